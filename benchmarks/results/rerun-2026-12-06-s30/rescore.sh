#!/usr/bin/env bash
# Session 30: openvino-cpu with and without `groups_split_convs` (a split, the same bias-free
# conv on each part and their concat run as one grouped conv, OpenVINO's
# ConvolutionToGroupConvolutionFusion), scored on the committed ground truths (measures
# nothing). "with" are the profiles of commit f717505 (before the attention refit of 70cf219),
# "without" the same with the flag taken out. Run from the repository root:
#   bash benchmarks/results/rerun-2026-12-06-s30/rescore.sh > benchmarks/results/rerun-2026-12-06-s30/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
OV2=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=$(mktemp -d)
mkdir "$work/with"
for f in $(git ls-tree --name-only f717505 annette_torch/profiles/builtin/); do   # the profiles this ran on
    git show "f717505:$f" > "$work/with/$(basename "$f")"
done
for name in openvino-cpu openvino-cpu-2t; do
    python - "$name" "$work" <<'PY'
import json, shutil, sys
from pathlib import Path
name, work = sys.argv[1:]
data = json.loads((Path(work) / "with" / f"{name}.json").read_text())
data.pop("groups_split_convs")
(Path(work) / f"{name}.json").write_text(json.dumps(data))
for npz in (Path(work) / "with").glob(f"{name}.*.npz"):
    shutil.copy(npz, work)
PY
done
score() {   # label threads profile sets folder [networks to show]
    local gt
    gt=$(dirname "${5#benchmarks/results/}"); [ "$gt" = . ] && gt=results
    python benchmarks/accuracy.py --backend openvino-cpu --threads "$2" --profile "$3" --sets "$4" --ground-truth "$5" \
        --summary "$(printf '%-26s%-22s' "$1" "$gt")" --show "${6:-}" 2> /dev/null | tail -n 1
}
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" "$R/rerun-2026-12-06-s28/$OV"; do
    score "openvino-cpu without" 1 "$work/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt" mixnet_s
    score "openvino-cpu with" 1 "$work/with/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt" mixnet_s
done
for gt in "$R/$OV2" "$R/rerun-2026-12-06-s29/$OV2"; do
    [ -d "$gt" ] || continue
    score "openvino-cpu-2t without" 2 "$work/openvino-cpu-2t.json" zoo,timm,nb201 "$gt" mixnet_s
    score "openvino-cpu-2t with" 2 "$work/with/openvino-cpu-2t.json" zoo,timm,nb201 "$gt" mixnet_s
done
rm -rf "$work"
