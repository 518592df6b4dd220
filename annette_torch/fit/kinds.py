"""Fitting the layer models of one kernel kind: roofline, refined roofline, statistical
and mixed (ANNETTE's four model types), from that kind's measured kernels.

* ``roofline``: peak and bandwidth (:mod:`.roofline`);
* ``refined_roofline``: plus unrolling ``par``/``alpha`` per dimension (:mod:`.unroll`);
* ``statistical``: ``log time`` regressed on the log features;
* ``mixed``: ``log(measured / refined roofline)`` regressed on the log features.

For the two learned types the scikit-learn model type (:mod:`.learners`) is chosen per
kind by cross-validated MAPE on the rows given here (the caller's training rows).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..layer_models import LayerModel, Mixed, RefinedRoofline, Statistical
from ..layer_models.regressors import regression_inputs
from .learners import LEARNERS, choose_learner, fit_learner, predict
from .roofline import as_plain, envelope, fit_roofline
from .unroll import UnrollSearch, fit_refined_roofline


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(100.0 * np.mean(np.abs(predicted - measured) / measured)) if len(measured) else float("nan")


@dataclass
class KindFit:
    """A kind's fitted models (model type -> model) and how they were chosen."""

    models: dict[str, LayerModel]
    unroll_search: list[UnrollSearch] = field(default_factory=list)
    learner: dict[str, str] = field(default_factory=dict)                  # model type -> learner
    learner_cv_mape: dict[str, dict[str, float]] = field(default_factory=dict)
    envelope: tuple[float, float] = (float("nan"), float("nan"))


def fit_kind(features: np.ndarray, seconds: np.ndarray, weights: np.ndarray, min_learned_rows: int = 20,
             seed: int = 0) -> KindFit:
    """All model types for one kind's kernels (``features`` rows, measured ``seconds``,
    fit ``weights``); statistical and mixed only with ``min_learned_rows`` rows or more."""
    refined, records = fit_refined_roofline(features, seconds, weights)
    fit = KindFit({"roofline": as_plain(fit_roofline(features, seconds, weights)),
                   "refined_roofline": refined}, records, envelope=envelope(features, seconds))
    if len(seconds) < min_learned_rows:
        return fit
    x = regression_inputs(features)
    roof = refined.predict(features)[0]
    targets = {"statistical": (np.log(seconds), np.ones_like(seconds)),
               "mixed": (np.log(seconds / roof), roof)}
    for type_name, (y, factor) in targets.items():
        def error(predicted: np.ndarray, rows: np.ndarray, factor=factor) -> float:
            return mape(factor[rows] * np.exp(predicted), seconds[rows])
        learner, scores = choose_learner(x, y, weights, error, seed, clamped=type_name == "mixed")
        regressor = fit_learner(learner, x, y, weights, seed)
        model_class = Statistical if type_name == "statistical" else Mixed
        fit.models[type_name] = model_class(refined, regressor, learner)
        fit.learner[type_name], fit.learner_cv_mape[type_name] = learner, scores
    return fit


def learner_errors(features: np.ndarray, seconds: np.ndarray, weights: np.ndarray, refined: RefinedRoofline,
                   test_features: np.ndarray, test_seconds: np.ndarray, seed: int = 0) -> dict[str, dict[str, float]]:
    """Held-out MAPE of every learner for the statistical and mixed types, each fitted on
    the given rows: what :func:`fit_kind`'s cross-validated choice is checked against."""
    x, x_test = regression_inputs(features), regression_inputs(test_features)
    roof, roof_test = refined.predict(features)[0], refined.predict(test_features)[0]
    result = {}
    for type_name, y, factor in (("statistical", np.log(seconds), np.ones_like(test_seconds)),
                                 ("mixed", np.log(seconds / roof), roof_test)):
        clamped = type_name == "mixed"
        result[type_name] = {name: mape(factor * np.exp(predict(fit_learner(name, x, y, weights, seed), x_test, clamped)),
                                        test_seconds) for name in LEARNERS}
    return result
