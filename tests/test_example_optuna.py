"""search_examples/optuna_search.py --smoke runs end to end and what it reports is true: the
front is non-dominated, each latency is the estimator's number for the built network and
each score the NASWOT score of that network, and repeated blocks hit the signature cache."""
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("optuna")

from annette_torch import Estimator  # noqa: E402
from annette_torch.nas import MobileNetV2Space, StageChoice  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "search_examples" / "optuna_search.py"


@pytest.fixture(scope="module")
def run():
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], check=False, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary_lines = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert len(summary_lines) == 1, done.stdout[-3000:]
    return done.stdout, json.loads(summary_lines[0].removeprefix("SUMMARY "))


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("optuna_search", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arch(row) -> tuple:
    return tuple(StageChoice(*stage) for stage in row["arch"])


def test_smoke_prints_the_study_and_a_non_dominated_front_by_latency(run):
    stdout, summary = run
    assert "Optuna NSGA-II on MobileNetV2Space(resolution=96): 40 trials" in stdout
    assert "maximise NASWOT score" in stdout and "minimise estimated latency" in stdout
    assert "Pareto front:" in stdout
    assert summary["trials"] == 40 and summary["proxy"] == "naswot"
    front = summary["front"]
    assert front
    assert [row["est_ms"] for row in front] == sorted(row["est_ms"] for row in front)
    for a in front:
        assert not any(b["score"] >= a["score"] and b["est_ms"] <= a["est_ms"]
                       and (b["score"], b["est_ms"]) != (a["score"], a["est_ms"]) for b in front)
    assert len({json.dumps(row["arch"]) for row in front}) == len(front)


def test_repeated_blocks_are_estimated_once(run):
    _, summary = run
    assert summary["block_hits"] > summary["block_misses"] > 0


def test_reported_latency_and_proxy_are_those_of_the_built_network(run, script):
    _, summary = run
    space = MobileNetV2Space(resolution=summary["resolution"])
    shape = (1, 3, space.resolution, space.resolution)
    estimator = Estimator(summary["profile"])
    images = script.random_images(summary["batch"], space.resolution, summary["seed"])
    for row in summary["front"][:3]:
        choice = arch(row)
        assert row["est_ms"] == pytest.approx(estimator(space.build(choice), input_shape=shape), rel=1e-9)
        network = script.seeded_network(space, choice, summary["seed"])
        # a unit within rounding of zero may flip with another thread count: K moves by a few counts in ~1e5
        assert row["score"] == pytest.approx(script.naswot_score(network, images), rel=1e-4)


def test_seeded_networks_leave_the_rng_and_the_score_tells_inputs_apart(script):
    state = torch.random.get_rng_state()
    space = MobileNetV2Space(resolution=32)
    first = script.seeded_network(space, space.mobilenet_v2(), seed=0)
    again = script.seeded_network(space, space.mobilenet_v2(), seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    images = script.random_images(4, 32, seed=0)
    assert math.isfinite(script.naswot_score(first, images))
    # identical images agree on every unit: K has rank 1, log|det K| = -inf
    assert script.naswot_score(first, images[:1].repeat(4, 1, 1, 1)) == -math.inf
