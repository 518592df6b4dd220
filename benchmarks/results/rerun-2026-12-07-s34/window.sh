#!/usr/bin/env bash
# Session 34: the whole openvino-cpu campaign a user runs (full, then transformer) measured in one window on the
# profiles' Zen 4 into calibration/data-window-2026-12-07-zen4, then the weight re-reads measured into the same
# store against a fit of it, then the fit with the re-reads (kept in $1, default /tmp/s34-window). Nothing else
# may run meanwhile (about 90 minutes). From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s34/window.sh [FIT_DIR] > benchmarks/results/rerun-2026-12-07-s34/window.txt 2>&1  (the progress bars stripped)
set -euo pipefail
W=calibration/data-window-2026-12-07-zen4
fit=${1:-/tmp/s34-window}
mkdir -p "$fit/before-rereads"
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }
stamp start; lscpu | grep -E "Model name|CPU family|Model:|Stepping|L2|L3"
for sweep in full transformer; do
    stamp "calibrate $sweep"
    annette-torch calibrate --out "$W" --statistic median --drift none --backend openvino-cpu --sweep "$sweep" --threads 1
done
store=$(ls -d "$W"/openvino-cpu-1t-*)
stamp "fit before re-reads"
annette-torch fit --data "$store" --out "$fit/before-rereads" --name openvino-cpu > "$fit/before-rereads/fit.txt" 2>&1
stamp "weight re-reads"
annette-torch calibrate --backend openvino-cpu --threads 1 --out "$W" --repeats 20 --profile "$fit/before-rereads/openvino-cpu.json" \
    --weight-rereads torchvision:regnet_x_800mf torchvision:efficientnet_b1 torchvision:mnasnet0_5 torchvision:regnet_y_800mf \
    torchvision:resnet101 timm:efficientnet_b2
stamp "fit with re-reads"
annette-torch fit --data "$store" --out "$fit" --name openvino-cpu > "$fit/fit.txt" 2>&1
stamp done
