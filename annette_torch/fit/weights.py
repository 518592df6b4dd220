"""Fitting when a real network's weights arrive from memory (see
:mod:`annette_torch.layer_models.weights_from_memory` for why it matters): the rate they
arrive at, and how many bytes of weights a network may hold and still find them cached.

Fully connected kernels whose weights are larger than any last-level cache of the
CPUs this targets (at least ``min_bytes``, 64 MiB) read their weights from memory even
in a benchmark loop. Their weight bytes over their measured time (scaled to its
end-to-end share by the gap, :class:`.overhead.Gap`) is the rate; the profile keeps the
median over those kernels, or none when the store has fewer than ``min_rows`` of them
(the sweeps' ``linear`` rows with thousands of inputs and outputs provide them).

Below some size a network's weights stay cached from one inference to the next. The
batch-1 fully connected kernels of the store (each reads its weights once, two
operations per weight) tell where: sorted by the weight bytes of the benchmark they ran
in (one layer, or an MLP's two), their rates split into a fast (cached) and a slow (from
memory) group. :func:`fit_weight_cache` finds that split and returns the geometric middle
between the largest benchmark of the fast group and the smallest of the slow one.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .overhead import Gap

MIN_WEIGHT_BYTES = 64 * 2 ** 20
#: batch-1 fully connected kernels with fewer weight bytes are left out of the cache fit:
#: their time is mostly per-kernel overhead, not weight traffic
MIN_CACHE_FIT_BYTES = 2 ** 20
#: the cached group must read its weights at least this many times faster than the
#: group from memory, else no cache size is fitted
MIN_CACHED_SPEEDUP = 1.5


def fit_weight_bandwidth(kernels: pd.DataFrame, gap: Gap, bit_weights: int = 32,
                         min_bytes: float = MIN_WEIGHT_BYTES, min_rows: int = 3) -> tuple[float | None, dict]:
    """(bandwidth in bytes/s or None, a summary of the kernels it came from) from the
    kernel table's ``linear`` rows with at least ``min_bytes`` of weights."""
    weight_bytes = kernels["weight_elems"].to_numpy() * bit_weights / 8.0
    use = (kernels["kind"].to_numpy() == "linear") & (weight_bytes >= min_bytes)
    if use.sum() < min_rows:
        return None, {"kernels": int(use.sum()), "min_weight_bytes": min_bytes}
    rates = weight_bytes[use] / (gap.scaled(kernels["time_ms"].to_numpy()[use]) / 1e3)
    p10, median, p90 = np.percentile(rates, [10, 50, 90])
    return float(median), {"kernels": int(use.sum()), "min_weight_bytes": min_bytes,
                           "largest_weight_bytes": float(weight_bytes[use].max()),
                           "bandwidth_p10_p90": [float(p10), float(p90)]}


def benchmark_weight_elems(graphs: dict) -> pd.Series:
    """Per benchmark, the weight elements of its traced graph (``StoreData.graphs``): what
    the estimator counts as the network's weights."""
    return pd.Series({benchmark: graph.total("weight_elems") for benchmark, graph in graphs.items()}, dtype=float)


def fit_weight_cache(kernels: pd.DataFrame, network_weight_elems: pd.Series, bit_weights: int = 32,
                     min_rows: int = 3) -> tuple[float | None, dict]:
    """(weight bytes a network may hold and still read them from cache, or None; a
    summary) from the kernel table's batch-1 ``linear`` rows of at least
    :data:`MIN_CACHE_FIT_BYTES`, ``network_weight_elems`` giving each benchmark's weights.

    The split of their log rates (weight bytes per second) into two groups by the
    benchmark's weight bytes that leaves the least squared deviation from each group's
    median; None unless each group has ``min_rows`` kernels and the faster reads
    :data:`MIN_CACHED_SPEEDUP` times faster."""
    scale = bit_weights / 8.0
    batch_one = ((kernels["kind"] == "linear") & (kernels["n"] == 1) & (kernels["h"] == 1) & (kernels["w"] == 1)
                 & (kernels["weight_elems"] * scale >= MIN_CACHE_FIT_BYTES) & (kernels["time_ms"] > 0))
    rows = kernels[batch_one]
    network = rows["benchmark"].map(network_weight_elems).to_numpy(dtype=float) * scale
    order = np.argsort(network, kind="stable")
    network = network[order]
    log_rate = np.log(rows["weight_elems"].to_numpy(dtype=float)[order] * scale
                      / rows["time_ms"].to_numpy(dtype=float)[order] * 1e3)
    summary: dict = {"kernels": len(rows), "min_kernel_weight_bytes": MIN_CACHE_FIT_BYTES}
    best = None
    for i in range(min_rows, len(network) - min_rows + 1):
        if network[i] == network[i - 1]:
            continue
        fast, slow = log_rate[:i], log_rate[i:]
        deviation = ((fast - np.median(fast)) ** 2).sum() + ((slow - np.median(slow)) ** 2).sum()
        if best is None or deviation < best[0]:
            best = (deviation, i)
    if best is None:
        return None, summary
    i = best[1]
    cached, from_memory = float(np.exp(np.median(log_rate[:i]))), float(np.exp(np.median(log_rate[i:])))
    summary.update({"largest_cached_bytes": float(network[i - 1]), "smallest_from_memory_bytes": float(network[i]),
                    "cached_bytes_s": cached, "from_memory_bytes_s": from_memory})
    if cached < MIN_CACHED_SPEEDUP * from_memory:
        return None, summary
    return float(np.sqrt(network[i - 1] * network[i])), summary
