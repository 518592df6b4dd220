#!/bin/bash
# calibrate --for, the two methods side by side (docs/cross-cpu.md, 2026-12-05 morning): adapt the shipped
# openvino-cpu profile to this machine; calibrate --for the first 10 cells of the accuracy benchmark's nb201
# set and 3 torchvision models with --method profile and with --method end-to-end, keyed by the adapted
# profile; then the ground truth of the zoo and nb201 sets; then every variant scored on it (measures nothing).
# About 15 minutes. Run alone (nothing else of yours on the machine). Usage: bash benchmarks/for_methods_session.sh R
set -x
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
PY=${PYTHON:-python}
R=${1:-benchmarks/results/for-methods}; mkdir -p $R; W=${WORK:-/tmp/for-methods}; mkdir -p $W
P="--rounds 12 --compile once --drift canary --across-rounds median"
CELLS=$(PYTHONPATH=$PWD:$PWD/benchmarks $PY -c "from accuracy import networks; print(' '.join('nb201:' + n.name for n in networks(['nb201'])[:10]))")
NETS="$CELLS torchvision:resnet18 torchvision:mobilenet_v3_large torchvision:efficientnet_b0"
date -u +%T; $PY -m annette_torch.cli adapt --from openvino-cpu --backend openvino-cpu --threads 1 --samples 10 --out $W/ov-here.json > $R/adapt.txt 2>&1
date -u +%T; $PY -m annette_torch.cli calibrate --backend openvino-cpu --threads 1 --for $NETS --profile $W/ov-here.json --out $W/profiled --rounds 12 --drift canary > $R/calibrate-for-profile.txt 2>&1
date -u +%T; $PY -m annette_torch.cli calibrate --backend openvino-cpu --threads 1 --for $NETS --profile $W/ov-here.json --method end-to-end --out $W/fitted $P > $R/calibrate-for-end-to-end.txt 2>&1
date -u +%T; $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $W/ov-here.json --sets zoo,nb201 --remeasure $P --results $W/gt > $R/ground-truth-measuring.txt 2>&1
date -u +%T; G=$(ls -d $W/gt/openvino-cpu-1t-f32-*)
for pair in "adapted -" "profiled $W/profiled" "fitted $W/fitted"; do
    set -- $pair
    M=$([ "$2" = - ] || echo "--measured $(ls -d $2/openvino-cpu-1t-f32-*)")
    $PY benchmarks/accuracy.py --backend openvino-cpu --threads 1 --profile $W/ov-here.json --sets zoo,nb201 --ground-truth $G $M --json $R/accuracy-$1.json > $R/accuracy-$1.txt 2>&1
done
cp -r $G $R/ground-truth; cp $W/ov-here.json $R/ov-here.json
for m in profiled fitted; do mkdir -p $R/table-$m; cp $W/$m/openvino-cpu-1t-f32-*/*.{csv,json} $R/table-$m/; done
