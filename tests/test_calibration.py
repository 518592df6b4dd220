"""Calibration engine: sweeps, generator, matcher, store, and campaigns on the real runtimes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import pytest

import annette_torch as at
from annette_torch.backends import KernelRecord
from annette_torch.calibration import (FAMILIES, BenchmarkSpec, MeasurementStore, StoreError, SweepError,
                                       build_benchmark, load_measurements, load_sweep, match_kernels,
                                       run_campaign)
from annette_torch.calibration.generator import estimate_size, resolve_params
from annette_torch.calibration.store import LAYER_COLUMNS, NETWORK_COLUMNS
from annette_torch.layer_models.base import COLUMN

HEADER = "family,count,n,h,w,c,f,k,stride,groups,op,pool\n"
FINGERPRINT = {"backend": "test", "runtime_version": "1", "cpu": "cpu", "threads": 1, "precision": "f32"}


def write_sweep(tmp_path: Path, rows: str, name: str = "sweep") -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_text("# a comment\n" + HEADER + rows)
    return path


# --- sweep files -------------------------------------------------------------------------

def test_sweep_cells_grid_choice_range_and_stable_ids(tmp_path):
    path = write_sweep(tmp_path, "conv2d,3,,8..64,,16|32,4..12:4,3,,,,\nlinear,2,,,,8..2048,10,,,,,\n")
    specs = load_sweep(path)
    convs = [s for s in specs if s.family == "conv2d"]
    assert sorted({s.params["f"] for s in convs}) == [4, 8, 12]          # the grid, every value
    assert {s.params["c"] for s in convs} <= {16, 32}                    # a choice
    assert all(8 <= s.params["h"] <= 64 and s.params["k"] == 3 for s in convs)
    assert all(8 <= s.params["c"] <= 2048 and s.params["f"] == 10 for s in specs if s.family == "linear")
    assert [s.id for s in load_sweep(path)] == [s.id for s in specs]     # seeded: same benchmarks again
    assert len({s.id for s in specs}) == len(specs)


@pytest.mark.parametrize("rows, message", [
    ("nosuch,1,,8,,8,8,3,,,,\n", "unknown family 'nosuch'"),
    ("conv2d,1,,8,,8,8,3,,,bogus,\n", "does not use op"),
    ("pool2d,1,,4,,8,,9,1,,max,\n", "larger than the input"),
    ("conv2d,1,,8,,8,8,3,,,,x\n", "does not use pool"),
    ("conv2d,1,,9..3,,8,8,3,,,,\n", "range '9..3' is empty"),
])
def test_sweep_errors_name_row_and_problem(tmp_path, rows, message):
    with pytest.raises(SweepError, match=message) as info:
        load_sweep(write_sweep(tmp_path, rows))
    assert "row 1" in str(info.value)


def test_sweep_header_and_name_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("family,count,h\nconv2d,1,8\n")
    with pytest.raises(SweepError, match="header must be"):
        load_sweep(bad)
    with pytest.raises(SweepError, match="known sweeps: .*quick"):
        load_sweep("no-such-sweep")


def test_shipped_sweeps_load_and_respect_limits():
    sizes = {name: load_sweep(name) for name in ("smoke", "quick", "full")}
    assert len(sizes["smoke"]) <= 15 < len(sizes["quick"]) < len(sizes["full"])
    from annette_torch.calibration.generator import TRAINING_FAMILIES
    assert {s.family for s in sizes["quick"]} == set(FAMILIES) - set(TRAINING_FAMILIES)   # every inference family
    training = {s.family for name in ("training", "training-large", "training-stem") for s in load_sweep(name)}
    assert set(TRAINING_FAMILIES) <= training
    from annette_torch.calibration.sweep import MAX_ELEMS, MAX_OPS
    for spec in sizes["quick"]:
        ops, elems = estimate_size(spec)
        assert ops <= MAX_OPS and elems <= MAX_ELEMS


def test_sweep_sets_its_own_size_limits(tmp_path):
    rows = "conv2d,1,32,28,,128,128,3,,,,\n"          # 7.4e9 ops: above the default limit
    with pytest.raises(SweepError, match="above the size limits"):
        load_sweep(write_sweep(tmp_path, rows, "big"))
    (tmp_path / "big.csv").write_text("# max_ops: 2e10\n" + HEADER + rows)
    (spec,) = load_sweep(tmp_path / "big.csv")
    assert estimate_size(spec)[0] == 32 * 28 * 28 * 128 * 128 * 9 * 2
    (tmp_path / "big.csv").write_text("# max_ops: lots\n" + HEADER + rows)
    with pytest.raises(SweepError, match="max_ops must be a positive number, got 'lots'"):
        load_sweep(tmp_path / "big.csv")


# --- generator ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, kinds", [
    (BenchmarkSpec("conv2d", {"h": 16, "c": 8, "f": 16, "k": 3, "groups": "dw"}), ["depthwise_conv"]),
    (BenchmarkSpec("conv2d", {"h": 16, "c": 8, "f": 16, "k": 3, "groups": 4}), ["conv"]),
    (BenchmarkSpec("conv_chain", {"h": 16, "c": 8, "f": 16, "k": 3, "op": "bn-hardswish-avgpool", "pool": 2}),
     ["conv", "batch_norm", "hardswish", "avg_pool"]),
    (BenchmarkSpec("residual", {"h": 8, "c": 8, "k": 3}), ["conv", "batch_norm", "relu", "conv", "batch_norm", "add", "relu"]),
    (BenchmarkSpec("dw_separable", {"h": 8, "c": 8, "f": 16, "k": 3}),
     ["depthwise_conv", "batch_norm", "relu6", "conv", "batch_norm"]),
    (BenchmarkSpec("branch_concat", {"h": 8, "c": 8, "f": 4, "k": 3}), ["conv", "relu", "conv", "relu", "concat"]),
    (BenchmarkSpec("mlp", {"c": 16, "f": 32, "h": 4}), ["linear", "gelu", "linear"]),
    (BenchmarkSpec("norm", {"h": 4, "c": 16, "op": "layernorm"}), ["layer_norm"]),
    (BenchmarkSpec("upsample", {"h": 8, "c": 8, "op": "bilinear", "stride": 4}), ["conv", "upsample"]),
    (BenchmarkSpec("pad", {"h": 8, "c": 8, "k": 2, "op": "reflect"}), ["conv", "pad"]),
    (BenchmarkSpec("adaptive_pool", {"h": 12, "c": 8, "k": 3, "op": "max"}), ["conv", "adaptive_max_pool"]),
    (BenchmarkSpec("split", {"h": 8, "c": 10, "groups": 3, "op": "dw"}),
     ["conv", "split", "depthwise_conv", "depthwise_conv", "depthwise_conv", "concat"]),
    (BenchmarkSpec("split", {"h": 8, "c": 10, "groups": 2, "op": "none"}), ["conv", "split", "concat"]),
    (BenchmarkSpec("conv_transpose", {"h": 8, "c": 8, "f": 4, "k": 2}), ["conv", "conv_transpose"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "channels"}), ["conv", "slice", "add", "slice", "concat"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "f": 21, "op": "ghost"}),
     ["conv", "depthwise_conv", "concat", "slice", "conv"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "groups": 4, "op": "qkv"}),
     ["linear", "permute", "slice", "slice", "slice", "attention", "permute", "linear"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "cls"}), ["layer_norm", "slice", "linear"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "tokens"}), ["layer_norm", "slice", "linear", "slice", "concat"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "gather"}), ["layer_norm", "slice", "linear"]),
    (BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "merge"}),
     ["linear", "slice", "slice", "slice", "slice", "concat", "layer_norm", "linear"]),
    (BenchmarkSpec("topk", {"h": 8, "c": 3, "k": 50}), ["conv", "topk"]),
    (BenchmarkSpec("sort", {"h": 8, "c": 2}), ["conv", "sort"]),
    (BenchmarkSpec("unique", {"h": 8, "c": 2}), ["conv", "unique"]),
    (BenchmarkSpec("nms", {"h": 8, "c": 16, "op": 0.7}), ["conv", "nms"]),
    (BenchmarkSpec("roi_align", {"h": 16, "c": 8, "k": 7, "groups": 20}), ["conv", "roi_align"]),
    (BenchmarkSpec("grid_sample", {"n": 30, "h": 12, "c": 1, "k": 7}), ["grid_sample"]),
    (BenchmarkSpec("unfold", {"h": 8, "c": 2, "k": 3}), ["conv", "unfold"]),
    (BenchmarkSpec("channel_shuffle", {"h": 8, "c": 13, "groups": 3}),     # c rounded down to 12
     ["split", "conv", "relu", "concat", "channel_shuffle", "permute", "split", "conv", "relu", "concat"]),
])
def test_generator_builds_the_layers_it_names(spec, kinds):
    model, shape = build_benchmark(spec)
    graph = at.trace(model, input_shape=shape)
    assert [layer.kind for layer in graph.layers if not layer.free] == kinds
    assert all(layer.module_path for layer in graph.layers)             # every layer leads back to a module


def test_shape_families_refuse_what_they_cannot_build():
    with pytest.raises(ValueError, match="adaptive_pool needs an input 10x10 that k=3 divides"):
        build_benchmark(BenchmarkSpec("adaptive_pool", {"h": 10, "c": 8, "k": 3}))
    with pytest.raises(ValueError, match="split needs 2 to c=4 parts, got groups=5"):
        build_benchmark(BenchmarkSpec("split", {"h": 8, "c": 4, "groups": 5, "op": "dw"}))
    with pytest.raises(ValueError, match="slice channels needs f > c, got c=16, f=16"):
        build_benchmark(BenchmarkSpec("slice", {"h": 8, "c": 16, "f": 16, "op": "channels"}))
    with pytest.raises(ValueError, match="slice merge needs an even map, got 7x7"):
        build_benchmark(BenchmarkSpec("slice", {"h": 7, "c": 16, "op": "merge"}))
    with pytest.raises(ValueError, match="upsample op must be one of nearest/bilinear"):
        build_benchmark(BenchmarkSpec("upsample", {"h": 8, "c": 8, "op": "bicubic"}))
    with pytest.raises(ValueError, match="topk k=300 exceeds the 192 scores it ranks"):
        build_benchmark(BenchmarkSpec("topk", {"h": 8, "c": 3, "k": 300}))
    with pytest.raises(ValueError, match="nms op is the IoU threshold, a number in \\(0, 1\\), got 'high'"):
        build_benchmark(BenchmarkSpec("nms", {"h": 8, "c": 16, "op": "high"}))
    with pytest.raises(ValueError, match="channel_shuffle needs groups >= 2, got 1"):
        build_benchmark(BenchmarkSpec("channel_shuffle", {"h": 8, "c": 16, "groups": 1}))
    with pytest.raises(ValueError, match="unfold k must be odd"):
        build_benchmark(BenchmarkSpec("unfold", {"h": 8, "c": 2, "k": 4}))


def test_group_width_sets_the_groups_from_the_channels():
    """``groups="gw16"``: 16 channels per group, as RegNet's grouped convs; channels are
    rounded down to what the width and the groups divide, f = c where not given."""
    model, shape = build_benchmark(BenchmarkSpec("conv2d", {"h": 14, "c": 300, "k": 3, "groups": "gw16"}))
    assert (model.conv.in_channels, model.conv.out_channels, model.conv.groups) == (288, 288, 18)
    assert resolve_params(BenchmarkSpec("conv2d", {"h": 14, "c": 300, "f": 500, "k": 3, "groups": "gw16"}))["f"] == 486
    assert resolve_params(BenchmarkSpec("conv2d", {"h": 14, "c": 10, "k": 3, "groups": "gw16"}))["groups"] == 1
    with pytest.raises(ValueError, match="needs a positive group width"):
        resolve_params(BenchmarkSpec("conv2d", {"h": 14, "c": 32, "k": 3, "groups": "gwide"}))


def test_pooled_head_is_a_classifier_head_on_the_pooled_map():
    """``pooled_head``: the head conv reads the pooled 1x1 map (c x f weights, as
    MobileNetV3's ``conv_head``), then the activation (an identity with ``op=none``) and a
    classifier to 1000 classes; its estimated size is the traced network's."""
    for op, kinds in (("hardswish", ["conv", "global_avg_pool", "conv", "hardswish", "reshape", "linear"]),
                      ("none", ["conv", "global_avg_pool", "conv", "identity", "reshape", "linear"])):
        spec = BenchmarkSpec("pooled_head", {"h": 7, "c": 96, "f": 320, "op": op})
        model, shape = build_benchmark(spec)
        graph = at.trace(model, input_shape=shape)
        assert [layer.kind for layer in graph.layers] == kinds and shape == (1, 96, 7, 7)
        assert model(torch.randn(shape)).shape == (1, 1000)
        head = graph.features[graph.index["head"]]
        assert (head[COLUMN["h"]], head[COLUMN["w"]], head[COLUMN["weight_elems"]]) == (1, 1, 96 * 320 + 320)
        assert estimate_size(spec)[0] == pytest.approx(graph.total("ops", ("conv", "linear")), rel=0.02)
    with pytest.raises(ValueError, match="pooled_head activation must be none or one of .*hardswish.*, got 'gelu6'"):
        build_benchmark(BenchmarkSpec("pooled_head", {"h": 7, "c": 8, "f": 16, "op": "gelu6"}))


def test_linear_takes_tokens_as_a_language_model_head_does():
    """``linear`` with ``h``: each of h tokens projected from c to f (n sequences), the
    features a traced language model's head has; without ``h`` a batch of n vectors."""
    spec = BenchmarkSpec("linear", {"h": 16, "c": 32, "f": 1000})
    model, shape = build_benchmark(spec)
    assert shape == (1, 16, 32) and model(torch.randn(shape)).shape == (1, 16, 1000)
    graph = at.trace(model, input_shape=shape)
    fc = graph.features[graph.index["fc"]]
    assert (fc[COLUMN["n"]], fc[COLUMN["h"]], fc[COLUMN["c"]], fc[COLUMN["f"]]) == (1, 16, 32, 1000)
    assert estimate_size(spec)[0] == pytest.approx(graph.total("ops", "linear"), rel=0.02)
    assert build_benchmark(BenchmarkSpec("linear", {"n": 4, "c": 32, "f": 8}))[1] == (4, 32)


def test_selection_families_run_on_fixed_data():
    """The boxes, RoIs and grids are buffers drawn from the benchmark's seed: two builds
    keep the same boxes, and the shapes are the ones the kinds are counted from."""
    spec = BenchmarkSpec("nms", {"h": 6, "w": 5, "c": 16})
    (first, shape), (second, _) = build_benchmark(spec), build_benchmark(spec)
    assert torch.equal(first.nms.boxes, second.nms.boxes) and first.nms.boxes.shape == (30, 4)
    keep = first(torch.randn(shape))
    assert keep.dtype == torch.int64 and 1 <= len(keep) <= 30
    model, shape = build_benchmark(BenchmarkSpec("roi_align", {"h": 16, "c": 8, "k": 7, "groups": 20}))
    rois = model.roi_align.rois
    assert rois.shape == (20, 5) and (rois[:, 3] > rois[:, 1]).all() and (rois[:, 3:] <= 16).all()
    assert model(torch.randn(shape)).shape == (20, 8, 7, 7)
    model, shape = build_benchmark(BenchmarkSpec("grid_sample", {"n": 30, "h": 12, "c": 1, "k": 9}))
    assert model(torch.randn(shape)).shape == (30, 1, 9, 9) and model.grid_sample.grid.abs().max() <= 1


def test_estimated_size_matches_the_traced_network():
    for spec in load_sweep("smoke"):
        model, shape = build_benchmark(spec)
        graph = at.trace(model, input_shape=shape)
        ops, _ = estimate_size(spec)
        if spec.family in ("conv2d", "linear", "residual", "branch_concat"):
            assert ops == pytest.approx(graph.total("ops", ("conv", "depthwise_conv", "linear")), rel=0.02), spec


# --- matcher (synthetic kernel reports) ----------------------------------------------------

def kernel(name, layers, times=(1.0, 1.2, 0.8), status="EXECUTED", kind="K"):
    return KernelRecord(name, kind, "impl", status, tuple(times), tuple(layers))


def test_matcher_fused_possibly_fused_folded_and_orphan_rows():
    model, shape = build_benchmark(BenchmarkSpec("residual", {"h": 8, "c": 8, "k": 3}))
    graph = at.trace(model, input_shape=shape)
    kernels = [kernel("k1", ["conv1", "act1"]), kernel("k2", ["conv2", "add", "act2"], times=(2, 2, 2)),
               kernel("relu-not-run", ["act1"], status="NOT_RUN"), kernel("reorder", [], times=(0.1, 0.1, 0.3))]
    rows = {row["layer"]: row for row in match_kernels(graph, kernels)}
    assert rows["conv1"]["status"] == "executed" and rows["conv1"]["time_ms"] == pytest.approx(1.0)
    assert rows["bn1"]["status"] == "fused" and rows["bn1"]["fused_into"] == "conv1"     # folded at export
    assert rows["act1"]["status"] == "fused" and rows["act1"]["kernel"] == "k1"
    assert rows["conv1"]["fusion"] == "fused" and rows["act1"]["fusion"] == "not-fused"  # act1 -> conv2
    assert rows["bn2"]["fusion"] == "possibly-fused"           # add has two inputs: merge point ambiguous
    assert rows["add"]["fusion"] == "fused" and rows["act2"]["fused_into"] == "conv2"
    assert rows["conv2"]["time_ms"] == 2 and rows["add"]["time_ms"] == 0
    assert rows[""]["kernel"] == "reorder" and rows[""]["time_ms"] == pytest.approx(0.1)


def test_matcher_gives_nameless_compute_kernels_to_the_only_layer_left():
    model, shape = build_benchmark(BenchmarkSpec("norm", {"h": 8, "c": 16, "op": "groupnorm"}))
    graph = at.trace(model, input_shape=shape)
    rows = match_kernels(graph, [kernel("MVN_1", [], (2, 2, 2), kind="MVN"), kernel("r", [], kind="Reorder")])
    assert [(r["layer"], r["status"], r["kernel"], r["time_ms"]) for r in rows] == [
        ("norm", "executed", "MVN_1", 2), ("", "executed", "r", 1)]


def test_matcher_gives_a_kernel_the_runtime_renamed_to_the_layers_of_its_kind():
    # OpenVINO merges ReXNet's y[:, :c] and y[:, c:] into one VariadicSplit_<id>, named after itself
    model, shape = build_benchmark(BenchmarkSpec("slice", {"h": 8, "c": 16, "op": "channels"}))
    graph = at.trace(model, input_shape=shape)
    kernels = [kernel("conv", ["conv"]), kernel("VariadicSplit_7", [], (0.5, 0.5, 0.5), kind="VariadicSplit"),
               kernel("add", ["add"]), kernel("cat", ["concat"]), kernel("r", [], kind="Reorder")]
    rows = {row["layer"]: row for row in match_kernels(graph, kernels)}
    assert (rows["getitem"]["status"], rows["getitem"]["kernel"], rows["getitem"]["time_ms"]) == ("executed", "VariadicSplit_7", 0.5)
    assert rows["getitem_1"]["status"] == "fused" and rows["getitem_1"]["fused_into"] == "getitem"
    assert rows[""]["kernel"] == "r"                       # a layout reorder stays a row of its own
    two = kernels[:2] + [kernel("VariadicSplit_8", [], kind="VariadicSplit")] + kernels[2:]
    rows = {row["layer"]: row for row in match_kernels(graph, two)}   # which one is whose: not guessed
    assert rows["getitem"]["status"] == "fused" and rows["getitem"]["fused_into"] == "conv"


class FunctionalSE(torch.nn.Module):
    """A conv, then squeeze-and-excitation written as timm writes it: the spatial mean, the
    ReLU, the sigmoid and the gating multiply are functional calls of one module path."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 1)
        self.fc1, self.fc2 = torch.nn.Conv2d(8, 4, 1), torch.nn.Conv2d(4, 8, 1)

    def forward(self, x):
        y = self.conv(x)
        return y * torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))


def test_matcher_tells_apart_the_layers_of_one_module_path_by_their_onnx_nodes():
    """A kernel naming the ``ReduceMean`` node of a path where a mean and a multiply live
    is the mean's, not the module output's; without node names it goes to the module's
    last layer, as before."""
    graph = at.trace(FunctionalSE(), input_shape=(1, 8, 6, 6))
    mean, mul = (next(layer.name for layer in graph if layer.kind == kind) for kind in ("reduce", "mul"))
    assert graph[mean].module_path == graph[mul].module_path == ""
    kernels = [kernel("conv", ["conv"]), KernelRecord("ReduceMean", "ReduceMean", "jit", "EXECUTED", (0.5,) * 3, ("",),
                                                      (("", "ReduceMean", 0, 1),)),
               kernel("fc1", ["fc1"]), kernel("fc2", ["fc2"]),
               KernelRecord("Multiply", "Eltwise", "jit", "EXECUTED", (0.2,) * 3, ("",), (("", "Sigmoid", 0, 1),
                                                                                          ("", "Mul", 0, 1)))]
    rows = {row["layer"]: row for row in match_kernels(graph, kernels)}
    assert (rows[mean]["status"], rows[mean]["time_ms"]) == ("executed", 0.5)
    sigmoid = next(layer.name for layer in graph if layer.kind == "sigmoid")
    assert rows[sigmoid]["time_ms"] == pytest.approx(0.2) and rows[mul]["fused_into"] == sigmoid
    unnamed = [KernelRecord(k.name, k.kernel_type, k.exec_type, k.status, k.runs_ms, k.layers) for k in kernels]
    rows = {row["layer"]: row for row in match_kernels(graph, unnamed)}
    assert rows[mean]["status"] != "executed" and rows[mul]["time_ms"] == pytest.approx(0.7)


class FunctionalAttention(torch.nn.Module):
    """timm's ``Attention``: the head split, the fused attention and the merge are
    functional calls of one module path."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


def test_matcher_ties_an_exported_attentions_matmuls_to_the_attention_layer():
    """The export writes a fused attention as MatMuls, a Softmax, Muls and a Transpose of
    k; the attention is the only layer of its path to export MatMul and Softmax, and the
    path's Transposes are the permute's, the attention's and the merge's, in that order."""
    graph = at.trace(FunctionalAttention(), input_shape=(1, 10, 32))
    attention = next(layer.name for layer in graph if layer.kind == "attention")
    permutes = [layer.name for layer in graph if layer.kind == "permute"]
    mha = KernelRecord("MHA", "Subgraph", "jit", "EXECUTED", (0.4,) * 3, ("",),
                       (("", "Transpose", 1, 3), ("", "MatMul", 0, 2), ("", "Softmax", 0, 1), ("", "MatMul", 1, 2)))
    merge = KernelRecord("Transpose", "Transpose", "ref", "EXECUTED", (0.1,) * 3, ("",), (("", "Transpose", 2, 3),))
    rows = {row["layer"]: row for row in match_kernels(graph, [kernel("qkv", ["qkv"]), mha, merge,
                                                               kernel("proj", ["proj"])])}
    assert rows[attention]["time_ms"] == pytest.approx(0.4) and rows[permutes[-1]]["time_ms"] == pytest.approx(0.1)


def test_a_real_export_names_each_node_by_path_op_type_and_place():
    import onnx

    from annette_torch.backends.base import export_onnx, onnx_node_places, onnx_scopes

    path = export_onnx(FunctionalSE().eval(), (1, 8, 6, 6), Path(tempfile.mkdtemp()) / "se.onnx")
    graph = onnx.load(str(path)).graph
    places = onnx_node_places(graph, onnx_scopes(graph))
    by_type = {place[1]: place for name, place in places.items() if name in {n.name for n in graph.node}}
    assert by_type["ReduceMean"] == ("", "ReduceMean", 0, 1) and by_type["Mul"] == ("", "Mul", 0, 1)
    assert by_type["Conv"][0] in ("conv", "fc1", "fc2")


def test_matcher_sums_a_layer_split_over_kernels_run_by_run():
    model, shape = build_benchmark(BenchmarkSpec("linear", {"c": 8, "f": 8}))
    graph = at.trace(model, input_shape=shape)
    rows = match_kernels(graph, [kernel("a", ["fc"], (1, 3, 2)), kernel("b", ["fc"], (3, 1, 2))])
    assert rows[0]["time_ms"] == 4 and rows[0]["spread"] == 0 and rows[0]["kernel"] == "a;b"


# --- store ---------------------------------------------------------------------------------

def network_row(benchmark):
    return {"benchmark": benchmark, "family": "conv2d", "spec": "{}", "status": "ok", "time_ms": 1.5}


def test_store_repairs_a_cut_row_and_drops_uncommitted_layer_rows(tmp_path):
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        store.append(network_row("a"), [{"layer": "conv", "time_ms": 1.0}])
        folder = store.folder
    with open(folder / "layers.csv", "a") as handle:           # b's layer rows were written, then a kill
        handle.write("b,conv,conv,Conv2d,executed,k,K,impl,,,,1.0,0\n")
    with open(folder / "networks.csv", "a") as handle:
        handle.write("b,conv2d,{},ok,,1.")                     # cut mid-row
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        assert store.done() == {"a"}
        assert list(store.layers()["benchmark"]) == ["a"]
        assert (folder / "networks.csv").read_text().endswith("\n")
    fingerprint, networks, layers = load_measurements(folder)
    assert fingerprint == FINGERPRINT and list(networks.columns) == list(NETWORK_COLUMNS)
    assert list(layers.columns) == list(LAYER_COLUMNS) and len(layers) == 1


def test_compaction_keeps_every_row_once_even_if_cut_short(tmp_path):
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        for name in "ab":
            store.append(network_row(name), [{"layer": "conv", "time_ms": 1.0, "ops": 2359296.0}])
        live_before = store.layers_path.read_bytes(), store.networks_path.read_bytes()
        store.compact()
        assert store.done() == {"a", "b"} and store.layers_path.read_text().count("\n") == 1
        store.append(network_row("c"), [{"layer": "conv", "time_ms": 2.0}])
        assert sorted(store.networks()["benchmark"]) == ["a", "b", "c"]
        assert store.layers().set_index("benchmark").loc["a", "ops"] == 2359296     # counts stay exact
        # a kill after the archives were written but before the live files were emptied
        store.layers_path.write_bytes(live_before[0])
        store.networks_path.write_bytes(live_before[1])
    _, networks, layers = load_measurements(store.folder)
    assert sorted(networks["benchmark"]) == ["a", "b"] and sorted(layers["benchmark"]) == ["a", "b"]


def test_stores_command_summarizes_and_compacts(tmp_path, capsys):
    from annette_torch.cli import main
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        store.append({**network_row("a"), "spread": 0.1, "wall_s": 60.0},
                     [{"layer": "conv", "status": "executed", "time_ms": 1.0, "spread": 0.02}])
    assert main(["stores", str(tmp_path), "--compact", "--by-family"]) == 0
    out = capsys.readouterr().out
    assert "compacted" in out and "test" in out and "layer_spread" in out and "layers_share" in out
    assert (store.folder / "layers.csv.gz").exists()
    assert main(["stores", str(tmp_path / "nothing")]) == 2


def test_stores_command_drops_a_family_to_measure_it_again(tmp_path, capsys):
    from annette_torch.cli import main
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        store.append(network_row("a"), [{"layer": "conv", "time_ms": 1.0}])
        store.append({**network_row("b"), "family": "nms"}, [{"layer": "nms", "time_ms": 2.0}])
    assert main(["stores", str(tmp_path), "--drop-family", "nms"]) == 0
    assert "dropped 1 nms benchmarks" in capsys.readouterr().out
    _, networks, layers = load_measurements(store.folder)
    assert list(networks["benchmark"]) == ["a"] and list(layers["benchmark"]) == ["a"]
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        assert store.done() == {"a"}                                 # a campaign measures b again
    assert main(["stores", str(tmp_path), "--drop-family", "nmss"]) == 2
    assert "--drop-family: no benchmark family nmss" in capsys.readouterr().err


def test_store_is_locked_and_checks_its_fingerprint(tmp_path):
    with MeasurementStore.open(tmp_path, FINGERPRINT):
        with pytest.raises(StoreError, match="in use by another calibration campaign"):
            MeasurementStore.open(tmp_path, FINGERPRINT)
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        (store.folder / "fingerprint.json").write_text('{"backend": "other"}')
    with pytest.raises(StoreError, match="records"):
        MeasurementStore.open(tmp_path, FINGERPRINT)


def test_store_rejects_unknown_columns(tmp_path):
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store, pytest.raises(ValueError, match="unknown columns: bogus"):
        store.append({**network_row("a"), "bogus": 1}, [])


# --- campaigns on the real runtimes --------------------------------------------------------

@pytest.fixture(scope="module")
def smoke_stores(tmp_path_factory):
    """The smoke sweep measured on each local CPU backend (one store root)."""
    root = tmp_path_factory.mktemp("smoke")
    summaries = {name: run_campaign(name, "smoke", root, warmup=2, repeats=5, progress=False)
                 for name in ("openvino-cpu", "onnxruntime-cpu", "torch-cpu")}
    return summaries


@pytest.mark.parametrize("backend", ["openvino-cpu", "onnxruntime-cpu", "torch-cpu"])
def test_smoke_sweep_end_to_end(smoke_stores, backend):
    summary = smoke_stores[backend]
    specs = load_sweep("smoke")
    assert (summary.measured, summary.failed, summary.benchmarks) == (len(specs), 0, len(specs))
    fingerprint, networks, layers = load_measurements(summary.store)
    assert fingerprint["backend"] == backend and fingerprint["threads"] == 1
    assert set(networks["benchmark"]) == {s.id for s in specs}
    assert (networks["status"] == "ok").all() and (networks["time_ms"] > 0).all()
    named = layers[layers["layer"] != ""]
    assert set(named["benchmark"]) == set(networks["benchmark"])       # every benchmark has layer rows
    compute = named[named["kind"].isin(["conv", "depthwise_conv", "linear", "max_pool", "matmul"])]
    assert (compute["status"] == "executed").all() and (compute["time_ms"] > 0).all()
    # every layer is accounted for: it ran, it was fused into a kernel, or it is a view/identity
    assert set(named["status"]) <= {"executed", "fused", "optimized_out"}
    # per-layer times add up to about the network's time (where it is well above the
    # profilers' microsecond resolution)
    summed = layers.groupby("benchmark")["time_ms"].sum()
    end_to_end = networks.set_index("benchmark")["time_ms"]
    ratio = (summed / end_to_end)[end_to_end > 0.1]
    assert len(ratio) >= 1 and ratio.between(0.3, 3).all(), ratio.to_dict()


def rows_of(summary, family, op=None):
    _, networks, layers = load_measurements(summary.store)
    wanted = networks[networks["family"] == family]
    if op:
        wanted = wanted[wanted["spec"].str.contains(f'"op": "{op}"')]
    return layers[layers["benchmark"].isin(wanted["benchmark"])].set_index("layer")


def test_openvino_fuses_relu_into_the_conv_and_the_store_says_so(smoke_stores):
    rows = rows_of(smoke_stores["openvino-cpu"], "conv_chain", "bn-relu")
    assert rows.loc["act", "status"] == "fused" and rows.loc["act", "fused_into"] == "conv"
    assert rows.loc["conv", "fusion"] == "fused" and rows.loc["bn", "fusion"] == "fused"
    assert rows.loc["conv", "kernel_type"] == "Convolution"
    residual = rows_of(smoke_stores["openvino-cpu"], "residual")
    assert residual.loc["bn2", "fusion"] == "possibly-fused"               # the add joins conv2's kernel
    assert residual.loc["add", "status"] == "fused"


def test_onnxruntime_fuses_relu_into_the_conv(smoke_stores):
    rows = rows_of(smoke_stores["onnxruntime-cpu"], "conv_chain", "bn-relu")
    assert rows.loc["act", "status"] == "fused" and rows.loc["act", "fused_into"] == "conv"
    assert rows.loc["conv", "status"] == "executed"


def test_torch_eager_fuses_nothing(smoke_stores):
    rows = rows_of(smoke_stores["torch-cpu"], "conv_chain", "bn-relu")
    assert list(rows["status"]) == ["executed"] * 3 and "aten::conv2d" in rows.loc["conv", "exec_type"]


def test_rerun_skips_what_the_store_holds(smoke_stores, tmp_path):
    summary = smoke_stores["torch-cpu"]
    root = Path(summary.store).parent
    again = run_campaign("torch-cpu", "smoke", root, warmup=1, repeats=2, progress=False)
    assert (again.measured, again.already_done) == (0, summary.benchmarks)


def test_failing_and_hanging_benchmarks_are_recorded_and_the_campaign_goes_on(tmp_path):
    bad = BenchmarkSpec("conv2d", {"h": 8, "c": 6, "f": 8, "k": 3, "groups": 4})      # groups do not divide c
    slow = BenchmarkSpec("conv2d", {"h": 160, "c": 256, "f": 256, "k": 3})            # 30 GFLOP x 30 runs: ~15 s
    good = BenchmarkSpec("linear", {"c": 32, "f": 16})
    summary = run_campaign("torch-cpu", [bad, slow, good], tmp_path, warmup=5, repeats=10, timeout_s=5.0,
                           progress=False)
    assert (summary.measured, summary.failed) == (1, 2)
    _, networks, layers = load_measurements(summary.store)
    errors = networks.set_index("benchmark")["error"]
    assert "groups=4 must divide c=6" in errors[bad.id]
    assert errors[slow.id].startswith("timeout")
    assert set(layers["benchmark"]) == {good.id}
    again = run_campaign("torch-cpu", [bad, slow, good], tmp_path, progress=False)
    assert again.already_done == 3 and again.measured == again.failed == 0


def test_time_limit_stops_early(tmp_path):
    summary = run_campaign("torch-cpu", "smoke", tmp_path, minutes=0, progress=False)
    assert summary.stopped_early and summary.measured == 0


def test_kill_9_mid_campaign_loses_nothing(tmp_path):
    sweep = write_sweep(tmp_path, "conv2d,40,,8..32,,8..64,8..64,1|3,,,,\n", name="killme")
    out = tmp_path / "store"
    command = [sys.executable, "-m", "annette_torch.cli", "calibrate", "--backend", "onnxruntime-cpu",
               "--sweep", str(sweep), "--out", str(out), "--warmup", "1", "--repeats", "3"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    networks_csv = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(out.glob("*/networks.csv"))
        if found and found[0].read_text().count("\n") >= 6:           # header + at least 5 benchmarks
            networks_csv = found[0]
            break
        time.sleep(0.05)
    assert networks_csv is not None, "the campaign did not start measuring"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = networks_csv.read_bytes()
    before_ids = set(pd.read_csv(networks_csv)["benchmark"]) if before.endswith(b"\n") else None
    assert process.returncode == -signal.SIGKILL

    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    after = networks_csv.read_bytes()
    assert after.startswith(before[: before.rfind(b"\n") + 1])          # nothing measured was lost or rewritten
    _, networks, layers = load_measurements(networks_csv.parent)
    assert len(networks) == len(load_sweep(sweep)) == networks["benchmark"].nunique()
    assert before_ids is None or before_ids <= set(networks["benchmark"])
    assert (networks["status"] == "ok").all()
    raw_layers = pd.read_csv(networks_csv.parent / "layers.csv")
    assert set(raw_layers["benchmark"]) == set(networks["benchmark"])   # no orphan rows of the killed benchmark
    assert layers.groupby("benchmark")["layer"].apply(lambda s: s[s != ""].is_unique).all()   # none doubled


def _onnx_graph(nodes):
    """An ONNX graph of ``nodes`` without declared inputs or outputs."""
    from onnx import helper

    return helper.make_graph(nodes, "g", [], [])


def test_onnxruntime_fusion_claims_follow_tensors_and_stop_at_claimed_nodes():
    from onnx import helper

    from annette_torch.backends.onnxruntime_cpu import fused_originals

    original = _onnx_graph([
        helper.make_node("Conv", ["input", "w1"], ["/conv1/Conv_output_0"], name="/conv1/Conv"),
        helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/act1/Relu_output_0"], name="/act1/Relu"),
        helper.make_node("Conv", ["/act1/Relu_output_0", "w2"], ["/conv2/Conv_output_0"], name="/conv2/Conv"),
        helper.make_node("Add", ["/conv2/Conv_output_0", "/act1/Relu_output_0"], ["/add/Add_output_0"], name="/add/Add"),
        helper.make_node("MatMul", ["/add/Add_output_0", "w3"], ["/fc/MatMul_output_0"], name="/fc/MatMul"),
        helper.make_node("Add", ["/fc/MatMul_output_0", "b3"], ["out"], name="/fc/Add"),
    ])
    optimized = _onnx_graph([      # NCHWc convolutions (the add fused as the second conv's sum), a fused gemm
        helper.make_node("ReorderInput", ["input"], ["t0"], name="ReorderInput"),
        helper.make_node("Conv", ["t0", "w1"], ["t1"], name="/act1/Relu_output_0_nchwc"),
        helper.make_node("Conv", ["t1", "w2", "b", "t1"], ["t2"], name="/add/Add_output_0_nchwc"),
        helper.make_node("ReorderOutput", ["t2"], ["/add/Add_output_0"], name="ReorderOutput"),
        helper.make_node("Gemm", ["/add/Add_output_0", "w3", "b3"], ["out"], name="/fc/MatMul/MatMulAddFusion"),
    ])
    claims = fused_originals(original, optimized)
    assert claims["ReorderInput"] == ()
    assert set(claims["/act1/Relu_output_0_nchwc"]) == {"/act1/Relu", "/conv1/Conv"}
    assert set(claims["/add/Add_output_0_nchwc"]) == {"/add/Add", "/conv2/Conv"}    # not act1: already claimed
    assert claims["ReorderOutput"] == ()
    assert set(claims["/fc/MatMul/MatMulAddFusion"]) == {"/fc/MatMul", "/fc/Add"}


def test_an_nchwc_conv_named_after_its_conv_claims_the_add_it_sums_and_the_activation_it_applies():
    """ONNX Runtime 1.32 names a ResNet block's second NCHWc conv after the conv's output,
    sums the skip in as its fourth input and applies the block's ReLU; the add and ReLU
    are gone from the optimized graph. A hard swish in a conv likewise."""
    from onnx import helper

    from annette_torch.backends.onnxruntime_cpu import fused_originals

    original = _onnx_graph([
        helper.make_node("Conv", ["input", "w0"], ["/stem/Conv_output_0"], name="/stem/Conv"),
        helper.make_node("HardSwish", ["/stem/Conv_output_0"], ["/act0/HardSwish_output_0"], name="/act0/HardSwish"),
        helper.make_node("Conv", ["/act0/HardSwish_output_0", "w2"], ["/conv2/Conv_output_0"], name="/conv2/Conv"),
        helper.make_node("Add", ["/conv2/Conv_output_0", "/act0/HardSwish_output_0"], ["/add/Add_output_0"],
                         name="/add/Add"),
        helper.make_node("Relu", ["/add/Add_output_0"], ["/act2/Relu_output_0"], name="/act2/Relu"),
        helper.make_node("Conv", ["/act2/Relu_output_0", "w3"], ["out"], name="/tail/Conv"),
    ])
    nchwc = "com.microsoft.nchwc"
    optimized = _onnx_graph([
        helper.make_node("ReorderInput", ["input"], ["t0"], name="ReorderInput", domain=nchwc),
        helper.make_node("Conv", ["t0", "w0"], ["t1"], name="/stem/Conv_output_0_nchwc", domain=nchwc,
                         activation="HardSwish"),
        helper.make_node("Conv", ["t1", "w2", "b", "t1"], ["t2"], name="/conv2/Conv_output_0_nchwc", domain=nchwc,
                         activation="Relu"),
        helper.make_node("Conv", ["t2", "w3"], ["t3"], name="out_nchwc", domain=nchwc),
        helper.make_node("ReorderOutput", ["t3"], ["out"], name="ReorderOutput", domain=nchwc),
    ])
    claims = fused_originals(original, optimized)
    assert set(claims["/stem/Conv_output_0_nchwc"]) == {"/stem/Conv", "/act0/HardSwish"}
    assert set(claims["/conv2/Conv_output_0_nchwc"]) == {"/conv2/Conv", "/add/Add", "/act2/Relu"}
    assert claims["out_nchwc"] == ("/tail/Conv",)
    # without the sum input the add is not the conv's: the walk stops before it
    optimized.node[2].input.pop()
    claims = fused_originals(original, optimized)
    assert claims["/conv2/Conv_output_0_nchwc"] == ("/conv2/Conv",)


def test_torch_cuda_is_skipped_cleanly_without_a_gpu():
    import torch

    from annette_torch.backends import BackendError, get_backend
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_smoke_sweep_on_cuda covers it")
    with pytest.raises(BackendError, match="torch-cuda.*no CUDA device"):
        get_backend("torch-cuda")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
def test_smoke_sweep_on_cuda(tmp_path):
    summary = run_campaign("torch-cuda", "smoke", tmp_path, warmup=2, repeats=5, progress=False)
    assert summary.failed == 0 and summary.measured == len(load_sweep("smoke"))
    fingerprint, networks, layers = load_measurements(summary.store)
    assert fingerprint["gpu"] and (networks["time_ms"] > 0).all()
    assert (layers.loc[layers["kind"] == "conv", "time_ms"] > 0).all()


def test_retry_failed_measures_failures_again_and_the_success_supersedes(tmp_path):
    bad_then_fixed = BenchmarkSpec("linear", {"c": 32, "f": 16})
    from annette_torch.backends import get_backend
    fingerprint = get_backend("torch-cpu").fingerprint()
    with MeasurementStore.open(tmp_path, fingerprint) as store:         # an earlier run where it failed
        store.append({"benchmark": bad_then_fixed.id, "family": "linear", "spec": bad_then_fixed.to_json(),
                      "status": "failed", "error": "board was down"}, [])
        store.compact()
    skipped = run_campaign("torch-cpu", [bad_then_fixed], tmp_path, progress=False)
    assert skipped.already_done == 1 and skipped.measured == 0
    retried = run_campaign("torch-cpu", [bad_then_fixed], tmp_path, warmup=1, repeats=3, progress=False,
                           retry_failed=True)
    assert retried.measured == 1
    _, networks, layers = load_measurements(retried.store)
    assert list(networks["status"]) == ["ok"] and set(layers["benchmark"]) == {bad_then_fixed.id}


def test_backends_default_to_their_own_precision_and_timeout():
    from annette_torch.backends import get_backend
    assert get_backend("openvino-cpu").precision == "f32"
    assert get_backend("torch-cpu").benchmark_timeout_s == 120


def test_a_compacted_store_reads_numbers_as_numbers(tmp_path):
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        store.append({**network_row("a"), "spread": 0.1}, [{"layer": "conv", "time_ms": 1.0, "ops": 8.0}])
        store.compact()
        networks, layers = store.networks(), store.layers()
    assert networks["time_ms"].dtype == float and layers["ops"].dtype.kind in "if"


def test_onnx_scope_recovers_nested_module_paths():
    """The exporter names a container's children relative to the scope above them;
    the scope names of a real export of nested modules map back to their module paths."""
    import tempfile

    import onnx
    from torch import nn

    from annette_torch.backends.base import export_onnx, onnx_scope

    model = nn.Sequential()
    model.add_module("stem", nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()))
    model.add_module("block", nn.Sequential(nn.Sequential(nn.Conv2d(8, 8, 1))))
    path = export_onnx(model, (1, 3, 16, 16), Path(tempfile.mkdtemp()) / "m.onnx")
    paths = {onnx_scope(node.name) for node in onnx.load(str(path)).graph.node if node.op_type in ("Conv", "Relu")}
    assert paths == {"stem.0", "stem.1", "block.0.0"}
    assert onnx_scope("/features/features.1/block/block.0/block.0.0/Conv") == "features.1.block.0.0"
    assert onnx_scope("/Constant") == "" and onnx_scope("Identity_3") == ""
    # a child reached through a ModuleDict (no forward, so no scope of its own)
    paths = {"cells", "cells.0", "cells.0.edges", "cells.0.edges.0_3", "cells.0.edges.0_3.0"}
    assert onnx_scope("/cells/cells.0/0_3/0_3.0/Conv", paths) == "cells.0.edges.0_3.0"


# --- the measuring protocol in campaigns ---------------------------------------------------

def test_a_campaign_records_its_protocol_and_pools_its_rounds(tmp_path):
    sweep = write_sweep(tmp_path, "linear,3,,,,16..64,8..32,,,,,\n", name="pooled")
    summary = run_campaign("torch-cpu", sweep, tmp_path / "store", warmup=1, repeats=3, rounds=2, drift="canary",
                           progress=False)
    assert summary.measured == 3 and summary.machine is not None and "steal" in str(summary.machine)
    record = json.loads((Path(summary.store) / "protocol.json").read_text())
    assert (record["statistic"], record["drift"], record["canary"]) == ("p10", "canary", "canary-v1")
    assert record["canary_ms"] > 0
    _, networks, layers = load_measurements(summary.store)
    assert (networks["repeats"] == 6).all()                           # 2 rounds x 3 runs, pooled
    assert (layers.loc[layers["status"] == "executed", "time_ms"] > 0).all()
    with pytest.raises(StoreError, match="continue it with --statistic p10 --drift canary"):
        run_campaign("torch-cpu", sweep, tmp_path / "store", statistic="median", drift="canary", progress=False)


def test_a_store_measured_before_the_protocol_is_continued_only_with_its_statistic(tmp_path):
    spec = BenchmarkSpec("linear", {"c": 32, "f": 16})
    other = BenchmarkSpec("linear", {"c": 16, "f": 16})
    fingerprint = at.backends.get_backend("torch-cpu").fingerprint()
    with MeasurementStore.open(tmp_path, fingerprint) as store:      # measured before protocol.json existed
        store.append({"benchmark": spec.id, "family": "linear", "spec": spec.to_json(), "status": "ok",
                      "time_ms": 0.01}, [])
    with pytest.raises(StoreError, match="statistic 'median', not 'p10'.*--statistic median --drift none"):
        run_campaign("torch-cpu", [spec, other], tmp_path, progress=False)
    summary = run_campaign("torch-cpu", [spec, other], tmp_path, statistic="median", drift="none", warmup=1,
                           repeats=2, progress=False)
    assert summary.measured == 1 and summary.already_done == 1


def test_a_budgeted_campaign_stops_within_a_benchmark_of_its_time_and_resumes(tmp_path, monkeypatch):
    """Each committed benchmark advances the campaign's clock by 10 s: with a 35 s budget and
    chunks of 2, it measures 2 (20 s), then a chunk of the 1 that fits (30 s), then 1 more
    although only 5 s are left (40 s), and stops; the rerun measures the rest."""
    import types

    from annette_torch.calibration import campaign

    clock = {"s": 0.0}
    append = MeasurementStore.append

    def timed_append(self, network, layers):
        clock["s"] += 10.0
        append(self, network, layers)

    monkeypatch.setattr(MeasurementStore, "append", timed_append)
    monkeypatch.setattr(campaign, "time", types.SimpleNamespace(monotonic=lambda: clock["s"],
                                                                perf_counter=time.perf_counter))
    monkeypatch.setattr(campaign, "CHUNK", 2)
    sweep = write_sweep(tmp_path, "linear,6,,,,16..64,8..32,,,,,\n", name="budget")
    first = run_campaign("torch-cpu", sweep, tmp_path, minutes=35 / 60, warmup=1, repeats=2, rounds=1, progress=False)
    assert first.stopped_early and first.measured == 4 and clock["s"] == 40.0
    rest = run_campaign("torch-cpu", sweep, tmp_path, warmup=1, repeats=2, rounds=1, progress=False)
    assert (rest.already_done, rest.measured, rest.stopped_early) == (4, 2, False)
    _, networks, _ = load_measurements(rest.store)
    assert len(networks) == 6 == networks["benchmark"].nunique()
