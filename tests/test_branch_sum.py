"""The branch_sum family's NAS-cell edges: zero (NAS-Bench-201's none), half, ReLU-conv1x1-BN."""
from __future__ import annotations

import pytest
import torch

from annette_torch import trace
from annette_torch.calibration import BenchmarkSpec, build_benchmark, load_sweep


def _spec(op: str) -> BenchmarkSpec:
    return BenchmarkSpec("branch_sum", {"c": 16, "h": 8, "op": op})


def test_zero_half_and_conv_edges_build_and_trace_as_a_cell_node_does():
    model, shape = build_benchmark(_spec("conv1x1+zero+half-relu"))
    x = torch.randn(shape)
    y = model.conv(x)
    expected = torch.relu(model.branches[0](y) + 0.0 * y + 0.5 * y)
    assert torch.allclose(model(x), expected, atol=1e-6)
    kinds = [layer.kind for layer in trace(model, input_shape=shape).layers]
    assert kinds.count("mul") == 2 and kinds.count("conv") == 2 and kinds.count("add") == 2


def test_an_unknown_edge_names_the_allowed_ones():
    with pytest.raises(ValueError, match="avgpool/skip/zero/half/conv1x1"):
        build_benchmark(_spec("zero+conv3x3"))


def test_the_sweeps_carry_the_new_edges_after_their_older_rows():
    for name in ("quick", "full"):
        ops = [s.params["op"] for s in load_sweep(name) if s.family == "branch_sum"]
        assert any("zero" in op for op in ops) and any("conv1x1" in op for op in ops)
        first_new = next(i for i, op in enumerate(ops) if any(t in op for t in ("zero", "half", "conv1x1")))
        assert all(not any(t in op for t in ("zero", "half", "conv1x1")) for op in ops[:first_new])
