#!/usr/bin/env bash
# Session 31: the openvino-cpu profile with weight-traffic terms of several sizes
# (weight_traffic_term.py: WA/WB/WC), scored on two committed ground truths (measures
# nothing). From the repository root:
#   bash benchmarks/results/rerun-2026-12-06-s31/rescore-weight-traffic.sh > benchmarks/results/rerun-2026-12-06-s31/rescore-weight-traffic.txt
set -euo pipefail
D=benchmarks/results/rerun-2026-12-06-s31
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
for terms in "0 0 0" "1 0 0" "1 0 0.5" "1 0.3 0.5" "1.3 0.4 0"; do
    set -- $terms
    for gt in rerun-2026-12-06-s28 rerun-2026-12-06-s30; do
        WA=$1 WB=$2 WC=$3 python $D/weight_traffic_term.py --backend openvino-cpu --profile openvino-cpu \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth benchmarks/results/$gt/$OV \
            --summary "$(printf '%-10s%-22s' "$1/$2/$3" "$gt")" \
            --show resnet18,resnet50,efficientnet_b0,shvit_s1,efficientvim_m1,efficientvit_m0,tinynet_e 2> /dev/null | tail -n 1
    done
done
