"""The budgeted campaign (annette_torch.calibration.budget): its plan, and, on the torch-cpu
backend with tiny benchmarks and an injected clock, its budget and resumption."""
from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import pytest

from annette_torch.calibration import BenchmarkSpec, MeasurementStore, load_measurements
from annette_torch.measure import Protocol
from annette_torch.calibration.budget import PILOT, FamilyState, Planner, run_budgeted_campaign
from annette_torch.cli import main
from annette_torch.layer_models.corrected import KindCorrection, PriorCorrection
from annette_torch.profiles import load_profile

HEADER = "family,count,n,h,w,c,f,k,stride,groups,op,pool\n"


def _family(name: str, errors: list[float], todo: int = 40, seconds: float = 1.0) -> FamilyState:
    """A family with ``len(errors)`` measured benchmarks the prior missed by ``errors`` (|log|)."""
    measured = [({"c": 16 * (i + 1)}, e) for i, e in enumerate(errors)]
    left = [BenchmarkSpec(name, {"c": 8 + i}) for i in range(todo)]
    return FamilyState(name, left, ok=len(errors), scored=measured, seconds=seconds)


def test_the_pilot_measures_every_family_first():
    planner = Planner({f: _family(f, []) for f in ("conv2d", "linear", "pool2d")})
    picks = [spec.family for spec in planner.next(3 * PILOT)]
    assert sorted(picks) == sorted(["conv2d", "linear", "pool2d"] * PILOT)
    assert picks[:3] == ["conv2d", "linear", "pool2d"]        # round robin


def test_the_plan_puts_more_samples_where_the_prior_is_wrong():
    """An injected prior error on linear (|log| 1, a factor 2.7) against 5 % elsewhere."""
    families = {"linear": _family("linear", [1.0, 0.9, 1.1]), "pool2d": _family("pool2d", [0.05] * 3),
                "activation": _family("activation", [0.05] * 3)}
    picks = [spec.family for spec in Planner(families).next(24)]
    assert picks.count("linear") >= 18
    assert picks.count("pool2d") + picks.count("activation") >= 1     # diminishing returns


def test_costly_families_get_fewer_and_the_users_kinds_more():
    same_error = {f: _family(f, [0.3] * 3) for f in ("linear", "pool2d")}
    same_error["linear"] = dataclasses.replace(same_error["linear"], seconds=10.0)
    picks = [spec.family for spec in Planner(same_error).next(20)]
    assert picks.count("pool2d") > picks.count("linear")
    weighted = Planner({f: _family(f, [0.3] * 3) for f in ("linear", "pool2d")}, relevance={"linear": 1.0,
                                                                                           "pool2d": 0.01})
    picks = [spec.family for spec in weighted.next(20)]
    assert picks.count("linear") == 20


def test_adaptive_picks_go_near_the_worst_benchmark():
    state = _family("linear", [0.1, 2.0, 0.1])          # the worst measured has c=32
    state.todo = [BenchmarkSpec("linear", {"c": c}) for c in (500, 700, 33, 900)]
    picks = Planner({"linear": state}).next(3)
    assert [p.params["c"] for p in picks] == [500, 33, 700]    # pool order, then the nearest the worst, ...


def _injected_prior():
    """torch-cpu with its linear kernels estimated 20 times too long."""
    prior = load_profile("torch-cpu")
    wrong = KindCorrection(math.log(20.0), math.log(20.0), 1)
    return dataclasses.replace(prior, correction=PriorCorrection(
        "torch-cpu", "injected", {t: {"linear": wrong} for t in prior.layer_models}))


def test_a_budget_stops_on_time_and_a_rerun_resumes_the_plan(tmp_path, monkeypatch):
    """Every committed benchmark advances the injected clock by 10 s. With 35 s, the first
    chunk (2) takes 20 s and teaches the campaign that a benchmark takes 10 s, so it
    measures 1 more and stops with 5 s left; reruns measure 3 more each, no benchmark
    twice, and finish the pilot before the allocation sends the rest to linear, where
    the prior is 20 times off."""
    clock = {"s": 0.0}
    append = MeasurementStore.append

    def timed_append(self, network, layers):
        clock["s"] += 10.0
        append(self, network, layers)

    monkeypatch.setattr(MeasurementStore, "append", timed_append)
    pool = tmp_path / "pool.csv"
    pool.write_text(HEADER + "linear,8,,,,64..256,64..256,,,,,\neltwise,8,,14,,16..64,,,,,add,\n")
    options = dict(prior=_injected_prior(), pool=pool, warmup=1, repeats=2, rounds=1, progress=False,
                   references=0, clock=lambda: clock["s"])
    first = run_budgeted_campaign("torch-cpu", tmp_path / "out", 35 / 60, **options)
    assert first.stopped_early and first.measured == 3 and clock["s"] == 30.0
    for _ in range(2):
        start = clock["s"]
        again = run_budgeted_campaign("torch-cpu", tmp_path / "out", 35 / 60, **options)
        assert again.stopped_early and again.measured == 3 and clock["s"] - start == 30.0
    _, networks, _ = load_measurements(again.store)
    assert len(networks) == 9 == networks["benchmark"].nunique()
    per_family = networks.groupby("family").size().to_dict()
    assert per_family["eltwise"] == PILOT and per_family["linear"] == 9 - PILOT
    assert "fit with the prior: annette-torch fit --data" in str(again)


