"""Tracing small hand-built modules: layer kinds, attributes, counts, parents, fallbacks and
errors."""
from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import annette_torch
from annette_torch import TraceError, trace


class Seq(nn.Module):
    """Wraps modules so that they are layers inside a network, as users have them."""

    def __init__(self, *modules: nn.Module) -> None:
        super().__init__()
        self.body = nn.Sequential(*modules)

    def forward(self, x):
        return self.body(x)


def traced(model: nn.Module, *shapes, **kwargs) -> annette_torch.LayerGraph:
    """Trace with warnings as errors: these models must not need a fallback."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = trace(model, input_shape=list(shapes) if len(shapes) > 1 else shapes[0], **kwargs)
    assert graph.method == "fx"
    return graph


# --------------------------------------------------------------------------- convolutions

CONVS = {
    "conv1d": (nn.Conv1d(3, 8, 5), (2, 3, 32), (2, 8, 28), "conv"),
    "conv2d": (nn.Conv2d(3, 16, 3, padding=1), (1, 3, 20, 24), (1, 16, 20, 24), "conv"),
    "conv3d": (nn.Conv3d(2, 4, 3, padding=(0, 1, 1)), (1, 2, 6, 10, 10), (1, 4, 4, 10, 10), "conv"),
    "grouped": (nn.Conv2d(8, 16, 3, groups=4), (2, 8, 10, 10), (2, 16, 8, 8), "conv"),
    "depthwise": (nn.Conv2d(12, 12, 3, padding=1, groups=12), (1, 12, 14, 14), (1, 12, 14, 14), "depthwise_conv"),
    "depthwise_multiplier": (nn.Conv2d(6, 12, 5, padding=2, groups=6), (1, 6, 9, 9), (1, 12, 9, 9), "depthwise_conv"),
    "dilated": (nn.Conv2d(4, 8, 3, dilation=2), (1, 4, 16, 16), (1, 8, 12, 12), "conv"),
    "strided": (nn.Conv2d(4, 8, 3, stride=2, padding=1), (1, 4, 15, 15), (1, 8, 8, 8), "conv"),
    "rectangular_same": (nn.Conv2d(4, 6, (1, 7), padding="same"), (1, 4, 9, 11), (1, 6, 9, 11), "conv"),
    "pointwise_no_bias": (nn.Conv2d(32, 64, 1, bias=False), (3, 32, 7, 7), (3, 64, 7, 7), "conv"),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_conv_kind_shapes_attrs_and_ops(case, one_layer, flops_of):
    conv, in_shape, out_shape, kind = CONVS[case]
    graph = traced(Seq(conv), in_shape)
    layer = one_layer(graph, kind)
    assert layer.op == type(conv).__name__ and layer.module_path == "body.0"
    assert layer.input_shapes == (in_shape,) and layer.output_shapes == (out_shape,)
    attrs = layer.attrs
    assert (attrs["in_channels"], attrs["out_channels"], attrs["groups"]) == (conv.in_channels, conv.out_channels, conv.groups)
    assert attrs["kernel_size"] == conv.kernel_size and attrs["stride"] == conv.stride
    assert attrs["dilation"] == conv.dilation and attrs["bias"] == (conv.bias is not None)
    # ops = 2 * N * prod(output spatial) * Cout * Cin / groups * prod(kernel)
    expected = (2 * out_shape[0] * math.prod(out_shape[2:]) * conv.out_channels
                * conv.in_channels // conv.groups * math.prod(conv.kernel_size))
    assert layer.counts.ops == expected == flops_of(conv, in_shape)
    assert layer.counts.weight_elems == sum(p.numel() for p in conv.parameters())
    assert layer.counts.input_elems == math.prod(in_shape)
    assert layer.counts.output_elems == math.prod(out_shape)
    dims = layer.counts.dims
    assert (dims["n"], dims["c"], dims["f"], dims["kw"], dims["groups"]) == (
        out_shape[0], conv.in_channels, conv.out_channels, conv.kernel_size[-1], conv.groups)
    assert dims["w"] == out_shape[-1] and dims["stride"] == conv.stride[-1]


def test_conv2d_hand_computed():
    layer = traced(Seq(nn.Conv2d(3, 64, 7, stride=2, padding=3)), (2, 3, 224, 224)).layers[0]
    assert layer.output_shapes == ((2, 64, 112, 112),)
    assert layer.counts.ops == 2 * 2 * 112 * 112 * 64 * 3 * 7 * 7
    assert (layer.counts.dims["h"], layer.counts.dims["kh"], layer.counts.dims["stride"]) == (112, 7, 2)


def test_conv_transpose(one_layer, flops_of):
    deconv = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
    graph = traced(Seq(deconv), (2, 8, 8, 8))
    layer = one_layer(graph, "conv_transpose")
    assert layer.output_shapes == ((2, 4, 16, 16),)
    assert layer.attrs["stride"] == (2, 2) and layer.attrs["output_padding"] == (0, 0)
    # each input pixel scatters a k x k patch to every output channel: 2 * N * Hin * Win * Cin * Cout * k * k
    assert layer.counts.ops == 2 * 2 * 8 * 8 * 8 * 4 * 4 * 4 == flops_of(deconv, (2, 8, 8, 8))


def test_functional_conv_counts_the_weight_as_weight(one_layer):
    class FunctionalConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(6, 4, 3, 3))

        def forward(self, x):
            return F.conv2d(x, self.weight, None, 1, 1, 1, 2)  # groups=2 positionally

    layer = one_layer(traced(FunctionalConv(), (1, 8, 10, 10)), "conv")
    assert (layer.attrs["in_channels"], layer.attrs["out_channels"], layer.attrs["groups"]) == (8, 6, 2)
    assert layer.counts.ops == 2 * 100 * 6 * 4 * 9
    assert layer.counts.weight_elems == 6 * 4 * 9 and layer.counts.input_elems == 800
    assert layer.parents == ()


# ------------------------------------------------------------------ linear, matmul, attention

def test_linear_on_3d_input(one_layer):
    layer = one_layer(traced(Seq(nn.Linear(32, 48)), (4, 10, 32)), "linear")
    assert layer.output_shapes == ((4, 10, 48),)
    assert layer.counts.ops == 2 * 4 * 10 * 32 * 48
    assert layer.counts.weight_elems == 32 * 48 + 48
    d = layer.counts.dims
    assert (d["n"], d["h"], d["c"], d["f"]) == (4, 10, 32, 48)


def test_linear_module_traced_directly():
    layer = traced(nn.Linear(8, 16), (2, 5, 8)).layers[0]
    assert (layer.kind, layer.op, layer.input_shapes) == ("linear", "Linear", ((2, 5, 8),))
    assert layer.counts.ops == 2 * 10 * 8 * 16


def test_matmul_bmm_and_operator(flops_of):
    class Products(nn.Module):
        def forward(self, a, b):
            return a @ b, torch.bmm(a, b), torch.matmul(a, b.transpose(1, 2).transpose(1, 2))

    graph = traced(Products(), (3, 5, 7), (3, 7, 11))
    products = [layer for layer in graph if layer.kind == "matmul"]
    assert [layer.op for layer in products] == ["matmul", "bmm", "matmul"]
    for layer in products:
        assert layer.output_shapes == ((3, 5, 11),)
        assert layer.counts.ops == 2 * 3 * 5 * 7 * 11
        d = layer.counts.dims
        assert (d["n"], d["h"], d["c"], d["f"]) == (3, 5, 7, 11)
    assert products[2].parents == ("transpose_1",)
    assert graph.total("ops", kinds=("matmul",)) == flops_of(Products(), (3, 5, 7), (3, 7, 11))


def test_broadcast_matmul_with_a_weight(one_layer):
    class Proj(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 8))

        def forward(self, x):
            return torch.relu(x) @ self.w

    layer = one_layer(traced(Proj(), (2, 3, 5, 16)), "linear")    # an activation times a weight
    assert layer.output_shapes == ((2, 3, 5, 8),)
    assert layer.counts.ops == 2 * 6 * 5 * 16 * 8
    assert layer.counts.weight_elems == 16 * 8 and layer.parents == ("relu",)


def test_einsum(one_layer, flops_of):
    class Contract(nn.Module):
        def forward(self, a, b, c):
            return torch.einsum("bhqd,bhkd->bhqk", a, b), torch.einsum("ij,jk,kl->il", c, c, c)

    shapes = ((2, 3, 5, 8), (2, 3, 7, 8), (6, 6))
    graph = traced(Contract(), *shapes)
    attention_scores, chain = [layer for layer in graph if layer.kind == "einsum"]
    assert attention_scores.counts.ops == 2 * 2 * 3 * 5 * 7 * 8
    assert attention_scores.counts.dims["c"] == 8
    assert chain.counts.ops == 2 * 2 * 6 ** 3  # contracted pairwise, like torch does
    assert graph.total("ops", kinds=("einsum",)) == flops_of(Contract(), *shapes)


def test_scaled_dot_product_attention(one_layer, flops_of):
    class SDPA(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    shapes = ((2, 4, 9, 16), (2, 4, 12, 16), (2, 4, 12, 24))
    layer = one_layer(traced(SDPA(), *shapes), "attention")
    assert layer.output_shapes == ((2, 4, 9, 24),)
    b, h, l, s, e, ev = 2, 4, 9, 12, 16, 24
    assert layer.counts.ops == 2 * b * h * l * s * e + 2 * b * h * l * s * ev == flops_of(SDPA(), *shapes)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention(batch_first, one_layer, flops_of):
    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, kdim=24, vdim=20, batch_first=batch_first)

        def forward(self, q, k, v):
            return self.attn(q, k, v, need_weights=False)[0]

    shapes = [(2, 10, 32), (2, 6, 24), (2, 6, 20)]
    if not batch_first:
        shapes = [(s[1], s[0], s[2]) for s in shapes]
    model = SelfAttention()
    graph = traced(model, *shapes)
    layer = one_layer(graph, "multihead_attention")
    assert layer.output_shapes[0] == shapes[0] and layer.module_path == "attn"
    assert layer.attrs["num_heads"] == 4 and layer.attrs["batch_first"] == batch_first
    assert layer.counts.weight_elems == sum(p.numel() for p in model.parameters())
    n, l, s, e = 2, 10, 6, 32
    projections = n * (l * e * e + s * 24 * e + s * 20 * e + l * e * e)
    assert layer.counts.ops == 2 * (projections + 2 * n * l * s * e) == flops_of(model, *shapes)
    assert len(graph) == 1  # getitem of the output tuple is no layer


def test_a_leaf_module_traced_directly_is_one_layer():
    """nn.MultiheadAttention's own forward is not FX-traceable; as the whole model it is one
    layer (no eager fallback, no warning)."""
    graph = traced(nn.MultiheadAttention(16, 2, batch_first=True), (1, 5, 16), (1, 5, 16), (1, 5, 16))
    assert [(layer.name, layer.kind, layer.module_path) for layer in graph] == [
        ("multihead_attention", "multihead_attention", "")]
    assert graph.layers[0].output_shapes == ((1, 5, 16), (1, 5, 5))


# ------------------------------------------------------------- normalisation and activations

def test_norms(one_layer):
    graph = traced(Seq(nn.BatchNorm2d(6), nn.LayerNorm(10), nn.GroupNorm(3, 6)), (2, 6, 8, 10))
    elems = 2 * 6 * 8 * 10
    bn, ln, gn = (one_layer(graph, k) for k in ("batch_norm", "layer_norm", "group_norm"))
    assert bn.counts.ops == 2 * elems and ln.counts.ops == 5 * elems and gn.counts.ops == 5 * elems
    assert bn.attrs["num_features"] == 6 and ln.attrs["normalized_shape"] == (10,) and gn.attrs["num_groups"] == 3
    assert bn.counts.weight_elems == 6 * 4 + 1  # weight, bias, running mean/var, num_batches_tracked
    assert ln.parents == (bn.name,) and gn.parents == (ln.name,)
    assert all(layer.output_shapes == ((2, 6, 8, 10),) for layer in graph)


class TokenNormalize(nn.Module):
    def forward(self, x):
        return F.normalize(x, dim=-1)


def test_a_group_norm_on_a_sequence_of_channels_reads_channels_at_dim_1(one_layer):
    """Group and instance norms on ``(N, C, L)`` normalise C channels of L positions;
    ``F.normalize(x, dim=-1)`` on ``(N, L, C)`` tokens normalises each token's C features."""
    gn = one_layer(traced(Seq(nn.GroupNorm(2, 6)), (2, 6, 40)), "group_norm")
    inorm = one_layer(traced(Seq(nn.InstanceNorm1d(6)), (2, 6, 40)), "group_norm")
    tokens = one_layer(traced(TokenNormalize(), (2, 40, 6)), "group_norm")
    for layer in (gn, inorm, tokens):
        dims = layer.counts.dims
        assert (dims["n"], dims["h"] * dims["w"], dims["c"]) == (2, 40, 6), dims


