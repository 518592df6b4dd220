"""``annette-torch noise`` and benchmarks/reproducibility.py, run for a few seconds on tiny settings."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from annette_torch.backends import get_backend
from annette_torch.cli import main as cli_main
from annette_torch.measure import Protocol
from annette_torch.measure.noise import measure_noise, noise_networks, round_to_round
from annette_torch.measure.protocol import combine

pytestmark = pytest.mark.filterwarnings("ignore::annette_torch.measure.BusyMachineWarning")

_spec = importlib.util.spec_from_file_location("reproducibility",
                                               Path(__file__).parents[1] / "benchmarks" / "reproducibility.py")
reproducibility = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("reproducibility", reproducibility)
_spec.loader.exec_module(reproducibility)


def test_round_to_round_and_agreement_on_hand_numbers():
    assert round_to_round([10.0, 11.0, 10.0]) == pytest.approx(2 / 2 / (31 / 3))
    assert round_to_round([5.0]) == 0.0
    first = {("a", "x"): combine([[10.0, 10.0]], [1.0], "p10"), ("b", "y"): combine([[4.0]], [1.0], "p10")}
    second = {("a", "x"): combine([[11.0, 11.0]], [1.1], "p10"), ("b", "y"): combine([[5.0]], [1.0], "p10")}
    assert reproducibility.agreement(first, second, "p10") == pytest.approx({("a", "x"): 0.0, ("b", "y"): 0.25})
    assert reproducibility.agreement(first, second, "p10", corrected=False)[("a", "x")] == pytest.approx(0.1)


def test_noise_command_prints_round_to_round_differences(capsys):
    assert cli_main(["noise", "--backend", "torch-cpu", "--rounds", "2", "--warmup", "1", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "round-to-round |diff|" in out and "drift-corrected" in out and "machine before measuring: " in out
    for name, _, _ in noise_networks():
        assert name in out
    assert "\nmean" in out and "steal" in out
    with pytest.raises(ValueError, match="at least 2 rounds"):
        measure_noise(get_backend("torch-cpu"), Protocol(rounds=1))


def test_reproducibility_benchmark_on_two_tiny_networks(tmp_path, capsys):
    out = tmp_path / "passes.json"
    reproducibility.main(["--backend", "torch-cpu", "--sets", "nb201", "--nb201", "2", "--rounds", "2",
                          "--warmup", "1", "--repeats", "2", "--drift", "canary", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "agreement between the passes (p10, drift corrected)" in printed
    assert "target <= 3.0%" in printed and "target <= 1.5%" in printed
    saved = json.loads(out.read_text())
    assert len(saved["passes"]) == 2 and all(len(p) == 2 for p in saved["passes"])
    first, second = saved["passes"]
    key = next(iter(first))
    assert len(first[key]["round_ms"]) == 2 and first[key]["time_ms"] > 0 and second[key]["time_ms"] > 0


def test_busy_check_benchmark_pairs_each_sessions_canary_spread_with_its_round_to_round(tmp_path):
    spec = importlib.util.spec_from_file_location("busy_check", Path(__file__).parents[1] / "benchmarks" / "busy_check.py")
    busy_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(busy_check)
    folder = tmp_path / "openvino-cpu-1t-x"
    folder.mkdir()
    sessions = [{"finished_utc": "2026-12-04T03:26:51+00:00", "before": "steal 0.0%, canary spread 26.6% over 1 s",
                 "during": "steal 0.0%, load 1.00 (1 min) over 600 s",             # no drift correction
                 "round_to_round": {"zoo": 0.052, "nb201": 0.183}},
                {"finished_utc": "2026-12-04T03:30:00+00:00", "before": "steal 0.0%, load 1.0 (1 min)",   # no canary
                 "round_to_round": {"zoo": 0.01}},
                {"finished_utc": "2026-12-05T19:21:00+00:00", "before": "steal 0.0%, canary spread 17.7% over 1 s",
                 "during": "steal 0.0%, load 1.01 (1 min), canary spread 0.6% over 621 s",   # before 2026-12-06
                 "round_to_round": {"zoo": 0.03}},
                {"finished_utc": "2026-12-06T17:13:00+00:00", "before": "steal 0.0%, canary spread 29.2% over 1 s",
                 "during": "steal 0.5%, load 2.00 (1 min), canary drift 50.7% over 271 s",
                 "round_to_round": {"zoo": 0.111}}]
    (folder / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    rows = busy_check.session_rows(tmp_path)
    assert sorted(zip(rows.set, rows.canary_spread_pct, rows.canary_drift_pct.fillna(-1), rows.r2r_pct.round(1))) == [
        ("nb201", 26.6, -1, 18.3), ("zoo", 17.7, 0.6, 3.0), ("zoo", 26.6, -1, 5.2), ("zoo", 29.2, 50.7, 11.1)]
    assert set(rows.folder) == {"openvino-cpu-1t-x"}
