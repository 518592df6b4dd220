"""import_onnx: ONNX exports of torch models give the layers the torch tracer gives."""
from __future__ import annotations

import collections

import onnx
import pytest
import torch
from torch import nn

import annette_torch
from annette_torch.graph import TraceError, import_onnx

torchvision = pytest.importorskip("torchvision")

# The TorchScript exporter warns that it is deprecated and about constant folding.
pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning:torch"),
              pytest.mark.filterwarnings("ignore::UserWarning:torch")]

MAC_KINDS = ("conv", "depthwise_conv", "linear", "matmul")


def export(model: nn.Module, shape, path, preserve_batch_norm: bool = True, **kwargs) -> str:
    """Export with the TorchScript exporter; PRESERVE keeps BatchNorm as its own node."""
    training = torch.onnx.TrainingMode.PRESERVE if preserve_batch_norm else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model.eval(), torch.zeros(shape), str(path), dynamo=False, training=training, **kwargs)
    return str(path)


def mac_ops(graph) -> float:
    return graph.total("ops", MAC_KINDS)


def kinds_without_dropout(graph) -> collections.Counter:
    """Kind counts less dropout, which the exporter drops in eval mode."""
    return collections.Counter(layer.kind for layer in graph if layer.kind != "dropout")


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))

    def forward(self, x):
        x = self.pool(self.stem(x))
        return self.head(torch.relu(self.body(x) + x))


class DepthwiseSeparable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.ReLU6()
        self.pw = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        return self.pw(self.act(self.bn(self.dw(x))))