ACTIVATIONS = [
    (nn.ReLU(), F.relu, "relu"), (nn.ReLU6(), F.relu6, "relu6"),
    (nn.LeakyReLU(0.1), F.leaky_relu, "leaky_relu"), (nn.SiLU(), F.silu, "silu"),
    (nn.Hardswish(), F.hardswish, "hardswish"), (nn.Hardsigmoid(), F.hardsigmoid, "hardsigmoid"),
    (nn.Sigmoid(), torch.sigmoid, "sigmoid"), (nn.GELU(), F.gelu, "gelu"), (nn.Tanh(), torch.tanh, "tanh"),
    (nn.Softmax(dim=-1), lambda x: F.softmax(x, dim=-1), "softmax"),
    (nn.Softmax(dim=1), lambda x: F.softmax(x, dim=1), "softmax_strided"),   # along the channels of a map
]


@pytest.mark.parametrize("module, function, kind", ACTIVATIONS, ids=[a[2] for a in ACTIVATIONS])
def test_activation_kinds(module, function, kind):
    class Both(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = module

        def forward(self, x):
            return function(self.act(x))

    graph = traced(Both(), (2, 4, 6, 6))
    assert [layer.kind for layer in graph] == [kind, kind]
    module_layer, function_layer = graph.layers
    assert module_layer.module_path == "act" and function_layer.parents == (module_layer.name,)
    assert module_layer.counts.ops == function_layer.counts.ops >= 2 * 4 * 6 * 6
    assert module_layer.output_shapes == function_layer.output_shapes == ((2, 4, 6, 6),)


def test_tensor_methods_and_inplace_calls_are_recognised():
    class Methods(nn.Module):
        def forward(self, x):
            y = x.relu()
            y.add_(1.0)
            y = y.sigmoid() * x
            return torch.clamp(y, 0.0, 6.0) - F.relu(x, inplace=True)

    graph = traced(Methods(), (1, 3, 4, 4))
    assert [layer.kind for layer in graph] == ["relu", "add", "sigmoid", "mul", "relu6", "relu", "sub"]


# ------------------------------------------------------------------------------- pooling

def test_pooling_kinds_and_ops(one_layer):
    graph = traced(Seq(nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((3, 3)),
                       nn.AdaptiveMaxPool2d(1)), (1, 8, 24, 24))
    mx, avg, adaptive, glob = graph.layers
    assert [l.kind for l in graph] == ["max_pool", "avg_pool", "adaptive_avg_pool", "global_max_pool"]
    assert mx.output_shapes == ((1, 8, 12, 12),) and mx.counts.ops == 8 * 12 * 12 * 9
    assert (mx.counts.dims["kh"], mx.counts.dims["kw"], mx.counts.dims["stride"]) == (3, 3, 2)
    assert avg.output_shapes == ((1, 8, 6, 6),) and avg.counts.ops == 8 * 6 * 6 * 4
    assert adaptive.output_shapes == ((1, 8, 3, 3),) and adaptive.counts.ops == 8 * 6 * 6
    assert glob.output_shapes == ((1, 8, 1, 1),) and glob.attrs["pool_type"] == "max"


def test_functional_and_global_pooling():
    class Pools(nn.Module):
        def forward(self, x):
            a = F.max_pool2d(x, 2)
            b = F.avg_pool2d(x, 3, stride=1, padding=1)
            c = F.adaptive_avg_pool2d(x, 1)
            d = x.mean((2, 3), keepdim=True)
            return a, b, c, d

    graph = traced(Pools(), (2, 4, 8, 8))
    assert [l.kind for l in graph] == ["max_pool", "avg_pool", "global_avg_pool", "reduce"]
    assert [l.output_shapes[0] for l in graph] == [(2, 4, 4, 4), (2, 4, 8, 8), (2, 4, 1, 1), (2, 4, 1, 1)]
    assert graph.layers[2].counts.ops == 2 * 4 * 8 * 8  # global pooling reads every input element
    assert (graph.layers[2].counts.dims["h"], graph.layers[2].counts.dims["w"]) == (8, 8)


# ------------------------------------------------------------------ elementwise and residual

def test_elementwise_arithmetic_with_broadcasting():
    class Arithmetic(nn.Module):
        def forward(self, x, s):
            return (x + s) * x - torch.div(x, s) + torch.sub(x, 1.0)

    graph = traced(Arithmetic(), (2, 8, 5, 5), (2, 8, 1, 1))
    assert [l.kind for l in graph] == ["add", "mul", "div", "sub", "sub", "add"]
    add = graph.layers[0]
    assert add.input_shapes == ((2, 8, 5, 5), (2, 8, 1, 1)) and add.output_shapes == ((2, 8, 5, 5),)
    assert all(l.counts.ops == 2 * 8 * 5 * 5 for l in graph)
    assert add.counts.input_elems == 2 * 8 * 25 + 2 * 8


def test_residual_add_parents_are_the_two_branches(one_layer):
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.branch = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.shortcut = nn.Conv2d(8, 8, 1)

        def forward(self, x):
            x = self.stem(x)
            return self.branch(x) + self.shortcut(x)

    graph = traced(Residual().eval(), (1, 3, 16, 16))
    add = one_layer(graph, "add")
    assert set(add.parents) == {"branch_2", "shortcut"}
    assert graph["branch_0"].parents == ("stem",) and graph["shortcut"].parents == ("stem",)
    assert sorted(graph.children["stem"]) == ["branch_0", "shortcut"]
    assert graph.children[add.name] == []


def test_identity_residual_reads_the_block_input():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            y = torch.relu(x)
            return self.conv(y) + y

    graph = traced(Block(), (1, 4, 8, 8))
    assert graph["add"].parents == ("conv", "relu")


# -------------------------------------------------------------------------- data movement

def test_concat_split_chunk_and_views(one_layer):
    class Moves(nn.Module):
        def forward(self, x, y):
            z = torch.cat([x, y], dim=1)
            a, b = torch.split(z, [3, 5], dim=1)
            c, d = z.chunk(2, dim=1)
            e = a.sum(1, keepdim=True) + b[:, :1] + c[:, :1] + d[:, :1]
            f = e.reshape(2, -1).flatten(0).view(2, 6, 6)
            return f.permute(0, 2, 1).transpose(1, 2)

    graph = traced(Moves(), (2, 3, 6, 6), (2, 5, 6, 6))
    cat = one_layer(graph, "concat")
    assert cat.output_shapes == ((2, 8, 6, 6),) and cat.attrs["dim"] == 1 and cat.parents == ()
    split, chunk = [l for l in graph if l.kind == "split"]
    assert split.op == "split" and chunk.op == "chunk"
    assert split.output_shapes == ((2, 3, 6, 6), (2, 5, 6, 6))
    assert chunk.output_shapes == ((2, 4, 6, 6), (2, 4, 6, 6))
    assert split.parents == chunk.parents == (cat.name,)
    assert graph["sum_1"].parents == (split.name,)  # a getitem on the split is no layer
    assert [l.kind for l in graph if l.kind in ("reshape", "permute")] == ["reshape"] * 3 + ["permute"] * 2
    for layer in graph:
        if layer.kind in ("concat", "split", "reshape", "permute", "slice"):
            assert layer.counts.ops == 0, layer.name
    assert all(l.free for l in graph if l.kind == "reshape")
    assert not any(l.free for l in graph if l.kind in ("concat", "permute"))


@pytest.mark.parametrize("mode, taps", [("nearest", 1), ("bilinear", 4)])
def test_interpolate(mode, taps, one_layer):
    class Up(nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=2, mode=mode)

    layer = one_layer(traced(Up(), (1, 3, 5, 7)), "upsample")
    assert layer.output_shapes == ((1, 3, 10, 14),) and layer.attrs["mode"] == mode
    assert layer.counts.ops == 3 * 10 * 14 * taps


def test_upsample_module(one_layer):
    layer = one_layer(traced(Seq(nn.Upsample(size=(9, 9), mode="bilinear")), (1, 2, 3, 3)), "upsample")
    assert layer.output_shapes == ((1, 2, 9, 9),) and layer.counts.ops == 2 * 81 * 4


def test_pad(one_layer):
    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.zero = nn.ZeroPad2d((1, 2, 3, 4))

        def forward(self, x):
            return F.pad(self.zero(x), (1, 1, 1, 1), mode="reflect")

    graph = traced(Padded(), (1, 2, 8, 8))
    assert [l.kind for l in graph] == ["pad", "pad"]
    assert graph.layers[0].output_shapes == ((1, 2, 15, 11),)
    assert graph.layers[1].output_shapes == ((1, 2, 17, 13),)
    assert graph.total("ops") == 0


def test_embedding_with_integer_inputs(one_layer):
    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(1000, 64)
            self.head = nn.Linear(64, 10)

        def forward(self, ids):
            return self.head(self.embed(ids))

    ids = torch.randint(0, 1000, (4, 12))
    graph = trace(Tokens(), example_inputs=(ids,))
    assert graph.method == "fx" and graph.input_shapes == ((4, 12),)
    emb = one_layer(graph, "embedding")
    assert emb.input_shapes == ((4, 12),) and emb.output_shapes == ((4, 12, 64),)
    assert emb.counts.weight_elems == 4 * 12 * 64 and emb.counts.ops == 0   # the rows it gathers
    assert emb.counts.stored_weight_elems == 1000 * 64                       # the table it holds
    assert emb.attrs == {"num_embeddings": 1000, "embedding_dim": 64}
    assert one_layer(graph, "linear").parents == (emb.name,)
    # A single tensor is accepted as example_inputs too.
    assert [l.kind for l in trace(Tokens(), example_inputs=ids)] == ["embedding", "linear"]


def test_identity_and_dropout_are_free():
    model = Seq(nn.Conv2d(3, 4, 1), nn.Identity(), nn.Dropout(0.5), nn.Dropout2d(0.1), nn.Flatten())
    graph = traced(model, (1, 3, 4, 4))  # in train mode: dropout is still free in the estimate
    assert [l.kind for l in graph] == ["conv", "identity", "dropout", "dropout", "reshape"]
    for layer in graph.layers[1:]:
        assert layer.free and layer.counts.ops == 0
    assert graph.total("ops") == graph.layers[0].counts.ops == 2 * 16 * 4 * 3
    assert graph.layers[-1].parents == (graph.layers[-2].name,)


def test_total_takes_one_kind_or_several():
    graph = traced(Seq(nn.Conv2d(3, 4, 1), nn.ReLU(), nn.ReLU6()), (1, 3, 4, 4))
    assert graph.total("ops", kinds=("relu6",)) == 64
    assert graph.total("ops", kinds="relu6") == 64  # a string is one kind, not its letters
    assert graph.total("ops", kinds=("relu", "relu6")) == 128


# --------------------------------------------------------------------------------- batch

def test_multiple_inputs_and_batch(one_layer):
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 4)
            self.b = nn.Linear(3, 4)

        def forward(self, x, y):
            return self.a(x) + self.b(y)

    for batch in (1, 5):
        graph = traced(TwoInputs(), (batch, 6), (batch, 3))
        assert graph.input_shapes == ((batch, 6), (batch, 3))
        assert one_layer(graph, "add").counts.ops == batch * 4
        assert graph.total("ops", kinds=("linear",)) == batch * 2 * (6 * 4 + 3 * 4)


