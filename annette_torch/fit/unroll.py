"""Finding a refined roofline's unrolling parameters from one-dimension sweeps.

A target that computes ``par`` elements of dimension d at once wastes the rest of its
last step when d is not a multiple of ``par``: time grows in steps of ``par`` (ANNETTE,
formula 3: ``eff = 1 / ((1 - alpha) + alpha * ceil(d / par) * par / d)``). The steps
show in sweeps where only d changes (``annette_torch/calibration/sweeps/full.csv`` has
such grids: ``4..160:4`` channels at fixed size, and so on). :func:`sweep_groups` finds them in
the data itself: kernels of one kind that agree on every dimension except d (and the
columns that always equal d in this kind, such as f = c of an elementwise layer).

:func:`find_unroll` then tries every ``par`` in :data:`PAR_CANDIDATES` and ``alpha`` in
:data:`ALPHAS`, dimension by dimension (h, w, c, f; a dimension that always equals an
earlier one is not searched again), and keeps the pair that minimises
the weighted squared relative error with a free scale per sweep and one launch time
for all of the kind's calls: only the shape of the staircase matters, not its level
(the roofline's peak sets that afterwards) nor a fixed cost per call (the mixed
model's correction learns that); without it, the flat start of a sweep of small
kernels, which cost mostly the call's overhead, reads as a staircase of ``par`` 64
(docs/fitting.md). A
dimension gets unrolling only when that lowers the error by :data:`MIN_GAIN`. A
candidate must beat the best so far by the relative margin :data:`TIE`: pairs that
predict the sweeps alike tie, and the first (smaller ``par``, then ``alpha``) wins,
whatever the last digits of their errors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from ..layer_models import RefinedRoofline
from ..layer_models.base import COLUMN
from ..layer_models.roofline import UNROLL_DIMS

PAR_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)
ALPHAS = np.round(np.linspace(0.0, 1.0, 21), 2)
MIN_GAIN = 0.1
TIE = 1e-9
_DIMS = ("n", "h", "w", "c", "f", "kh", "kw", "stride", "groups")


def sweep_groups(features: np.ndarray, dim: str, min_points: int = 8) -> list[np.ndarray]:
    """Row-index groups of ``features`` in which only ``dim`` varies (with the columns
    tied to it), each with at least ``min_points`` distinct values of ``dim``."""
    d = features[:, COLUMN[dim]]
    key_columns = [COLUMN[c] for c in _DIMS if c != dim and not np.array_equal(features[:, COLUMN[c]], d)]
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(map(tuple, features[:, key_columns])):
        groups.setdefault(key, []).append(i)
    return [np.array(rows) for rows in groups.values() if len(np.unique(d[rows])) >= min_points]


@dataclass(frozen=True)
class UnrollSearch:
    """What the search saw for one dimension: sweeps, points, error without and with
    the best (par, alpha), and whether that was kept."""

    dim: str
    sweeps: int
    points: int
    error_without: float
    error_best: float
    par: int
    alpha: float
    kept: bool


def _sweep_error(seconds: np.ndarray, predicted: np.ndarray, weights: np.ndarray, labels: np.ndarray) -> float:
    """Weighted squared relative error of ``seconds`` against ``a + b_g * predicted``:
    one launch time ``a >= 0`` for all the kind's calls, a scale ``b_g >= 0`` per group."""
    t, m = seconds / np.median(seconds), predicted / np.median(predicted)      # the error is scale-free
    root = np.sqrt(weights) / t               # least squares on (t - a - b m) / t
    design = np.zeros((len(t), labels.max() + 2))
    design[:, 0] = root
    design[np.arange(len(t)), labels + 1] = root * m
    return float(nnls(design, root * t, maxiter=50 * design.shape[1])[1] ** 2)


def find_unroll(features: np.ndarray, seconds: np.ndarray, weights: np.ndarray, roofline: RefinedRoofline,
                min_points: int = 8) -> tuple[dict[str, dict[str, float]], list[UnrollSearch]]:
    """(unroll parameters, per-dimension search record) for a kind's kernels, starting
    from ``roofline`` (its peak and bandwidth decide which kernels are compute bound)."""
    unroll: dict[str, dict[str, float]] = dict(roofline.unroll)
    records = []
    for i, dim in enumerate(UNROLL_DIMS):
        if any(np.array_equal(features[:, COLUMN[dim]], features[:, COLUMN[d]]) for d in UNROLL_DIMS[:i]):
            continue   # the same column as a dimension already searched (f = c of an elementwise kind)
        groups = sweep_groups(features, dim, min_points)
        if not groups:
            continue
        rows = np.concatenate(groups)
        labels = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
        feats, t, w = features[rows], seconds[rows], weights[rows]

        def error(candidate: dict) -> float:
            model = RefinedRoofline(roofline.peak_ops_s, roofline.bandwidth_bytes_s, roofline.bit_act,
                                    roofline.bit_weights, candidate)
            return _sweep_error(t, model.predict(feats)[0], w, labels)

        without = {d: p for d, p in unroll.items() if d != dim}
        base = error(without)
        best = (base, 1, 0.0)
        largest = feats[:, COLUMN[dim]].max()
        for par in PAR_CANDIDATES[1:]:
            if par > largest:
                break
            for alpha in ALPHAS[1:]:
                e = error(without | {dim: {"par": float(par), "alpha": float(alpha)}})
                if e < best[0] * (1 - TIE):
                    best = (e, par, float(alpha))
        kept = best[1] > 1 and best[0] < (1 - MIN_GAIN) * base
        unroll = without | ({dim: {"par": float(best[1]), "alpha": best[2]}} if kept else {})
        records.append(UnrollSearch(dim, len(groups), len(rows), base, best[0], best[1], best[2], kept))
    return unroll, records


def fit_refined_roofline(features: np.ndarray, seconds: np.ndarray, weights: np.ndarray, rounds: int = 2,
                         min_points: int = 8) -> tuple[RefinedRoofline, list[UnrollSearch]]:
    """A kind's refined roofline: fit the plain roofline, search the unrolling
    parameters, refit peak and bandwidth with them; ``rounds`` times, since better
    peak and bandwidth change which sweep points are compute bound. Returns the model
    and the last round's search records."""
    from .roofline import fit_roofline

    model = fit_roofline(features, seconds, weights)
    records: list[UnrollSearch] = []
    for _ in range(rounds):
        unroll, records = find_unroll(features, seconds, weights, model, min_points)
        if not records:
            break
        model = fit_roofline(features, seconds, weights, unroll=unroll)
    return model, records
