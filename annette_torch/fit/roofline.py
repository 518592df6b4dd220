"""Fitting a kind's roofline: peak operations per second and memory bandwidth.

The roofline predicts ``max(ops / peak, bytes / bandwidth)``. Both parameters are
fitted to the kind's measured kernels by minimising a robust (soft-L1) loss on the log
of measured over predicted time, weighted per kernel, from the best point of a coarse
grid around the achieved rates. The *envelope* (the 98th percentile of the achieved
ops/s and bytes/s: what the hardware reached at best) is reported too: it is the
classic roofline's ceiling, but as a predictor it underestimates most kernels, which
is why the profile's roofline is the fitted one.

A refined roofline's unrolling efficiency (:mod:`.unroll`) is fixed while fitting, so
the same function refits peak and bandwidth once ``par``/``alpha`` are known.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from ..layer_models import RefinedRoofline, Roofline
from ..layer_models.base import COLUMN

_LOSS_SCALE = 0.1   # residuals (log ratio) beyond ~10% count linearly, not squared


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
    moved = shape.bytes_moved(features)                                # memory time at bandwidth 1
    log_t = np.log(seconds)
    has_ops = work > 0

    def residuals(params: np.ndarray) -> np.ndarray:
        log_peak, log_bandwidth = params
        compute = np.where(has_ops, np.log(np.maximum(work, 1e-300)) - log_peak, -np.inf)
        return sqrt_w * (np.maximum(compute, np.log(moved) - log_bandwidth) - log_t)

    def loss(params: np.ndarray) -> float:
        r = residuals(params) / _LOSS_SCALE
        return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))

    rate_b = np.log(moved) - log_t
    rate_p = np.log(work[has_ops]) - log_t[has_ops] if has_ops.any() else np.array([30.0])
    grid_p = np.linspace(np.quantile(rate_p, 0.02), np.quantile(rate_p, 1.0) + 1.0, 24)
    grid_b = np.linspace(np.quantile(rate_b, 0.02), np.quantile(rate_b, 1.0) + 1.0, 24)
    start = min(((p, b) for p in grid_p for b in grid_b), key=lambda pb: loss(np.array(pb)))
    result = least_squares(residuals, np.array(start), loss="soft_l1", f_scale=_LOSS_SCALE)
    log_peak, log_bandwidth = result.x if loss(result.x) <= loss(np.array(start)) else start
    return RefinedRoofline(float(np.exp(log_peak)), float(np.exp(log_bandwidth)), bit_act, bit_weights,
                           dict(unroll or {}))


def as_plain(model: RefinedRoofline) -> Roofline:
    """The same peak and bandwidth as a plain roofline (no unrolling)."""
    return Roofline(model.peak_ops_s, model.bandwidth_bytes_s, model.bit_act, model.bit_weights)
