#!/bin/bash
# The cross-CPU sequence of docs/cross-cpu.md (2026-12-03, extended 2026-12-04): noise, ground truth with
# the shipped profile, a 30-minute budgeted campaign, fits (anchored and not), adapt, a second ground truth;
# then noise again, calibrate --for on the adapted profile, the other runtimes' shipped profiles and the
# ground truth's reproducibility. About 1 h 40 min. Run alone (nothing else of yours on the machine);
# results go to R. Usage: bash benchmarks/cross_cpu_session.sh [R]
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
date -u +%T; $PY -m annette_torch.cli fit --data $S --out $W/sf --name openvino-cpu-here-30min > $R/fit-scratch30-anchored.txt 2>&1
date -u +%T; $PY -m annette_torch.cli adapt --from openvino-cpu --backend openvino-cpu --threads 1 --samples 10 --out $W/ov-here.json > $R/adapt-openvino-cpu-k10.txt 2>&1
date -u +%T; $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $W/pf/openvino-cpu-corrected.json --sets $SETS --remeasure --json $R/accuracy-openvino-cpu-prior30-anchored-gt2.json > $R/accuracy-openvino-cpu-prior30-anchored-gt2.txt 2>$R/accuracy-gt2.err
# every other profile scored on the second ground truth (measures nothing)
for pair in "shipped-gt2 openvino-cpu" "prior30-gt2 $W/pf-plain/openvino-cpu-corrected.json" \
            "scratch30-anchored-gt2 $W/sf/openvino-cpu-here-30min.json" "adapted-gt2 $W/ov-here.json"; do
    set -- $pair
    $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $2 --sets $SETS --json $R/accuracy-openvino-cpu-$1.json > $R/accuracy-openvino-cpu-$1.txt
done
date -u +%T; $PY -m annette_torch.cli noise --backend openvino-cpu > $R/noise-openvino-cpu-second.txt 2>&1
# calibrate --for: the first 10 cells of the accuracy benchmark's nb201 set and 3 torchvision models, keyed by the adapted profile
CELLS=$(PYTHONPATH=$PWD:$PWD/benchmarks $PY -c "from accuracy import networks; print(' '.join('nb201:' + n.name for n in networks(['nb201'])[:10]))")
date -u +%T; $PY -m annette_torch.cli calibrate --backend openvino-cpu --threads 1 --for $CELLS torchvision:resnet18 torchvision:mobilenet_v3_large torchvision:efficientnet_b0 --profile $W/ov-here.json --out $W/measured > $R/calibrate-for.txt 2>&1
date -u +%T; M=$(ls -d $W/measured/openvino-cpu-1t-f32-*)
$PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $W/ov-here.json --sets zoo,nb201 --measured $M --json $R/accuracy-openvino-cpu-adapted-for.json > $R/accuracy-openvino-cpu-adapted-for.txt 2>&1
for B in onnxruntime-cpu torch-cpu; do
    date -u +%T; $PY benchmarks/accuracy.py --backend $B --threads 1 --profile $B --sets zoo,nb201 --remeasure --json $R/accuracy-$B-shipped.json > $R/accuracy-$B-shipped.txt 2>$R/accuracy-$B.err
done
date -u +%T; $PY benchmarks/reproducibility.py --backend openvino-cpu --threads 1 --json $R/reproducibility-openvino-cpu.json > $R/reproducibility-openvino-cpu.txt 2>$R/reproducibility.err
date -u +%T
