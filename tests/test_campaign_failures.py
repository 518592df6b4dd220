"""A campaign whose own settings fail every benchmark stops instead of storing them as failed.

The measuring worker is replaced by a fake that answers each benchmark's rounds as a
test scenario says (no process is started, nothing is timed)."""
import pytest

from annette_torch.backends.base import Latency, Profiled
from annette_torch.calibration import BenchmarkSpec, CampaignStopped, campaign, load_measurements, run_campaign
from annette_torch.calibration.campaign import failure_kind

SPECS = [BenchmarkSpec("conv2d", {"h": 8, "c": 4, "f": 8 + i, "k": 3}) for i in range(7)]
TIMEOUT = "timeout: no result after 0.01 s (worker killed)"
CRASH = "worker died (exit code -11) while measuring"


def fake_worker(answer):
    """A stand-in for the campaign's worker: ``answer(spec)`` is None (the round
    succeeds) or the error its round fails with."""
    class FakeWorker:
        def __init__(self, *args):
            pass

        def store_extras(self, folder):
            pass

        def run(self, request, argument, timeout_s):
            if request == "round":
                error = answer(BenchmarkSpec.from_json(argument))
                return ("failed", error) if error else ("ok", Profiled([], Latency.from_runs([1.0, 1.1], 1)))
            spec = BenchmarkSpec.from_json(argument[0])
            return ("ok", {"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "ok",
                           "error": "", "time_ms": 1.0, "spread": 0.01, "repeats": 2, "layers_sum_ms": 0.0,
                           "kernels": 0, "wall_s": 0.0}, [])

        def stop(self):
            pass
    return FakeWorker


def campaign_with(monkeypatch, folder, answer, **options):
    monkeypatch.setattr(campaign, "MeasuringWorker", fake_worker(answer))
    return run_campaign("torch-cpu", SPECS, folder, progress=False, drift="none", rounds=1, **options)


def stored(summary_or_folder):
    return load_measurements(summary_or_folder)[1]


def test_timeouts_in_a_row_stop_the_campaign_and_store_nothing(monkeypatch, tmp_path):
    with pytest.raises(CampaignStopped, match=r"5 benchmarks in a row failed with the same error \(timeout.*none of "
                                              r"them was recorded.*--timeout 0.01 s is shorter"):
        campaign_with(monkeypatch, tmp_path, lambda spec: TIMEOUT, timeout_s=0.01)
    store = next(tmp_path.iterdir())
    assert stored(store).empty
    summary = campaign_with(monkeypatch, tmp_path, lambda spec: None)         # the cause fixed: all are measured
    assert (summary.measured, summary.failed, summary.already_done) == (7, 0, 0)


def test_failures_broken_by_successes_or_of_different_kinds_are_recorded(monkeypatch, tmp_path):
    order = {spec.id: i for i, spec in enumerate(sorted(SPECS, key=lambda s: s.id.rsplit("-", 1)[1]))}
    every_third_ok = campaign_with(monkeypatch, tmp_path / "a", lambda s: None if order[s.id] % 3 == 2 else TIMEOUT,
                                   stop_after_failures=3)
    assert (every_third_ok.measured, every_third_ok.failed) == (2, 5)
    alternating = campaign_with(monkeypatch, tmp_path / "b", lambda s: (TIMEOUT, CRASH)[order[s.id] % 2],
                                stop_after_failures=2)
    assert alternating.failed == 7
    networks = stored(alternating.store)
    assert (networks["status"] == "failed").all() and set(networks["error"]) == {TIMEOUT, CRASH}


def test_zero_never_stops_and_a_negative_limit_is_refused(monkeypatch, tmp_path):
    summary = campaign_with(monkeypatch, tmp_path / "a", lambda spec: TIMEOUT, stop_after_failures=0)
    assert summary.failed == 7 and len(stored(summary.store)) == 7
    with pytest.raises(ValueError, match="--stop-after-failures"):
        campaign_with(monkeypatch, tmp_path / "b", lambda spec: TIMEOUT, stop_after_failures=-1)
    assert not (tmp_path / "b").exists()


def test_failure_kinds_ignore_numbers_but_not_words():
    assert failure_kind(TIMEOUT) == failure_kind("timeout: no result after 120 s (worker killed)")
    assert failure_kind(TIMEOUT) != failure_kind(CRASH)
    assert failure_kind("RuntimeError: out of memory\nat line 3") == "RuntimeError: out of memory"
