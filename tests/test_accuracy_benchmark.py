"""benchmarks/accuracy.py: metrics, the resumable results store, evaluation of all variants."""
import contextlib
import importlib.util
import json
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from annette_torch.backends.base import BackendError, Latency
from annette_torch.measure import Protocol
from annette_torch.nas.nasbench201 import NB201Network, arch_string

_spec = importlib.util.spec_from_file_location("accuracy", Path(__file__).parents[1] / "benchmarks" / "accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("accuracy", accuracy)    # dataclasses look their module up there
_spec.loader.exec_module(accuracy)


pytestmark = pytest.mark.filterwarnings("ignore::annette_torch.measure.BusyMachineWarning")
ONE_ROUND = Protocol(rounds=1, warmup=0, repeats=20, drift="none")


@pytest.fixture(autouse=True)
def quick_machine_check(monkeypatch):
    monkeypatch.setattr("annette_torch.measure.networks.CHECK_INTERVAL_S", 0.0)


class FakeBackend:
    """Canned latencies; counts calls; fails for networks named in ``failing``."""

    name = "fake"
    threads = 1

    def __init__(self, fingerprint=None, failing=()):
        self._fingerprint = fingerprint or {"backend": "fake", "runtime_version": "1", "cpu": "test cpu",
                                            "threads": 1, "precision": "f32"}
        self.failing = set(failing)
        self.calls = []

    def fingerprint(self):
        return dict(self._fingerprint)

    @contextlib.contextmanager
    def prepared(self, model, input_shape):
        """The canary: always 1 ms, not counted in ``calls``."""
        yield lambda warmup, repeats: Latency.from_runs([1.0] * repeats, threads=1)

    def measure(self, model, input_shape, warmup=5, repeats=20):
        self.calls.append(model.tag)
        if model.tag in self.failing:
            raise BackendError("fake", "compile", RuntimeError("unsupported op"))
        return Latency.from_runs([float(len(self.calls) + i) for i in range(repeats)], threads=1)


class Erfcx(nn.Module):
    """A conv followed by an op no layer kind claims."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.special.erfcx(self.conv(x))


def _tagged(module, tag):
    module.tag = tag
    return module.eval()


def _nets():
    return [accuracy.Network("a", "small", (1, 3, 8, 8), lambda: _tagged(nn.Conv2d(3, 4, 3), "small")),
            accuracy.Network("b", "tiny", (1, 3, 8, 8), lambda: _tagged(nn.Conv2d(3, 2, 1), "tiny"))]


def test_metrics_on_hand_numbers():
    m = accuracy.metrics([10, 20, 40], [10.5, 17, 60])      # errors 5 %, 15 %, 50 %
    assert m["mape"] == pytest.approx(70 / 3)
    assert m["within10"] == pytest.approx(100 / 3)
    assert m["max_error"] == pytest.approx(50)
    assert m["spearman"] == pytest.approx(1.0)
    assert accuracy.metrics([1, 2, 3], [3, 2, 1])["spearman"] == pytest.approx(-1.0)


def test_store_round_trip_resume_and_remeasure(tmp_path):
    backend = FakeBackend()
    rows, path, failures = accuracy.measure_networks(backend, _nets(), tmp_path, ONE_ROUND, progress=False)
    assert failures == [] and backend.calls == ["small", "tiny"]
    assert path.parent.name == accuracy.fingerprint_folder(backend.fingerprint())
    assert json.loads((path.parent / "fingerprint.json").read_text()) == backend.fingerprint()
    assert list(pd.read_csv(path).columns) == list(accuracy.COLUMNS)
    small = rows.set_index("network").loc["small"]
    assert small["median_ms"] == pytest.approx(10.5) and small["repeats"] == 20
    assert small["p10_ms"] < small["median_ms"] < small["p90_ms"]
    assert small["input_shape"] == "1x3x8x8" and small["measured_at"].endswith("+00:00")

    again, _, _ = accuracy.measure_networks(backend, _nets(), tmp_path, ONE_ROUND, progress=False)
    assert backend.calls == ["small", "tiny"]                # resumed: nothing measured twice
    pd.testing.assert_frame_equal(again, rows)

    with open(path, "a") as handle:                          # a row cut by a kill
        handle.write("a,small,1x3x8x8,99")
    assert len(accuracy.read_measured(path.parent)) == 2
    accuracy.measure_networks(backend, _nets()[:1], tmp_path, ONE_ROUND, remeasure=True, progress=False)
    assert backend.calls == ["small", "tiny", "small"]
    newest = accuracy.read_measured(path.parent).set_index("network")
    assert newest.loc["small", "median_ms"] == pytest.approx(12.5)   # the newest row wins
    assert len(pd.read_csv(path)) == 3                       # the cut line is gone


def test_rounds_interleave_and_rows_of_another_protocol_are_measured_again(tmp_path):
    backend = FakeBackend()
    folder = accuracy.results_folder(tmp_path, backend.fingerprint())
    (folder / "measured.csv").write_text(",".join(accuracy.COLUMNS) + "\n"
                                         "a,small,1x3x8x8,9,8,10,0.2,25,2020-01-01T00:00:00+00:00\n")
    legacy, _, _ = accuracy.measure_networks(backend, _nets()[:1], tmp_path, Protocol(drift="none", statistic="median"),
                                             progress=False)
    assert backend.calls == [] and legacy["median_ms"].tolist() == [9]   # re-scored as it was measured
    assert not (folder / "protocol.json").exists()
    rows, path, _ = accuracy.measure_networks(backend, _nets(), tmp_path, Protocol(rounds=2, warmup=0, repeats=10,
                                                                                  drift="canary"),
                                              progress=False)
    assert backend.calls == ["small", "tiny", "small", "tiny"]          # with the canary the legacy row does not count
    record = json.loads((folder / "protocol.json").read_text())
    assert (record["statistic"], record["drift"], record["canary_ms"]) == ("p10", "canary", 1.0)
    small = rows.set_index("network").loc["small"]
    assert small["repeats"] == 20 and small["p10_ms"] < small["median_ms"]
    sessions = accuracy.read_sessions(folder, record["since"])
    assert len(sessions) == 1 and sessions[0]["networks"] == 2 and sessions[0]["reference_ms"] == 1.0
    assert set(sessions[0]["round_to_round"]) == {"a", "b"} and min(sessions[0]["round_to_round"].values()) >= 0
    accuracy.measure_networks(backend, _nets(), tmp_path, Protocol(rounds=2, warmup=0, repeats=10,
                                                                   statistic="median", drift="canary"), progress=False)
    assert len(backend.calls) == 4                      # p10 and median are both in the rows: nothing to measure
    accuracy.measure_networks(backend, _nets(), tmp_path, ONE_ROUND, progress=False)
    assert len(backend.calls) == 6                      # another drift correction: a new record, measured again
    with pytest.raises(ValueError, match="cannot be the ground truth"):
        accuracy.measure_networks(backend, _nets(), tmp_path, Protocol(statistic="min"), progress=False)


def test_failures_are_reported_not_recorded(tmp_path):
    backend = FakeBackend(failing={"tiny"})
    rows, _, failures = accuracy.measure_networks(backend, _nets(), tmp_path, ONE_ROUND, progress=False)
    assert list(rows["network"]) == ["small"]
    assert len(failures) == 1 and "b/tiny" in failures[0] and "compile" in failures[0]


def test_a_cell_of_none_edges_only_is_measured_as_it_runs(tmp_path):
    """A standard NAS-Bench-201 cell of ``none`` edges still runs (``x.mul(0.)`` is work a
    runtime does), so it is measured like any other network."""
    zeros = arch_string(["none"] * 6)
    nets = [accuracy.Network("nb201", zeros, (1, 3, 32, 32), lambda: _tagged(NB201Network(zeros, N=1), "z"))]
    backend = FakeBackend()
    rows, _, failures = accuracy.measure_networks(backend, nets, tmp_path, ONE_ROUND, progress=False)
    assert failures == [] and backend.calls == ["z"] and list(rows["network"]) == [zeros]


def test_a_second_run_waits_for_the_one_measuring(tmp_path, capsys):
    backend = FakeBackend()
    with accuracy.measuring_lock(tmp_path):
        second = threading.Thread(target=accuracy.measure_networks, args=(backend, _nets(), tmp_path, ONE_ROUND),
                                  kwargs={"progress": False})
        second.start()
        second.join(0.5)
        assert second.is_alive() and backend.calls == []
    second.join(10)
    assert not second.is_alive() and backend.calls == ["small", "tiny"]
    assert "waiting for it to finish" in capsys.readouterr().err


def test_refuses_a_folder_of_another_fingerprint(tmp_path):
    accuracy.measure_networks(FakeBackend(), _nets()[:1], tmp_path, ONE_ROUND, progress=False)
    folder = next(tmp_path.iterdir())
    other = FakeBackend()
    other._fingerprint = {**other.fingerprint(), "cpu": "another cpu"}
    (folder / "fingerprint.json").write_text(json.dumps(other.fingerprint()))
    with pytest.raises(accuracy.ResultsError, match="records"):
        accuracy.measure_networks(FakeBackend(), _nets(), tmp_path, ONE_ROUND, progress=False)


def test_evaluate_two_tiny_networks_with_every_variant():
    arch = arch_string(["nor_conv_3x3", "skip_connect", "avg_pool_3x3", "none", "nor_conv_1x1", "skip_connect"])
    nets = [accuracy.Network("nb201", arch, (1, 3, 32, 32), lambda: NB201Network(arch, C=4, N=1).eval()),
            accuracy.Network("odd", "erfcx", (1, 3, 16, 16), lambda: Erfcx().eval()),
            accuracy.Network("odd", "not_measured", (1, 3, 16, 16), lambda: Erfcx().eval())]
    measured = pd.DataFrame({"set": ["nb201", "odd"], "network": [arch, "erfcx"],
                             "median_ms": [0.5, 0.1], "spread": [0.05, 0.1]})
    graphs = {}
    summary = accuracy.evaluate("ncs2-myriad", nets, measured, graphs, statistic="median")
    assert summary["variants"] == ["flops", "roofline+map", "roofline-map", "refined_roofline+map",
                                   "refined_roofline-map"]
    assert any("'mixed'" in note for note in summary["notes"])
    assert any("in-sample" in note for note in summary["notes"])
    assert set(summary["sets"]) == {"nb201", "odd", "all"}
    assert [row["network"] for row in summary["rows"]] == [arch, "erfcx"]
    assert all(row[v] > 0 for row in summary["rows"] for v in summary["variants"])
    assert list(summary["unknown"]) == ["erfcx"] and "special_erfcx" in summary["unknown"]["erfcx"]
    assert set(graphs) == {("nb201", arch), ("odd", "erfcx")}
    assert accuracy.main_variant(summary["variants"]) == "refined_roofline+map"


def test_an_adapted_profiles_reference_networks_are_scored_apart():
    """A network the profile was adapted on (its reference) is in-sample: it counts in set
    'references' only, not in its own set or 'all'."""
    import dataclasses

    from annette_torch import load_profile
    from annette_torch.layer_models.adapted import Adaptation

    profile = dataclasses.replace(load_profile("ncs2-myriad"), name="ncs2-adapted",
                                  adaptation=Adaptation(compute_scale=2.0, memory_scale=2.0, source="ncs2-myriad",
                                                        terms=("scale",), samples=1,
                                                        reference_networks=("small",)))
    nets = [*_nets(), accuracy.Network("a", "other", (1, 3, 8, 8), lambda: nn.Conv2d(3, 8, 3).eval())]
    measured = pd.DataFrame({"set": ["a", "b", "a"], "network": ["small", "tiny", "other"],
                             "median_ms": [0.5, 0.1, 0.3], "spread": [0.05, 0.1, 0.1]})
    summary = accuracy.evaluate(profile, nets, measured, statistic="median")
    assert [(row["network"], row["reference"]) for row in summary["rows"]] == [
        ("small", True), ("tiny", False), ("other", False)]
    assert set(summary["sets"]) == {"a", "b", "references", "all"}
    rows = {row["network"]: row for row in summary["rows"]}
    error = {name: abs(row["refined_roofline+map"] / row["measured_ms"] - 1) * 100 for name, row in rows.items()}
    assert summary["sets"]["a"]["refined_roofline+map"]["mape"] == pytest.approx(error["other"])
    assert summary["sets"]["references"]["refined_roofline+map"]["mape"] == pytest.approx(error["small"])
    assert summary["sets"]["all"]["refined_roofline+map"]["mape"] == pytest.approx((error["tiny"] + error["other"]) / 2)
    assert any("1 of these networks are reference networks" in note for note in summary["notes"])


def test_the_timm_set_is_the_coverage_list_below_the_compute_cap():
    coverage_spec = importlib.util.spec_from_file_location(
        "timm_coverage", Path(__file__).parents[1] / "benchmarks" / "timm_coverage.py")
    coverage = importlib.util.module_from_spec(coverage_spec)
    coverage_spec.loader.exec_module(coverage)
    order = [m for m in coverage.MODELS if m in accuracy.TIMM]
    assert order == list(accuracy.TIMM) and len(set(accuracy.TIMM)) == len(accuracy.TIMM) == 61
    assert set(accuracy.TIMM_INPUT_SIZE) <= set(accuracy.TIMM)
    nets = accuracy.networks(["timm"], models=["tinynet_e", "lcnet_050"])
    assert [(n.name, n.input_shape) for n in nets] == [("lcnet_050", (1, 3, 224, 224)), ("tinynet_e", (1, 3, 106, 106))]


def test_the_mobilenetv2_space_set_is_fixed_by_its_seed():
    first, again = accuracy.networks(["mbv2"]), accuracy.networks(["mbv2"])
    assert [n.name for n in first] == [n.name for n in again] and len({n.name for n in first}) == accuracy.MBV2_COUNT
    assert all(n.input_shape == (1, 3, 224, 224) for n in first)


def test_the_dense_set_keeps_every_output_of_a_detection_backbone():
    nets = accuracy.networks(["dense"], models=["ssdlite320_mobilenet_v3_large.backbone"])
    assert [n.input_shape for n in nets] == [(1, 3, 320, 320)]
    model = nets[0].build()
    from annette_torch import Estimator, trace
    graph = trace(model, input_shape=nets[0].input_shape)
    assert len(graph.outputs) == 6            # SSDLite's six feature maps, none of them dead
    assert not graph.dead
    assert Estimator("openvino-cpu")(graph) > 1.0


def test_a_recorded_ground_truth_is_scored_as_it_is_and_refuses_to_measure(tmp_path):
    """--ground-truth: another machine's folder scored without measuring (its rows under its
    record only, of the networks asked for); combined with --remeasure it is refused."""
    backend = FakeBackend({"backend": "fake", "runtime_version": "1", "cpu": "other cpu", "threads": 1,
                           "precision": "f32"})
    rows, path, _ = accuracy.measure_networks(backend, _nets(), tmp_path, ONE_ROUND, progress=False)
    calls = len(backend.calls)
    args = type("Args", (), {"ground_truth": str(path.parent), "remeasure": False, "ray": None})()
    recorded, source, failures = accuracy.recorded_ground_truth(args, _nets()[:1])
    assert source == path and failures == [] and len(backend.calls) == calls
    assert recorded[["set", "network", "p10_ms"]].values.tolist() == rows[rows["network"] == "small"][
        ["set", "network", "p10_ms"]].values.tolist()
    assert accuracy.recorded_fingerprint(path.parent)["cpu"] == "other cpu"
    args.remeasure = True
    with pytest.raises(SystemExit, match="cannot be combined with --remeasure"):
        accuracy.recorded_ground_truth(args, _nets())
    args.remeasure, args.ground_truth = False, str(tmp_path / "empty")
    with pytest.raises(SystemExit, match="holds no measurements"):
        accuracy.recorded_ground_truth(args, _nets())
