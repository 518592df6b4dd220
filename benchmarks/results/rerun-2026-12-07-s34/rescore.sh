#!/usr/bin/env bash
# Session 34: the openvino-cpu profile shipped before it (commit 62b9760, fitted on the store now in
# calibration/data-2026-11-29-zen4) against the fit of the store measured in one window on 2026-12-07 (full and
# transformer, with the weight re-reads measured into it; window.sh; since session 34 calibration/data's and the
# shipped profile's), scored on the eight committed ground truths of the profiles' Zen 4 (the eighth measured right
# after the store, 08:26-08:37 UTC). Measures nothing; the fit takes about 3 minutes unless FIT_DIR holds it.
# From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s34/rescore.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s34/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=${1:-$(mktemp -d)}
[ -f "$work/openvino-cpu.json" ] || \
    annette-torch fit --data calibration/data/$OV --out "$work" --name openvino-cpu > /dev/null 2>&1
before=$(mktemp -d)
git show 62b9760:annette_torch/profiles/builtin/openvino-cpu.json > "$before/openvino-cpu.json"
git show 62b9760:annette_torch/profiles/builtin/openvino-cpu.c149c08428ab66f3.npz > "$before/openvino-cpu.c149c08428ab66f3.npz"
SHOW=regnetz_b16,regnet_x_400mf,regnet_y_400mf,efficientnet_b0,shvit_s1,efficientvim_m1,lraspp_mobilenet_v3_large
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" \
          "$R/rerun-2026-12-06-s28/$OV" "$R/rerun-2026-12-06-s30/$OV" "$R/rerun-2026-12-07-s34/$OV"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in "$before/openvino-cpu.json" "$work/openvino-cpu.json"; do
        label=before; [ "$profile" = "$before/openvino-cpu.json" ] || label=window
        python benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
rm -rf "$before"
