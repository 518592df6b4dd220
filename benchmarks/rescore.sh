#!/usr/bin/env bash
# Score a shipped profile as it was at commit BASE ("before") and as it is now, or the profile file AFTER ("after"),
# on every committed ground truth of the machine and backend its calibration store describes
# (benchmarks/results/<store folder> and benchmarks/results/rerun-*/<store folder>). Measures nothing: it only
# scores, one summary line per ground truth and profile. From the repository root, with the package installed:
#   bash benchmarks/rescore.sh PROFILE BASE [AFTER] > rescore.txt
#   e.g. bash benchmarks/rescore.sh torch-cpu 5023b5e /tmp/refit/torch-cpu.json
# PROFILE: openvino-cpu, openvino-cpu-2t, onnxruntime-cpu or torch-cpu. SHOW=net,net,... adds those networks' errors;
# SETS (default zoo,timm,dense,mbv2,nb201) picks the network sets.
set -euo pipefail
name=$1 base=$2 after=${3:-$name}
case $name in
    *-2t) backend=${name%-2t} threads=2 ;;
    *)    backend=$name threads=1 ;;
esac
stores=(calibration/data/"$backend-${threads}t-f32-"*)
[ -d "${stores[0]}" ] || { echo "rescore.sh: no store calibration/data/$backend-${threads}t-f32-* for profile $name" >&2; exit 2; }
folder=$(basename "${stores[0]}")
before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
git show "$base:annette_torch/profiles/builtin/$name.json" > "$before/$name.json"
for npz in $(grep -o "$name\.[0-9a-f]*\.npz" "$before/$name.json" | sort -u); do
    git show "$base:annette_torch/profiles/builtin/$npz" > "$before/$npz"
done
show=()
[ -n "${SHOW:-}" ] && show=(--show "$SHOW")
for gt in benchmarks/results/"$folder" benchmarks/results/rerun-*/"$folder"; do
    [ -d "$gt" ] || continue
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for label in before after; do
        profile=$after; [ $label = before ] && profile=$before/$name.json
        python benchmarks/accuracy.py --backend "$backend" --threads "$threads" --profile "$profile" \
            --sets "${SETS:-zoo,timm,dense,mbv2,nb201}" --ground-truth "$gt" \
            --summary "$(printf '%-8s%-22s' $label "$g")" "${show[@]}" 2> /dev/null | tail -n 1
    done
done
