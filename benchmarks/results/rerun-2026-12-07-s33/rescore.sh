#!/usr/bin/env bash
# Session 33: the shipped openvino-cpu profile against the candidate fitted on
# calibration/data-candidate-2026-12-07-zen4 (the store measured in one window on 2026-12-06, full's 45
# channel_shuffle rows, 713 rows of small-kernel families measured 2026-12-07, and the weight re-reads measured
# in context into it, which fit gives the profile), scored on the seven committed ground truths of the profiles'
# Zen 4 (measures nothing; the fit takes about 2.5 minutes). From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s33/rescore.sh > benchmarks/results/rerun-2026-12-07-s33/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=$(mktemp -d)
annette-torch fit --data calibration/data-candidate-2026-12-07-zen4/$OV --out "$work" --name openvino-cpu > /dev/null 2>&1
SHOW=regnetz_b16,regnet_x_400mf,regnet_y_400mf,efficientnet_b0,shvit_s1,efficientvim_m1,lraspp_mobilenet_v3_large
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" \
          "$R/rerun-2026-12-06-s28/$OV" "$R/rerun-2026-12-06-s30/$OV"; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in openvino-cpu "$work/openvino-cpu.json"; do
        label=shipped; [ "$profile" = openvino-cpu ] || label=candidate
        python benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-10s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
rm -rf "$work"
