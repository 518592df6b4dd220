"""Which statistic reproduces best across sessions? Evidence from the accuracy benchmark's
results files (a benchmark: prints a table, measures nothing, takes a second).

    python benchmarks/session_agreement.py [--results benchmarks/results]

Each ``<fingerprint folder>/measured.csv`` keeps every row ever appended: a folder
measured several times (``--remeasure``) holds several sessions of the same networks,
taken minutes to hours apart on the same machine. A session is a run of rows in which
no network repeats. For each pair of consecutive sessions and each set (zoo, nb201) the
table gives the mean relative difference |b - a| / a over the networks both measured,
for the median and for the 10th percentile of the runs, both as recorded and after
removing the pair's median ratio (what a perfect drift correction by one factor per
session could remove at most).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS_ROOT = Path(__file__).parent / "results"
STATISTICS = {"median": "median_ms", "p10": "p10_ms"}


def short_name(folder: str) -> str:
    """A results folder's name shortened to its backend configuration and the machine's
    hash (its last part), which tells folders of two CPUs apart."""
    parts = folder.split("-")
    return "-".join(parts[:4]) + "-" + parts[-1] if len(parts) > 5 else folder


def sessions(table: pd.DataFrame) -> pd.Series:
    """A session number per row: a new session starts where a network repeats."""
    number, seen, numbers = 0, set(), []
    for key in zip(table["set"], table["network"]):
        if key in seen:
            number, seen = number + 1, set()
        seen.add(key)
        numbers.append(number)
    return pd.Series(numbers, index=table.index)


def agreement(path: Path, min_networks: int = 5) -> list[dict]:
    """One row per (consecutive session pair, set) of one results file."""
    table = pd.read_csv(path)
    table["session"] = sessions(table)
    rows = []
    numbers = sorted(table["session"].unique())
    for a, b in zip(numbers[:-1], numbers[1:]):
        first = table[table["session"] == a].set_index(["set", "network"])
        second = table[table["session"] == b].set_index(["set", "network"])
        for name in sorted(set(first.index.get_level_values(0)) & set(second.index.get_level_values(0))):
            common = [k for k in first.index.intersection(second.index) if k[0] == name]
            if len(common) < min_networks:
                continue
            row = {"results": short_name(path.parent.name), "sessions": f"{a}->{b}", "set": name, "networks": len(common)}
            for label, column in STATISTICS.items():
                ratio = np.log(second.loc[common, column].to_numpy(float) / first.loc[common, column].to_numpy(float))
                row[f"{label} %"] = float(np.mean(np.abs(np.expm1(ratio))) * 100)
                row[f"{label} one factor %"] = float(np.mean(np.abs(np.expm1(ratio - np.median(ratio)))) * 100)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_ROOT), help="root of the results folders")
    args = parser.parse_args()
    rows = [row for path in sorted(Path(args.results).glob("*/measured.csv")) for row in agreement(path)]
    if not rows:
        raise SystemExit(f"no results folder under {args.results} holds two sessions of the same networks")
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", None, "display.float_format", "{:.2f}".format):
        print(table.to_string(index=False))
    better = int((table["p10 %"] < table["median %"]).sum())
    print(f"\nmean |difference| between consecutive sessions: median {table['median %'].mean():.2f} %, "
          f"p10 {table['p10 %'].mean():.2f} %; p10 agrees better in {better} of {len(table)} cases")
    print(f"after removing one factor per session pair: median {table['median one factor %'].mean():.2f} %, "
          f"p10 {table['p10 one factor %'].mean():.2f} %")


if __name__ == "__main__":
    main()
