"""Fitting a kind's roofline: peak operations per second and memory bandwidth.

The roofline predicts ``max(ops / peak, bytes / bandwidth)``. Both parameters are
fitted to the kind's measured kernels by minimising a robust (soft-L1) loss on the log
of measured over predicted time, weighted per kernel, from the best point of a coarse
grid around the achieved rates, with the exact Jacobian (each kernel's residual moves
with the bound that binds it: finite differences straddle the kink between the two
bounds, and on it their value is decided by the measurements' last digits), and the
solver's answer is then made exact (:func:`_fit_both`). So the result is a smooth
function of the measurements: last-digit noise, such as another BLAS code path
leaves, moves it by about as much, never to another point.

When every kernel of the kind does the same operations per byte (elementwise kinds:
``add``, ``relu``, ... count both as fixed multiples of the elements), compute and
memory time are proportional and the data fix one rate, not two: a two-parameter fit
would start on the ridge, where the loss is flat along either parameter. Such a kind
gets a one-parameter fit of bytes per second, and its peak is put at the ridge
(``ops / peak == bytes / bandwidth`` for every kernel), so an unrolling loss
(:mod:`.unroll`) shows as a slower compute term; a kind without operations (``concat``)
gets a peak that never binds. The *envelope* (the 98th percentile of the achieved
ops/s and bytes/s: what the hardware reached at best) is reported too: it is the
classic roofline's ceiling, but as a predictor it underestimates most kernels, which
is why the profile's roofline is the fitted one.

A refined roofline's unrolling efficiency (:mod:`.unroll`) is fixed while fitting, so
the same function refits peak and bandwidth once ``par``/``alpha`` are known.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq, least_squares

from ..layer_models import RefinedRoofline, Roofline
from ..layer_models.base import COLUMN

_LOSS_SCALE = 0.1   # residuals (log ratio) beyond ~10% count linearly, not squared
_SAME_INTENSITY = 1e-9   # log ops per byte varying less than this: one rate (see module doc)
_IDLE_PEAK_OPS_S = 1e13  # the peak of a kind whose kernels compute nothing (it never binds)


def achieved_rates(features: np.ndarray, seconds: np.ndarray, bit_act: int = 32,
                   bit_weights: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(ops per second, bytes per second) each kernel reached."""
    moved = Roofline(1.0, 1.0, bit_act, bit_weights).bytes_moved(features)
    return features[:, COLUMN["ops"]] / seconds, moved / seconds


def envelope(features: np.ndarray, seconds: np.ndarray, quantile: float = 0.98) -> tuple[float, float]:
    """(peak ops/s, bandwidth bytes/s) as the ``quantile`` of the achieved rates."""
    ops_s, bytes_s = achieved_rates(features, seconds)
    return float(np.quantile(ops_s, quantile)), float(np.quantile(bytes_s, quantile))


def fit_roofline(features: np.ndarray, seconds: np.ndarray, weights: np.ndarray | None = None,
                 unroll: dict | None = None, bit_act: int = 32, bit_weights: int = 32) -> RefinedRoofline:
    """The roofline (a refined one with the given, fixed ``unroll``) that best predicts
    ``seconds`` from ``features`` in the robust log sense described in the module doc."""
    weights = np.ones(len(seconds)) if weights is None else weights
    sqrt_w = np.sqrt(weights / weights.mean())
    shape = RefinedRoofline(1.0, 1.0, bit_act, bit_weights, dict(unroll or {}))
    work = features[:, COLUMN["ops"]] / shape.efficiency(features)     # compute time at peak 1
    has_ops = work > 0
    log_work = np.where(has_ops, np.log(np.where(has_ops, work, 1.0)), -np.inf)
    log_moved = np.log(shape.bytes_moved(features))                    # memory time at bandwidth 1
    log_t = np.log(seconds)
    intensity = log_work[has_ops] - log_moved[has_ops]                 # log ops per byte
    if not has_ops.any() or np.ptp(intensity) <= _SAME_INTENSITY:
        log_bandwidth = _fit_rate(log_moved - log_t, sqrt_w)
        log_peak = log_bandwidth + float(np.median(intensity)) if has_ops.any() else np.log(_IDLE_PEAK_OPS_S)
    else:
        log_peak, log_bandwidth = _fit_both(log_work, log_moved, log_t, sqrt_w)
    return RefinedRoofline(float(np.exp(log_peak)), float(np.exp(log_bandwidth)), bit_act, bit_weights,
                           dict(unroll or {}))