# ------------------------------------------------------------------------ fallbacks, errors

class DataDependent(nn.Module):
    """``if x.sum() > 0`` cannot be traced symbolically; the eager fallback takes the branch
    the input takes (the conv's bias is 1, so the sum is positive on zero inputs)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)
        with torch.no_grad():
            self.conv.bias.fill_(1.0)

    def forward(self, x):
        x = self.bn(self.conv(x))
        if x.sum() > 0:
            x = torch.relu(x)
        else:
            x = torch.sigmoid(x)
        return self.fc(x.mean((2, 3)))


def test_data_dependent_control_flow_falls_back_to_eager():
    model = DataDependent().eval()
    with pytest.warns(UserWarning, match="could not trace"):
        graph = trace(model, input_shape=(2, 3, 16, 16))
    assert graph.method.startswith("eager")
    names = {l.kind: l for l in graph}
    assert [l.kind for l in graph if l.kind not in ("reduce", "compare")] == ["conv", "batch_norm", "relu", "linear"]
    assert "sigmoid" not in names  # the branch not taken is not in the graph
    conv, bn, relu, fc = names["conv"], names["batch_norm"], names["relu"], names["linear"]
    assert conv.output_shapes == bn.output_shapes == relu.output_shapes == ((2, 8, 16, 16),)
    assert fc.input_shapes == ((2, 8),) and fc.output_shapes == ((2, 10),)
    assert conv.counts.ops == 2 * 2 * 16 * 16 * 8 * 3 * 9
    assert fc.counts.weight_elems == 8 * 10 + 10 and fc.counts.ops == 2 * 2 * 8 * 10
    assert conv.module_path == "conv" and fc.module_path == "fc"
    assert bn.parents == (conv.name,) and relu.parents == (bn.name,)
    mean = next(l for l in graph if l.kind == "reduce" and l.parents == (relu.name,))
    assert fc.parents == (mean.name,)


def test_eager_fallback_leaves_the_model_unchanged():
    model = DataDependent().train()  # batch-norm statistics would be updated by a real run
    state = copy.deepcopy(model.state_dict())
    with pytest.warns(UserWarning):
        trace(model, input_shape=(2, 3, 8, 8))
    assert model.training
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key


class CudaKernel(nn.Module):
    """Stands for a custom kernel (an extension op) that only runs on a GPU."""

    def forward(self, x):
        if not x.is_cuda:
            raise RuntimeError("custom_kernel: only implemented for CUDA tensors")
        return x * 2


class WithCudaKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.kernel = CudaKernel()

    def forward(self, x):
        return self.kernel(self.conv(x))


def test_unavoidable_failure_is_a_trace_error_naming_the_module():
    with pytest.raises(TraceError) as info:
        trace(WithCudaKernel(), input_shape=(1, 3, 8, 8))
    message = str(info.value)
    assert "WithCudaKernel" in message and "'kernel'" in message
    assert "only implemented for CUDA" in message and "torch.fx" in message
    assert "leaf_modules" in message


def test_leaf_module_that_cannot_run_names_its_layer():
    with pytest.raises(TraceError, match=r"layer 'kernel'.*CudaKernel.*\(1, 4, 8, 8\)"):
        trace(WithCudaKernel(), input_shape=(1, 3, 8, 8), leaf_modules=(CudaKernel,))


class MyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x))) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.block = MyBlock()
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


@pytest.mark.parametrize("leaves", [(MyBlock,), MyBlock, [MyBlock]])
def test_leaf_modules_are_recorded_whole(leaves):
    graph = traced(Net(), (2, 3, 10, 10), leaf_modules=leaves)
    assert [l.name for l in graph] == ["stem", "block", "head"]
    block = graph["block"]
    assert (block.kind, block.op, block.module_path) == ("unknown", "MyBlock", "block")
    assert block.input_shapes == ((2, 8, 10, 10),) and block.output_shapes == ((2, 16, 10, 10),)
    convs = 2 * 2 * 100 * (8 * 8 * 9 + 8 * 16)
    assert block.attrs["flops"] == convs and block.counts.ops == convs  # from the flop counter
    assert block.counts.weight_elems == sum(p.numel() for p in Net().block.parameters())
    assert block.parents == ("stem",) and graph["head"].parents == ("block",)
    # Without leaf_modules the block is traced into.
    inside = traced(Net(), (2, 3, 10, 10))
    assert [l.name for l in inside] == ["stem", "block_c1", "relu", "block_c2", "add", "head"]


class NeedsData(nn.Module):
    """Reads a value of its input (no meta kernel can): recorded whole as a leaf module,
    its shapes come from a real run instead of the meta device."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(x) * (float(x.abs().max()) + 1.0)


