#!/usr/bin/env bash
# The campaigns behind calibration/data, as run on the project machine (2 shared cores).
# Each command resumes where an interrupted run stopped; run this file again to continue.
# Keep the machine otherwise idle while the 2-thread campaign runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# the stores predate the measuring protocol: continued with its median, no drift correction
calibrate() { annette-torch calibrate --out calibration/data --statistic median --drift none "$@"; }

# The full sweep grew by appended rows (context families, big fully connected layers,
# small kernels, branch sums); rerunning it measures only what a store lacks.
calibrate --backend openvino-cpu    --sweep full  --threads 1
calibrate --backend openvino-cpu    --sweep quick --threads 2
calibrate --backend openvino-cpu    --sweep full  --threads 2 --minutes 10   # 1,542 of its benchmarks
calibrate --backend onnxruntime-cpu --sweep quick --threads 1
calibrate --backend torch-cpu       --sweep quick --threads 1
calibrate --backend onnxruntime-cpu --sweep full  --threads 1
calibrate --backend torch-cpu       --sweep full  --threads 1
# 2026-12-01: the transformer sweep, and the rows appended to full and quick (transformer
# families, branch_sum with zero/half/conv1x1 edges)
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep transformer --threads 1
    calibrate --backend "$backend" --sweep full        --threads 1
done
calibrate --backend openvino-cpu    --sweep transformer --threads 2
calibrate --backend openvino-cpu    --sweep quick       --threads 2
# 2026-12-01 (later): inverted_residual rows appended to full and quick (MobileNet blocks
# whose depthwise convs read a conv's output; e<k>-none ones leave the depthwise conv plain)
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep full --threads 1
done
calibrate --backend openvino-cpu    --sweep quick --threads 2
# 2026-12-01 (session 4): the shape-kind families appended to full and quick (upsample, pad,
# adaptive_pool, split, conv_transpose: kinds the profiles had answered with their default)
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep full --threads 1
done
calibrate --backend openvino-cpu    --sweep quick --threads 2
# 2026-12-01 (session 5): the selection and sampling families appended to full and quick (topk,
# sort, unique, nms, roi_align, grid_sample, unfold: detection post-processing and RAFT) and
# grouped-query decoder_attention rows appended to full, quick and transformer
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep full        --threads 1
    calibrate --backend "$backend" --sweep transformer --threads 1
done
calibrate --backend openvino-cpu    --sweep quick       --threads 2
calibrate --backend openvino-cpu    --sweep transformer --threads 2
# 2026-12-02: the slice family appended to full and quick (slices OpenVINO and ONNX Runtime run:
# ReXNet's and GhostNet's partial channel slices, qkv selects, cls tokens, token gathers, Swin's
# patch merging); no family held one after parameter-only slices were folded as constants
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep full --threads 1
done
calibrate --backend openvino-cpu    --sweep quick --threads 2
# 2026-12-05 (session 22, on the profiles' Zen 4): convs read from a conv's output against the same convs
# reading the input; a separate store, not fitted into the shipped profile (docs/cross-cpu.md)
annette-torch calibrate --out calibration/data-context-2026-12-05-zen4 --statistic median --drift none \
    --backend openvino-cpu --sweep conv-context --threads 1
# 2026-12-05 (session 23, the profiles' Zen 4): full's 27 branch_sum rows into the openvino-cpu store
# (the line above that resumes full); the grouped-conv sweep into a separate store, not fitted: the refits
# with it scored worse (docs/accuracy.md, session 23). full's branch sums for ONNX Runtime and torch were
# measured by the resuming line above and moved into that store by benchmark id: their refit scored worse too
held=calibration/data-held-back-2026-12-05-zen4
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    annette-torch calibrate --out "$held" --statistic median --drift none --backend "$backend" --sweep grouped-conv --threads 1
done
# 2026-12-06 (session 26, the profiles' Zen 4): full's 120 pooled_head rows (classifier heads: a 1x1 conv on the
# pooled map) and 30 linear rows on tokens (language-model heads) into a separate store, not fitted: the refits
# with them scored no better over all networks (docs/accuracy.md, session 26). The file lists exactly those 150
# benchmarks of full; the lines above that resume full would measure them into calibration/data
held=calibration/data-held-back-2026-12-06-zen4
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    annette-torch calibrate --out "$held" --statistic median --drift none --backend "$backend" \
        --sweep calibration/rows-of-full-2026-12-06.csv --threads 1
done
# 2026-12-06 (session 27, the profiles' Zen 4): the 10 reference networks a budgeted campaign measures first,
# timed as the accuracy benchmark's ground truth is (12 rounds compiled once, canary, median), into the
# torch-cpu store's references.csv: fit anchors torch-cpu on them (docs/accuracy.md, session 27). A budget of
# 0.01 minutes measures them and no benchmark; the other stores have none (not anchored, same section)
calibrate --backend torch-cpu --minutes 0.01 --references 10 --prior torch-cpu --threads 1
# training passes (forward + backward per layer; optimizer steps timed into the store first)
for sweep in training training-large training-stem; do
    calibrate --backend torch-cpu-train --sweep "$sweep" --threads 1 --warmup 2 --repeats 7
done

annette-torch stores calibration/data --compact --by-family
# 2026-12-07 (session 32, the profiles' Zen 4): full's 45 channel_shuffle rows (ShuffleNetV2's view-transpose-view
# between two units, which OpenVINO runs as one ShuffleChannels kernel) into the 1-thread stores and openvino-cpu's
# 2-thread store, the four profiles refitted. The file lists exactly those benchmarks of full; the lines above that
# resume full measure them too
for backend in openvino-cpu onnxruntime-cpu torch-cpu; do
    calibrate --backend "$backend" --sweep calibration/rows-of-full-2026-12-07.csv --threads 1
