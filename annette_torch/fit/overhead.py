"""Per-inference overhead and the gap between summed kernel times and end-to-end time.

Per benchmark the store has the end-to-end median (profiler off), its kernel rows
(profiler on, runtime-inserted kernels such as layout reorders included) and their
number. They are related by

    end_to_end = overhead_ms + sum over kernels of factor(t) * t + kernel_ms * kernels
    factor(t)  = scale + slope * d(t),  d(t) = log10(t / 0.1 ms) clipped to +-2 decades

fitted robustly (soft-L1 on relative errors) with ``overhead_ms >= 0``. ``overhead_ms``
is the profile's per-inference overhead; ``factor`` (what profiling adds or hides in
proportion) multiplies the kernel times the layer models are fitted to. It depends on a
kernel's duration: on OpenVINO a 10 us kernel runs end to end in about 0.83 of its
profiled time, a 10 ms one in 0.997 (``slope`` 0.056 per decade); a single scale for
both had left the store's benchmarks of 1-100 ms about 6 % short on average, and
estimates of networks of tiny kernels (NAS-Bench-201 cells) long. ``kernel_ms`` is
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
import pandas as pd
from scipy.optimize import least_squares


#: the kernel time (ms) at which the factor is ``scale``
REFERENCE_KERNEL_MS = 0.1
#: decades of kernel time either side of the reference over which the factor follows it
SLOPE_DECADES = 2.0
#: the smallest factor a kernel time is scaled by
MIN_FACTOR = 0.05
#: a fitted slope (per decade) smaller than this is dropped and the gap fitted without it:
#: under 4 % across the four decades, it would only perturb the layer models' targets
#: (ONNX Runtime's came out at +0.005, and refitting on it moved its NAS-Bench-201 MAPE
#: from 12.2 to 14.8 %)
MIN_SLOPE = 0.01


def decades(time_ms: np.ndarray) -> np.ndarray:
    """``log10(time_ms / REFERENCE_KERNEL_MS)`` clipped to +-``SLOPE_DECADES`` (0 ms: the low end)."""
    ratio = np.maximum(np.asarray(time_ms, dtype=float), 1e-9) / REFERENCE_KERNEL_MS
    return np.clip(np.log10(ratio), -SLOPE_DECADES, SLOPE_DECADES)


@dataclass(frozen=True)
class Gap:
    """The fitted overhead and duration-dependent scale, and how well ``sum`` and the fit
    match end to end."""

    overhead_ms: float
    scale: float
    kernel_ms: float
    benchmarks: int
    mape_sum: float     # MAPE (%) of the plain sum of kernel times against end to end
    mape_fit: float     # MAPE (%) of overhead + scaled kernel times + kernel_ms per kernel
    slope: float = 0.0  # change of the factor per decade of kernel time

    def factor(self, time_ms: np.ndarray) -> np.ndarray:
        """Per profiled kernel time (ms), what it is multiplied by to give its end-to-end share."""
        return np.maximum(self.scale + self.slope * decades(time_ms), MIN_FACTOR)

    def scaled(self, time_ms: np.ndarray) -> np.ndarray:
        """Profiled kernel times (ms) as their end-to-end shares (ms)."""
        time_ms = np.asarray(time_ms, dtype=float)
        return time_ms * self.factor(time_ms)

    def to_dict(self) -> dict:
        return {"overhead_ms": self.overhead_ms, "scale": self.scale, "slope": self.slope,
                "reference_kernel_ms": REFERENCE_KERNEL_MS, "kernel_ms": self.kernel_ms,
                "benchmarks": self.benchmarks, "mape_sum": self.mape_sum, "mape_fit": self.mape_fit}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Gap":
        """The gap a profile's ``fit_metrics["gap"]`` records (scale 1 where it records none;
        slope 0 for profiles fitted before the slope existed)."""
        data = data or {}

        def number(key: str, default: float) -> float:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else default

        scale = number("scale", 1.0)
        return cls(number("overhead_ms", 0.0), scale if scale > 0 else 1.0, number("kernel_ms", 0.0),
                   int(number("benchmarks", 0)), number("mape_sum", float("nan")),
                   number("mape_fit", float("nan")), number("slope", 0.0))


def _per_benchmark(layers: pd.DataFrame, values: np.ndarray) -> pd.Series:
    """``values`` (one per layer row) summed per benchmark of the rows."""
    return pd.Series(values, index=layers.index).groupby(layers["benchmark"]).sum()


def kernel_decade_sums(layers: pd.DataFrame) -> pd.Series:
    """Per benchmark of a store's layer rows, the sum of ``time_ms * decades(time_ms)``
    (the term of the fit that carries the slope)."""
    times = layers["time_ms"].to_numpy(dtype=float)
    return _per_benchmark(layers, times * decades(times))


def scaled_kernel_sums(layers: pd.DataFrame, gap: Gap) -> pd.Series:
    """Per benchmark of a store's layer rows, the sum of their times scaled by ``gap``."""
    return _per_benchmark(layers, gap.scaled(layers["time_ms"].to_numpy(dtype=float)))


def fit_gap(end_to_end_ms: np.ndarray, kernels_ms: np.ndarray, kernels: np.ndarray,
            kernel_decades_ms: np.ndarray | None = None) -> Gap:
    """Fit ``end_to_end_ms ~ overhead_ms + scale * kernels_ms + slope * kernel_decades_ms
    + kernel_ms * kernels`` over benchmarks (see the module doc; ``kernel_decades_ms``:
    :func:`kernel_decade_sums`, None: the slope stays 0, as it does when smaller than
    :data:`MIN_SLOPE`); rows with a non-positive time on either side are left out."""
    keep = (end_to_end_ms > 0) & (kernels_ms > 0)
    y, x, k = end_to_end_ms[keep], kernels_ms[keep], kernels[keep].astype(float)
    if len(y) < 3:
        return Gap(0.0, 1.0, 0.0, int(len(y)), float("nan"), float("nan"))
    with_slope = kernel_decades_ms is not None
    d = np.asarray(kernel_decades_ms, dtype=float)[keep] if with_slope else np.zeros_like(y)

    def relative(params: np.ndarray) -> np.ndarray:
        slope_term = params[3] * d if with_slope else 0.0
        return (params[0] + params[1] * x + params[2] * k + slope_term - y) / y

    columns = [np.ones_like(y), x, k] + [d] * with_slope
    design = np.stack(columns, axis=1) / y[:, None]     # the exact Jacobian

    start = np.array([max(float(np.median(y - x)), 0.0), 1.0, 0.0] + [0.0] * with_slope)
    low, high = [0.0, 1e-3, -1.0] + [-0.5] * with_slope, [np.inf, np.inf, 0.0] + [0.5] * with_slope
    result = least_squares(relative, start, jac=lambda params: design, loss="soft_l1", f_scale=0.05,
                           bounds=(low, high))
    overhead, scale, per_kernel = (float(v) for v in result.x[:3])
    slope = float(result.x[3]) if with_slope else 0.0
    if with_slope and abs(slope) < MIN_SLOPE:
        return fit_gap(end_to_end_ms, kernels_ms, kernels)
    return Gap(overhead, scale, per_kernel, int(len(y)), float(100 * np.mean(np.abs(x - y) / y)),
               float(100 * np.mean(np.abs(relative(result.x)))), slope)
