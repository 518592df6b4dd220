#!/usr/bin/env bash
# Session 30: openvino-cpu and openvino-cpu-2t before (commit f717505) and after the refit
# that leaves out attention kernels whose runtime kernels only move data (their products
# ran in a kernel named after another layer: fit/table.py, MOVEMENT_KERNELS), scored on the
# committed ground truths (measures nothing). Run from the repository root:
#   bash benchmarks/results/rerun-2026-12-06-s30/rescore-attention.sh > benchmarks/results/rerun-2026-12-06-s30/rescore-attention.txt
set -euo pipefail
R=benchmarks/results
OV=openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
OV2=openvino-cpu-2t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653
before=$(mktemp -d)
for f in $(git ls-tree --name-only f717505 annette_torch/profiles/builtin/); do
    git show "f717505:$f" > "$before/$(basename "$f")"
done
score() {   # label threads profile sets folder [networks to show]
    local gt
    gt=$(dirname "${5#benchmarks/results/}"); [ "$gt" = . ] && gt=results
    python benchmarks/accuracy.py --backend openvino-cpu --threads "$2" --profile "$3" --sets "$4" --ground-truth "$5" \
        --summary "$(printf '%-26s%-22s' "$1" "$gt")" --show "${6:-}" 2> /dev/null | tail -n 1
}
for gt in "$R/$OV" "$R/rerun-2026-12-04/$OV" "$R/rerun-2026-12-05/$OV" "$R/rerun-2026-12-06/$OV" "$R/rerun-2026-12-06-0508/$OV" "$R/rerun-2026-12-06-s28/$OV"; do
    score "openvino-cpu before" 1 "$before/openvino-cpu.json" zoo,timm,dense,mbv2,nb201 "$gt" deit_tiny_patch16_224,mobilevit_xxs,mobilevitv2_050
    score "openvino-cpu after" 1 openvino-cpu zoo,timm,dense,mbv2,nb201 "$gt" deit_tiny_patch16_224,mobilevit_xxs,mobilevitv2_050
done
for gt in "$R/$OV2" "$R/rerun-2026-12-06-s29/$OV2"; do
    score "openvino-cpu-2t before" 2 "$before/openvino-cpu-2t.json" zoo,timm,nb201 "$gt" deit_tiny_patch16_224,mobilevit_xxs,mobilevitv2_050
    score "openvino-cpu-2t after" 2 openvino-cpu-2t zoo,timm,nb201 "$gt" deit_tiny_patch16_224,mobilevit_xxs,mobilevitv2_050
done
rm -rf "$before"
