"""Fitting the rate at which a real network's weights arrive from memory (see
:mod:`annette_torch.layer_models.weights_from_memory` for why it matters).

Fully connected kernels whose weights are larger than any last-level cache of the
CPUs this targets (at least ``min_bytes``, 64 MiB) read their weights from memory even
in a benchmark loop. Their weight bytes over their measured time (scaled to its
end-to-end share by the gap, :class:`.overhead.Gap`) is the rate; the profile keeps the
median over those kernels, or none when the store has fewer than ``min_rows`` of them
(the sweeps' ``linear`` rows with thousands of inputs and outputs provide them).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .overhead import Gap

MIN_WEIGHT_BYTES = 64 * 2 ** 20


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
