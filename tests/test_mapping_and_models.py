"""Mapping model (fusion rules -> kernel table) and the roofline layer models."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from annette_torch import trace
from annette_torch.kinds import FEATURES
from annette_torch.layer_models import RefinedRoofline, Roofline, layer_model_from_dict
from annette_torch.mapping import OUTPUT_REORDER, FusionRule, map_kernels

CONV_BN_RELU = (
    FusionRule("conv", "batch_norm", "conv"),
    FusionRule("conv", "relu", "conv"),
    FusionRule("conv", "add", "conv"),
    FusionRule.from_dict({"primary": "conv", "secondary": "max_pool", "result": "conv_pool",
                          "condition": [{"layer": "secondary", "attr": "kernel_size", "op": "==", "value": 2}]}),
)


class Block(nn.Module):
    def __init__(self, pool: int = 2):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(pool)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.conv2(y) + y          # residual add of two layers' outputs, fusable into conv2
        return self.pool(torch.relu(y))


def test_chain_fuses_into_one_kernel_and_remembers_its_layers():
    graph = trace(Block().eval(), input_shape=(1, 8, 16, 16))
    table = map_kernels(graph, CONV_BN_RELU)
    assert table.layers[0] == ("conv1", "bn1", "relu")
    assert table.kinds[0] == "conv" and table.fusion[0] == "fused"
    # add joins conv2 (multi-input: possibly-fused), then relu; pool(2) fuses as conv_pool
    conv2 = table.names.index("conv2")
    assert table.layers[conv2] == ("conv2", "add", "relu_1", "pool")
    assert table.kinds[conv2] == "conv_pool"
    assert table.fusion[conv2] == "possibly-fused"
    assert len(table) == 2


def test_fused_kernel_sums_ops_and_reads_external_inputs_once():
    graph = trace(Block().eval(), input_shape=(1, 8, 16, 16))
    table = map_kernels(graph, CONV_BN_RELU)
    ops, inputs, outputs = (FEATURES.index(k) for k in ("ops", "input_elems", "output_elems"))
    layer_ops = {layer.name: layer.counts.ops for layer in graph}
    conv2 = table.names.index("conv2")
    assert table.features[conv2, ops] == pytest.approx(sum(layer_ops[n] for n in table.layers[conv2]))
    # conv2 reads its input (8*16*16) and the residual add reads it again; writes the pooled output
    assert table.features[conv2, inputs] == 2 * 8 * 16 * 16
    assert table.features[conv2, outputs] == 8 * 8 * 8
    assert table.features[conv2, FEATURES.index("c")] == 8  # primary's dimensions


def test_a_profile_fitted_without_post_op_inputs_sees_the_primary_layers_inputs_only():
    """``Counting(post_op_inputs=False)`` (fitted profiles since 2026-12-06): the residual
    the fused add reads is its own cost per element, not among the conv's input elements;
    ops and outputs are counted as before, and the counting survives its JSON form."""
    from annette_torch.mapping import Counting

    graph = trace(Block().eval(), input_shape=(1, 8, 16, 16))
    primary_only = Counting(post_op_inputs=False)
    assert Counting.from_dict(primary_only.to_dict()) == primary_only and Counting().to_dict().get(
        "post_op_inputs", True) is True
    counted, alone = map_kernels(graph, CONV_BN_RELU), map_kernels(graph, CONV_BN_RELU, counting=primary_only)
    inputs = FEATURES.index("input_elems")
    conv2 = counted.names.index("conv2")
    assert counted.features[conv2, inputs] == 2 * 8 * 16 * 16 and alone.features[conv2, inputs] == 8 * 16 * 16
    others = [i for i in range(len(FEATURES)) if i != inputs]
    assert np.array_equal(counted.features[:, others], alone.features[:, others])
    # a table of kernels measured in context keys them alike under either counting
    from annette_torch.measure.kernel_table import kernel_signatures
    assert kernel_signatures(alone) == kernel_signatures(counted)
    with pytest.raises(ValueError, match="counting.post_op_inputs"):
        Counting.from_dict({"post_op_inputs": "no"})


def test_condition_blocks_fusion_and_no_rules_means_one_kernel_per_layer():
    graph = trace(Block(pool=3).eval(), input_shape=(1, 8, 18, 18))
    table = map_kernels(graph, CONV_BN_RELU)
    assert "pool" in table.names and "conv_pool" not in table.kinds
    unfused = map_kernels(graph, ())
    assert len(unfused) == len(graph) and set(unfused.fusion) == {"not-fused"}


def test_a_rule_can_ask_for_a_channel_multiple_and_whether_the_network_returns_the_layer():
    """ONNX Runtime runs a hard swish inside its NCHWc conv: the conv's input channels a
    multiple of 4, and not where the network returns the activation."""
    from annette_torch.mapping import RETURNED, Clause
    rule = FusionRule.from_dict({"primary": "conv", "secondary": "hardswish", "condition": [
        {"layer": "primary", "attr": "c", "op": "multiple of", "value": 4},
        {"layer": "secondary", "attr": RETURNED, "op": "==", "value": False}]})
    assert rule.condition[0] == Clause("primary", "c", "multiple of", 4)

    def kernels(c, tail):
        layers = [nn.Conv2d(c, 16, 3, padding=1), nn.Hardswish()] + ([nn.Conv2d(16, 8, 1)] if tail else [])
        graph = trace(nn.Sequential(*layers).eval(), input_shape=(1, c, 8, 8))
        return map_kernels(graph, (rule,)).layers

    assert kernels(20, tail=True)[0] == ("_0", "_1")            # fused
    assert kernels(18, tail=True)[0] == ("_0",)                # 18 channels: no NCHWc conv
    assert kernels(20, tail=False)[0] == ("_0",)               # the returned activation runs on its own
    with pytest.raises(ValueError, match="positive integer"):
        Clause("primary", "c", "multiple of", 0)
    with pytest.raises(ValueError, match="positive integer"):
        Clause("primary", "c", "not multiple of", 2.5)


def test_layer_with_two_consumers_is_not_fused():
    class Fork(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 1)
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.conv(x)
            return self.relu(y) + y      # conv output is needed twice

    graph = trace(Fork().eval(), input_shape=(1, 4, 8, 8))
    table = map_kernels(graph, CONV_BN_RELU)
    assert table.layers[table.names.index("conv")] == ("conv",)


def test_roofline_takes_the_slower_of_compute_and_memory():
    model = Roofline(peak_ops_s=1e9, bandwidth_bytes_s=1e8, bit_act=8, bit_weights=8)
    feats = np.zeros((2, len(FEATURES)))
    feats[:, FEATURES.index("ops")] = [1e9, 1e3]
    feats[:, FEATURES.index("input_elems")] = [10, 1e8]
    seconds, compute = model.predict(feats)
    assert seconds[0] == pytest.approx(1.0) and compute[0]
    assert seconds[1] == pytest.approx(1e8 / 1e8) and not compute[1]


def test_refined_roofline_matches_the_published_formula():
    model = RefinedRoofline(1e12, 1e12, 8, 8, unroll={"f": {"par": 16, "alpha": 0.5}, "c": {"par": 8, "alpha": 1.0}})
    feats = np.ones((3, len(FEATURES)))
    feats[:, FEATURES.index("ops")] = 1e9
    feats[:, FEATURES.index("f")] = [16, 17, 32]
    feats[:, FEATURES.index("c")] = [8, 8, 3]
    seconds, _ = model.predict(feats)

    def eff(n, par, alpha):
        e = n / (math.ceil(n / par) * par)
        return 1 / ((1 - alpha) + alpha / e)

    for i, (f, c) in enumerate([(16, 8), (17, 8), (32, 3)]):
        expected = 1e9 / (1e12 * eff(f, 16, 0.5) * eff(c, 8, 1.0))
        assert seconds[i] == pytest.approx(expected)
    assert seconds[1] > seconds[0]  # 17 filters waste most of a second pass


def test_torch_path_equals_numpy_path_and_has_gradients():
    model = RefinedRoofline(1e12, 1e10, 16, 16, unroll={"f": {"par": 32, "alpha": 0.7}, "h": {"par": 8, "alpha": 0.2}})
    feats = np.abs(np.random.default_rng(0).normal(size=(5, len(FEATURES)))) * 1000 + 1
    numpy_s, _ = model.predict(feats)
    tensor = torch.tensor(feats, requires_grad=True)
    torch_s, _ = model.predict(tensor, xp=torch)
    assert np.allclose(torch_s.detach().numpy(), numpy_s)
    torch_s.sum().backward()
    assert torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0


@pytest.mark.parametrize("type_name, data, message", [
    ("roofline", {"peak_ops_s": 1}, "bandwidth_bytes_s"),
    ("magic", {}, "unknown layer model type"),
    ("roofline", [1, 2], "expected an object"),
    ("roofline", {"peak_ops_s": -1, "bandwidth_bytes_s": 1}, "positive"),
    ("refined_roofline", {"peak_ops_s": 1, "bandwidth_bytes_s": 1, "unroll": {"q": {"par": 2, "alpha": 0}}}, "unroll"),
])
def test_invalid_layer_model_data_is_named(type_name, data, message):
    with pytest.raises(ValueError, match=f"layer_models.conv: .*{message}"):
        layer_model_from_dict(type_name, data, where="layer_models.conv")


def test_returned_conv_maps_get_an_output_reorder_kernel():
    """A graph compiler computing channels-last or blocked converts what the network returns
    back to NCHW: one kernel per returned conv-derived map, absorbing no layer."""
    graph = trace(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()), input_shape=(1, 3, 32, 32))
    table = map_kernels(graph, (), True, reorder_outputs=True)
    assert table.kinds[-1] == OUTPUT_REORDER and table.layers[-1] == () and table.names[-1] == graph.layers[-1].name
    row = dict(zip(FEATURES, table.features[-1]))
    assert row["input_elems"] == row["output_elems"] == 16 * 32 * 32 and row["ops"] == 0 and row["c"] == 16
    assert OUTPUT_REORDER not in map_kernels(graph, (), True).kinds                          # not asked for
    for net, shape in ((nn.Sequential(nn.ReLU()), (1, 16, 32, 32)),                          # plain input, plain output
                       (nn.Sequential(nn.Conv2d(3, 16, 1)), (1, 3, 8, 8)),                   # 1,024 elements: written plain
                       (nn.Sequential(nn.Conv2d(3, 1, 1)), (1, 3, 64, 64)),                  # one channel: every layout
                       (nn.Sequential(nn.Conv2d(3, 16, 1), nn.Flatten()), (1, 3, 32, 32))):  # not a feature map
        assert OUTPUT_REORDER not in map_kernels(trace(net, input_shape=shape), (), True, reorder_outputs=True).kinds
