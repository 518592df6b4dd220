"""Every estimate says what it can vouch for: calibrated ranges computed from a store and
recorded in profiles, and the report's ``confidence`` column and the CLI's summary line."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from torch import nn

from annette_torch import Estimator, load_profile, trace
from annette_torch.calibration import BenchmarkSpec, build_benchmark
from annette_torch.cli import confidence_line
from annette_torch.cli import main as cli_main
from annette_torch.fit import StoreData, store_ranges
from annette_torch.kinds import FEATURES
from annette_torch.layer_models import Roofline
from annette_torch.profiles import Profile, ProfileError

CHANNELS = (8, 16, 24, 32)


def conv_store() -> StoreData:
    """conv -> relu benchmarks on 16x16 inputs with 8..32 input channels and 16 filters,
    every layer executed on its own."""
    networks, layers, graphs = [], [], {}
    for c in CHANNELS:
        spec = BenchmarkSpec("conv_chain", {"h": 16, "w": 16, "c": c, "f": 16, "k": 3, "op": "relu"})
        module, shape = build_benchmark(spec)
        benchmark = f"c{c}"
        graphs[benchmark] = graph = trace(module, input_shape=shape, name=benchmark)
        networks.append({"benchmark": benchmark, "family": "conv_chain", "spec": spec.to_json(), "status": "ok",
                         "time_ms": 0.2, "layers_sum_ms": 0.2, "kernels": len(graph)})
        layers += [{"benchmark": benchmark, "layer": layer.name, "kind": layer.kind, "status": "executed",
                    "fused_into": "", "time_ms": 0.1, "spread": 0.01} for layer in graph]
    frame = pd.DataFrame(networks).set_index("benchmark", drop=False)
    return StoreData({"backend": "synthetic"}, frame, pd.DataFrame(layers), graphs)


def test_store_ranges_span_the_features_of_the_fitted_kernels():
    ranges = store_ranges(conv_store())
    assert set(ranges) == {"conv", "relu"}
    conv = ranges["conv"]
    assert set(conv) == set(FEATURES)
    assert conv["c"] == (8.0, 32.0) and conv["f"] == (16.0, 16.0) and conv["kh"] == (3.0, 3.0)
    assert conv["ops"] == (2.0 * 16 * 16 * 16 * 8 * 9, 2.0 * 16 * 16 * 16 * 32 * 9)
    assert store_ranges(conv_store(), min_rows=5) == {}        # too few kernels of a kind: no model, no range


def ranged_profile(conv_range: dict) -> Profile:
    """A roofline profile with a ``conv`` entry calibrated over ``conv_range``."""
    model = Roofline(1e11, 1e10)
    return Profile("ranged", {"backend": "test", "device": "test", "runtime_version": "0", "threads": 1,
                              "precision": "f32"},
                   {"roofline": {"default": model, "conv": model, "relu": model}},
                   ranges={"roofline": {"conv": conv_range}})


def test_confidence_flags_a_kernel_whose_features_lie_outside_the_calibrated_range():
    profile = ranged_profile({"c": (8.0, 32.0), "kh": (1.0, 7.0)})
    model = nn.Sequential(nn.Conv2d(3, 16, 11, padding=5), nn.Conv2d(16, 16, 3, padding=1), nn.Identity(),
                          nn.ReLU(), nn.Flatten(), nn.Unflatten(1, (16, 16, 16)))
    graph = trace(model, input_shape=(1, 3, 16, 16))
    estimator = Estimator(profile)
    report = estimator.report(graph).set_index("kernel")
    first, second = report.iloc[0], report.iloc[1]
    assert first["confidence"] == "extrapolated"
    assert first["outside_range"] == "c=3 (8..32), kh=11 (1..7)"
    assert second["confidence"] == "calibrated" and second["outside_range"] == ""
    assert set(report.loc[report["kind"] == "relu", "confidence"]) == {"unranged"}   # an entry without a range
    assert set(report.loc[report["bound"] == "free", "confidence"]) == {"free"}
    assert report.attrs["total_ms"] == estimator(graph)
    line = confidence_line(report.reset_index())
    share = 100 * first["time_ms"] / report["time_ms"].sum()
    assert line.startswith(f"1 kernel, {share:.0f} % of the time, outside the calibrated range: conv (c=3, kh=11)")
    assert "by models with no recorded calibrated range" in line and "1 kernel inside" in line


def test_kinds_without_their_own_model_are_answered_by_fallback():
    report = Estimator(ranged_profile({"c": (1.0, 64.0)})).report(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Tanh()),
                                                                    input_shape=(1, 3, 8, 8))
    assert report["confidence"].tolist() == ["calibrated", "fallback"]
    assert confidence_line(report).startswith("1 kernel (")


def test_ranges_round_trip_through_profile_json_and_bad_ones_name_the_field(tmp_path):
    profile = ranged_profile({"c": (8.0, 32.0)})
    data = json.loads(profile.save(tmp_path / "p.json").read_text())
    assert data["layer_models"]["roofline"]["conv"]["range"] == {"c": [8.0, 32.0]}
    assert "range" not in data["layer_models"]["roofline"]["relu"]
    assert load_profile(tmp_path / "p.json").ranges == profile.ranges
    for bad, problem in (({"c": [32, 8]}, "low <= high"), ({"depth": [1, 2]}, "unknown feature"),
                         ({"c": [1, float("nan")]}, "low <= high"), ([1, 2], "expected an object")):
        data["layer_models"]["roofline"]["conv"]["range"] = bad
        with pytest.raises(ProfileError, match=rf"layer_models\.roofline\.conv\.range.*{problem}"):
            Profile.from_dict(data)


def test_cli_estimate_ends_with_the_confidence_summary(capsys):
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", "ncs2-myriad"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("1 kernel, ") and "outside the calibrated range: conv (c=3)" in last
    assert "by fallback" in last


def test_a_fitted_profile_records_the_ranges_of_its_kinds():
    from annette_torch.fit.generate import _fit_pass, _profile

    data = conv_store()
    fitted = _fit_pass(data, set(data.networks.index), 0.005, 1.0, 3, 20, 0)
    profile = _profile("p", data, fitted, {}, [])
    for type_name, models in profile.layer_models.items():
        for kind in models:
            expected = None if kind == "default" else store_ranges(data)[kind]
            assert profile.range_of(type_name, kind) == expected, (type_name, kind)
    assert dataclasses.replace(profile).ranges == profile.ranges
    assert np.isfinite(Estimator(profile)(data.graphs["c8"]))
