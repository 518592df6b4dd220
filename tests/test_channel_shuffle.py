"""Channel shuffles: ShuffleNet's view-transpose-view is one ``channel_shuffle`` layer,
which OpenVINO runs as one ``ShuffleChannels`` kernel, and which profiles without a model
of their own answer as a permute."""
import dataclasses

import pytest
import torch
import torchvision
from torch import nn

from annette_torch import Estimator, load_profile, trace
from annette_torch.backends import KernelRecord, export_onnx
from annette_torch.calibration import BenchmarkSpec, build_benchmark, match_kernels
from annette_torch.graph.onnx_import import import_onnx


class Shuffle(nn.Module):
    """A 1x1 conv, then ``how`` shuffles its channels: written out as torchvision writes
    it, ``F.channel_shuffle``, ``nn.ChannelShuffle``; or ``video``: a (n, c, t, h, w)
    transpose(1, 2), five-dimensional but no shuffle."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.conv, self.module = how, nn.Conv2d(12, 12, 1), nn.ChannelShuffle(3)

    def forward(self, x):
        y = self.conv(x)
        if self.how == "written":
            n, c, h, w = y.shape
            y = torch.transpose(y.view(n, 3, c // 3, h, w), 1, 2).contiguous().view(n, -1, h, w)
        elif self.how == "function":
            y = nn.functional.channel_shuffle(y, 3)
        elif self.how == "module":
            y = self.module(y)
        else:
            y = y.view(1, 12, 2, 4, 8).transpose(1, 2).contiguous()
        return y


@pytest.mark.parametrize("how, kinds", [
    ("written", ["conv", "channel_shuffle", "permute"]),       # and the .contiguous() the export drops
    ("function", ["conv", "channel_shuffle"]),
    ("module", ["conv", "channel_shuffle"]),
    ("video", ["conv", "permute", "permute"]),
])
def test_a_channel_shuffle_is_one_layer_of_its_own_kind(how, kinds):
    graph = trace(Shuffle(how), input_shape=(1, 12, 8, 8))
    assert [layer.kind for layer in graph.layers if not layer.free] == kinds


def test_shufflenet_and_its_onnx_export_hold_one_channel_shuffle_per_unit(tmp_path):
    model = torchvision.models.shufflenet_v2_x0_5().eval()
    graph = trace(model, input_shape=(1, 3, 224, 224))
    assert graph.kind_counts()["channel_shuffle"] == 16
    assert {graph[layer.parents[0]].op for layer in graph if layer.kind == "channel_shuffle"} == {"view"}
    path = tmp_path / "shuffle.onnx"
    export_onnx(Shuffle("written").eval(), (1, 12, 8, 8), path)
    assert [layer.kind for layer in import_onnx(path) if not layer.free] == ["conv", "channel_shuffle"]


def test_the_split_of_a_shuffle_is_free_where_the_runtime_splits_in_place():
    """OpenVINO writes its ShuffleChannels in plain layout and splits that in place
    (``splits_shuffles_in_place``); ONNX Runtime and eager torch run the split."""
    graph = trace(torchvision.models.shufflenet_v2_x0_5().eval(), input_shape=(1, 3, 224, 224))
    splits = {layer.name for layer in graph if layer.kind == "split"}
    assert graph.shuffle_splits == splits and len(splits) == 13   # every unit's chunk but the first stage's
    for profile, free in (("openvino-cpu", True), ("onnxruntime-cpu", False), ("torch-cpu", False)):
        report = Estimator(profile).report(graph).set_index("kernel")
        assert report.loc[sorted(splits), "confidence"].eq("free").all() == free, profile
        assert (report.loc[sorted(splits), "time_ms"] > 0).all() == (not free), profile


def test_a_profile_without_a_channel_shuffle_model_answers_it_as_a_permute():
    shipped = load_profile("openvino-cpu")
    assert shipped.model_for("channel_shuffle")[1] == "channel_shuffle"
    without = dataclasses.replace(shipped, layer_models={
        kind: {entry: model for entry, model in models.items() if entry != "channel_shuffle"}
        for kind, models in shipped.layer_models.items()})
    assert without.model_for("channel_shuffle")[1:] == shipped.model_for("permute")[1:]
    graph = trace(Shuffle("module"), input_shape=(1, 12, 8, 8))
    report = Estimator(without).report(graph).set_index("kind")
    assert report.loc["channel_shuffle", "profile_entry"] == "permute"


def test_the_matcher_gives_openvinos_shuffle_kernel_to_the_channel_shuffle():
    """OpenVINO names its ShuffleChannels kernel after the shuffle's second Reshape, a
    view, which no kernel computes; the kernel is the transpose's (the shuffle layer's),
    whether the shuffle's calls are functional in one module (as ShuffleNet writes them)
    or each its own module (the calibration family)."""
    graph = trace(nn.Sequential(Shuffle("written")), input_shape=(1, 12, 8, 8))
    functional = KernelRecord("/0/Reshape_1", "ShuffleChannels", "jit_avx512_f32", "EXECUTED", (0.3, 0.3, 0.3),
                              ("0",), (("0", "Reshape", 1, 2),))
    rows = {row["layer"]: row for row in match_kernels(graph, [functional])}
    assert (rows["transpose"]["kind"], rows["transpose"]["status"], rows["transpose"]["time_ms"]) == \
        ("channel_shuffle", "executed", 0.3)
    assert rows["view_1"]["status"] == "optimized_out"

    model, shape = build_benchmark(BenchmarkSpec("channel_shuffle", {"h": 8, "c": 12, "groups": 2}))
    graph = trace(model, input_shape=shape)
    per_module = KernelRecord("/ungroup/Reshape", "ShuffleChannels", "jit_avx512_f32", "EXECUTED", (0.3, 0.3, 0.3),
                              ("ungroup",), (("ungroup", "Reshape", 0, 1),))
    rows = {row["layer"]: row for row in match_kernels(graph, [per_module])}
    assert [name for name, row in rows.items() if row["status"] == "executed"] == ["transpose"]
    assert rows["transpose"]["kind"] == "channel_shuffle"


def test_a_dropped_copy_exports_no_node_of_its_own():
    """``.transpose(1, 2).contiguous()`` in one module exports one Transpose: ONNX Runtime's
    Transpose kernel there is the transpose's, not the module's last layer's."""
    class TokenMixer(nn.Module):
        def forward(self, x):
            return torch.relu(x.transpose(1, 2).contiguous())

    graph = trace(nn.Sequential(TokenMixer()), input_shape=(1, 8, 16))
    transpose = KernelRecord("/0/Transpose", "Transpose", "impl", "EXECUTED", (0.2, 0.2, 0.2),
                             ("0",), (("0", "Transpose", 0, 1),))
    rows = {row["layer"]: row for row in match_kernels(graph, [transpose])}
    assert rows["transpose"]["status"] == "executed" and rows["relu"]["status"] != "executed"