def test_a_leaf_that_needs_data_is_run_for_real_and_leaves_the_model_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), NeedsData(), nn.BatchNorm2d(4)).train()
    state = copy.deepcopy(model.state_dict())
    graph = trace(Seq(*model), input_shape=(2, 3, 8, 8), leaf_modules=(NeedsData,))
    assert graph.method == "fx-real"
    assert [(l.kind, l.parents) for l in graph] == [
        ("conv", ()), ("unknown", ("body_0",)), ("batch_norm", ("body_1",))]
    assert graph["body_1"].output_shapes == ((2, 4, 8, 8),)
    for key, value in model.state_dict().items():  # train-mode batch norms ran on copies
        assert torch.equal(value, state[key]), key


def test_leaf_modules_must_be_module_classes():
    with pytest.raises(TypeError, match="leaf_modules"):
        trace(Net(), input_shape=(1, 3, 8, 8), leaf_modules=("MyBlock",))


def test_input_that_does_not_fit_names_the_first_failing_layer():
    import torchvision

    model = torchvision.models.resnet18()
    with pytest.raises(TraceError) as info:
        trace(model, input_shape=(1, 4, 224, 224))
    message = str(info.value)
    assert "'conv1'" in message and "(1, 4, 224, 224)" in message
    assert "channels" in message


