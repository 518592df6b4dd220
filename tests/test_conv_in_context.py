"""The ``conv_in_context`` family: a conv reading a conv's output, as every conv of a
network but the first does."""
from __future__ import annotations

import pytest
import torch

from annette_torch import trace
from annette_torch.calibration import BenchmarkSpec, build_benchmark, load_sweep


def test_the_conv_of_interest_reads_a_conv_output_followed_by_its_chain():
    model, shape = build_benchmark(BenchmarkSpec("conv_in_context",
                                                 {"h": 16, "c": 32, "f": 48, "k": 3, "stride": 2, "op": "bn-relu"}))
    graph = trace(model, input_shape=shape)
    assert [layer.kind for layer in graph.layers if not layer.free] == ["conv", "conv", "batch_norm", "relu"]
    stem, conv = graph["stem"], graph["conv"]
    assert stem.reads_input and not conv.reads_input and conv.parents == ("stem",)
    assert model(torch.randn(shape)).shape == (1, 48, 8, 8)
    with pytest.raises(ValueError, match="conv_chain step"):
        build_benchmark(BenchmarkSpec("conv_in_context", {"h": 16, "c": 32, "f": 32, "k": 1, "op": "bn-nope"}))
    sweep = load_sweep("conv-context")
    assert sum(s.family == "conv_in_context" for s in sweep) >= 1000
    pairs = [dict(s.params) for s in sweep if s.family == "conv_chain"]
    assert len(pairs) == 24 and all(BenchmarkSpec("conv_in_context", p) in sweep for p in pairs)
