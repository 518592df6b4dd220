"""Bad input never becomes a wrong number: every case of ``benchmarks/bad_input.py`` is
answered by a named error or warning (or its property holds), plus the repairs and
guarantees behind them."""
import importlib.util
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

_spec = importlib.util.spec_from_file_location("bad_input", Path(__file__).parents[1] / "benchmarks" / "bad_input.py")
bad_input = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bad_input", bad_input)    # dataclasses look their module up there
_spec.loader.exec_module(bad_input)

CASES = bad_input.cases()


def test_the_battery_has_at_least_100_cases_with_unique_names():
    names = [(case.surface, case.name) for case in CASES]
    assert len(CASES) >= 100 and len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.surface}: {c.name}" for c in CASES])
def test_bad_input_is_handled_well(case, tmp_path):
    verdict, detail = bad_input.judge(case, tmp_path)
    assert verdict == "handled well", detail


def test_the_judge_grades_a_silent_nan_and_a_raw_key_error_as_bugs(tmp_path):
    silent = bad_input.Case("t", "nan", lambda folder: math.nan, match=("x",))
    raw = bad_input.Case("t", "key", lambda folder: {}["missing"], match=("missing",))
    vague = bad_input.Case("t", "vague", lambda folder: (_ for _ in ()).throw(ValueError("bad")), match=("file",))
    assert bad_input.judge(silent, tmp_path)[0] == "bug"
    assert bad_input.judge(raw, tmp_path)[0] == "bug"
    assert bad_input.judge(vague, tmp_path)[0] == "poor message"


def test_a_valid_base_profile_estimates_a_finite_positive_time(tmp_path):
    from annette_torch import Estimator
    estimator = Estimator(bad_input.write_profile(tmp_path))
    ms = estimator(bad_input.small_net(), input_shape=(1, 3, 16, 16))
    assert math.isfinite(ms) and ms > 0
    assert estimator.report(bad_input.small_net(), input_shape=(1, 3, 16, 16)).attrs["total_ms"] == pytest.approx(ms)


def test_save_writes_free_form_nan_as_null_and_the_file_loads(tmp_path):
    import dataclasses
    from annette_torch.profiles import load_profile
    profile = load_profile(bad_input.write_profile(tmp_path))
    saved = dataclasses.replace(profile, fit_metrics={"mape": float("nan")}).save(tmp_path / "saved.json")
    assert json.loads(saved.read_text())["fit_metrics"] == {"mape": None}
    assert load_profile(saved).fit_metrics == {"mape": None}


