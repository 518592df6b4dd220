"""The board profiles count layers as ANNETTE did when it fitted the published parameters
(calibration/published/build_board_profiles.py): per-layer figures computed by hand from
the published parameter files, and the direction each rule moves whole networks."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from annette_torch import Estimator, load_profile, trace
from annette_torch.layer_models import RefinedRoofline
from annette_torch.mapping import Counting

PUBLISHED = Path(__file__).resolve().parents[1] / "calibration" / "published" / "annette-published" / "layer"
BOARDS = {"ncs2-myriad": "ncs2", "zcu102-dpu": "dnndk"}


def published(board: str, layer_type: str) -> dict:
    """The entry of ``layer_type`` in ``board``'s published refined-roofline file."""
    return json.loads((PUBLISHED / f"{board}-ref_roofline.json").read_text())[layer_type]


def roofline_ms(ops: float, data_bytes: float, entry: dict, efficiency: float = 1.0) -> float:
    """ANNETTE's refined roofline: max(ops / op_s, bytes / bandwidth), the compute term
    divided by the utilisation, in ms."""
    return max(ops / entry["op_s"] / efficiency, data_bytes / entry["bandwidth"]) * 1e3


def kernel_ms(profile: str, model: nn.Module, shapes) -> float:
    report = Estimator(profile).report(model, input_shape=shapes)
    executed = report[report["bound"] != "free"]
    assert len(executed) == 1, executed
    return float(executed["time_ms"].iloc[0])


@pytest.mark.parametrize("profile", BOARDS)
def test_a_first_conv_on_3_channels_is_replicated_not_underused(profile):
    conv = published(BOARDS[profile], "Conv")
    arch = conv["architecture"]
    ops = 2 * 7 * 7 * 3 * 64 * 112 * 112                  # 2 per MAC, no bias (ANNETTE's count)
    inputs, outputs, weights = 112 * 112 * 3 * 2 * 2, 112 * 112 * 64, 7 * 7 * 3 * 64
    data_bytes = ((inputs + outputs) * arch["bit_act"] + weights * arch["bit_weights"]) / 8
    # c = 3 < c_par: efficiency 1 (replicated); f = 64, h = w = 112 fill their units exactly
    expected = roofline_ms(ops, data_bytes, conv)
    assert expected == pytest.approx(0.7387 if profile == "ncs2-myriad" else 0.2011, abs=1e-4)
    layer = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
    assert kernel_ms(profile, layer, (1, 3, 224, 224)) == pytest.approx(expected, rel=1e-9)


def test_below_its_unroll_factor_a_dimension_costs_nothing_extra_only_with_replicate():
    features = torch.tensor([[1e9, 0, 0, 0, 1, 8, 8, 3, 64, 3, 3, 1, 1]], dtype=torch.float64)
    unroll = {"c": {"par": 32.0, "alpha": 0.5}}
    plain = RefinedRoofline(1e12, 1e12, unroll=unroll)
    replicated = RefinedRoofline(1e12, 1e12, unroll=unroll, replicate=True)
    eff = 1 / (0.5 + 0.5 / (3 / 32))
    assert plain.predict(features.numpy())[0][0] == pytest.approx(1e-3 / eff)
    assert replicated.predict(features.numpy())[0][0] == pytest.approx(1e-3)
    features[0, 7] = 40                                     # above par: formula 3 as before
    assert replicated.predict(features, xp=torch)[0].item() == pytest.approx(plain.predict(features.numpy())[0][0])
    assert RefinedRoofline.from_dict(replicated.to_dict()) == replicated
    assert "replicate" not in plain.to_dict()


class Concat(nn.Module):
    def forward(self, x, y):
        return torch.cat([x, y], 1)


def test_a_concat_reads_its_first_input_only():
    base = published("ncs2", "Base")                        # no Concat entry: ANNETTE's Base layer
    first, second = 64 * 56 * 56, 32 * 56 * 56
    expected = roofline_ms(0, (first + first + second) * 16 / 8, base)   # first input + whole output
    assert expected == pytest.approx(0.1767, abs=1e-4)
    shapes = [(1, 64, 56, 56), (1, 32, 56, 56)]
    assert kernel_ms("ncs2-myriad", Concat(), shapes) == pytest.approx(expected, rel=1e-9)


def test_a_dpu_pool_counts_2_ops_per_window_tap():
    pool = published("dnndk", "Pool")
    outputs = 64 * 56 * 56
    ops = outputs * 3 * 3 * 2
    expected = roofline_ms(ops, 112 * 112 * 64 + outputs, pool)          # int8: one byte per element
    assert expected == pytest.approx(0.1321, abs=1e-4) and ops / pool["op_s"] > (112 * 112 * 64 + outputs) / pool["bandwidth"]
    layer = nn.MaxPool2d(3, stride=2, padding=1)
    assert kernel_ms("zcu102-dpu", layer, (1, 64, 112, 112)) == pytest.approx(expected, rel=1e-9)


def without(profile, rule: str):
    """``profile`` with one of ANNETTE's counting rules switched off."""
    if rule == "replicate":
        return dataclasses.replace(profile, layer_models={
            t: {k: dataclasses.replace(m, replicate=False) if isinstance(m, RefinedRoofline) else m
                for k, m in models.items()} for t, models in profile.layer_models.items()})
    counting = profile.counting
    if rule == "concat":
        return dataclasses.replace(profile, counting=Counting(counting.ops_scale, ()))
    return dataclasses.replace(profile, counting=Counting((), counting.first_input_only))


NETWORKS = {"resnet18": 224, "resnet50": 224, "densenet121": 224, "squeezenet1_0": 224, "mobilenet_v2": 224,
            "googlenet": 224, "inception_v3": 299}


@pytest.fixture(scope="module")
def networks(fast_init):
    graphs = {}
    for name, size in NETWORKS.items():
        options = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
        with fast_init():
            model = getattr(torchvision.models, name)(weights=None, **options).eval()
        graphs[name] = trace(model, input_shape=(1, 3, size, size), name=name)
    return graphs


@pytest.mark.parametrize("profile", BOARDS)
def test_each_rule_moves_whole_networks_the_way_annette_counts(networks, profile):
    board = load_profile(profile)
    ours = {name: Estimator(board)(graph) for name, graph in networks.items()}
    # replicated small dimensions and first-input concats cost less; 2 ops per pool tap more
    for rule, sign in (("replicate", -1), ("concat", -1), ("pool", +1)):
        other = Estimator(without(board, rule))
        for name, graph in networks.items():
            change = ours[name] - other(graph)
            assert sign * change >= 0, (rule, name, change)
            if rule == "concat" and name in ("densenet121", "squeezenet1_0", "googlenet", "inception_v3"):
                assert change < 0, (rule, name)
    resnet18 = Estimator(without(without(without(board, "replicate"), "concat"), "pool"))(networks["resnet18"])
    if profile == "ncs2-myriad":        # the 3-channel first conv: 1.8 ms -> 0.74 ms of about 18 ms
        assert 0.04 < 1 - ours["resnet18"] / resnet18 < 0.08
    assert all(math.isfinite(v) and v > 0 for v in ours.values())
