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
from typing import Callable

import numpy as np

from annette_torch.measure.protocol import Measured, combine

STATISTICS = ("p10", "min", "median")


def subsets(rounds: int) -> dict[str, list[int]]:
    """Named subsets of ``rounds`` round indices."""
    spread = list(range(0, rounds, max(1, rounds // 3)))[:3]
    return {"first 3": [0, 1, 2], "3 spread": spread, f"first {rounds // 2}": list(range(rounds // 2)),
            f"all {rounds}": list(range(rounds))}


def rebuilt(item: dict, repeats: int, chosen: list[int], across_rounds: str) -> Measured:
    """The :class:`Measured` of a pass's item (``measured_json``) from the chosen rounds'
    runs as timed and their canary factors."""
    per_round = np.asarray(item["raw_runs_ms"]).reshape(-1, repeats)
    return combine([per_round[i] for i in chosen], [item["factors"][i] for i in chosen], "p10", across_rounds)


def agreement(first: dict, second: dict, sets: list[str], value: Callable[[dict], float]) -> str:
    """Per set and over all items of both passes: mean |value(second) / value(first) - 1|, as columns."""
    agree = {k: abs(value(second[k]) / value(first[k]) - 1) for k in first if k in second}
    per_set = [np.mean([v for k, v in agree.items() if k.split("/")[0] == s]) for s in sets]
    return "".join(f"{v * 100:8.2f}%" for v in [*per_set, np.mean(list(agree.values()))])


def main(path: str) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    first, second = data["passes"]
    rounds, repeats = data["protocol"]["rounds"], data["protocol"]["repeats"]
    sets = sorted({k.split("/")[0] for k in first if k in second})
    everything = list(range(rounds))

    print(f"{path}: {sum(k in second for k in first)} networks, {rounds} rounds of {repeats} runs, two passes "
          f"({'compiled once' if data['protocol'].get('compile_once') else 'compiled anew each round'})")
    print(f"{'statistic':<10}{'rounds':<12}" + "".join(f"{s:>9}" for s in sets) + f"{'all':>9}")
    for statistic in STATISTICS:
        for label, chosen in subsets(rounds).items():
            if max(chosen) < rounds:
                print(f"{statistic:<10}{label:<12}" + agreement(first, second, sets, lambda item: rebuilt(
                    item, repeats, chosen, "pool").value(statistic, corrected=False)))

    drifts = (False, True) if data["protocol"].get("drift") == "canary" else (False,)
    print(f"\nall {rounds} rounds: {'statistic':<10}{'across rounds':<15}{'drift':<11}"
          + "".join(f"{s:>9}" for s in sets) + f"{'all':>9}")
    for statistic in STATISTICS:
        for across in ("pool", "median"):
            for corrected in drifts:
                print(f"{'':<15}{statistic:<10}{across:<15}{'corrected' if corrected else 'as timed':<11}"
                      + agreement(first, second, sets, lambda item: rebuilt(
                          item, repeats, everything, across).value(statistic, corrected)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
