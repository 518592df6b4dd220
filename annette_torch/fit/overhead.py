"""Per-inference overhead and the gap between summed kernel times and end-to-end time.

Per benchmark the store has the end-to-end median (profiler off), the sum of all its
kernel rows (profiler on, runtime-inserted kernels such as layout reorders included) and
their number. The three are related by

    end_to_end = overhead_ms + scale * sum of kernel times + kernel_ms * kernels

fitted robustly (soft-L1 on relative errors) with ``overhead_ms >= 0``. ``overhead_ms``
is the profile's per-inference overhead; ``scale`` (what profiling adds or hides in
proportion) multiplies the kernel times the layer models are fitted to; ``kernel_ms`` is
what each executed kernel adds end to end beyond its profiled time: dispatch between
kernels when positive, the profiler's own cost per kernel when negative (ONNX Runtime's
profiler adds about 2 us to every kernel). Networks of many small kernels, such as
NAS-Bench-201 cells, depend on it. ``kernel_ms`` is bounded to at most zero: with 1 to 10
kernels per benchmark, a positive per-kernel cost cannot be told apart from the
per-inference overhead (unbounded, OpenVINO's came out at +1.8 us and made the estimates
of NAS-Bench-201 networks worse), while the profiler's inflation is clear in the data.
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
    kernel_ms: float
    benchmarks: int
    mape_sum: float     # MAPE (%) of the plain sum of kernel times against end to end
    mape_fit: float     # MAPE (%) of overhead + scale * sum

    def to_dict(self) -> dict:
        return {"overhead_ms": self.overhead_ms, "scale": self.scale, "kernel_ms": self.kernel_ms,
                "benchmarks": self.benchmarks,
                "mape_sum": self.mape_sum, "mape_fit": self.mape_fit}


def fit_gap(end_to_end_ms: np.ndarray, kernels_ms: np.ndarray, kernels: np.ndarray) -> Gap:
    """Fit ``end_to_end_ms ~ overhead_ms + scale * kernels_ms + kernel_ms * kernels`` over
    benchmarks (see the module doc); rows with a non-positive time on either side are
    left out."""
    keep = (end_to_end_ms > 0) & (kernels_ms > 0)
    y, x, k = end_to_end_ms[keep], kernels_ms[keep], kernels[keep].astype(float)
    if len(y) < 3:
        return Gap(0.0, 1.0, 0.0, int(len(y)), float("nan"), float("nan"))

    def relative(params: np.ndarray) -> np.ndarray:
        return (params[0] + params[1] * x + params[2] * k - y) / y

    design = np.stack([np.ones_like(y), x, k], axis=1) / y[:, None]     # the exact Jacobian
    start = np.array([max(float(np.median(y - x)), 0.0), 1.0, 0.0])
    result = least_squares(relative, start, jac=lambda params: design, loss="soft_l1", f_scale=0.05,
                           bounds=([0.0, 1e-3, -1.0], [np.inf, np.inf, 0.0]))
    overhead, scale, per_kernel = (float(v) for v in result.x)
    return Gap(overhead, scale, per_kernel, int(len(y)), float(100 * np.mean(np.abs(x - y) / y)),
               float(100 * np.mean(np.abs(relative(result.x)))))
