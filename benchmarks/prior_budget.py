"""Calibrating from a prior, replayed on a committed store (a benchmark: prints a table,
asserts nothing, measures nothing).

    python benchmarks/prior_budget.py [--prior openvino-cpu-2t] [--target openvino-cpu] [--minutes 2,5,10]

A measuring budget of M minutes is spent on the target's committed store
(``calibration/data``) as a campaign on that device would have spent it, each benchmark
costing its recorded measuring time (``wall_s``):

* ``sweep``: the fixed sweep cut short, in the order a campaign measures it (by id hash);
* ``plan``: the budgeted campaign's plan (:class:`annette_torch.calibration.budget.Planner`:
  pilot, allocation by the prior's errors, adaptive picks), the prior scored on each
  benchmark's recorded end-to-end time as the campaign scores it;

and each set of benchmarks is fitted from scratch (``fit``) and as corrections of the
prior (``fit --prior``). Every profile is scored on the target's networks measured by
``benchmarks/accuracy.py`` (22 torchvision classifiers, 49 NAS-Bench-201 cells; MAPE %
and Spearman per set), beside the prior unchanged and the target's own shipped profile
(a full campaign). The prior and target are configurations of this one machine (e.g.
2 threads as the prior of 1 thread), not two CPUs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import torch

from transfer import DEVICES, measured_times, scores, traced
from annette_torch import Estimator, load_profile
from annette_torch.backends import get_backend
from annette_torch.calibration import MeasurementStore, load_measurements
from annette_torch.calibration.budget import Planner, PriorScorer, family_states
from annette_torch.calibration.campaign import CHUNK
from annette_torch.calibration.store import fingerprint_folder
from annette_torch.calibration.sweep import BenchmarkSpec
from annette_torch.fit import fit_profile
from annette_torch.fit.prior import fit_prior_corrected

ROOT = Path(__file__).resolve().parents[1]


def sweep_ids(networks: pd.DataFrame, budget_s: float) -> list[str]:
    """The benchmarks a fixed campaign measures first (hash order) within ``budget_s``."""
    ordered = networks.assign(order=networks["benchmark"].str.rsplit("-", n=1).str[1]).sort_values("order")
    spent = ordered["wall_s"].fillna(0.0).cumsum()
    return list(ordered["benchmark"][spent <= budget_s])


def plan_ids(networks: pd.DataFrame, budget_s: float, scorer: PriorScorer) -> list[str]:
    """The benchmarks the budgeted plan measures within ``budget_s``, replayed on the store."""
    pool = [BenchmarkSpec.from_json(s) for s in networks["spec"]]
    by_id = networks.set_index("benchmark")
    chosen: list[str] = []
    spent = 0.0
    while True:
        planner = Planner(family_states(pool, by_id.loc[chosen].reset_index(), scorer))
        picks = planner.next(CHUNK)
        if not picks:
            return chosen
        for spec in picks:
            cost = float(by_id.at[spec.id, "wall_s"])
            if spent + cost > budget_s:
                return chosen
            chosen.append(spec.id)
            spent += cost


def subset_store(fingerprint: dict, networks: pd.DataFrame, layers: pd.DataFrame, ids: list[str], root: Path) -> Path:
    """A store under ``root`` holding only the benchmarks ``ids`` of the given tables."""
    keep = set(ids)
    with MeasurementStore.open(root, fingerprint) as store:
        by_benchmark = {b: rows for b, rows in layers[layers["benchmark"].isin(keep)].groupby("benchmark")}
        for row in networks[networks["benchmark"].isin(keep)].to_dict("records"):
            rows = by_benchmark.get(row["benchmark"])
            store.append(row, [] if rows is None else rows.to_dict("records"))
        return store.folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prior", default="openvino-cpu-2t", help="the prior profile (built-in name or .json)")
    parser.add_argument("--target", default="openvino-cpu", choices=list(DEVICES),
                        help="the device whose committed store is replayed and whose networks score")
    parser.add_argument("--minutes", default="2,5,10", help="measuring budgets (comma-separated)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    backend, threads, precision = DEVICES[args.target]
    fingerprint = get_backend(backend, threads=threads, precision=precision).fingerprint()
    store = ROOT / "calibration" / "data" / fingerprint_folder(fingerprint)
    measured = measured_times(args.target)
    if measured is None:
        raise SystemExit(f"{args.target} was not measured here; run benchmarks/accuracy.py for it first")
    keys = sorted(measured)
    graphs = traced(keys)
    fp, networks, layers = load_measurements(store)
    networks = networks.drop_duplicates("benchmark", keep="last")
    prior = load_profile(args.prior)
    scorer = PriorScorer(prior)

    def score(profile) -> dict:
        estimator = Estimator(profile)
        return scores(keys, {key: estimator(graphs[key]) for key in keys}, measured)

    rows = [("prior unchanged", 0, 0.0, score(prior))]
    own = args.target if args.target in DEVICES and (ROOT / "annette_torch/profiles/builtin" / f"{args.target}.json").exists() else None
    if own:
        rows.append((f"{own} (full campaign)", len(networks), float(networks["wall_s"].sum()) / 60, score(own)))
    with tempfile.TemporaryDirectory() as folder:
        for minutes in (float(m) for m in args.minutes.split(",")):
            for how, ids in (("sweep", sweep_ids(networks, 60 * minutes)), ("plan", plan_ids(networks, 60 * minutes, scorer))):
                root = Path(folder) / f"{how}-{minutes:g}"
                subset = subset_store(fp, networks, layers, ids, root)
                spent = float(networks.set_index("benchmark").loc[ids, "wall_s"].sum()) / 60
                rows.append((f"{how}, fit", len(ids), spent, score(fit_profile(subset))))
                rows.append((f"{how}, fit --prior", len(ids), spent, score(fit_prior_corrected(subset, prior))))
                print(f"{minutes:g} min {how}: {len(ids)} benchmarks", file=sys.stderr)
    print(f"prior {args.prior}, target {args.target} (store {store.name}); MAPE % / Spearman on the measured networks")
    print(f"{'strategy':<30}{'benchmarks':>11}{'minutes':>9}" + "".join(f"{s + ' MAPE':>12}{'rho':>7}"
                                                                     for s in ("all", "zoo", "nb201")))
    for name, count, minutes, result in rows:
        print(f"{name:<30}{count:>11}{minutes:>9.1f}" + "".join(f"{result[s]['mape']:>12.1f}{result[s]['spearman']:>7.3f}"
                                                             for s in ("all", "zoo", "nb201")))


if __name__ == "__main__":
    main()
