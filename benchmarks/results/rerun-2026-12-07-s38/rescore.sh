#!/usr/bin/env bash
# Session 38: openvino-cpu as shipped before it (commit 194b0ab) against the profile of this commit, whose weight re-reads
# are faster in a network that keeps its weights cached, scored on every committed 1-thread ground truth of the profiles'
# Zen 4. Measures nothing. From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s38/rescore.sh [AFTER_PROFILE] > benchmarks/results/rerun-2026-12-07-s38/rescore.txt
set -euo pipefail
R=benchmarks/results
BASE=${BASE:-194b0ab}
after=${1:-openvino-cpu}
before=$(mktemp -d)
SHOW=tinynet_e,mobilenetv3_small_050,repghostnet_050,regnety_002,efficientvit_m0,ghostnet_050,mambaout_femto,resnet18
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
git show $BASE:annette_torch/profiles/builtin/openvino-cpu.json > "$before/openvino-cpu.json"
npz=$(grep -o "openvino-cpu\.[0-9a-f]*\.npz" "$before/openvino-cpu.json" | head -1)
git show "$BASE:annette_torch/profiles/builtin/$npz" > "$before/$npz"
for gt in $R/$OV $R/rerun-*/$OV; do
    g=$(dirname "${gt#benchmarks/results/}"); [ "$g" = . ] && g=results
    for profile in "$before/openvino-cpu.json" "$after"; do
        label=before; [ "$profile" = "$before/openvino-cpu.json" ] || label=after
        python benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile "$profile" \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth "$gt" \
            --summary "$(printf '%-8s%-22s' $label "$g")" --show "$SHOW" 2> /dev/null | tail -n 1
    done
done
