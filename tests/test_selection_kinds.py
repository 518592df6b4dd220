"""Sorting, top-k, NMS and RoI align are kinds costed by what they do, never unknown or free."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from annette_torch import Estimator, UnknownKindWarning, trace
from annette_torch.kinds.selection import ADAPTIVE_SAMPLES, BILINEAR_OPS, IOU_OPS
from annette_torch.layer_models.regressors import regression_inputs

torchvision = pytest.importorskip("torchvision")
# torchvision's roi_align checks its boxes in Python: FX cannot trace it, the eager capture does
pytestmark = pytest.mark.filterwarnings("ignore:.*captured one eager forward pass:UserWarning")


class DetectionHead(nn.Module):
    """The selection ops of a detection head on a feature map and 64 candidate boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x, boxes, scores):
        features = self.conv(x)
        top, _ = torch.topk(scores, 16)
        ordered, _ = torch.sort(scores)
        distinct = torch.unique(scores.round())
        keep = torchvision.ops.nms(boxes, scores, 0.5)
        pooled = torchvision.ops.roi_align(features, [boxes], output_size=(7, 7), sampling_ratio=2)
        return top.sum() + ordered.sum() + distinct.sum() + keep.float().sum() + pooled.sum()


def head_inputs():
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(64, 2, generator=generator) * 24
    boxes = torch.cat([corners, corners + 4 + torch.rand(64, 2, generator=generator) * 4], 1)
    return torch.rand(1, 3, 32, 32, generator=generator), boxes, torch.rand(64, generator=generator)


def test_selection_ops_are_their_own_kinds_with_counted_work():
    graph = trace(DetectionHead().eval(), example_inputs=head_inputs())
    by_kind = {layer.kind: layer for layer in graph}
    assert {"topk", "sort", "unique", "nms", "roi_align"} <= by_kind.keys() and not graph.unknown_layers()
    assert by_kind["topk"].counts.ops == 64 * math.ceil(math.log2(17))
    assert by_kind["sort"].counts.ops == by_kind["unique"].counts.ops == 64 * 6
    assert by_kind["nms"].counts.ops == 64 * 6 + 64 * 63 // 2 * IOU_OPS
    assert by_kind["roi_align"].counts.ops == 64 * 8 * 49 * 2 ** 2 * BILINEAR_OPS
    assert by_kind["roi_align"].counts.input_elems == 8 * 32 * 32 + 64 * 5      # the feature map and the rois (index, box)


def test_an_estimate_costs_them_by_their_own_fitted_models_and_never_as_free():
    graph = trace(DetectionHead().eval(), example_inputs=head_inputs())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownKindWarning)
        report = Estimator("openvino-cpu").report(graph)
    rows = report[report["kind"].isin(["topk", "sort", "unique", "nms", "roi_align"])]
    assert len(rows) == 5 and (rows["time_ms"] > 0).all() and (rows["bytes"] > 0).all()
    # the selection families calibrate them (this head's 64 scores are below their sizes: extrapolated)
    assert (rows["profile_entry"] == rows["kind"]).all() and (rows["confidence"] != "fallback").all()


def test_adaptive_roi_align_counts_two_samples_per_bin_side():
    class Adaptive(nn.Module):
        def forward(self, x, boxes):
            return torchvision.ops.roi_align(x, [boxes], output_size=2)

    graph = trace(Adaptive(), example_inputs=(torch.zeros(1, 4, 8, 8), torch.tensor([[0.0, 0.0, 4.0, 4.0]])))
    (layer,) = [layer for layer in graph if layer.kind == "roi_align"]
    assert layer.counts.ops == 4 * 4 * ADAPTIVE_SAMPLES ** 2 * BILINEAR_OPS


def test_two_layers_on_different_outputs_of_a_split_are_both_costed():
    class Halves(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=1)
            return torch.topk(a, 3).values, torch.topk(b, 3).values

    graph = trace(Halves(), input_shape=(1, 64))
    assert not graph.folded
    report = Estimator("openvino-cpu").report(graph)
    assert (report.loc[report["kind"] == "topk", "confidence"] != "free").all()


def test_a_kernel_on_zero_boxes_gives_finite_regression_inputs():
    features = np.zeros((1, 13))
    with np.errstate(all="raise"):
        inputs = regression_inputs(features)
    assert np.isfinite(inputs).all()
    assert torch.isfinite(regression_inputs(torch.zeros(1, 13, dtype=torch.float64), torch)).all()


def test_fasterrcnn_mobilenet_320_has_no_unknown_and_no_free_selection_kernels():
    from annette_torch.models_source import trace_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = trace_model("torchvision:fasterrcnn_mobilenet_v3_large_320_fpn")
    assert not graph.unknown_layers()
    kinds = {layer.kind for layer in graph}
    assert {"topk", "nms", "roi_align"} <= kinds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", RuntimeWarning)          # no 0/0 on kernels of zero boxes
        report = Estimator("openvino-cpu").report(graph)
    selection = report[report["kind"].isin(["topk", "nms", "roi_align"])]
    assert len(selection) >= 5 and (selection["confidence"] != "free").all()
    assert math.isfinite(report.attrs["total_ms"])
