#!/usr/bin/env bash
# Session 36: the onnxruntime-cpu profile shipped before it (commit 7b815a8) against the fit of its store with the 59
# residual_in_context rows (measured with the matcher that gives an NCHWc conv the add and activation it fuses) and the
# fusion learner's new clauses (channel multiples, whether the network returns the layer or it reads the network input,
# depth 3); since session 36 the shipped profile. Scored on the four committed onnxruntime-cpu ground truths of the
# profiles' Zen 4 (the fourth measured in session 36,
# 13:09-13:20 UTC, with the refitted profile shipped). Measures nothing; the fit takes
# about 4 minutes unless FIT_DIR holds it. From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s36/rescore.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s36/rescore.txt
set -euo pipefail
R=benchmarks/results
ORT=onnxruntime-cpu-1t-f32-1.32.0-c13e1653
BASE=${BASE:-7b815a8}
work=${1:-$(mktemp -d)}
[ -f "$work/onnxruntime-cpu.json" ] || \
    annette-torch fit --data calibration/data/$ORT --out "$work" --name onnxruntime-cpu > /dev/null 2>&1
before=$(mktemp -d)
git show $BASE:annette_torch/profiles/builtin/onnxruntime-cpu.json > "$before/onnxruntime-cpu.json"
npz=$(git show $BASE:annette_torch/profiles/builtin/onnxruntime-cpu.json | grep -o 'onnxruntime-cpu\.[0-9a-f]*\.npz' | head -1)
git show "$BASE:annette_torch/profiles/builtin/$npz" > "$before/$npz"
SHOW=mobilenetv3_small_050,lcnet_050,mobilenetv3_large_100,hardcorenas_a,tinynet_e,regnetz_b16,resnet18,resnet50
for gt in "$R/$ORT" "$R/rerun-2026-12-05/$ORT" "$R/rerun-2026-12-07-s35/$ORT" "$R/rerun-2026-12-07-s36/$ORT"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in "$before/onnxruntime-cpu.json" "$work/onnxruntime-cpu.json"; do
        label=before; [ "$profile" = "$before/onnxruntime-cpu.json" ] || label=refit
        python benchmarks/accuracy.py --backend onnxruntime-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
rm -rf "$before"
