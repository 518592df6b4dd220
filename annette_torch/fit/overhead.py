"""Per-inference overhead and the gap between summed kernel times and end-to-end time.

Per benchmark the store has the end-to-end median (profiler off) and the sum of all its
kernel rows (profiler on, runtime-inserted kernels such as layout reorders included).
The two are related by

    end_to_end = overhead_ms + scale * sum of kernel times

fitted robustly (soft-L1 on relative errors) with ``overhead_ms >= 0``. ``overhead_ms``
is the profile's per-inference overhead; ``scale`` (what profiling adds or hides)
multiplies the kernel times the layer models are fitted to, so that the estimate is an
end-to-end time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True)
class Gap:
    """The fitted overhead and scale, and how well ``sum`` and the fit match end to end."""

    overhead_ms: float
    scale: float
    benchmarks: int
    mape_sum: float     # MAPE (%) of the plain sum of kernel times against end to end
    mape_fit: float     # MAPE (%) of overhead + scale * sum

    def to_dict(self) -> dict:
        return {"overhead_ms": self.overhead_ms, "scale": self.scale, "benchmarks": self.benchmarks,
                "mape_sum": self.mape_sum, "mape_fit": self.mape_fit}


def fit_gap(end_to_end_ms: np.ndarray, kernels_ms: np.ndarray) -> Gap:
    """Fit ``end_to_end_ms ~ overhead_ms + scale * kernels_ms`` over benchmarks (see the
    module doc); rows with a non-positive time on either side are left out."""
    keep = (end_to_end_ms > 0) & (kernels_ms > 0)
    y, x = end_to_end_ms[keep], kernels_ms[keep]
    if len(y) < 2:
        return Gap(0.0, 1.0, int(len(y)), float("nan"), float("nan"))

    def relative(params: np.ndarray) -> np.ndarray:
        return (params[0] + params[1] * x - y) / y

    start = np.array([max(float(np.median(y - x)), 0.0), 1.0])
    result = least_squares(relative, start, loss="soft_l1", f_scale=0.05, bounds=([0.0, 1e-3], [np.inf, np.inf]))
    overhead, scale = (float(v) for v in result.x)
    return Gap(overhead, scale, int(len(y)), float(100 * np.mean(np.abs(x - y) / y)),
               float(100 * np.mean(np.abs(relative(result.x)))))
