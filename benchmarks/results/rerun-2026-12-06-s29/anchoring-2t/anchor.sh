#!/usr/bin/env bash
# Session 29: the shipped openvino-cpu-2t store anchored on 10 reference networks measured at 2 threads
# (annette-torch calibrate --backend openvino-cpu --threads 2 --minutes 1 --prior openvino-cpu-2t --references 10
#  --statistic median --drift none --out W, twice, 17:54 and 17:59 UTC, the profiles' Zen 4; only their
# references.csv kept), each fitted as profiles.sh fits the store and scored on both 2-thread ground truths
# (measures nothing). Run from the repository root:
#   bash benchmarks/results/rerun-2026-12-06-s29/anchoring-2t/anchor.sh > benchmarks/results/rerun-2026-12-06-s29/anchoring-2t/anchor.txt
set -euo pipefail
F=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
HERE=benchmarks/results/rerun-2026-12-06-s29/anchoring-2t
work=$(mktemp -d)
score() {   # label profile
    for gt in "rerun-2026-12-06-s29/$F|2026-12-06 17:08" "$F|2026-12-04"; do
        python benchmarks/accuracy.py --backend openvino-cpu --threads 2 --profile "$2" --sets nb201,zoo,timm \
            --ground-truth "benchmarks/results/${gt%%|*}" 2>/dev/null | awk -v label="$1" -v gt="${gt##*|}" '
            /^set / {set=$2" "$3} /^mixed\+map/ {printf "%s, ground truth %s: %s MAPE %s %%, within +-10 %% %s %%\n", label, gt, set, $2, $3}' \
            | sed 's/ mixed+map//' | grep -v "network"
    done
}
score "shipped openvino-cpu-2t" openvino-cpu-2t
for refs in references-1754 references-1759; do
    cp -r "calibration/data/$F" "$work/$refs"
    cp "$HERE/$refs.csv" "$work/$refs/references.csv"
    annette-torch fit --data "$work/$refs" --out "$work/out-$refs" --name openvino-cpu-2t 2>&1 | grep -E "^correction|^leave-one-out"
    score "anchored on $refs" "$work/out-$refs/openvino-cpu-2t.json"
done
rm -rf "$work"