def test_wrong_feature_size_names_the_linear_layer():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(TraceError, match=r"module 'body\.0'.*\(3, 15\).*16x8"):
        trace(Seq(*model), input_shape=(3, 15))


def test_missing_input_is_reported():
    class TwoInputs(nn.Module):
        def forward(self, x, y):
            return x + y

    with pytest.raises(TraceError, match="input 'y'"):
        trace(TwoInputs(), input_shape=(1, 3))


def test_a_non_module_is_a_type_error():
    with pytest.raises(TypeError, match="nn.Module"):
        trace(lambda x: x, input_shape=(1, 3))
    with pytest.raises(TypeError):
        trace(torch.zeros(3), input_shape=(1, 3))


@pytest.mark.parametrize("shape", [(1, 3, 0, 8), (1, -3, 8, 8), (0,), (), [(1, 3), (1, 0)], (1, 3.0, 8), 5])
def test_bad_input_shapes_are_value_errors(shape):
    with pytest.raises(ValueError, match="input_shape"):
        trace(Seq(nn.ReLU()), input_shape=shape)


def test_no_input_is_a_value_error():
    with pytest.raises(ValueError, match="input_shape"):
        trace(Seq(nn.ReLU()))


def test_integer_likes_are_fine_in_shapes():
    graph = traced(Seq(nn.ReLU()), torch.Size([1, 2, 3]))
    assert graph.input_shapes == ((1, 2, 3),)
    graph = traced(Seq(nn.ReLU()), (np.int64(2), np.int32(3)))
    assert graph.input_shapes == ((2, 3),)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_the_model_is_unchanged_by_tracing(mode):
    import torchvision

    model = torchvision.models.mobilenet_v3_small()
    getattr(model, mode)()
    params = {name: (p, p.detach().clone(), p.device, p.requires_grad) for name, p in model.named_parameters()}
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    modules = dict(model.named_modules())
    graph = trace(model, input_shape=(2, 3, 64, 64))
    assert graph.method == "fx" and len(graph) > 100
    assert dict(model.named_modules()) == modules
    assert all(m.training == (mode == "train") for m in model.modules())
    for name, p in model.named_parameters():
        original, value, device, requires_grad = params[name]
        assert p is original and p.device == device and p.requires_grad == requires_grad
        assert torch.equal(p, value), name
    for name, b in model.named_buffers():
        assert b.device.type == "cpu" and torch.equal(b, buffers[name]), name
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not nn.modules.module._global_forward_hooks and not nn.modules.module._global_forward_pre_hooks


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights, average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("unbatched", [False, True])
def test_multihead_attention_meta_shortcut_has_the_real_shapes(batch_first, need_weights, average, unbatched):
    from annette_torch.kinds import KINDS

    kind = KINDS["multihead_attention"]
    module = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    q_shape, k_shape = ((5, 16), (7, 16)) if unbatched else (((2, 5, 16), (2, 7, 16)) if batch_first
                                                             else ((5, 2, 16), (7, 2, 16)))
    q, k = torch.zeros(q_shape), torch.zeros(k_shape)
    options = {"need_weights": need_weights, "average_attn_weights": average}
    real = module(q, k, k, **options)
    fake = kind.meta_output(kind.attrs_from_module(module), [q.to("meta"), k.to("meta"), k.to("meta")], options)
    assert fake[0].shape == real[0].shape
    assert (fake[1] is None) == (real[1] is None)
    if real[1] is not None:
        assert fake[1].shape == real[1].shape
    with pytest.raises(ValueError, match="feature sizes"):
        kind.meta_output(kind.attrs_from_module(module), [torch.zeros(q_shape[:-1] + (8,), device="meta")] * 3, {})


