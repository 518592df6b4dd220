#!/usr/bin/env bash
# Session 34: the shipped openvino-cpu profile against the fit of calibration/data-window-2026-12-07-zen4 (full and
# transformer measured in one window on 2026-12-07 with the weight re-reads measured into it; window.sh), scored on
# the eight committed ground truths (the eighth measured right after the store, 08:26-08:37 UTC) of the profiles' Zen 4 (measures nothing; the fit takes about 3 minutes unless
# FIT_DIR already holds it). From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s34/rescore.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s34/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=${1:-$(mktemp -d)}
[ -f "$work/openvino-cpu.json" ] || \
    annette-torch fit --data calibration/data-window-2026-12-07-zen4/$OV --out "$work" --name openvino-cpu > /dev/null 2>&1
SHOW=regnetz_b16,regnet_x_400mf,regnet_y_400mf,efficientnet_b0,shvit_s1,efficientvim_m1,lraspp_mobilenet_v3_large
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" \
          "$R/rerun-2026-12-06-s28/$OV" "$R/rerun-2026-12-06-s30/$OV" "$R/rerun-2026-12-07-s34/$OV"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in openvino-cpu "$work/openvino-cpu.json"; do
        label=shipped; [ "$profile" = openvino-cpu ] || label=window
        python benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