class FlattenByView(nn.Module):
    """x.view(x.size(0), ...) exports a Shape -> Gather -> Concat -> Reshape chain."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.proj = nn.Linear(4, 6)  # on a 3-D input: exported as MatMul + Add

    def forward(self, x):
        y = self.conv(x)
        y = y.view(y.size(0), 4, -1).transpose(1, 2)
        return self.proj(y)


def test_tiny_net_matches_the_torch_tracer(tmp_path):
    model = TinyResNet()
    graph = import_onnx(export(model, (1, 3, 16, 16), tmp_path / "tiny.onnx"))
    traced = annette_torch.trace(model, input_shape=(1, 3, 16, 16))
    assert graph.method == "onnx" and graph.model_name == "tiny"
    assert graph.input_shapes == ((1, 3, 16, 16),)
    assert kinds_without_dropout(graph) == kinds_without_dropout(traced)
    assert graph.total("ops") == pytest.approx(traced.total("ops"), rel=0.01)
    assert mac_ops(graph) == pytest.approx(mac_ops(traced), rel=0.01)

    conv = next(layer for layer in graph if layer.kind == "conv")
    assert conv.attrs == {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "stride": (1, 1),
                          "padding": (1, 1), "dilation": (1, 1), "groups": 1, "spatial_dims": 2,
                          "bias": False}
    pool = next(layer for layer in graph if layer.kind == "max_pool")
    assert pool.attrs == {"pool_type": "max", "kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}
    linear = next(layer for layer in graph if layer.kind == "linear")
    assert linear.attrs == {"in_features": 8, "out_features": 5, "bias": True}
    assert linear.counts.weight_elems == 8 * 5 + 5

    add = next(layer for layer in graph if layer.kind == "add")
    assert len(add.parents) == 2
    assert {graph[p].kind for p in add.parents} == {"batch_norm", "max_pool"}
    assert graph.layers[0].parents == ()  # reads the graph input only


def test_folded_batch_norm_keeps_conv_and_linear_ops(tmp_path):
    model = TinyResNet()
    graph = import_onnx(export(model, (2, 3, 16, 16), tmp_path / "folded.onnx", preserve_batch_norm=False))
    traced = annette_torch.trace(model, input_shape=(2, 3, 16, 16))
    assert "batch_norm" not in graph.kind_counts()
    assert mac_ops(graph) == pytest.approx(mac_ops(traced), rel=0.01)


def test_depthwise_separable_block(tmp_path):
    model = DepthwiseSeparable()
    graph = import_onnx(export(model, (1, 16, 32, 32), tmp_path / "dws.onnx"))
    assert [layer.kind for layer in graph] == ["depthwise_conv", "batch_norm", "relu6", "conv"]
    dw = graph.layers[0]
    assert dw.attrs["groups"] == 16 and dw.attrs["stride"] == (2, 2)
    assert dw.counts.dims["groups"] == 16 and dw.output_shapes == ((1, 16, 16, 16),)
    traced = annette_torch.trace(model, input_shape=(1, 16, 32, 32))
    assert mac_ops(graph) == pytest.approx(mac_ops(traced), rel=0.01)
    # Same features, layer by layer, except BatchNorm's weights (torch also counts its
    # num_batches_tracked buffer).
    for onnx_layer, torch_layer in zip(graph, traced, strict=True):
        assert onnx_layer.kind == torch_layer.kind
        if onnx_layer.kind != "batch_norm":
            assert onnx_layer.counts == torch_layer.counts


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_models_match_the_torch_tracer(tmp_path, name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    graph = import_onnx(export(model, (1, 3, 64, 64), tmp_path / f"{name}.onnx"))
    traced = annette_torch.trace(model, input_shape=(1, 3, 64, 64))
    assert kinds_without_dropout(graph) == kinds_without_dropout(traced)
    assert mac_ops(graph) == pytest.approx(mac_ops(traced), rel=0.01)
    assert graph.total("weight_elems") == pytest.approx(traced.total("weight_elems"), rel=0.01)
    assert not graph.unknown_layers()


def test_dynamic_batch_shape_chain_and_matmul_weights(tmp_path):
    path = export(FlattenByView(), (2, 3, 8, 8), tmp_path / "view.onnx",
                  input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    with pytest.raises(TraceError, match="input_shape"):
        import_onnx(path)
    graph = import_onnx(path, input_shape=(5, 3, 8, 8))
    assert graph.input_shapes == ((5, 3, 8, 8),)
    # Shape/Gather/Unsqueeze/Concat only compute the view's size: no layers, and the
    # Reshape reads the conv directly.
    assert [layer.kind for layer in graph] == ["conv", "reshape", "permute", "matmul", "add"]
    reshape = graph.layers[1]
    assert reshape.parents == (graph.layers[0].name,) and reshape.output_shapes == ((5, 4, 64),)
    matmul = graph.layers[3]
    assert matmul.counts.weight_elems == 4 * 6 and matmul.counts.input_elems == 5 * 64 * 4
    assert matmul.counts.ops == 2 * 5 * 64 * 4 * 6


def test_other_ops_and_unknown_ops(tmp_path):
    class Misc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
            self.pad = nn.ZeroPad2d((1, 2, 3, 4))

        def forward(self, x):
            y = nn.functional.interpolate(self.pad(self.up(x)), scale_factor=2, mode="bilinear")
            return torch.cumsum(y, dim=1)

    model = Misc()
    # The exported pads go through Transpose/Reshape, which shape inference does not
    # evaluate: the Pad's output shape needs the importer's constant folding.
    graph = import_onnx(export(model, (1, 4, 8, 8), tmp_path / "misc.onnx"))
    traced = annette_torch.trace(model, input_shape=(1, 4, 8, 8))
    by_kind = {layer.kind: layer for layer in graph}
    assert by_kind["conv_transpose"].counts.ops == traced.layers[0].counts.ops
    assert by_kind["conv_transpose"].attrs["out_channels"] == 2
    assert by_kind["pad"].attrs == {"padding": (1, 2, 3, 4)}
    assert by_kind["upsample"].attrs == {"mode": "bilinear"}
    assert by_kind["unknown"].attrs == {"op": "CumSum"}


def test_model_proto_input_is_not_modified(tmp_path):
    path = export(DepthwiseSeparable(), (1, 16, 8, 8), tmp_path / "proto.onnx")
    proto = onnx.load(path)
    before = proto.SerializeToString()
    graph = import_onnx(proto, input_shape=(1, 16, 8, 8))
    assert len(graph) == 4 and proto.SerializeToString() == before


def test_missing_and_corrupt_files_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="missing.onnx does not exist"):
        import_onnx(tmp_path / "missing.onnx")
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"this is not an ONNX model")
    with pytest.raises(ValueError, match="corrupt.onnx is not a readable ONNX model"):
        import_onnx(corrupt)


def test_shape_inference_failure_names_file_and_node(tmp_path):
    path = export(TinyResNet().head, (1, 8, 4, 4), tmp_path / "head.onnx")
    with pytest.raises(ValueError, match="rank 4"):
        import_onnx(path, input_shape=(1, 8))
    graph = import_onnx(path, input_shape=(3, 8, 4, 4))  # the head works for any batch
    assert graph.layers[-1].output_shapes == ((3, 5),)
    with pytest.raises(TraceError, match=r"head: ONNX shape inference failed.*node name: /2/Gemm"):
        import_onnx(path, input_shape=(1, 9, 4, 4))


class TokenModel(nn.Module):
    """Token ids -> an embedding -> a linear, plus a gather from the activation."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5000, 32)
        self.fc = nn.Linear(32, 8)

    def forward(self, ids):
        x = self.fc(self.embed(ids))
        return x[:, 0]