def test_bilinear_ops_and_in_place_fill_are_recognised():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bilinear = nn.Bilinear(6, 5, 4)

        def forward(self, x):
            mask = x.clone()
            mask.zero_()
            return self.bilinear(x[..., :6], x[..., :5] + mask[..., :5])

    graph = trace(Net(), input_shape=(3, 7, 8))
    assert not graph.unknown_layers()
    bilinear = [layer for layer in graph if layer.kind == "bilinear"][0]
    assert bilinear.counts.ops == 2 * 3 * 7 * 4 * 6 * 5
    assert bilinear.counts.weight_elems == 4 * 6 * 5 + 4


@pytest.mark.parametrize("module, shape", [
    (nn.AdaptiveAvgPool2d(1), (2, 8, 7, 7)), (nn.AdaptiveAvgPool2d((3, None)), (2, 8, 7, 5)),
    (nn.AdaptiveAvgPool1d(4), (2, 8, 9)), (nn.AdaptiveAvgPool1d(4), (8, 9)),
    (nn.AdaptiveAvgPool3d((1, 2, 3)), (1, 4, 5, 6, 7)), (nn.AdaptiveAvgPool2d(2), (8, 7, 7)),
])
def test_adaptive_avg_pool_meta_shortcut_has_the_real_shape(module, shape):
    from annette_torch.kinds import KINDS

    kind = KINDS["adaptive_avg_pool"]
    fake = kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape, device="meta")], {})
    assert fake.shape == module(torch.zeros(shape)).shape


