#!/usr/bin/env bash
# Session 38: openvino-cpu as shipped before it (commit 194b0ab) against AFTER_PROFILE (default: the profile shipped now),
# scored on every committed 1-thread ground truth of the profiles' Zen 4 by benchmarks/rescore.sh. Measures nothing.
# rescore.txt's "after" lines are the profile session 38 shipped (that of commit 5023b5e; extract its json and .npz with
# git show to reproduce them); rescore-cached-rereads.txt's came from a patch not in the repository. From the repository root:
#   bash benchmarks/results/rerun-2026-12-07-s38/rescore.sh [AFTER_PROFILE] > benchmarks/results/rerun-2026-12-07-s38/rescore.txt
set -euo pipefail
SHOW=tinynet_e,mobilenetv3_small_050,repghostnet_050,regnety_002,efficientvit_m0,ghostnet_050,mambaout_femto,resnet18 \
    exec bash benchmarks/rescore.sh openvino-cpu "${BASE:-194b0ab}" "${1:-openvino-cpu}"
