"""search_examples/evolutionary_search.py --smoke runs end to end (search, measurement on
openvino-cpu) and what it reports is true: every top candidate fits the budget, and its
numbers are what the estimator says of the built network."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from annette_torch import Estimator, trace
from annette_torch.nas import MobileNetV2Space, StageChoice

SCRIPT = Path(__file__).resolve().parents[1] / "search_examples" / "evolutionary_search.py"
MIN_MOPS, MAX_MOPS = 80.0, 100.0


@pytest.fixture(scope="module")
def run():
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--min-mops", str(MIN_MOPS),
                           "--max-mops", str(MAX_MOPS)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary_lines = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert len(summary_lines) == 1, done.stdout[-3000:]
    return done.stdout, json.loads(summary_lines[0].removeprefix("SUMMARY "))


def test_smoke_prints_top_candidates_and_predicted_vs_measured(run):
    stdout, summary = run
    assert "search: " in stdout and "candidates/s" in stdout and "hits" in stdout
    assert "top 3 (stages 2-7" in stdout
    assert "predicted vs measured (openvino-cpu" in stdout
    assert "Spearman rank correlation" in stdout
    assert len(summary["top"]) == 3
    assert summary["evaluated"] > 100
    assert -1.0 <= summary["spearman"] <= 1.0


def test_top_candidates_fit_the_budget_ranked_by_latency(run):
    _, summary = run
    assert summary["budget"] == {"max_mops": MAX_MOPS, "min_mops": MIN_MOPS}
    assert not summary["maximize_mops"]
    top = summary["top"]
    for row in top:
        assert MIN_MOPS <= row["mops"] <= MAX_MOPS
        assert row["measured_ms"] > 0 and row["spread"] >= 0
    estimates = [row["est_ms"] for row in top]
    assert estimates == sorted(estimates)
    assert len({json.dumps(row["arch"]) for row in top}) == len(top)


def test_reported_numbers_are_the_estimators(run):
    _, summary = run
    space = MobileNetV2Space(resolution=summary["resolution"])
    shape = (1, 3, space.resolution, space.resolution)
    est = Estimator()
    for row in summary["top"]:
        model = space.build(tuple(StageChoice(*stage) for stage in row["arch"]))
        assert row["est_ms"] == pytest.approx(est(model, input_shape=shape), rel=1e-9)
        assert row["mops"] == pytest.approx(trace(model, input_shape=shape).total("ops") / 1e6, rel=1e-9)
        weights = sum(t.numel() for t in [*model.parameters(), *model.buffers()])
        assert row["mweights"] == pytest.approx(weights / 1e6, rel=1e-9)