@pytest.mark.parametrize("shape", [(4, 6), (6,), (2, 3, 6)])
def test_linear_meta_shortcut_has_the_real_shape_and_rejects_bad_widths(shape):
    from annette_torch.kinds import KINDS

    kind, module = KINDS["linear"], nn.Linear(6, 5)
    fake = kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape, device="meta")], {})
    assert fake.shape == module(torch.zeros(shape)).shape
    with pytest.raises(ValueError, match="expected 6 input features"):
        kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape[:-1] + (7,), device="meta")], {})


@pytest.mark.parametrize("module, shape", [
    (nn.Conv2d(3, 8, 3), (2, 3, 17, 19)), (nn.Conv2d(3, 8, 5, stride=2, padding=2), (1, 3, 33, 32)),
    (nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8), (1, 8, 15, 15)),
    (nn.Conv2d(4, 6, (3, 1), stride=(2, 1), padding=(1, 0)), (1, 4, 9, 7)),
    (nn.Conv2d(4, 6, 3, padding="same"), (4, 10, 10)), (nn.Conv2d(4, 6, 3, padding="valid"), (1, 4, 10, 10)),
    (nn.Conv1d(4, 6, 5, stride=3), (2, 4, 50)), (nn.Conv3d(2, 4, 3, padding=1, stride=2), (1, 2, 7, 8, 9)),
    (nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect"), (1, 3, 8, 8)),
])
def test_conv_meta_shortcut_has_the_real_shape(module, shape):
    from annette_torch.kinds import KINDS

    kind = KINDS["conv"]
    fake = kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape, device="meta")], {})
    assert fake.shape == module(torch.zeros(shape)).shape


def test_conv_meta_shortcut_rejects_what_torch_rejects():
    from annette_torch.kinds import KINDS

    kind, module = KINDS["conv"], nn.Conv2d(3, 8, 5)
    for shape in [(1, 4, 16, 16), (1, 3, 4, 16), (3, 16)]:
        with pytest.raises(RuntimeError):
            module(torch.zeros(shape))
        with pytest.raises(ValueError):
            kind.meta_output(kind.attrs_from_module(module), [torch.zeros(shape, device="meta")], {})


@pytest.mark.parametrize("module, shape", [
    (nn.Conv2d(3, 16, 3), (3, 32, 32)), (nn.ConvTranspose2d(3, 16, 3, stride=2), (3, 8, 8)),
    (nn.Conv1d(3, 4, 3), (3, 10)),
])
def test_unbatched_convs_count_like_the_flop_counter(module, shape, flops_of):
    layer = trace(module, input_shape=shape).layers[0]
    assert layer.counts.ops == flops_of(module, shape)
    assert layer.counts.dims["n"] == 1


def test_unbatched_pooling_window_and_batch():
    class Functional(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, (3, 3))

    for model in (Functional(), nn.MaxPool2d(3)):
        layer = trace(model, input_shape=(3, 12, 12)).layers[0]
        assert layer.counts.ops == 3 * 4 * 4 * 9
        assert (layer.counts.dims["n"], layer.counts.dims["c"], layer.counts.dims["h"]) == (1, 3, 4)


def test_comparisons_keep_their_bool_dtype_through_shape_propagation():
    class Select(nn.Module):
        def forward(self, x):
            return torch.where(x > x * 2, x, x + 1).sqrt() + torch.logical_not(x < 0)

    graph = trace(Select(), input_shape=(2, 3))
    assert [layer.kind for layer in graph].count("compare") == 4
    assert graph.layers[-1].output_shapes == ((2, 3),)