def test_a_resumed_campaign_rewrites_a_damaged_store_and_reports_it(tmp_path):
    from annette_torch.calibration.store import MeasurementStore, StoreRepairWarning
    store = bad_input.tampered_store(bad_input.half_line)(tmp_path)
    with pytest.warns(StoreRepairWarning, match=r"layers\.csv: left out 1 damaged line.*benchmark\(s\) b0"):
        with MeasurementStore.open(store.parent, bad_input.FINGERPRINT) as opened:
            assert opened.done() == {"b1", "b2"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # repaired for good: nothing to say the second time
        with MeasurementStore.open(store.parent, bad_input.FINGERPRINT) as opened:
            assert opened.done() == {"b1", "b2"}


def test_a_damaged_archive_line_leaves_its_benchmark_out_until_measured_again(tmp_path):
    import gzip
    from annette_torch.calibration import load_measurements
    from annette_torch.calibration.store import MeasurementStore, StoreRepairWarning
    store = bad_input.make_store(tmp_path, 3)
    with MeasurementStore.open(store.parent, bad_input.FINGERPRINT) as opened:
        opened.compact()
    archive = store / "layers.csv.gz"
    lines = gzip.decompress(archive.read_bytes()).decode().splitlines(keepends=True)
    archive.write_bytes(gzip.compress("".join(lines[:2] + [lines[2][:20] + "\n"] + lines[3:]).encode()))
    with pytest.warns(StoreRepairWarning, match="b1"):
        _, networks, layers = load_measurements(store)
    assert sorted(networks["benchmark"]) == ["b0", "b2"] and sorted(layers["benchmark"]) == ["b0", "b2"]
    with pytest.warns(StoreRepairWarning):
        with MeasurementStore.open(store.parent, bad_input.FINGERPRINT) as opened:
            opened.append({"benchmark": "b1", "family": "conv2d", "spec": "{}", "status": "ok", "time_ms": 2.0},
                          [{"layer": "conv", "status": "executed", "time_ms": 1.5}])
    with pytest.warns(StoreRepairWarning):
        _, networks, layers = load_measurements(store)
    assert sorted(networks["benchmark"]) == ["b0", "b1", "b2"]
    assert layers.set_index("benchmark").loc["b1", "time_ms"] == 1.5       # the new measurement, not the damaged one


def test_every_estimate_path_checks_its_kernel_times(tmp_path):
    from annette_torch import EstimateError, Estimator, trace
    profile = bad_input.write_profile(tmp_path, bad_input.set_field("layer_models.mixed.conv.roofline.peak_ops_s", 1e-300))
    estimator = Estimator(profile)
    graph = trace(bad_input.small_net(), input_shape=(1, 3, 16, 16))
    for answer in (estimator, estimator.report, estimator.kernel_times):
        with pytest.raises(EstimateError, match=r"kernel '_0' \(conv\).*layer_models\.mixed\.conv"):
            answer(graph)


class Widening(torch.nn.Module):
    """Three activations the size of the input, then an op without a meta kernel."""

    def forward(self, x):
        y = x * 2
        z = y + 1
        return (z + y).flatten().nonzero().float().sum()


def test_the_real_tensor_fallback_stops_at_its_memory_limit(monkeypatch):
    from annette_torch.graph import RealRunTooLarge, fx_capture, trace
    monkeypatch.setattr(fx_capture, "REAL_RUN_MAX_BYTES", 2 ** 20)     # 1 MiB: the run, not the inputs, passes it
    with pytest.raises(RealRunTooLarge, match=r"Widening: .*more than 1 MiB \(1 MiB at layer 'add'\)"):
        trace(Widening(), input_shape=(1, 3, 200, 200))                  # 0.46 MiB per activation
    monkeypatch.undo()
    assert trace(Widening(), input_shape=(1, 3, 200, 200)).method == "fx-real"


class LongChain(torch.nn.Module):
    """Twelve activations the size of the input, each read only by the next, then an op
    without a meta kernel."""

    def __init__(self, branch: bool = False) -> None:
        super().__init__()
        self.branch = branch  # on data (FX cannot trace it): the eager capture runs it

    def forward(self, x):
        if self.branch and float(x.sum()) < 0:
            x = -x
        for _ in range(12):
            x = x + 1
        return x.sum().reshape(1).nonzero()


def test_the_memory_limit_counts_what_the_run_holds_alive_not_all_it_made(monkeypatch):
    from annette_torch.graph import eager_capture, fx_capture, trace
    monkeypatch.setattr(fx_capture, "REAL_RUN_MAX_BYTES", 2 ** 21)     # 2 MiB: 4 activations of 0.46 MiB
    monkeypatch.setattr(eager_capture, "REAL_RUN_MAX_BYTES", 2 ** 21)
    assert trace(LongChain(), input_shape=(1, 3, 200, 200)).method == "fx-real"      # 5.5 MiB made in all
    with pytest.warns(UserWarning, match="captured one eager forward pass"):
        assert trace(LongChain(branch=True), input_shape=(1, 3, 200, 200)).method == "eager-real"


def test_store_reading_is_unchanged_for_good_files(tmp_path):
    from annette_torch.calibration import load_measurements
    store = bad_input.make_store(tmp_path, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, networks, layers = load_measurements(store)
    assert list(networks["benchmark"]) == ["b0", "b1"] and networks["time_ms"].dtype == np.float64
    assert networks["kernels"].dtype == np.int64 and (layers["layer"] == "conv").all()


def test_a_clause_ordering_a_text_attribute_does_not_hold():
    from annette_torch.mapping.rules import Clause
    layer = type("L", (), {"attrs": {"padding": "same"}, "counts": type("C", (), {"dims": {}})()})()
    assert not Clause("primary", "padding", "<", 2).holds(layer, layer)
    assert not Clause("primary", "padding", "multiple of", 2).holds(layer, layer)


def test_model_state_warning_is_silent_for_eval_f32_models_and_training_profiles():
    from annette_torch import Estimator
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Estimator("openvino-cpu")(bad_input.small_net(), input_shape=(1, 3, 16, 16))
        Estimator("torch-cpu-train")(bad_input.small_net().train(), input_shape=(1, 3, 16, 16))
    assert torch.get_default_dtype() == torch.float32