def test_an_exported_embedding_is_the_embedding_kind_reading_the_rows_it_gathers(tmp_path):
    ids = torch.zeros(2, 12, dtype=torch.int64)
    path = tmp_path / "tokens.onnx"
    torch.onnx.export(TokenModel().eval(), (ids,), str(path), dynamo=False)
    graph = import_onnx(path)
    (lookup,) = [layer for layer in graph if layer.kind == "embedding"]
    traced = annette_torch.trace(TokenModel().eval(), example_inputs=(ids,)).layers[0]
    assert lookup.attrs == traced.attrs == {"num_embeddings": 5000, "embedding_dim": 32}
    assert lookup.input_shapes[0] == (2, 12) and lookup.counts.input_elems == 24
    assert lookup.counts.weight_elems == 2 * 12 * 32 == traced.counts.weight_elems      # rows x width, not the table
    assert lookup.counts.stored_weight_elems == 5000 * 32
    assert [layer.kind for layer in graph if layer.kind == "slice"], "x[:, 0] of an activation stays a slice"
    assert annette_torch.Estimator("openvino-cpu")(graph) > 0


class Softmaxes(nn.Module):
    """Softmaxes along the last axis, along channels, and along channels of a 1x1 map."""

    def __init__(self) -> None:
        super().__init__()
        self.channels = nn.Softmax(dim=1)

    def forward(self, x):
        return x.softmax(-1), self.channels(x), torch.softmax(x.mean((2, 3), keepdim=True), dim=1)


def test_a_softmax_along_a_strided_axis_is_its_own_kind_in_both_tracers(tmp_path):
    """A softmax along adjacent elements is ``softmax``; along a map's channels (a strided
    axis, which ONNX Runtime runs 100 times slower per element) ``softmax_strided``, in the
    torch tracer and the ONNX importer alike; a profile fitted with one softmax model
    answers both with it (the torch-cpu and openvino-cpu stores have channel softmaxes only)."""
    from annette_torch.profiles import load_profile

    model = Softmaxes().eval()
    traced = annette_torch.trace(model, input_shape=(1, 4, 8, 8))
    imported = import_onnx(export(model, (1, 4, 8, 8), tmp_path / "softmaxes.onnx"))
    for graph in (traced, imported):
        assert [layer.kind for layer in graph if "softmax" in layer.kind] == ["softmax", "softmax_strided", "softmax"]
    for name in ("torch-cpu", "openvino-cpu"):
        profile = load_profile(name)
        assert {"softmax", "softmax_strided"} & set(profile.layer_models["mixed"]) == {"softmax_strided"}
        assert profile.model_for("softmax_strided")[1:] == profile.model_for("softmax")[1:]


@pytest.mark.parametrize("axis, reading", [(1, (2, 40, 6)), (-1, (2, 6, 40)), (None, (2, 6, 40))])
def test_an_lp_normalization_reads_its_axis(axis, reading):
    """ONNX's LpNormalization normalises along ``axis`` (default the last): along axis 1 of
    ``(N, C, L)`` it is N maps of L positions with C channels, as ``F.normalize``'s default;
    along the last, each of the C rows of L features, as ``F.normalize(x, dim=-1)``."""
    from onnx import TensorProto, helper

    node = helper.make_node("LpNormalization", ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    graph = helper.make_graph([node], "lp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 40])])
    (layer,) = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    dims = layer.counts.dims
    assert layer.kind == "group_norm" and (dims["n"], dims["h"] * dims["w"], dims["c"]) == reading, dims



@pytest.mark.parametrize("opset, kind", [(11, "softmax"), (13, "softmax_strided")])
def test_a_softmax_before_opset_13_normalises_the_trailing_axes_together(opset, kind):
    """Before opset 13 ONNX's Softmax with axis 1 normalises all axes from the channels on
    as one row (adjacent elements); from 13 along the channels alone (a strided axis)."""
    from onnx import TensorProto, helper

    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    graph = helper.make_graph([node], "softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (layer,) = import_onnx(model)
    assert layer.kind == kind and layer.attrs["dim"] == 1