def test_a_dilated_padded_conv_counts_the_taps_inside_its_input(one_layer):
    atrous = nn.Conv2d(8, 8, 3, padding=24, dilation=24)          # DeepLab's ASPP on a 20x20 map
    layer = one_layer(traced(atrous, (1, 8, 20, 20)), "conv")
    assert layer.counts.ops == 2 * 8 * 8 * 20 * 20 * 1             # only the centre tap reads the input
    half = one_layer(traced(nn.Conv2d(8, 8, 3, padding=2, dilation=2), (1, 8, 4, 4)), "conv")
    per_dim = sum(0 <= o - 2 + 2 * t < 4 for o in range(4) for t in range(3))
    assert half.counts.ops == 2 * 8 * 8 * per_dim ** 2


def test_eager_torch_counts_every_tap_of_a_dilated_conv_its_onednn_runs_as_gemm():
    """torch-cpu's oneDNN runs DeepLab's dilation-24 conv on a 20x20 map as im2col + GEMM
    (every tap, as long as the dilation-1 conv; 11.4 against 11.7 ms measured,
    benchmarks/dilated_convs.py), its dilation-12 conv with the direct kernel that skips
    the padding; OpenVINO skips it in both. The profiles count accordingly."""
    from annette_torch import Estimator

    def estimates(profile):
        est = Estimator(profile)
        return {d: est(nn.Conv2d(960, 256, 3, padding=d, dilation=d).eval(), input_shape=(1, 960, 20, 20))
                for d in (1, 12, 24)}

    torch_ms, openvino_ms = estimates("torch-cpu"), estimates("openvino-cpu")
    assert torch_ms[24] == pytest.approx(torch_ms[1], rel=1e-9)      # every tap, like the dilation-1 conv
    assert torch_ms[12] < 0.6 * torch_ms[1]                           # the direct kernel: 36 % of the taps
    assert openvino_ms[24] < 0.3 * openvino_ms[1]


def test_eager_torch_costs_a_1x1_depthwise_conv_by_its_groups():
    """At one thread and batch 1 PyTorch hands a 1x1 grouped conv at stride 1 not to oneDNN
    but to its own conv, which runs it group by group: about 4 us per group on the profiles'
    CPU (384 channels on 7x7 took 1.52 ms, 48 on 56x56 0.24 ms, 1/8 of the data; the full
    sweep's 1x1 depthwise rows, docs/accuracy.md session 37). torch-cpu learned from its
    store that the first costs more (0.66 against 0.35 ms: its trees have few such kernels
    of hundreds of channels); OpenVINO costs such a conv by the data it moves."""
    from annette_torch import Estimator

    def estimates(profile):
        est = Estimator(profile)
        return [est(nn.Conv2d(c, c, 1, groups=c).eval(), input_shape=(1, c, s, s)) for c, s in ((384, 7), (48, 56))]

    many_groups, large_map = estimates("torch-cpu")
    assert many_groups > large_map
    many_groups, large_map = estimates("openvino-cpu")
    assert many_groups < large_map


def test_openvino_answers_squeeze_excite_convs_inside_their_calibrated_range():
    """OpenVINO runs a squeeze-excite's 1x1 convs on the pooled map, fused with their
    activation, in 1-5 us (session 24's in-context tables); openvino-cpu's store has them with
    nothing fused at these widths since session 38 (its conv model had extrapolated them to
    2-4 times their time): each is calibrated and a small part of the 14x14 conv before it."""
    from annette_torch import Estimator
    from annette_torch.calibration.generator import build_benchmark
    from annette_torch.calibration.sweep import BenchmarkSpec

    model, shape = build_benchmark(BenchmarkSpec("squeeze_excite", {"h": 14, "c": 96, "f": 4, "op": "sigmoid"}))
    rows = Estimator("openvino-cpu").report(trace(model, input_shape=shape)).set_index("kernel")
    for kernel in ("fc1", "fc2"):
        assert rows.at[kernel, "confidence"] == "calibrated"
        assert rows.at[kernel, "time_ms"] < 0.1 * rows.at["conv", "time_ms"]


def test_counting_all_taps_round_trips_and_names_a_bad_entry():
    from annette_torch.mapping import Counting

    data = {"all_taps": [{"kind": "conv", "condition": [{"layer": "primary", "attr": "padding", "op": ">",
                                                         "value": 18}]}]}
    counting = Counting.from_dict(data)
    assert Counting.from_dict(counting.to_dict()) == counting
    atrous = trace(nn.Conv2d(8, 8, 3, padding=24, dilation=24), input_shape=(1, 8, 20, 20)).layers[0]
    plain = trace(nn.Conv2d(8, 8, 3, padding=12, dilation=12), input_shape=(1, 8, 20, 20)).layers[0]
    assert counting.computes_all_taps(atrous) and not counting.computes_all_taps(plain)
    for bad in ({"all_taps": [{"kind": "linear", "condition": []}]}, {"all_taps": [{"kind": "conv"}]},
                {"all_taps": [{"kind": "conv", "condition": [{"attr": "padding"}]}]}):
        with pytest.raises(ValueError, match="counting.all_taps"):
            Counting.from_dict(bad)


def test_a_batch_norm_counts_its_channels_in_dim_1_at_every_rank():
    """A batch norm's channels are dim 1: on ``(N, C)`` (LeViT's flattened tokens) one map
    of N positions, on ``(N, C, L)`` N maps of L positions (not L channels)."""
    net = nn.Sequential(nn.BatchNorm1d(8))
    tokens = traced(net, (196, 8)).layers[0].counts.dims
    sequences = traced(net, (2, 8, 50)).layers[0].counts.dims
    assert (tokens["n"], tokens["h"], tokens["w"], tokens["c"]) == (1, 196, 1, 8)
    assert (sequences["n"], sequences["h"], sequences["w"], sequences["c"]) == (2, 50, 1, 8)
