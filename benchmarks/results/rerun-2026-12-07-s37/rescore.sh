#!/usr/bin/env bash
# Session 37: the torch-cpu profile shipped before it (commit c1f75be) against the fit of its store with the 150 1x1
# depthwise convs appended to the full sweep (PyTorch eager runs a grouped 1x1 conv at stride 1, batch under 16 and
# one thread group by group: about 4 us per group, which no benchmark of the store had shown), anchored with the
# correction form it has had since session 27 (calibration/profiles.sh); since session 37 the shipped profile.
# Scored on the five committed torch-cpu ground truths of the profiles' Zen 4 (the fifth measured in session 37,
# 15:15-15:31 UTC, with the profile of c1f75be). Measures nothing; the fit takes about 5 minutes unless
# FIT_DIR holds it. From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s37/rescore.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s37/rescore.txt
set -euo pipefail
R=benchmarks/results
TORCH=torch-cpu-1t-f32-2.14.1+cu130-c13e1653
BASE=${BASE:-c1f75be}
work=${1:-$(mktemp -d)}
[ -f "$work/torch-cpu.json" ] || \
    annette-torch fit --data calibration/data/$TORCH --out "$work" --name torch-cpu \
        --anchor-terms scale+exponent+per_kernel > /dev/null 2>&1
before=$(mktemp -d)
git show $BASE:annette_torch/profiles/builtin/torch-cpu.json > "$before/torch-cpu.json"
npz=$(git show $BASE:annette_torch/profiles/builtin/torch-cpu.json | grep -o 'torch-cpu\.[0-9a-f]*\.npz' | head -1)
git show "$BASE:annette_torch/profiles/builtin/$npz" > "$before/$npz"
SHOW=repvit_m0_9,fastvit_t8,lcnetv2_small,mobileone_s0,efficientvit_b0,cpubone_nano,resnet18,resnet50
for gt in "$R/$TORCH" "$R/rerun-2026-12-05/$TORCH" "$R/rerun-2026-12-06-s27/$TORCH" "$R/rerun-2026-12-07-s35/$TORCH" \
          "$R/rerun-2026-12-07-s37/$TORCH"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in "$before/torch-cpu.json" "$work/torch-cpu.json"; do
        label=before; [ "$profile" = "$before/torch-cpu.json" ] || label=refit
        python benchmarks/accuracy.py --backend torch-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
rm -rf "$before"
