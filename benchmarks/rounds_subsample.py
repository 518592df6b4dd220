"""How many rounds does a reproducible ground truth need, and how should they be combined?
Re-reads a run of ``benchmarks/reproducibility.py --json`` measured with many rounds and
scores the protocols its rounds contain (a benchmark: prints tables, asserts nothing).

    python benchmarks/rounds_subsample.py RESULTS.json[.gz]

First table: per statistic of the pooled runs and per subset of the rounds (the first 3,
3 spread over the session, the first half, all), the mean |pass 2 - pass 1| / pass 1 per
set: what the two passes would have agreed to had they been measured with that protocol.
The rounds of one item lie minutes apart (they are interleaved), the runs within one
round milliseconds apart, so this separates the number of rounds from the runs in one.
Second table, all rounds: the statistic of the pooled runs against the median over rounds
of each round's statistic (``--across-rounds``), as timed and, for a run measured with
``--drift canary``, divided by each round's canary factor.
"""
from __future__ import annotations

import gzip
import json
import sys

import numpy as np

STATISTICS = {"p10": lambda runs: np.percentile(runs, 10), "min": np.min, "median": np.median}


def subsets(rounds: int) -> dict[str, list[int]]:
    """Named subsets of ``rounds`` round indices."""
    spread = list(range(0, rounds, max(1, rounds // 3)))[:3]
    return {"first 3": [0, 1, 2], "3 spread": spread, f"first {rounds // 2}": list(range(rounds // 2)),
            f"all {rounds}": list(range(rounds))}


def main(path: str) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    first, second = data["passes"]
    rounds, repeats = data["protocol"]["rounds"], data["protocol"]["repeats"]
    keys = [k for k in first if k in second]
    sets = sorted({k.split("/")[0] for k in keys})

    def runs(measured: dict, chosen: list[int]) -> np.ndarray:
        return np.asarray(measured["raw_runs_ms"]).reshape(-1, repeats)[chosen].ravel()

    print(f"{path}: {len(keys)} networks, {rounds} rounds of {repeats} runs, two passes "
          f"({'compiled once' if data['protocol'].get('compile_once') else 'compiled anew each round'})")
    print(f"{'statistic':<10}{'rounds':<12}" + "".join(f"{s:>9}" for s in sets) + f"{'all':>9}")
    for name, statistic in STATISTICS.items():
        for label, chosen in subsets(rounds).items():
            if max(chosen) >= rounds:
                continue
            agree = {k: abs(statistic(runs(second[k], chosen)) / statistic(runs(first[k], chosen)) - 1) for k in keys}
            per_set = [np.mean([v for k, v in agree.items() if k.split("/")[0] == s]) for s in sets]
            print(f"{name:<10}{label:<12}" + "".join(f"{v * 100:8.2f}%" for v in per_set)
                  + f"{np.mean(list(agree.values())) * 100:8.2f}%")

    def value(measured: dict, statistic, across: str, corrected: bool) -> float:
        per_round = np.asarray(measured["raw_runs_ms"]).reshape(-1, repeats)
        if corrected:
            per_round = per_round / np.asarray(measured["factors"])[:, None]
        return float(np.median([statistic(r) for r in per_round])) if across == "median" else statistic(per_round)

    drifts = (False, True) if data["protocol"].get("drift") == "canary" else (False,)
    print(f"\nall {rounds} rounds: {'statistic':<10}{'across rounds':<15}{'drift':<11}"
          + "".join(f"{s:>9}" for s in sets) + f"{'all':>9}")
    for name, statistic in STATISTICS.items():
        for across in ("pool", "median"):
            for corrected in drifts:
                agree = {k: abs(value(second[k], statistic, across, corrected)
                                / value(first[k], statistic, across, corrected) - 1) for k in keys}
                per_set = [np.mean([v for k, v in agree.items() if k.split("/")[0] == s]) for s in sets]
                print(f"{'':<15}{name:<10}{across:<15}{'corrected' if corrected else 'as timed':<11}"
                      + "".join(f"{v * 100:8.2f}%" for v in per_set) + f"{np.mean(list(agree.values())) * 100:8.2f}%")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
