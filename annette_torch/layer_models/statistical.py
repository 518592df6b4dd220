"""Statistical and mixed layer models (ANNETTE's third and fourth model types).

* ``statistical``: ``time = exp(regressor(log features))`` seconds, a regressor learned
  on the measured kernels of one kind (:mod:`.regressors`).
* ``mixed``: ``time = refined_roofline(features) * exp(regressor(log features))``: the
  refined roofline corrected by a learned residual (log of measured over roofline).
  Outside the calibrated range the roofline carries the extrapolation and the correction
  stays the one at the range's edge: a tree ensemble is constant beyond its outermost
  splits, and a linear regressor is evaluated at the edge of the range it was fitted on,
  on the way from the kernel to the nearest fitted one
  (:meth:`~.regressors.LinearRegressor.within_fitted`; a power law of the correction would
  otherwise grow without bound: a slice model fitted on at most 350 weight elements gave
  a 4,429-element gather 5 ms).

Both keep the kind's refined roofline: the mixed model's time rests on it, the
statistical model uses it only for the compute-bound flag and the bytes moved it
reports. JSON::

    {"roofline": {refined_roofline parameters}, "regressor": {see regressors}, "learner": "gradient_boosting"}

``learner`` records which scikit-learn model type the regressor came from.
On torch tensors the mixed model's gradients flow through its roofline part.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import LayerModel, register_layer_model
from .regressors import LinearRegressor, TreeEnsemble, regression_inputs, regressor_from_dict
from .roofline import RefinedRoofline


@dataclass
class _Learned(LayerModel):
    roofline: RefinedRoofline
    regressor: TreeEnsemble | LinearRegressor
    learner: str = ""

    def bytes_moved(self, features):
        return self.roofline.bytes_moved(features)

    def log_correction(self, features: Any, xp: Any = np) -> Any:
        """The regressor's output (natural log) per kernel."""
        return self.regressor.predict(regression_inputs(features, xp), xp)

    def to_dict(self) -> dict:
        return {"roofline": self.roofline.to_dict(), "regressor": self.regressor.to_dict(), "learner": self.learner}

    @classmethod
    def from_dict(cls, data):
        return cls(RefinedRoofline.from_dict(data["roofline"]), regressor_from_dict(data["regressor"]),
                   str(data.get("learner", "")))


@register_layer_model
@dataclass
class Statistical(_Learned):
    """``exp(regressor(log features))`` seconds; the roofline only says the bound."""

    type_name = "statistical"

    def predict(self, features, xp=np):
        _, compute = self.roofline.predict(features, xp)
        return xp.exp(self.log_correction(features, xp)), compute


@register_layer_model
@dataclass
class Mixed(_Learned):
    """Refined roofline times ``exp(regressor(log features))``."""

    type_name = "mixed"

    def log_correction(self, features: Any, xp: Any = np) -> Any:
        """The regressor's output (natural log) per kernel, at inputs inside its fitted range."""
        inputs = regression_inputs(features, xp)
        if isinstance(self.regressor, LinearRegressor):
            inputs = self.regressor.within_fitted(inputs, xp)
        return self.regressor.predict(inputs, xp)

    def predict(self, features, xp=np):
        seconds, compute = self.roofline.predict(features, xp)
        return seconds * xp.exp(self.log_correction(features, xp)), compute
