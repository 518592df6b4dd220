"""Weights that arrive from memory: the floor a real network puts under each kernel.

A calibration benchmark runs one layer in a loop, so weights up to the size of the
last-level cache stay cached from one inference to the next. Inside a real network the
other layers' weights and activations evict them: every inference reads each kernel's
weights from memory again. A batch-1 fully connected layer, which does two operations
per weight, then takes its weight bytes over the memory bandwidth, several times its
cached time (ResNet-18's 2 MB classifier: 0.04 ms cached, 0.14 ms in the network on
OpenVINO CPU). :class:`WeightsFromMemory` wraps a kind's layer model with that floor:
``time = max(model time, weight bytes / bandwidth_bytes_s)``; compute-bound kernels,
whose weights load while they compute, are unaffected.

A network small enough keeps its weights cached as a benchmark does (the 1280-to-1000
classifier of a small mobile network, 5 MB of weights: 0.11 ms in context on OpenVINO CPU
where the floor said 0.22): the floor applies only to
networks holding more weight bytes than the profile's ``weight_cache_bytes``, fitted
from the store (:func:`annette_torch.fit.weights.fit_weight_cache`); the estimator
decides per network (:meth:`annette_torch.Estimator.reads_weights_from_memory`).

Below the floor the same eviction costs time too: a conv whose weights a benchmark kept in
the L2 cache reads them again at every inference of a network, and that traffic adds to
its compute rather than hiding under it (on the profiles' Zen 4, RegNetX-400MF's 400-to-400
1x1 convs, 625 KB of weights each, ran 1.22-1.33 times their benchmark-fitted estimate in
context, its 4 KB ones 0.8-1.0 times). :class:`RereadWeights` adds that time,
``min(weight bytes, up_to_bytes) / bytes_s``, in every network: the profile's
``weight_rereads``, measured in context (:mod:`annette_torch.calibration.weight_rereads`).
Weights beyond ``up_to_bytes`` (the L2 size) a benchmark already read from further away.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..validation import DataError, number
from .base import COLUMN, WrappedLayerModel


def weight_bytes(features: Any, bit_weights: int) -> Any:
    """The weight bytes of each kernel of a feature matrix, at ``bit_weights`` per weight."""
    return features[:, COLUMN["weight_elems"]] * (bit_weights / 8.0)


@dataclass(frozen=True)
class WeightRereads:
    """A network re-reads each kernel's weights, up to ``up_to_bytes`` of them, at
    ``bytes_s`` at every inference."""

    bytes_s: float
    up_to_bytes: float

    def to_dict(self) -> dict:
        return {"bytes_s": self.bytes_s, "up_to_bytes": self.up_to_bytes}

    @classmethod
    def from_dict(cls, data: Any) -> WeightRereads:
        if not isinstance(data, dict):
            raise DataError(f"weight_rereads: expected an object with bytes_s and up_to_bytes, got {data!r}")
        return cls(number(data.get("bytes_s"), "weight_rereads.bytes_s", low=0, low_open=True),
                   number(data.get("up_to_bytes"), "weight_rereads.up_to_bytes", low=0, low_open=True))


@dataclass
class WeightsFromMemory(WrappedLayerModel):
    """``inner``'s time, but at least the kernel's weight bytes / ``bandwidth_bytes_s``."""

    bandwidth_bytes_s: float
    bit_weights: int = 32

    def weight_seconds(self, features: Any) -> Any:
        """Seconds to read each kernel's weights from memory."""
        return weight_bytes(features, self.bit_weights) / self.bandwidth_bytes_s

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        floor = self.weight_seconds(features)
        return xp.maximum(seconds, floor), compute & (seconds >= floor)


@dataclass
class RereadWeights(WrappedLayerModel):
    """``inner``'s time plus the time to read the kernel's weights again (``rereads``)."""

    rereads: WeightRereads
    bit_weights: int = 32

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        reread = xp.clip(weight_bytes(features, self.bit_weights), 0.0, self.rereads.up_to_bytes)
        return seconds + reread / self.rereads.bytes_s, compute
