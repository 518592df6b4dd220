"""Roofline and refined roofline (ANNETTE, formulas 1-3).

Roofline: ``time = max(ops / peak_ops_s, bytes / bandwidth_bytes_s)`` with
``bytes = ((inputs + outputs) * bit_act + weights * bit_weights) / 8``.

Refined roofline: the compute term is divided by the utilisation of the unrolled
dimensions. For a dimension d of size n unrolled ``par`` times,
``eff = n / (ceil(n / par) * par)``, softened by ``alpha``:
``eff = 1 / ((1 - alpha) + alpha / eff)``. The kernel's compute time is
``ops / (peak_ops_s * prod_d eff_d)``. Dimensions: ``h``, ``w`` (output height and
width), ``c`` (input channels), ``f`` (filters / output features). With ``replicate``
(ANNETTE's estimator code, whose published board parameters were fitted so) a dimension
smaller than its ``par`` is taken to be replicated across the idle units: its ``eff`` is 1.

The ``ceil`` makes the refined roofline piecewise constant in the dimension sizes: its
derivative with respect to a size is zero almost everywhere. On torch tensors we use a
straight-through ceil (forward: ceil; backward: identity), so gradients with respect
to continuous width multipliers see the smooth utilisation trend instead of zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..validation import boolean, integer, number
from .base import COLUMN, LayerModel, register_layer_model

UNROLL_DIMS = ("h", "w", "c", "f")


def _ceil(x: Any, xp: Any) -> Any:
    if xp is np:
        return np.ceil(x)
    return x + (xp.ceil(x) - x).detach()  # straight-through for torch


@register_layer_model
@dataclass
class Roofline(LayerModel):
    """Peak compute and bandwidth; the kernel takes the slower of the two."""

    type_name = "roofline"
    peak_ops_s: float
    bandwidth_bytes_s: float
    bit_act: int = 32
    bit_weights: int = 32

    def __post_init__(self) -> None:
        """Validate (a :class:`~annette_torch.validation.DataError` names the parameter)."""
        self.peak_ops_s = number(self.peak_ops_s, "peak_ops_s", low=0, low_open=True)
        self.bandwidth_bytes_s = number(self.bandwidth_bytes_s, "bandwidth_bytes_s", low=0, low_open=True)
        self.bit_act = integer(self.bit_act, "bit_act", 1, 64)
        self.bit_weights = integer(self.bit_weights, "bit_weights", 1, 64)

    def bytes_moved(self, features):
        return ((features[:, COLUMN["input_elems"]] + features[:, COLUMN["output_elems"]]) * self.bit_act
                + features[:, COLUMN["weight_elems"]] * self.bit_weights) / 8.0

    def compute_time(self, features, xp=np):
        return features[:, COLUMN["ops"]] / self.peak_ops_s

    def predict(self, features, xp=np):
        compute = self.compute_time(features, xp)
        memory = self.bytes_moved(features) / self.bandwidth_bytes_s
        return xp.maximum(compute, memory), compute >= memory

    def to_dict(self) -> dict:
        return {"peak_ops_s": self.peak_ops_s,
                "bandwidth_bytes_s": self.bandwidth_bytes_s, "bit_act": self.bit_act,
                "bit_weights": self.bit_weights}

    @classmethod
    def from_dict(cls, data):
        return cls(data["peak_ops_s"], data["bandwidth_bytes_s"], data.get("bit_act", 32), data.get("bit_weights", 32))


@register_layer_model
@dataclass
class RefinedRoofline(Roofline):
    """Roofline whose compute peak is scaled by per-dimension unrolling efficiency."""

    type_name = "refined_roofline"
    unroll: dict[str, dict[str, float]] = field(default_factory=dict)
    replicate: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.unroll, dict) or not all(isinstance(p, dict) for p in self.unroll.values()):
            raise ValueError(f"unroll: expected an object of dimension -> {{par, alpha}}, got {self.unroll!r}")
        for dim, p in self.unroll.items():
            if dim not in UNROLL_DIMS:
                raise ValueError(f"unroll dimension must be one of {UNROLL_DIMS}, got {dim!r}")
            p.update(par=number(p.get("par"), f"unroll.{dim}.par", low=1),
                     alpha=number(p.get("alpha"), f"unroll.{dim}.alpha", low=0, high=1))
        self.replicate = boolean(self.replicate, "replicate")

    def efficiency(self, features, xp=np):
        """Product over unrolled dimensions of the alpha-softened utilisation."""
        total = 1.0
        for dim, p in self.unroll.items():
            n = features[:, COLUMN[dim]]
            par, alpha = float(p["par"]), float(p["alpha"])
            eff = n / (_ceil(n / par, xp) * par)
            if self.replicate:
                eff = xp.where(n < par, 1.0, eff)
            total = total * (1.0 / ((1.0 - alpha) + alpha / eff))
        return total

    def compute_time(self, features, xp=np):
        return features[:, COLUMN["ops"]] / (self.peak_ops_s * self.efficiency(features, xp))

    def to_dict(self) -> dict:
        return (super().to_dict() | {"unroll": {d: dict(p) for d, p in self.unroll.items()}}
                | ({"replicate": True} if self.replicate else {}))

    @classmethod
    def from_dict(cls, data):
        base = Roofline.from_dict(data)
        unroll = data.get("unroll") or {}
        if isinstance(unroll, dict):
            unroll = {str(d): dict(p) if isinstance(p, dict) else p for d, p in unroll.items()}
        return cls(base.peak_ops_s, base.bandwidth_bytes_s, base.bit_act, base.bit_weights, unroll,
                   data.get("replicate", False))
