#!/usr/bin/env bash
# Session 32: the CPU profiles before (commit fc9bb16) and after the channel_shuffle kind
# (ShuffleNet's view-transpose-view as one layer; full's 45 channel_shuffle benchmarks
# measured into the openvino-cpu (1 and 2 threads), onnxruntime-cpu and torch-cpu stores,
# those profiles refitted; on OpenVINO the split of a shuffle's output free,
# splits_shuffles_in_place), scored on the committed ground truths (measures nothing).
# "after" is the profiles of the working tree. Run from the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s32/rescore.sh > benchmarks/results/rerun-2026-12-07-s32/rescore.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
ORT=onnxruntime-cpu-1t-f32-1.32.0-c13e1653
TORCH=torch-cpu-1t-f32-2.14.1+cu130-c13e1653
OV2=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
work=$(mktemp -d)
for f in $(git ls-tree --name-only fc9bb16 annette_torch/profiles/builtin/); do   # the profiles before
    git show "fc9bb16:$f" > "$work/$(basename "$f")"
done
score() {   # label backend threads profile sets folder [networks to show]
    local gt
    gt=$(dirname "${6#benchmarks/results/}"); [ "$gt" = . ] && gt=results
    python benchmarks/accuracy.py --backend "$2" --threads "$3" --profile "$4" --sets "$5" --ground-truth "$6" \
        --summary "$(printf '%-24s%-22s' "$1" "$gt")" --show "${7:-}" 2> /dev/null | tail -n 1
}
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" \
          "$R/rerun-2026-12-06-0508/$OV" "$R/rerun-2026-12-06-s28/$OV" "$R/rerun-2026-12-06-s30/$OV"; do
    score "openvino-cpu before" openvino-cpu 1 "$work/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt" shufflenet_v2_x1_0
    score "openvino-cpu after" openvino-cpu 1 openvino-cpu zoo,timm,dense,mbv2,nb201 "$gt" shufflenet_v2_x1_0
done
for gt in "$R/$OV2" "$R/rerun-2026-12-06-s29/$OV2"; do
    score "openvino-cpu-2t before" openvino-cpu 2 "$work/openvino-cpu-2t.json" zoo,timm,nb201 "$gt" shufflenet_v2_x1_0
    score "openvino-cpu-2t after" openvino-cpu 2 openvino-cpu-2t zoo,timm,nb201 "$gt" shufflenet_v2_x1_0
done
for gt in "$R/$ORT" "$R/rerun-2026-12-05/$ORT"; do
    score "onnxruntime-cpu before" onnxruntime-cpu 1 "$work/onnxruntime-cpu.json" zoo,dense,nb201 "$gt" shufflenet_v2_x1_0
    score "onnxruntime-cpu after" onnxruntime-cpu 1 onnxruntime-cpu zoo,dense,nb201 "$gt" shufflenet_v2_x1_0
done
for gt in "$R/$TORCH" "$R/rerun-2026-12-05/$TORCH" "$R/rerun-2026-12-06-s27/$TORCH"; do
    score "torch-cpu before" torch-cpu 1 "$work/torch-cpu.json" zoo,dense,nb201 "$gt" shufflenet_v2_x1_0
    score "torch-cpu after" torch-cpu 1 torch-cpu zoo,dense,nb201 "$gt" shufflenet_v2_x1_0
done
rm -rf "$work"
