"""A profile moved to another device: the per-kernel correction of an adapted profile.

A profile adapted to a device it was not calibrated on (:mod:`annette_torch.transfer`:
few-shot from a handful of measured networks, or zero-shot from a device descriptor)
keeps the source's mapping rules and layer models and adds an :class:`Adaptation`, the
profile's ``adaptation`` field. Each executed kernel's source time ``t`` (milliseconds,
after the fused-layer costs and the per-kernel overhead of the source) becomes::

    t' = scale * t ** exponent + per_kernel_ms
    scale = compute_scale if the source's roofline says the kernel is compute-bound,
            memory_scale otherwise

and never drops below half of ``scale * t ** exponent`` (a negative ``per_kernel_ms``,
a target with less dispatch cost per kernel than the source, cannot make a kernel free).
The network time is the sum over kernels plus the source's per-inference
``overhead_ms``, unchanged. Because the correction is per kernel, everything that sums
kernels (``Estimator.__call__``, ``report`` and its total, the NAS caches, LUTs and
width gradients) sees the same adapted times. JSON (``compute_scale``, ``memory_scale``
and ``exponent`` positive, ``per_kernel_ms`` any finite number; the rest is provenance)::

    "adaptation": {"method": "few-shot", "source": "openvino-cpu",
                   "compute_scale": 0.55, "memory_scale": 0.55, "exponent": 1.0, "per_kernel_ms": 0.0,
                   "terms": ["scale"], "samples": 10, "seed": 0, "reference_networks": ["resnet18", ...],
                   "fit": {...}}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import LayerModel

PARAMETERS = ("compute_scale", "memory_scale", "exponent", "per_kernel_ms")
METHODS = ("few-shot", "descriptor")


@dataclass(frozen=True)
class Adaptation:
    """The correction's four numbers (see the module docstring) and where they came from:
    ``method`` ("few-shot" or "descriptor"), the ``source`` profile's name, the fitted
    ``terms``, the number of measured ``samples``, the ``seed`` that drew them, the
    ``reference_networks`` measured, and ``fit`` (fit statistics or the descriptors used)."""

    compute_scale: float = 1.0
    memory_scale: float = 1.0
    exponent: float = 1.0
    per_kernel_ms: float = 0.0
    method: str = "few-shot"
    source: str = ""
    terms: tuple[str, ...] = ()
    samples: int = 0
    seed: int | None = None
    reference_networks: tuple[str, ...] = ()
    fit: dict[str, Any] = field(default_factory=dict)

    def kernel_ms(self, time_ms: Any, compute: Any, xp: Any = np) -> Any:
        """Adapted times (ms) of kernels whose source times are ``time_ms`` and whose
        compute-bound flags are ``compute``."""
        scale = xp.where(compute, self.compute_scale, self.memory_scale)
        scaled = scale * time_ms ** self.exponent
        if not self.per_kernel_ms:
            return scaled
        return xp.maximum(scaled + self.per_kernel_ms, 0.5 * scaled)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "source": self.source, "compute_scale": self.compute_scale,
                "memory_scale": self.memory_scale, "exponent": self.exponent, "per_kernel_ms": self.per_kernel_ms,
                "terms": list(self.terms), "samples": self.samples, "seed": self.seed,
                "reference_networks": list(self.reference_networks), "fit": dict(self.fit)}

    @classmethod
    def from_dict(cls, data: Any) -> Adaptation:
        """Validate and build; a ``ValueError`` names the offending field as
        ``adaptation.<field>``."""
        def fail(name: str, problem: str) -> ValueError:
            return ValueError(f"'adaptation.{name}': {problem}" if name else f"'adaptation': {problem}")

        if not isinstance(data, dict):
            raise fail("", f"expected an object, got {data!r}")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise fail(unknown[0], f"unknown field (known: {', '.join(cls.__dataclass_fields__)})")
        numbers = {}
        for name in PARAMETERS:
            value = data.get(name, 0.0 if name == "per_kernel_ms" else 1.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise fail(name, f"expected a finite number, got {value!r}")
            if name != "per_kernel_ms" and value <= 0:
                raise fail(name, f"must be positive, got {value!r}")
            numbers[name] = float(value)
        method = data.get("method", "few-shot")
        if method not in METHODS:
            raise fail("method", f"expected one of {', '.join(METHODS)}, got {method!r}")
        samples = data.get("samples", 0)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise fail("samples", f"expected a non-negative integer, got {samples!r}")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise fail("seed", f"expected an integer or null, got {seed!r}")
        for name in ("terms", "reference_networks"):
            value = data.get(name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(name, f"expected a list of strings, got {value!r}")
        if not isinstance(data.get("source", ""), str):
            raise fail("source", f"expected a string, got {data['source']!r}")
        if not isinstance(data.get("fit", {}), dict):
            raise fail("fit", f"expected an object, got {data['fit']!r}")
        return cls(**numbers, method=method, source=data.get("source", ""), terms=tuple(data.get("terms", [])),
                   samples=samples, seed=seed, reference_networks=tuple(data.get("reference_networks", [])),
                   fit=dict(data.get("fit", {})))


@dataclass
class AdaptedKernels(LayerModel):
    """``inner``'s kernel times corrected by ``adaptation`` (see the module docstring)."""

    inner: LayerModel
    adaptation: Adaptation

    @property
    def type_name(self) -> str:     # what answered: the wrapped model's type
        return self.inner.type_name

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        return self.adaptation.kernel_ms(seconds * 1e3, compute, xp) / 1e3, compute

    def bytes_moved(self, features: Any) -> Any:
        return self.inner.bytes_moved(features)
