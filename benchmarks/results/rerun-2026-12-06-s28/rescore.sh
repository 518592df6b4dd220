#!/usr/bin/env bash
# Session 28: the CPU profiles before (commit 8d63301) and after the refit that counts a
# kernel's primary layer's inputs only and keeps fused-layer costs >= 0 (b764d07), scored on
# the committed ground truths (measures nothing). Run from the repository root:
#   bash benchmarks/results/rerun-2026-12-06-s28/rescore.sh > benchmarks/results/rerun-2026-12-06-s28/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
OV2=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
ORT=onnxruntime-cpu-1t-f32-1.32.0-c13e1653
before=$(mktemp -d)
for f in $(git ls-tree --name-only 8d63301 annette_torch/profiles/builtin/); do
    git show "8d63301:$f" > "$before/$(basename "$f")"
done
score() {   # label backend threads profile sets folder
    python benchmarks/accuracy.py --backend "$2" --threads "$3" --profile "$4" --sets "$5" --ground-truth "$6" \
        --json "$before/score.json" > /dev/null 2>&1
    python - "$1" "$6" "$before/score.json" <<'PY'
import json, statistics, sys
label, folder, path = sys.argv[1:]
rows = [r for r in json.load(open(path))["rows"] if not r.get("reference")]
cells = []
for name in sorted({r["set"] for r in rows}) + ["all"]:
    errors = [r["mixed+map"] / r["measured_ms"] - 1 for r in rows if name in ("all", r["set"])]
    cells.append(f"{name} {100 * statistics.mean(map(abs, errors)):.2f}")
within = 100 * sum(abs(r["mixed+map"] / r["measured_ms"] - 1) <= 0.1 for r in rows) / len(rows)
print(f"{label:<24}{folder.replace('benchmarks/results/', '').split('/')[0]:<40}" + "  ".join(cells) + f"  (±10 %: {within:.0f} %)")
PY
}
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" "$R/rerun-2026-12-06-s28/$OV"; do
    [ -d "$gt" ] || continue
    score "openvino-cpu before" openvino-cpu 1 "$before/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt"
    score "openvino-cpu after" openvino-cpu 1 openvino-cpu zoo,timm,dense,mbv2,nb201 "$gt"
done
for gt in "$R/$ORT" "$R/rerun-2026-12-05/$ORT"; do
    score "onnxruntime-cpu before" onnxruntime-cpu 1 "$before/onnxruntime-cpu.json" zoo,dense,nb201 "$gt"
    score "onnxruntime-cpu after" onnxruntime-cpu 1 onnxruntime-cpu zoo,dense,nb201 "$gt"
done
score "openvino-cpu-2t before" openvino-cpu 2 "$before/openvino-cpu-2t.json" zoo,timm,nb201 "$R/$OV2"
score "openvino-cpu-2t after" openvino-cpu 2 openvino-cpu-2t zoo,timm,nb201 "$R/$OV2"
rm -rf "$before"
