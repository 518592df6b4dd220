"""A profile moved to another device: the per-kernel correction of an adapted profile.

A profile adapted to a device it was not calibrated on (:mod:`annette_torch.transfer`:
few-shot from a handful of measured networks, or zero-shot from a device descriptor)
keeps the source's layer models and adds an :class:`Adaptation`, the profile's
``adaptation`` field. The adaptation says how the target maps layers to kernels:

* ``fusion``: ``"source"`` (the source profile's fusion rules) or ``"none"`` (every
  layer is its own kernel, as in PyTorch eager mode: each batch norm and activation
  runs separately and costs what the source's model of that kind says);
* ``optimizes_graph``: null (the source's), true or false (whether the target folds
  constant subgraphs and computes repeated parameter-free layers once).

The estimator maps with these instead of the profile's ``mapping`` and
``optimizes_graph``, which stay the source's (so the source can be adapted again).
Each executed kernel's source time ``t`` (milliseconds, after the fused-layer costs and
the per-kernel overhead of the source) then becomes::

    t' = scale * t ** exponent + per_kernel_ms
    scale = compute_scale if the source's roofline says the kernel is compute-bound,
            memory_scale otherwise

and never drops below half of ``scale * t ** exponent`` (a negative ``per_kernel_ms``,
a target with less dispatch cost per kernel than the source, cannot make a kernel free).
The network time is the sum over kernels plus the source's per-inference
``overhead_ms``, unchanged. Because the correction is per kernel, everything that sums
kernels (``Estimator.__call__``, ``report`` and its total, the NAS caches, LUTs and
width gradients) sees the same adapted times and kernels. JSON (``compute_scale``,
``memory_scale`` and ``exponent`` positive, ``per_kernel_ms`` any finite number,
``fusion`` "source" or "none", ``optimizes_graph`` true, false or null; all optional,
the defaults change nothing; the rest is provenance)::

    "adaptation": {"method": "few-shot", "source": "openvino-cpu",
                   "compute_scale": 0.55, "memory_scale": 0.55, "exponent": 1.0, "per_kernel_ms": 0.0,
                   "fusion": "source", "optimizes_graph": null,
                   "terms": ["scale"], "samples": 10, "seed": 0, "reference_networks": ["resnet18", ...],
                   "fit": {...}}
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import WrappedLayerModel

PARAMETERS = ("compute_scale", "memory_scale", "exponent", "per_kernel_ms")
METHODS = ("few-shot", "descriptor")
FUSIONS = ("source", "none")


@dataclass(frozen=True)
class Adaptation:
    """The correction's four numbers and the target's mapping (``fusion``,
    ``optimizes_graph``; see the module docstring) and where they came from: ``method``
    ("few-shot" or "descriptor"), the ``source`` profile's name, the fitted ``terms``, the
    number of measured ``samples``, the ``seed`` that drew them, the ``reference_networks``
    measured, and ``fit`` (fit statistics or the descriptors used)."""

    compute_scale: float = 1.0
    memory_scale: float = 1.0
    exponent: float = 1.0
    per_kernel_ms: float = 0.0
    fusion: str = "source"
    optimizes_graph: bool | None = None
    method: str = "few-shot"
    source: str = ""
    terms: tuple[str, ...] = ()
    samples: int = 0
    seed: int | None = None
    reference_networks: tuple[str, ...] = ()
    fit: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Validate; a ``ValueError`` names the field as ``adaptation.<field>``."""
        for name in PARAMETERS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"'adaptation.{name}': expected a finite number, got {value!r}")
            if name != "per_kernel_ms" and value <= 0:
                raise ValueError(f"'adaptation.{name}': must be positive, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.fusion not in FUSIONS:
            raise ValueError(f"'adaptation.fusion': expected one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if not isinstance(self.optimizes_graph, (bool, type(None))):
            raise ValueError(f"'adaptation.optimizes_graph': expected true, false or null, "
                             f"got {self.optimizes_graph!r}")

    def rules(self, mapping: tuple) -> tuple:
        """The fusion rules the target runs with, given the source profile's ``mapping``."""
        return mapping if self.fusion == "source" else ()

    def merges(self, merges: bool) -> bool:
        """Whether the target merges kernels as the source's compiler does (elementwise
        subgraphs, a split's parallel convs), given the source profile's flag: only when it
        fuses as the source does."""
        return merges and self.fusion == "source"

    def folds(self, optimizes_graph: bool) -> bool:
        """Whether the target optimizes the graph, given the source profile's flag."""
        return optimizes_graph if self.optimizes_graph is None else self.optimizes_graph

    @property
    def mapping_label(self) -> str:
        """The mapping in a word: "source" (the source's), "unfused" (no fusion, graph
        optimized), "eager" (no fusion, no graph optimization), "no-fusion" (no fusion,
        graph optimized as the source does), or "fusion=source, optimizes_graph=.."."""
        return mapping_label(self.fusion, self.optimizes_graph)

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
                "fusion": self.fusion, "optimizes_graph": self.optimizes_graph,
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
        parameters = {name: data[name] for name in PARAMETERS if name in data}
        method = data.get("method", "few-shot")
        if method not in METHODS:
            raise fail("method", f"expected one of {', '.join(METHODS)}, got {method!r}")
        fusion = data.get("fusion", "source")
        if fusion not in FUSIONS:
            raise fail("fusion", f"expected one of {', '.join(FUSIONS)}, got {fusion!r}")
        folds = data.get("optimizes_graph")
        if not isinstance(folds, (bool, type(None))):
            raise fail("optimizes_graph", f"expected true, false or null, got {folds!r}")
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
        return cls(**parameters, fusion=fusion, optimizes_graph=folds, method=method, source=data.get("source", ""),
                   terms=tuple(data.get("terms", [])),
                   samples=samples, seed=seed, reference_networks=tuple(data.get("reference_networks", [])),
                   fit=dict(data.get("fit", {})))


def mapping_label(fusion: str, optimizes_graph: bool | None) -> str:
    """See :attr:`Adaptation.mapping_label`."""
    if fusion == "source" and optimizes_graph is None:
        return "source"
    if fusion == "none":
        return {True: "unfused", False: "eager", None: "no-fusion"}[optimizes_graph]
    return f"fusion={fusion}, optimizes_graph={optimizes_graph}"


@dataclass
class AdaptedKernels(WrappedLayerModel):
    """``inner``'s kernel times corrected by ``adaptation`` (see the module docstring)."""

    adaptation: Adaptation

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        return self.adaptation.kernel_ms(seconds * 1e3, compute, xp) / 1e3, compute
