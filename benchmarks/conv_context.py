"""Do a profile's convs fit in context? Measured over estimated time of a store's conv
kernels, split by filter size, whether the kernel reads the network input (the plain layout
of an image) or another kernel's output (the layout the runtime chose), and whether a batch
norm is fused into it (a benchmark: prints a table, measures nothing). A store of the
``conv-context`` sweep also holds pairs, the same conv reading the input and a conv's
output; a second table compares their kernel times.

    python benchmarks/conv_context.py --store calibration/data/openvino-cpu-1t-f32-... \\
        --profile openvino-cpu [--max-channels 64 --max-size 32]

Kernels are the store's measured and agreeing conv kernels with 8 to ``--max-channels``
input and output channels and a map of at most ``--max-size`` (NAS-Bench-201's convs). The
measured times are the profiler's kernel times as stored, before the fit's gap scaling, so
only the ratios between rows compare, not their level.
"""
from __future__ import annotations

import argparse
import warnings

import pandas as pd

from annette_torch import Estimator
from annette_torch.fit.table import kernel_table, load_store, output_reorder_pattern


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--profile", default="openvino-cpu")
    parser.add_argument("--max-channels", type=int, default=64)
    parser.add_argument("--max-size", type=int, default=32)
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator = Estimator(args.profile)
        data = load_store(args.store)
    table = kernel_table(data, estimator.profile.mapping, estimator.profile.optimizes_graph,
                         merge_elementwise=estimator.profile.merges_elementwise,
                         output_reorders=output_reorder_pattern(data))
    convs = table[table["measured"] & table["agrees"] & (table["kind"] == "conv") & (table["c"] >= 8)
                  & (table["c"] <= args.max_channels) & (table["f"] <= args.max_channels)
                  & (table["h"] <= args.max_size)].copy()
    estimated = {}                           # (benchmark, conv kernel) -> estimated ms
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # benchmarks with layers the compiler removes say so
        for benchmark in convs["benchmark"].unique():
            times = estimator.kernel_times(data.graphs[benchmark])
            estimated.update(((benchmark, name), ms) for name, kind, ms in
                             zip(times.table.names, times.table.kinds, times.time_ms) if kind == "conv")
    convs["ratio"] = convs["time_ms"] / [estimated[key] for key in zip(convs["benchmark"], convs["kernel"])]
    convs["batch_norm"] = convs["fused_kinds"].fillna("").str.contains("batch_norm")
    print(f"{args.profile} on {args.store}: conv kernels of 8-{args.max_channels} channels, maps up to "
          f"{args.max_size}; measured / estimated")
    summary = convs.groupby(["kh", "reads_input", "batch_norm"])["ratio"].agg(["count", "median"])
    print(summary[summary["count"] >= 5].round(2).to_string())
    pairs = paired(table)
    if len(pairs):
        print("\nthe same conv reading a conv's output (conv_in_context) and the network input (conv_chain), "
              "profiler times of the conv kernel (its input reorder not counted), ms")
        print(pairs.round(4).to_string(index=False))


def paired(table: pd.DataFrame) -> pd.DataFrame:
    """One row per conv measured both as ``conv_in_context`` and as ``conv_chain`` with the
    same parameters: the two measured times of the ``conv`` kernel and their ratio."""
    convs = table[(table["kernel"] == "conv") & table["measured"] & table["family"].isin(PAIRED)]
    key = ["kh", "c", "f", "h", "w", "stride", "groups"]
    both = convs.pivot_table(index=key, columns="family", values="time_ms", aggfunc="first").dropna()
    both = both.reset_index().rename(columns=PAIRED)
    return both.assign(ratio=both["in_context"] / both["reads_input"])[key[:4] + ["reads_input", "in_context", "ratio"]]


#: the families of a paired conv, by what the conv reads (sweep ``conv-context``)
PAIRED = {"conv_chain": "reads_input", "conv_in_context": "in_context"}


if __name__ == "__main__":
    main()