def test_calibrate_minutes_with_a_prior_prints_the_plan_and_the_fit_command(tmp_path, capsys):
    pool = tmp_path / "pool.csv"
    pool.write_text(HEADER + "linear,2,,,,16..32,16..32,,,,,\n")
    code = main(["calibrate", "--backend", "torch-cpu", "--minutes", "5", "--prior", "torch-cpu", "--sweep", str(pool),
                 "--out", str(tmp_path / "out"), "--rounds", "1", "--warmup", "1", "--repeats", "2",
                 "--references", "0"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "every benchmark of the pool is measured" in printed
    assert "--prior torch-cpu" in printed.splitlines()[-1]


def test_a_budgeted_campaign_needs_minutes(tmp_path, capsys):
    assert main(["calibrate", "--backend", "torch-cpu", "--prior", "torch-cpu", "--out", str(tmp_path)]) == 2
    assert "needs --minutes" in capsys.readouterr().err


def test_the_users_networks_weigh_the_families_by_their_kernel_kinds():
    from annette_torch.calibration.budget import RELEVANCE_FLOOR, PriorScorer, family_relevance

    prior = load_profile("torch-cpu")
    families = {"conv2d": FamilyState("conv2d", [BenchmarkSpec("conv2d", {"c": 32, "f": 32, "h": 14, "k": 3})]),
                "linear": FamilyState("linear", [BenchmarkSpec("linear", {"c": 64, "f": 64})])}
    relevance = family_relevance(prior, ["torchvision:squeezenet1_0"], families, PriorScorer(prior))
    assert relevance["linear"] == RELEVANCE_FLOOR           # squeezenet has no fully connected layer
    assert relevance["conv2d"] > 0.5


def test_the_prior_scores_benchmarks_that_compute_foldable_work_without_warning_about_it():
    from annette_torch.calibration.budget import PriorScorer

    spec = BenchmarkSpec("eltwise", {"c": 36, "h": 28, "op": "div"})   # its divisor is a constant the compiler folds
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PriorScorer(load_profile("openvino-cpu-2t")).estimate_ms(spec) > 0


def test_a_fixed_sweep_with_minutes_is_still_the_fixed_campaign(tmp_path, capsys):
    assert main(["calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--minutes", "0", "--out",
                 str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "with sweep 'smoke'" in printed and "time limit reached" in printed


def test_a_budgeted_campaign_measures_reference_networks_first_and_once(tmp_path):
    """Before its benchmarks a campaign measures whole reference networks into the store;
    a run that stops early keeps them, and a rerun does not measure them again."""
    from annette_torch.calibration.store import read_references
    from annette_torch.transfer.references import reference_pool

    cells = [net for net in reference_pool() if net.set == "nb201"][:4]
    pool = tmp_path / "pool.csv"
    pool.write_text(HEADER + "linear,4,,,,16..32,16..32,,,,,\n")
    options = dict(prior="torch-cpu", pool=pool, warmup=1, repeats=2, rounds=1, progress=False,
                   references=3, reference_pool=cells, reference_protocol=Protocol(rounds=1, warmup=1, repeats=2))
    first = run_budgeted_campaign("torch-cpu", tmp_path / "out", 0.001, **options)
    assert first.stopped_early and first.measured == 0 and first.references == 3
    table = read_references(first.store)
    assert len(table) == 3 and set(table["benchmark"]) <= {net.name for net in cells}
    assert (table["time_ms"] > 0).all() and set(table["set"]) == {"nb201"}
    written = (Path(first.store) / "references.csv").read_text()
    again = run_budgeted_campaign("torch-cpu", tmp_path / "out", 5, **options)
    assert again.references == 3 and again.measured == 4 and again.store == first.store
    assert (Path(again.store) / "references.csv").read_text() == written
    assert "anchors the profile on the store's 3 reference networks" in str(again)


def test_a_campaign_times_its_reference_networks_as_adapt_and_the_ground_truth_do(tmp_path, monkeypatch):
    """Unless told otherwise, the reference networks are timed with the whole-network
    protocol (:func:`~annette_torch.measure.networks.network_protocol`), not the campaign's."""
    import annette_torch.calibration.budget as budget
    from annette_torch.measure.networks import NETWORK_PROTOCOL

    used = []
    monkeypatch.setattr(budget, "measure_references_into",
                        lambda store, backend, k, protocol, pool: used.append(protocol) or 0)
    pool = tmp_path / "pool.csv"
    pool.write_text(HEADER + "linear,4,,,,16..32,16..32,,,,,\n")
    run_budgeted_campaign("torch-cpu", tmp_path / "out", 0.001, prior="torch-cpu", pool=pool, rounds=1,
                          progress=False, references=2)
    assert used == [NETWORK_PROTOCOL]


def test_a_negative_reference_count_is_refused_naming_the_option(tmp_path):
    with pytest.raises(ValueError, match="--references must be 0 or more"):
        run_budgeted_campaign("torch-cpu", tmp_path / "out", 1, prior="torch-cpu", references=-1, progress=False)
    assert not (tmp_path / "out").exists()
