#!/usr/bin/env bash
# Session 36: the openvino-cpu and openvino-cpu-2t profiles shipped before it (commit 7b815a8) against the fits of the
# same stores with the fusion learner's new clauses (channel multiples, whether the network returns the layer or it
# reads the network input, depth 3, splits that decide no more examples right undone), scored on the committed ground
# truths of the profiles' Zen 4. Measures nothing; the fits take about 4 minutes each unless FIT_DIR holds them.
# From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s36/rescore-openvino.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s36/rescore-openvino.txt
set -euo pipefail
R=benchmarks/results
BASE=${BASE:-7b815a8}
work=${1:-$(mktemp -d)}
before=$(mktemp -d)
SHOW=regnetz_b16,mobilenetv3_small_050,lcnet_050,tinynet_e,mambaout_femto,resnet18,resnet50
for name in openvino-cpu openvino-cpu-2t; do
    threads=1; [ $name = openvino-cpu-2t ] && threads=2
    OV=openvino-cpu-${threads}t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
    [ -f "$work/$name.json" ] || annette-torch fit --data calibration/data/$OV --out "$work" --name $name > /dev/null 2>&1
    git show $BASE:annette_torch/profiles/builtin/$name.json > "$before/$name.json"
    npz=$(grep -o "$name\.[0-9a-f]*\.npz" "$before/$name.json" | head -1)
    git show "$BASE:annette_torch/profiles/builtin/$npz" > "$before/$npz"
    for gt in $R/$OV $R/rerun-*/$OV; do
        [ -d "$gt" ] || continue
        g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
        for profile in "$before/$name.json" "$work/$name.json"; do
            label=before; [ "$profile" = "$before/$name.json" ] || label=refit
            python benchmarks/accuracy.py --backend openvino-cpu --threads $threads --profile "$profile" \
                --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
                --summary "$(printf '%-16s%-8s%-22s' $name $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
        done
    done
done
rm -rf "$before"
