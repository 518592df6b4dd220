#!/bin/bash
# The cross-CPU sequence of docs/cross-cpu.md (2026-12-03): noise, ground truth with the shipped
# profile, a 30-minute budgeted campaign, fits (anchored and not), adapt, a second ground truth.
# Run alone on a quiet machine; results go to R. Usage: bash benchmarks/cross_cpu_session.sh [R]
set -x
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
PY=${PYTHON:-python}
R=${1:-benchmarks/results/cross-cpu-session}; mkdir -p $R; W=${WORK:-/tmp/cross-cpu}
SETS=zoo,timm,dense,mbv2,nb201
date -u +%T; $PY -m annette_torch.cli noise --backend openvino-cpu > $R/noise-openvino-cpu.txt 2>&1
date -u +%T; $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile openvino-cpu --sets $SETS --remeasure --json $R/accuracy-openvino-cpu-shipped.json > $R/accuracy-openvino-cpu-shipped.txt 2>$R/accuracy-shipped.err
date -u +%T; $PY -m annette_torch.cli calibrate --backend openvino-cpu --threads 1 --minutes 30 --prior openvino-cpu --out $W/calib > $R/calibrate-minutes30.txt 2>$R/calibrate-minutes30.err
date -u +%T; S=$(ls -d $W/calib/openvino-cpu-1t-f32-*)
$PY -m annette_torch.cli fit --data $S --out $W/pf --prior openvino-cpu > $R/fit-prior30-anchored.txt 2>&1
date -u +%T; $PY -m annette_torch.cli fit --data $S --out $W/pf-plain --prior openvino-cpu --no-anchor > $R/fit-prior30.txt 2>&1
date -u +%T; $PY -m annette_torch.cli fit --data $S --out $W/sf --name openvino-cpu-intel-30min > $R/fit-scratch30-anchored.txt 2>&1
date -u +%T; $PY -m annette_torch.cli adapt --from openvino-cpu --backend openvino-cpu --threads 1 --samples 10 --out $W/ov-here.json > $R/adapt-openvino-cpu-k10.txt 2>&1
date -u +%T; $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $W/pf/openvino-cpu-corrected.json --sets $SETS --remeasure --json $R/accuracy-openvino-cpu-prior30-anchored-gt2.json > $R/accuracy-openvino-cpu-prior30-anchored-gt2.txt 2>$R/accuracy-gt2.err
# every other profile scored on the second ground truth (measures nothing)
for pair in "shipped-gt2 openvino-cpu" "prior30-gt2 $W/pf-plain/openvino-cpu-corrected.json" \
            "scratch30-anchored-gt2 $W/sf/openvino-cpu-intel-30min.json" "adapted-gt2 $W/ov-here.json"; do
    set -- $pair
    $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $2 --sets $SETS --json $R/accuracy-openvino-cpu-$1.json > $R/accuracy-openvino-cpu-$1.txt
done
date -u +%T
