"""Kinds and tracer paths added for timm coverage: recurrent layers, unfold/fold, scans,
casts, ``torch.fx.wrap``-ed functions, and a few timm models that need them."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

import annette_torch
from annette_torch.kinds import KINDS


def _single_layer(module: nn.Module, shape: tuple[int, ...]):
    graph = annette_torch.trace(module.eval(), input_shape=shape)
    assert len(graph) == 1
    return graph.layers[0]


@pytest.mark.parametrize("module, shape", [
    (nn.GRUCell(12, 16), (4, 12)),
    (nn.LSTM(12, 16, num_layers=2), (5, 3, 12)),
    (nn.LSTM(12, 16, proj_size=6, batch_first=True), (3, 5, 12)),
    (nn.RNN(12, 16), (5, 12)),
])
def test_recurrent_ops_match_the_flop_counter(module, shape):
    layer = _single_layer(module, shape)
    assert layer.kind == "rnn"
    with FlopCounterMode(display=False) as counter, torch.no_grad(), \
            torch.backends.mkldnn.flags(enabled=False):
        module(torch.zeros(shape))
    assert layer.counts.ops == counter.get_total_flops()


def test_bidirectional_lstm_ops_and_dims():
    layer = _single_layer(nn.LSTM(32, 64, num_layers=2, bidirectional=True, batch_first=True),
                          (4, 10, 32))
    per_step = 4 * 64 * (32 + 64) + 4 * 64 * (128 + 64)  # two layers, input 2*64 above the first
    assert layer.counts.ops == 2 * 10 * 4 * 2 * per_step
    assert {k: layer.counts.dims[k] for k in "nhcf"} == {"n": 4, "h": 10, "c": 32, "f": 64}


@pytest.mark.parametrize("module, shape", [
    (nn.LSTM(7, 9, num_layers=2, bidirectional=True, proj_size=5), (3, 4, 7)),
    (nn.GRU(7, 9, batch_first=True), (4, 7)),
    (nn.LSTMCell(7, 9), (3, 7)),
    (nn.RNNCell(7, 9), (7,)),
])
def test_recurrent_meta_output_has_the_real_shapes(module, shape):
    kind = KINDS["rnn"]
    meta = kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape, device="meta")], {})
    real = module(torch.zeros(shape))
    assert tree_map(lambda t: t.shape, meta) == tree_map(lambda t: t.shape, real)
    with pytest.raises(ValueError):
        kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape[:-1] + (8,), device="meta")], {})


class _Ops(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unfold = nn.Unfold(3, padding=1)

    def forward(self, x):
        cols = self.unfold(x)
        image = nn.functional.fold(cols, x.shape[-2:], 3, padding=1)
        mask = ~(image > 0)
        return cols.unfold(2, 4, 2), mask.cumsum(1), image.long(), torch.meshgrid(
            torch.arange(3, device=x.device), torch.arange(4, device=x.device), indexing="ij")


def test_unfold_fold_scan_and_casts_are_known():
    graph = annette_torch.trace(_Ops(), input_shape=(1, 4, 8, 8))
    assert not graph.unknown_layers()
    by_op = {layer.op: layer for layer in graph}
    assert by_op["Unfold"].kind == by_op["unfold"].kind == "unfold"
    assert by_op["fold"].counts.ops == 4 * 9 * 64  # one add per column element
    assert by_op["cumsum"].kind == "reduce" and by_op["invert"].kind == "unary"
    assert by_op["long"].kind == "reshape"


@torch.fx.wrap
def _scale_add(x, weight, other=None):
    return x if other is None else x * weight + other


class _Wrapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return self.linear(_scale_add(_scale_add(y, self.weight), self.weight, y))


def test_wrapped_functions_are_traced_into():
    graph = annette_torch.trace(_Wrapped(), input_shape=(2, 8))
    assert graph.method == "fx"
    assert [(layer.kind, layer.parents) for layer in graph] == [
        ("linear", ()),
        ("mul", ("linear",)),
        ("add", ("_scale_add_1/mul", "linear")),
        ("linear", ("_scale_add_1/add",)),
    ]
    assert graph["_scale_add_1/mul"].counts.weight_elems == 8


@pytest.mark.parametrize("name", ["halonet26t", "volo_d1_224", "sequencer2d_s",
                                  "edgenext_xx_small", "samvit_base_patch16"])
def test_timm_models_trace_without_unknown_kinds(name):
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False).eval()
    graph = annette_torch.trace(model, input_shape=(1, *model.pretrained_cfg["input_size"]))
    assert [layer.attrs["op"] for layer in graph.unknown_layers()] == []
