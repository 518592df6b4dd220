#!/usr/bin/env bash
# Session 31: the openvino-cpu profile with weight-traffic terms of several sizes
# (weight_traffic_term.py), scored on two committed ground truths (measures nothing). From the
# repository root:
#   bash benchmarks/results/rerun-2026-12-06-s31/rescore-weight-traffic.sh > benchmarks/results/rerun-2026-12-06-s31/rescore-weight-traffic.txt
set -euo pipefail
D=benchmarks/results/rerun-2026-12-06-s31
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
out=$(mktemp)
echo "WA/WB/WC  ground truth          MAPE % per set                                              within ±10 %  networks"
for terms in "0 0 0" "1 0 0" "1 0 0.5" "1 0.3 0.5" "1.3 0.4 0"; do
    set -- $terms
    for gt in rerun-2026-12-06-s28 rerun-2026-12-06-s30; do
        WA=$1 WB=$2 WC=$3 python $D/weight_traffic_term.py --backend openvino-cpu --profile openvino-cpu \
            --sets zoo,timm,dense,mbv2,nb201 --ground-truth benchmarks/results/$gt/$OV --json "$out" > /dev/null 2>&1
        python - "$1/$2/$3" "$gt" "$out" <<'PY'
import json, statistics, sys
label, gt, path = sys.argv[1:]
rows = [r for r in json.load(open(path))["rows"] if not r.get("reference")]
error = {r["network"]: r["mixed+map"] / r["measured_ms"] - 1 for r in rows}
cells = []
for name in ["zoo", "timm", "dense", "mbv2", "nb201", "all"]:
    cells.append(f"{name} {100 * statistics.mean(abs(error[r['network']]) for r in rows if name in ('all', r['set'])):.2f}")
within = 100 * sum(abs(e) <= 0.1 for e in error.values()) / len(error)
named = ("resnet18", "resnet50", "efficientnet_b0", "shvit_s1", "efficientvim_m1", "efficientvit_m0", "tinynet_e")
print(f"{label:<10}{gt:<22}{'  '.join(cells)}  {within:.0f} %  " + ", ".join(f"{n} {100 * error[n]:+.1f}" for n in named))
PY
    done
done
rm -f "$out"
