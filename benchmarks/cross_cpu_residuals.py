"""One profile's per-network errors on two machines' ground truths, each with one scale taken out.

    python benchmarks/cross_cpu_residuals.py \\
        benchmarks/results/openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653 \\
        benchmarks/results/cross-cpu-amd-zen3/2026-12-05/ground-truth-5 [--profile openvino-cpu]

After one scale per ground truth (the geometric mean of measured over estimated), what is
left of a profile's error is either the other CPU (then the two machines' errors differ
network by network) or the estimator's own (then they agree). Prints per set the mean
|error| on each machine with its scale taken out, the correlation of the two machines' log
errors, how far the machines' measured times differ from one ratio, and the networks worst
on both. Measures nothing; traces the networks both ground truths hold.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
import torch

from accuracy import GROUND_TRUTH, SUBSETS, ground_truth, networks
from annette_torch import Estimator, trace


def estimates(profile: str, sets: list[str], keys: set[tuple[str, str]]) -> pd.DataFrame:
    """(set, network, estimate ms) of ``profile`` (mixed + mapping) for the networks ``keys``."""
    estimator, rows = Estimator(profile), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for net in networks(sets):
            if (net.set, net.name) in keys:
                rows.append((net.set, net.name, estimator(trace(net.build(), input_shape=net.input_shape,
                                                                name=net.name))))
    return pd.DataFrame(rows, columns=["set", "network", "estimate"])


def scaled_errors(frame: pd.DataFrame, column: str) -> pd.Series:
    """Log errors of the estimates against ``column`` with their mean (one scale) taken out."""
    errors = np.log(frame["estimate"] / frame[column])
    return errors - errors.mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", help="a ground-truth folder (measured.csv) of one machine")
    parser.add_argument("second", help="one of another machine")
    parser.add_argument("--profile", default="openvino-cpu")
    parser.add_argument("--sets", default="zoo,timm,dense,mbv2,nb201")
    parser.add_argument("--worst", type=int, default=12, help="networks listed (worst mean error on both)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    truths = []
    for label, folder in (("a", args.first), ("b", args.second)):
        measured, statistic = ground_truth(folder)
        truths.append(measured[["set", "network", GROUND_TRUTH[statistic]]].rename(
            columns={GROUND_TRUTH[statistic]: label}))
    both = truths[0].merge(truths[1], on=["set", "network"])
    frame = both.merge(estimates(args.profile, args.sets.split(","), set(zip(both["set"], both["network"]))),
                       on=["set", "network"])
    frame["err_a"], frame["err_b"] = scaled_errors(frame, "a"), scaled_errors(frame, "b")
    ratio = np.log(frame["b"] / frame["a"])
    frame["ratio"] = ratio - ratio.mean()
    print(f"profile {args.profile}; a = {args.first}\nb = {args.second}\n"
          f"one scale per ground truth taken out (a x{np.exp(-np.log(frame['estimate'] / frame['a']).mean()):.3f}, "
          f"b x{np.exp(-np.log(frame['estimate'] / frame['b']).mean()):.3f}); mean |error| %, "
          f"correlation of the two machines' log errors, mean |b/a - one ratio| %")
    print(f"{'set':<18}{'networks':>9}{'a %':>8}{'b %':>8}{'corr':>7}{'b/a %':>8}")
    subsets = [(name, frame[(frame["set"] == of) & frame["network"].isin(members)])
               for name, (of, members) in SUBSETS.items()]
    for name, group in [*frame.groupby("set", sort=False), *subsets, ("all", frame)]:
        if len(group) < 2:
            continue
        pct = [100 * np.mean(np.abs(np.expm1(group[c]))) for c in ("err_a", "err_b", "ratio")]
        print(f"{name:<18}{len(group):>9}{pct[0]:>8.1f}{pct[1]:>8.1f}"
              f"{np.corrcoef(group['err_a'], group['err_b'])[0, 1]:>7.2f}{pct[2]:>8.1f}")
    worst = frame.assign(mean=(frame["err_a"].abs() + frame["err_b"].abs()) / 2).nlargest(args.worst, "mean")
    print(f"\nworst on both (error % with each machine's scale taken out)\n{'set':<7}{'network':<62}{'a %':>8}{'b %':>8}")
    for row in worst.itertuples():
        print(f"{row.set:<7}{row.network[:60]:<62}{100 * np.expm1(row.err_a):>+8.1f}{100 * np.expm1(row.err_b):>+8.1f}")


if __name__ == "__main__":
    main()
