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
        if not (self.peak_ops_s > 0 and self.bandwidth_bytes_s > 0):
            raise ValueError("peak_ops_s and bandwidth_bytes_s must be positive")

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
        return cls(float(data["peak_ops_s"]), float(data["bandwidth_bytes_s"]),
                   int(data.get("bit_act", 32)), int(data.get("bit_weights", 32)))


@register_layer_model
@dataclass
class RefinedRoofline(Roofline):
    """Roofline whose compute peak is scaled by per-dimension unrolling efficiency."""

    type_name = "refined_roofline"
    unroll: dict[str, dict[str, float]] = field(default_factory=dict)
    replicate: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for dim, p in self.unroll.items():
            if dim not in UNROLL_DIMS:
                raise ValueError(f"unroll dimension must be one of {UNROLL_DIMS}, got {dim!r}")
            if not (p["par"] >= 1 and 0.0 <= p["alpha"] <= 1.0):
                raise ValueError(f"unroll[{dim!r}] needs par >= 1 and 0 <= alpha <= 1, got {p}")

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
        unroll = {str(d): {"par": float(p["par"]), "alpha": float(p["alpha"])}
                  for d, p in (data.get("unroll") or {}).items()}
        replicate = data.get("replicate", False)
        if not isinstance(replicate, bool):
            raise ValueError(f"replicate must be true or false, got {replicate!r}")
        return cls(base.peak_ops_s, base.bandwidth_bytes_s, base.bit_act, base.bit_weights, unroll, replicate)
