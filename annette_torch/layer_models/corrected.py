"""A prior profile corrected by measurements of this machine: per kernel kind, a factor
in log time and, where a kind has many samples, a small residual model on its features.

``annette-torch fit --data STORE --prior PROFILE`` (:mod:`annette_torch.fit.prior`)
keeps the prior's layer models, fusion rules and overheads, and adds a
:class:`PriorCorrection`, the profile's ``correction`` field. For a kernel of kind ``K``
answered by a layer model of type ``T`` (the type the estimator picked, after the
fused-layer costs, the per-kernel overhead and any adaptation of the prior), the time
``t`` becomes::

    t' = t * exp(clip(log_scale + residual(regression_inputs(features)), -max_log, max_log))

with the ``log_scale`` and ``residual`` fitted for (``T``, ``K``); ``residual`` is absent
(zero) for kinds with few samples, and ``max_log`` bounds the correction by the largest
one the data showed, so a residual model cannot extrapolate beyond it. A (type, kind)
without an entry keeps the prior's time exactly. JSON::

    "correction": {"prior": {"name": "openvino-cpu", "sha256": "..."},
                   "layer_models": {"mixed": {"conv": {"log_scale": 0.26, "max_log": 0.9, "samples": 41,
                                                       "residual": {linear regressor, optional}}}},
                   "fit": {...}}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import WrappedLayerModel
from .regressors import LinearRegressor, regression_inputs, regressor_from_dict


@dataclass(frozen=True)
class KindCorrection:
    """One (model type, kernel kind)'s correction: ``log_scale`` (natural log of the
    factor), ``max_log`` (the bound on the total log correction), the number of measured
    kernels it was fitted on, and an optional ``residual`` linear model on the
    regression inputs (:func:`~annette_torch.layer_models.regressors.regression_inputs`)."""

    log_scale: float
    max_log: float
    samples: int
    residual: LinearRegressor | None = None

    def __post_init__(self) -> None:
        for name in ("log_scale", "max_log"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
        if self.max_log < abs(self.log_scale) * (1 - 1e-12) or self.max_log > 50:
            raise ValueError(f"max_log: expected a number between |log_scale| and 50, got {self.max_log!r}")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"samples: expected a positive integer, got {self.samples!r}")

    def log_factor(self, features: Any, xp: Any = np) -> Any:
        """The natural log of the factor per kernel row of ``features``."""
        if self.residual is None:
            return float(self.log_scale)
        log = self.log_scale + self.residual.predict(regression_inputs(features, xp), xp)
        return xp.clip(log, -self.max_log, self.max_log)

    def to_dict(self) -> dict[str, Any]:
        return {"log_scale": self.log_scale, "max_log": self.max_log, "samples": self.samples,
                **({"residual": self.residual.to_dict()} if self.residual is not None else {})}

    @classmethod
    def from_dict(cls, data: Any) -> KindCorrection:
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {data!r}")
        unknown = sorted(set(data) - {"log_scale", "max_log", "samples", "residual"})
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r}")
        residual = None
        if data.get("residual") is not None:
            residual = regressor_from_dict(data["residual"])
            if not isinstance(residual, LinearRegressor):
                raise ValueError("residual: expected a linear regressor")
        try:
            return cls(data["log_scale"], data["max_log"], data["samples"], residual)
        except KeyError as missing:
            raise ValueError(f"missing field {missing}") from None


@dataclass(frozen=True)
class PriorCorrection:
    """The prior a profile corrects (``prior_name``, ``prior_sha256``: its content digest,
    :func:`~annette_torch.profiles.profile.profile_digest`), its corrections per model type
    and kernel kind, and ``fit`` (how they were fitted: free-form provenance)."""

    prior_name: str
    prior_sha256: str
    layer_models: dict[str, dict[str, KindCorrection]] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)

    def for_kind(self, type_name: str, kind: str) -> KindCorrection | None:
        """The correction of kernels of ``kind`` answered by ``type_name``, or None (the prior's time)."""
        return self.layer_models.get(type_name, {}).get(kind)

    def to_dict(self) -> dict[str, Any]:
        return {"prior": {"name": self.prior_name, "sha256": self.prior_sha256},
                "layer_models": {t: {k: c.to_dict() for k, c in kinds.items()} for t, kinds in self.layer_models.items()},
                "fit": dict(self.fit)}

    @classmethod
    def from_dict(cls, data: Any) -> PriorCorrection:
        """Validate and build; a ``ValueError`` names the field as ``correction.<field>``."""
        if not isinstance(data, dict):
            raise ValueError(f"'correction': expected an object, got {data!r}")
        prior = data.get("prior")
        if not (isinstance(prior, dict) and isinstance(prior.get("name"), str) and isinstance(prior.get("sha256"), str)):
            raise ValueError(f"'correction.prior': expected {{'name': ..., 'sha256': ...}}, got {prior!r}")
        models = data.get("layer_models", {})
        if not isinstance(models, dict) or not all(isinstance(v, dict) for v in models.values()):
            raise ValueError("'correction.layer_models': expected an object of model type -> kind -> correction")
        corrections: dict[str, dict[str, KindCorrection]] = {}
        for type_name, kinds in models.items():
            for kind, entry in kinds.items():
                try:
                    corrections.setdefault(type_name, {})[kind] = KindCorrection.from_dict(entry)
                except ValueError as error:
                    raise ValueError(f"'correction.layer_models.{type_name}.{kind}': {error}") from None
        if not isinstance(data.get("fit", {}), dict):
            raise ValueError(f"'correction.fit': expected an object, got {data['fit']!r}")
        return cls(prior["name"], prior["sha256"], corrections, dict(data.get("fit", {})))


@dataclass
class CorrectedKernels(WrappedLayerModel):
    """``inner``'s kernel times times the factor of ``correction`` (see the module docstring)."""

    correction: KindCorrection

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        log = self.correction.log_factor(features, xp)
        factor = math.exp(log) if isinstance(log, float) else xp.exp(log)
        return seconds * factor, compute
