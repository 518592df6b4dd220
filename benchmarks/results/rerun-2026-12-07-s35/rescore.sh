#!/usr/bin/env bash
# Session 35: the onnxruntime-cpu profile shipped before it (commit 469a779) against the fit of its store with the 36
# softmaxes along the last axis (attention's; `calibrate --sweep full` after the rows were appended, 10:10-10:12 UTC;
# since session 35 the shipped profile), scored on the three committed onnxruntime-cpu ground truths of the profiles'
# Zen 4 (the third, with timm and mbv2, measured in session 35). The same run measured the 177 rows of full held back
# from that store (sessions 23 and 26); they are in calibration/data-held-back-2026-12-07-zen4/ (rescore-left-out.txt).
# Measures nothing; the fit takes about 4 minutes unless FIT_DIR holds it. From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s35/rescore.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s35/rescore.txt
set -euo pipefail
R=benchmarks/results
ORT=onnxruntime-cpu-1t-f32-1.32.0-c13e1653
work=${1:-$(mktemp -d)}
[ -f "$work/onnxruntime-cpu.json" ] || \
    annette-torch fit --data calibration/data/$ORT --out "$work" --name onnxruntime-cpu > /dev/null 2>&1
before=$(mktemp -d)
git show 469a779:annette_torch/profiles/builtin/onnxruntime-cpu.json > "$before/onnxruntime-cpu.json"
npz=$(git show 469a779:annette_torch/profiles/builtin/onnxruntime-cpu.json | grep -o 'onnxruntime-cpu\.[0-9a-f]*\.npz' | head -1)
git show "469a779:annette_torch/profiles/builtin/$npz" > "$before/$npz"
SHOW=convit_tiny,levit_128s,levit_conv_128s,efficientformerv2_s0,mobilenetv3_small_050,lcnet_050,regnetz_b16
for gt in "$R/$ORT" "$R/rerun-2026-12-05/$ORT" "$R/rerun-2026-12-07-s35/$ORT"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in "$before/onnxruntime-cpu.json" "$work/onnxruntime-cpu.json"; do
        label=before; [ "$profile" = "$before/onnxruntime-cpu.json" ] || label=refit
        python benchmarks/accuracy.py --backend onnxruntime-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
rm -rf "$before"
