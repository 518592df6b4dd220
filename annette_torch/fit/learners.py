"""The scikit-learn model types a statistical or mixed layer model is chosen from, and
their export to the stored regressors of :mod:`annette_torch.layer_models.regressors`.

Every learner maps :func:`regression_inputs` (log features) to a log time (statistical)
or a log ratio of measured to refined-roofline time (mixed):

* ``gradient_boosting``: 200 depth-4 trees, each on a random 80% of the rows;
* ``random_forest``: 60 trees of at most 48 leaves (small enough to ship in a profile);
* ``ridge``: a linear model on the log features, i.e. a power law in the features; it
  records the range of the inputs it was fitted on.

:func:`choose_learner` picks the one with the lowest cross-validated error on the
training rows only, so the held-out rows stay unseen until the final check.

Targets are rounded to multiples of :data:`TARGET_STEP` before any learner sees them.
A tree's split is the one of largest gain, and many gains tie exactly: every feature
that separates a node's rows the same way (any feature that tells a node's two rows
apart) gains the same, and which one wins is decided by the rounding of the gain's
sums. Those splits differ on unseen kernels, so a change in the targets' 15th digit
(as another BLAS code path in the gap or roofline fit makes) moved a kind's held-out
MAPE by up to 13 points. The step, 2**-12 in log time (0.02 % of a kernel's time), is
some 500 times finer than the stored kernels' median run-to-run spread (10-20 %, p90 -
p10 over median) and ten million times coarser than such changes (1e-11 at most), so
the learners see the same numbers on any machine.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold

from ..layer_models.regressors import SIZE_INPUTS, LinearRegressor, TreeEnsemble, regressor_from_dict

TARGET_STEP = 2.0 ** -12   # the targets' resolution (log time; see the module doc)


def _gradient_boosting(x: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int) -> TreeEnsemble:
    base = float(np.average(y, weights=w))
    model = GradientBoostingRegressor(n_estimators=200, max_depth=4, learning_rate=0.06,
                                      subsample=0.8, init="zero", random_state=seed)
    model.fit(x, y - base, sample_weight=w)
    return _export_trees([e.tree_ for e in model.estimators_[:, 0]], model.learning_rate, base)


def _random_forest(x: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int) -> TreeEnsemble:
    model = RandomForestRegressor(n_estimators=60, max_leaf_nodes=48, min_samples_leaf=2, max_features=0.7,
                                  random_state=seed, n_jobs=1)
    model.fit(x, y, sample_weight=w)
    return _export_trees([e.tree_ for e in model.estimators_], 1.0 / len(model.estimators_), 0.0)


def _ridge(x: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int) -> LinearRegressor:
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    model = Ridge(alpha=1.0).fit((x - mean) / std, y, sample_weight=w)
    coef = model.coef_ / std
    rows = np.unique(x[:, :SIZE_INPUTS].astype(np.float32), axis=0)
    return LinearRegressor(coef, float(model.intercept_ - coef @ mean), x.min(axis=0), x.max(axis=0), rows)


LEARNERS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray, int], TreeEnsemble | LinearRegressor]] = {
    "gradient_boosting": _gradient_boosting, "random_forest": _random_forest, "ridge": _ridge}


def _export_trees(trees: list, factor: float, base: float) -> TreeEnsemble:
    """scikit-learn trees as one padded :class:`TreeEnsemble`, leaf values times ``factor``;
    thresholds and values at the 9 significant digits profiles stored them with in version
    1, so a refit of the same store gives the same, already shipped, models."""
    width = max(t.node_count for t in trees)
    shape = (len(trees), width)
    feature = np.full(shape, -1, dtype=np.intp)
    left, right = np.full(shape, -1, dtype=np.intp), np.full(shape, -1, dtype=np.intp)
    threshold, value = np.zeros(shape), np.zeros(shape)
    for i, t in enumerate(trees):
        n = t.node_count
        leaf = t.children_left[:n] < 0
        feature[i, :n] = np.where(leaf, -1, t.feature[:n])
        threshold[i, :n] = np.where(leaf, 0.0, t.threshold[:n])
        left[i, :n], right[i, :n] = t.children_left[:n], t.children_right[:n]
        value[i, :n] = np.where(leaf, t.value[:n, 0, 0] * factor, 0.0)
    depth = max(t.max_depth for t in trees)
    return TreeEnsemble(base, feature, _nine_digits(threshold), left, right, _nine_digits(value), depth)


def _nine_digits(values: np.ndarray) -> np.ndarray:
    return np.array([float(f"{v:.9g}") for v in values.ravel()]).reshape(values.shape)


def fit_learner(name: str, x: np.ndarray, y: np.ndarray, weights: np.ndarray,
                seed: int = 0) -> TreeEnsemble | LinearRegressor:
    """Fit learner ``name`` on inputs ``x``, targets ``y``, and return it exported, as it
    reads back from its stored form (so a saved profile predicts exactly as the fitted one);
    ``y`` is rounded to :data:`TARGET_STEP` first (see the module doc)."""
    return regressor_from_dict(LEARNERS[name](x, round_targets(y), weights, seed).to_dict())


def round_targets(y: np.ndarray) -> np.ndarray:
    """``y`` rounded to the nearest multiple of :data:`TARGET_STEP` (exactly: a power of two)."""
    return np.round(y / TARGET_STEP) * TARGET_STEP


def choose_learner(x: np.ndarray, y: np.ndarray, weights: np.ndarray,
                   error: Callable[[np.ndarray, np.ndarray], float], seed: int = 0,
                   folds: int = 3, clamped: bool = False) -> tuple[str, dict[str, float]]:
    """(learner with the lowest cross-validated error, each learner's error); see
    :func:`cv_errors` for ``error`` and ``clamped``."""
    scores = cv_errors(x, y, weights, error, seed, folds, clamped)
    return min(scores, key=scores.get), scores


def predict(model: TreeEnsemble | LinearRegressor, x: np.ndarray, clamped: bool = False) -> np.ndarray:
    """``model``'s targets for inputs ``x``; ``clamped``: a linear model on ``x`` moved
    into its fitted range, as a mixed layer model evaluates it."""
    if clamped and isinstance(model, LinearRegressor):
        x = model.within_fitted(x)
    return model.predict(x)


def cv_errors(x: np.ndarray, y: np.ndarray, weights: np.ndarray, error: Callable[[np.ndarray, np.ndarray], float],
              seed: int = 0, folds: int = 3, clamped: bool = False) -> dict[str, float]:
    """Per learner, the mean over ``folds`` shuffled folds of ``error(predicted targets of
    the fold, the fold's row indices)``; the caller's ``error`` turns targets into times.
    ``clamped``: predict as a mixed layer model does (:func:`predict`)."""
    splitter = KFold(n_splits=min(folds, len(y)), shuffle=True, random_state=seed)
    scores = {}
    for name in LEARNERS:
        errors = []
        for train, test in splitter.split(x):
            model = fit_learner(name, x[train], y[train], weights[train], seed)
            errors.append(error(predict(model, x[test], clamped), test))
        scores[name] = float(np.mean(errors))
    return scores
