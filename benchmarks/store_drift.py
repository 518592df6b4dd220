"""How far has this machine moved since a store was measured? The benchmarks of a store
measured again into another (a benchmark: prints a table, measures nothing).

    annette-torch calibrate --backend openvino-cpu --sweep benchmarks/results/rerun-2026-12-05/store-redo.csv \\
        --statistic median --drift none --out W        # 80 benchmarks of the committed store, about 40 s
    python benchmarks/store_drift.py --store calibration/data/openvino-cpu-1t-... --again W/openvino-cpu-1t-...

Per family and per hour the store's rows were measured in: how many benchmarks both hold,
and the geometric mean of the new end-to-end time over the stored one; then per layer
kind, the same over the executed layers both hold (memory-bound kinds and convs need not
move alike).
"""
from __future__ import annotations

import argparse

import numpy as np

from annette_torch.calibration import load_measurements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the store measured first")
    parser.add_argument("--again", required=True, help="a store holding some of its benchmarks measured again")
    args = parser.parse_args()
    (_, first, first_layers), (_, again, again_layers) = (load_measurements(folder) for folder in (args.store, args.again))
    ok = [n[n["status"] == "ok"] for n in (first, again)]
    both = ok[0].merge(ok[1][["benchmark", "time_ms"]], on="benchmark", suffixes=("", "_again"))
    both["ratio"] = both["time_ms_again"] / both["time_ms"]
    both["hour"] = both["finished_utc"].str[:13]
    geo = lambda r: float(np.exp(np.log(r).mean()))  # noqa: E731
    print(f"{len(both)} benchmarks in both; again / first, geometric mean {geo(both['ratio']):.3f}, "
          f"median {both['ratio'].median():.3f}")
    table = both.groupby(["hour", "family"])["ratio"].agg(count="count", again_over_first=geo)
    print(table.round(3).to_string())
    executed = [layers[(layers["status"] == "executed") & (layers["time_ms"] > 0)][["benchmark", "layer", "kind", "time_ms"]]
                for layers in (first_layers, again_layers)]
    pairs = executed[0].merge(executed[1], on=["benchmark", "layer", "kind"], suffixes=("", "_again"))
    pairs = pairs[pairs["benchmark"].isin(both["benchmark"])]
    pairs["ratio"] = pairs["time_ms_again"] / pairs["time_ms"]
    print("\nper layer kind (executed layers in both):")
    kinds = pairs.groupby("kind").agg(layers=("ratio", "count"), again_over_first=("ratio", geo),
                                      first_ms=("time_ms", "sum"), again_ms=("time_ms_again", "sum"))
    print(kinds.sort_values("first_ms", ascending=False).round(3).to_string())


if __name__ == "__main__":
    main()