def _fit_rate(log_rate: np.ndarray, sqrt_w: np.ndarray) -> float:
    """The log rate ``r`` minimising the robust loss of ``log_rate - r``: the root of the
    loss's derivative, which only grows with ``r`` (one minimum, found to the last digits)."""
    def slope(r: float) -> float:
        z = sqrt_w * (r - log_rate) / _LOSS_SCALE
        return float(np.sum(sqrt_w * z / np.sqrt(1 + z * z)))

    low, high = float(log_rate.min()), float(log_rate.max())
    return low if low == high else brentq(slope, low, high, xtol=1e-15, rtol=4 * np.finfo(float).eps)


def _fit_both(log_work: np.ndarray, log_moved: np.ndarray, log_t: np.ndarray,
              sqrt_w: np.ndarray) -> tuple[float, float]:
    """(log peak, log bandwidth) minimising the robust loss: descent from the best grid
    point, then each parameter refitted exactly (:func:`_fit_rate`) to the kernels its
    bound binds, kept when they stay bound the same way; when they do not, the minimum
    is on one kernel's ridge, and the refit is along it. The solver alone stops where its
    steps get small, up to 1e-8 away from the minimum, wherever the measurements' last
    digits lead it; the refit is the minimum itself."""
    def terms(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return log_work - params[0], log_moved - params[1]

    def residuals(params: np.ndarray) -> np.ndarray:
        return sqrt_w * (np.maximum(*terms(params)) - log_t)

    def compute_binds(params: np.ndarray) -> np.ndarray:
        compute, memory = terms(params)
        return compute > memory

    def jacobian(params: np.ndarray) -> np.ndarray:
        binds = compute_binds(params)
        return -sqrt_w[:, None] * np.stack([binds, ~binds], axis=1)

    def loss(params: np.ndarray) -> float:
        r = residuals(params) / _LOSS_SCALE
        return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))

    has_ops = np.isfinite(log_work)
    rate_p, rate_b = log_work - log_t, log_moved - log_t
    grid_p = np.linspace(np.quantile(rate_p[has_ops], 0.02), np.quantile(rate_p[has_ops], 1.0) + 1.0, 24)
    grid_b = np.linspace(np.quantile(rate_b, 0.02), np.quantile(rate_b, 1.0) + 1.0, 24)
    start = np.array(min(((p, b) for p in grid_p for b in grid_b), key=lambda pb: loss(np.array(pb))))
    result = least_squares(residuals, start, jac=jacobian, loss="soft_l1", f_scale=_LOSS_SCALE)
    found = result.x if loss(result.x) <= loss(start) else start
    binds = compute_binds(found)
    exact = np.array([_fit_rate(rate_p[binds], sqrt_w[binds]) if binds.any() else found[0],
                      _fit_rate(rate_b[~binds], sqrt_w[~binds]) if (~binds).any() else found[1]])
    if np.array_equal(compute_binds(exact), binds):     # the refit's loss is the true one there: no higher
        return float(exact[0]), float(exact[1])
    # no way of binding is self-consistent: the minimum is on the ridge of the nearest kernel
    compute, memory = terms(found)
    nearest = int(np.argmin(np.abs(compute - memory)))
    ridge = log_work[nearest] - log_moved[nearest]                 # log peak - log bandwidth there
    log_bandwidth = _fit_rate(np.maximum(log_work - ridge, log_moved) - log_t, sqrt_w)
    on_ridge = np.array([log_bandwidth + ridge, log_bandwidth])
    found = on_ridge if loss(on_ridge) <= loss(found) else found
    return float(found[0]), float(found[1])


def as_plain(model: RefinedRoofline) -> Roofline:
    """The same peak and bandwidth as a plain roofline (no unrolling)."""
    return Roofline(model.peak_ops_s, model.bandwidth_bytes_s, model.bit_act, model.bit_weights)
