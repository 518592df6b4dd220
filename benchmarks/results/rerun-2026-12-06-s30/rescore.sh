#!/usr/bin/env bash
# Session 30: openvino-cpu with and without `groups_split_convs` (a split, the same bias-free
# conv on each part and their concat run as one grouped conv, OpenVINO's
# ConvolutionToGroupConvolutionFusion), scored on the committed ground truths (measures
# nothing). "without" is the shipped profile with the flag taken out. Run from the
# repository root:
#   bash benchmarks/results/rerun-2026-12-06-s30/rescore.sh > benchmarks/results/rerun-2026-12-06-s30/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
OV2=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=$(mktemp -d)
for name in openvino-cpu openvino-cpu-2t; do
    python - "$name" "$work" <<'PY'
import json, shutil, sys
from pathlib import Path
import annette_torch.profiles as profiles
name, work = sys.argv[1:]
builtin = Path(profiles.__file__).parent / "builtin"
data = json.loads((builtin / f"{name}.json").read_text())
data.pop("groups_split_convs")
(Path(work) / f"{name}.json").write_text(json.dumps(data))
for npz in builtin.glob(f"{name}.*.npz"):
    shutil.copy(npz, work)
PY
done
score() {   # label threads profile sets folder
    python benchmarks/accuracy.py --backend openvino-cpu --threads "$2" --profile "$3" --sets "$4" --ground-truth "$5" \
        --json "$work/score.json" > /dev/null 2>&1
    python - "$1" "$5" "$work/score.json" <<'PY'
import json, statistics, sys
label, folder, path = sys.argv[1:]
rows = [r for r in json.load(open(path))["rows"] if not r.get("reference")]
cells = []
for name in sorted({r["set"] for r in rows}) + ["all"]:
    errors = [r["mixed+map"] / r["measured_ms"] - 1 for r in rows if name in ("all", r["set"])]
    cells.append(f"{name} {100 * statistics.mean(map(abs, errors)):.2f}")
within = 100 * sum(abs(r["mixed+map"] / r["measured_ms"] - 1) <= 0.1 for r in rows) / len(rows)
mixnet = [f"{r['network']} {100 * (r['mixed+map'] / r['measured_ms'] - 1):+.1f} %" for r in rows if "mixnet" in r["network"]]
gt = folder.replace('benchmarks/results/', '').split('/')[0]
print(f"{label:<26}{gt if gt.startswith('rerun') else 'results/' + gt[:16] + '...':<34}" + "  ".join(cells)
      + f"  (±10 %: {within:.0f} %)  " + ", ".join(mixnet))
PY
}
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" "$R/rerun-2026-12-06-s28/$OV"; do
    score "openvino-cpu without" 1 "$work/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt"
    score "openvino-cpu with" 1 openvino-cpu zoo,timm,dense,mbv2,nb201 "$gt"
done
for gt in "$R/$OV2" "$R/rerun-2026-12-06-s29/$OV2"; do
    [ -d "$gt" ] || continue
    score "openvino-cpu-2t without" 2 "$work/openvino-cpu-2t.json" zoo,timm,nb201 "$gt"
    score "openvino-cpu-2t with" 2 openvino-cpu-2t zoo,timm,nb201 "$gt"
done
rm -rf "$work"
