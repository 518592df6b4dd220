"""What a kernel costs beyond its kind's layer model: the layers fused into it after its
primary layer, and the profile's per-kernel overhead.

A runtime that fuses a SiLU or GELU into a conv still computes an exponential or an
error function per output element; fused ReLUs and batch norms (folded into the weights
at export) cost next to nothing. The layer models of a kernel kind are fitted on kernels
without such costs, and the profile's ``fused_cost_s_per_elem`` holds, per fused layer
kind, the seconds per output element it adds (:mod:`annette_torch.fit.fused`; 0 or more
in profiles fitted since 2026-12-06, negative in older ones where the kind's model already
charged more for the fused layer's inputs than they cost).
:class:`FusedLayers` adds them: ``time = model time + output elements * sum of the
fused layers' costs + kernel_s``, with one summed cost per kernel row. ``kernel_s`` is
the profile's ``kernel_overhead_ms`` (:mod:`annette_torch.fit.overhead`): dispatch
between kernels, or, when negative, what the runtime's profiler added to every kernel
time the models were fitted to; a kernel never drops below half its model time
(:data:`MIN_MODEL_SHARE`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import COLUMN, WrappedLayerModel

#: the least share of its model time a kernel keeps, whatever its fused layers and the
#: per-kernel overhead take off
MIN_MODEL_SHARE = 0.5


@dataclass
class FusedLayers(WrappedLayerModel):
    """``inner``'s time plus ``seconds_per_elem[row]`` times each row's output elements
    plus ``kernel_s``, at least :data:`MIN_MODEL_SHARE` of ``inner``'s time; the rows given
    to :meth:`predict` are the kernels ``seconds_per_elem`` was built for."""

    seconds_per_elem: np.ndarray
    kernel_s: float = 0.0

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        cost = self.seconds_per_elem if xp is np else xp.as_tensor(self.seconds_per_elem, dtype=features.dtype,
                                                                    device=features.device)
        total = xp.maximum(seconds + features[:, COLUMN["output_elems"]] * cost + self.kernel_s,
                           MIN_MODEL_SHARE * seconds)
        return total, compute
