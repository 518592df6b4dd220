"""search_examples/supernet_latency_loss.py --smoke: runs, trains above chance, and the LUT
latency of every derived network equals the estimator's number for the derived module."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "search_examples" / "supernet_latency_loss.py"
HEADER = re.compile(r"^penalty\s+architecture\s+test_acc\s+lut_ms\s+estimator_ms\s+measured_ms$")
ROW = re.compile(r"^\s*(?P<penalty>[\d.e+-]+)\s+(?P<arch>\S+)\s+(?P<acc>[\d.]+)\s+(?P<lut>[\d.e+-]+)\s+"
                 r"(?P<est>[\d.e+-]+)\s+(?P<measured>[\d.]+) \(spread \d+%\)$")
LABELS = {f"e{e}k{k}" for e in (1, 3, 6) for k in (3, 5)} | {"skip"}


@pytest.fixture(scope="module")
def smoke_run():
    result = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--weights", "0,4"],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def table_rows(stdout: str) -> list[dict]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if HEADER.match(line.strip()))
    rows = []
    for line in lines[start + 2:]:
        match = ROW.match(line)
        if not match:
            break
        rows.append(match.groupdict())
    return rows


def test_smoke_prints_one_row_per_penalty(smoke_run):
    rows = table_rows(smoke_run)
    assert [float(r["penalty"]) for r in rows] == [0.0, 4.0], smoke_run
    for row in rows:
        labels = row["arch"].split("-")
        assert len(labels) == 5 and set(labels) <= LABELS
        assert float(row["measured"]) > 0


def test_derived_nets_classify_above_chance(smoke_run):
    for row in table_rows(smoke_run):
        assert float(row["acc"]) > 0.2, row


def test_lut_latency_equals_estimator_on_derived_module(smoke_run):
    for row in table_rows(smoke_run):
        assert float(row["lut"]) > 0
        assert float(row["lut"]) == pytest.approx(float(row["est"]), rel=1e-5), row


def test_latency_penalty_lowers_latency(smoke_run):
    free, penalised = table_rows(smoke_run)
    assert float(penalised["lut"]) < float(free["lut"])
    fastest = float(re.search(r"range of the space: ([\d.e+-]+) ms", smoke_run).group(1))
    assert float(penalised["lut"]) <= 1.05 * fastest  # a strong penalty reaches (nearly) the fastest net
