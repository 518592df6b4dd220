"""OpenVINO-style elementwise subgraphs (``merge_elementwise``) and the in-context
``inverted_residual`` family whose depthwise convs read a conv's output."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from annette_torch import Estimator, trace
from annette_torch.calibration import BenchmarkSpec, build_benchmark, load_sweep
from annette_torch.kinds import FEATURES
from annette_torch.mapping import ELEMENTWISE_SUBGRAPH, FusionRule, map_kernels
from annette_torch.profiles import load_profile

RULES = (FusionRule("conv", "batch_norm", "conv"), FusionRule("mul", "add", "mul"))
_IN, _OUT, _OPS = (FEATURES.index(k) for k in ("input_elems", "output_elems", "ops"))


class CellNode(nn.Module):
    """A NAS-Bench-201 node feeding three edges, two of them ``none`` (x * 0)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AvgPool2d(3, 1, 1)

    def forward(self, x):
        y = self.conv(x)
        a = y.mul(0.0) + y          # node 1: none + skip
        b = y.mul(0.5) + a          # node 2 reads y again and node 1
        return self.pool(a), b


def test_connected_elementwise_kernels_merge_into_one_subgraph():
    graph = trace(CellNode().eval(), input_shape=(1, 8, 16, 16))
    chained = map_kernels(graph, RULES)
    merged = map_kernels(graph, RULES, merge_elementwise=True)
    assert ELEMENTWISE_SUBGRAPH not in chained.kinds
    k = merged.kinds.index(ELEMENTWISE_SUBGRAPH)
    assert merged.layers[k] == ("mul", "add", "mul_1", "add_1")
    assert len(merged) == len(chained) - 1
    elems = 8 * 16 * 16
    # reads the conv's output once (not once per edge); writes a (read by the pool) and b (returned)
    assert merged.features[k, _IN] == elems
    assert merged.features[k, _OUT] == 2 * elems
    assert merged.features[k, _OPS] == pytest.approx(sum(graph[n].counts.ops for n in merged.layers[k]))


def test_a_broadcast_gate_is_not_merged():
    class Gate(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x.mean((2, 3), keepdim=True)) + x

    graph = trace(Gate().eval(), input_shape=(1, 8, 16, 16))
    merged = map_kernels(graph, (), merge_elementwise=True)
    assert "sigmoid" in merged.kinds         # the (1, 8, 1, 1) gate runs apart from the full-size mul


def test_openvino_profiles_merge_and_eager_torch_does_not():
    assert load_profile("openvino-cpu").merges_elementwise
    assert not load_profile("torch-cpu").merges_elementwise
    model = CellNode().eval()
    kinds = Estimator("openvino-cpu").report(model, input_shape=(1, 8, 16, 16))
    assert ELEMENTWISE_SUBGRAPH in set(kinds["kind"])
    eager = Estimator("torch-cpu").report(model, input_shape=(1, 8, 16, 16))
    assert ELEMENTWISE_SUBGRAPH not in set(eager["kind"])


def test_inverted_residual_reads_a_conv_output_and_adds_its_input():
    model, shape = build_benchmark(BenchmarkSpec("inverted_residual", {"c": 16, "h": 14, "k": 5, "op": "e6-relu6"}))
    graph = trace(model, input_shape=shape)
    dw = next(layer for layer in graph.layers if layer.kind == "depthwise_conv")
    assert dw.parents and graph[dw.parents[0]].kind != "input"
    assert [layer.kind for layer in graph.layers].count("add") == 1
    strided, shape = build_benchmark(BenchmarkSpec("inverted_residual",
                                                   {"c": 16, "f": 24, "h": 14, "k": 3, "stride": 2, "op": "e4-silu"}))
    assert strided(torch.randn(shape)).shape == (1, 24, 7, 7)
    with pytest.raises(ValueError, match="e<expansion>-<activation or none>"):
        build_benchmark(BenchmarkSpec("inverted_residual", {"c": 16, "h": 14, "k": 3, "op": "relu6"}))
    assert sum(s.family == "inverted_residual" for s in load_sweep("full")) >= 300


def test_no_merge_makes_a_kernel_wait_for_itself():
    class Around(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AvgPool2d(3, 1, 1)

        def forward(self, x):
            a = x * 2.0
            return self.pool(a) + a       # merging the add with a would read the pool that reads a

    graph = trace(Around().eval(), input_shape=(1, 8, 16, 16))
    merged = map_kernels(graph, (), merge_elementwise=True)
    assert ELEMENTWISE_SUBGRAPH not in merged.kinds and len(merged) == 3


class RepBranch(nn.Module):
    """A re-parameterizable block (RepGhost, MobileOne): a batch norm on the block's input,
    added to a depthwise conv's output."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.dw_bn = nn.BatchNorm2d(8)
        self.identity_bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.dw_bn(self.dw(x)) + self.identity_bn(x))


def test_a_batch_norm_on_a_branch_joins_the_elementwise_subgraph():
    # OpenVINO computes no kernel for such a batch norm (timm repghostnet_050 in context,
    # 2026-12-06): it runs inside the add's subgraph
    graph = trace(RepBranch().eval(), input_shape=(1, 8, 16, 16))
    rules = (FusionRule("depthwise_conv", "batch_norm", "depthwise_conv"),)
    merged = map_kernels(graph, rules, merge_elementwise=True)
    k = merged.kinds.index(ELEMENTWISE_SUBGRAPH)
    assert set(merged.layers[k]) == {"identity_bn", "add", "relu"}
    assert "batch_norm" not in merged.kinds
    assert "batch_norm" in map_kernels(graph, rules).kinds      # a target that runs it apart