done
calibrate --backend openvino-cpu --sweep calibration/rows-of-full-2026-12-07.csv --threads 2
# 2026-12-07 (session 33, the profiles' Zen 4): calibration/data-candidate-2026-12-07-zen4 is the openvino-cpu store
# measured in one window on 2026-12-06 02:27-03:01 UTC (3,387 of full's benchmarks in its fixed order and the 73 of
# transformer: calibrate --backend openvino-cpu --sweep full --minutes 33, then --sweep transformer; until this session
# calibration/data-refresh-2026-12-06-zen4), with full's 45 channel_shuffle rows, the 713 benchmarks of full's
# small-kernel families it lacked (its activations, norms, pools and detection kinds had too few rows for a learned
# model), and the weight re-reads measured in context into it; not fitted into a shipped profile
# (docs/accuracy.md, session 33)
candidate=calibration/data-candidate-2026-12-07-zen4
for sweep in calibration/rows-of-full-2026-12-07.csv calibration/rows-of-full-2026-12-07-s33.csv; do
    annette-torch calibrate --out "$candidate" --statistic median --drift none --backend openvino-cpu --sweep "$sweep" --threads 1
done
annette-torch fit --data "$candidate"/openvino-cpu-1t-* --out /tmp/candidate --name openvino-cpu   # before weight_rereads.json was written
annette-torch calibrate --backend openvino-cpu --threads 1 --out "$candidate" --repeats 20 --profile /tmp/candidate/openvino-cpu.json \
    --weight-rereads torchvision:regnet_x_800mf torchvision:efficientnet_b1 torchvision:mnasnet0_5 torchvision:regnet_y_800mf \
    torchvision:resnet101 timm:efficientnet_b2
# 2026-12-07 (session 34, the profiles' Zen 4): openvino-cpu's 1-thread store in calibration/data measured anew in one
# window (full and transformer, 06:53-08:18 UTC), then the weight re-reads into it against a fit of it (08:21), as
# benchmarks/results/rerun-2026-12-07-s34/window.sh ran them into a fresh folder that then replaced calibration/data's
# store; the store the lines above built (measured from 2026-11-29 over several days) is in
# calibration/data-2026-11-29-zen4. On calibration/data the lines above now measure nothing new for it
# (docs/accuracy.md, session 34)
annette-torch fit --data calibration/data/openvino-cpu-1t-* --out /tmp/before-rereads --name openvino-cpu
annette-torch calibrate --backend openvino-cpu --threads 1 --out calibration/data --repeats 20 \
    --profile /tmp/before-rereads/openvino-cpu.json --weight-rereads torchvision:regnet_x_800mf torchvision:efficientnet_b1 torchvision:mnasnet0_5 torchvision:regnet_y_800mf \
    torchvision:resnet101 timm:efficientnet_b2
# 2026-12-07 (session 35, the profiles' Zen 4): full's 36 softmax_last rows (softmax along the last axis, as attention's;
# the activation row's softmax is along channels, softmax_strided) into the onnxruntime-cpu store, and its profile refitted.
# The file lists exactly those benchmarks of full. The `--sweep full` that measured them (10:10-10:12 UTC) also measured the
# 177 rows of full held back from that store (session 26's pooled heads and language-model heads, session 23's branch
# sums); refitted with them it scored worse again, so they were moved into calibration/data-held-back-2026-12-07-zen4
# by benchmark id (docs/accuracy.md, session 35)
calibrate --backend onnxruntime-cpu --sweep calibration/rows-of-full-2026-12-07-s35.csv --threads 1
# 2026-12-07 (session 36, the profiles' Zen 4): full's 59 residual_in_context rows (a ResNet block between 1x1 convs, where
# ONNX Runtime's NCHWc conv takes the residual add in) into the onnxruntime-cpu (12:33 UTC) and openvino-cpu (13:37 UTC)
# stores, the file listing exactly those benchmarks of full; the profiles refitted with the fusion learner's new
# clauses (docs/accuracy.md, session 36)
calibrate --backend onnxruntime-cpu --sweep calibration/rows-of-full-2026-12-07-s36.csv --threads 1
calibrate --backend openvino-cpu --sweep calibration/rows-of-full-2026-12-07-s36.csv --threads 1
# 2026-12-07 (session 37, the profiles' Zen 4): full's 150 rows of 1x1 depthwise convs (60 on the network input, 60 in
# context at stride 1, 30 in context at stride 2; RepVGG-style branches, which PyTorch eager runs group by group at
# stride 1) and 30 of narrow linears on 1,024-65,536 rows (ConViT's positional projection) into the torch-cpu store
# (15:37, 15:48, 16:01 and 16:38 UTC), the file listing exactly those benchmarks of full; torch-cpu refitted with the
# anchor form of calibration/profiles.sh (docs/accuracy.md, session 37)
calibrate --backend torch-cpu --sweep calibration/rows-of-full-2026-12-07-s37.csv --threads 1
# 2026-12-07 (session 38, the profiles' Zen 4): full's 80 rows of the pooled head's 1x1 conv with nothing fused at
# squeeze-excite widths (reducing and expanding; the squeeze_excite row's convs run fused with their ReLU and gate, so the
# conv model had 11 plain kernels on a 1x1 map) into the openvino-cpu store (19:00 UTC), the file listing exactly those
# benchmarks of full; openvino-cpu refitted (docs/accuracy.md, session 38)
calibrate --backend openvino-cpu --sweep calibration/rows-of-full-2026-12-07-s38.csv --threads 1
