"""Latency as a differentiable function of channel-width multipliers.

For a traced network and multipliers ``m`` (one per channel group), every kernel's
features are rescaled: its input channels by the multiplier of the group that produced
its input (1 for the network input), its output channels by its own group's multiplier
(1 for the network output, e.g. the logits). Products (conv, linear, matmul, ...) scale
their ops and weights by both; per-channel kernels (depthwise conv, norms, activations,
pools, elementwise) by their channel multiplier. The profile's layer models then run on
torch tensors with the same formulas as the numpy path (:mod:`annette_torch.layer_models`).

The refined roofline's ``ceil`` is piecewise constant: its true derivative is 0 almost
everywhere. We use a straight-through ceil (forward: ceil, backward: identity), so the
gradient follows the smooth utilisation trend while the value stays exact.

Multipliers must be finite and positive, and every kernel time the layer models give
passes the estimator's check (:meth:`~annette_torch.estimator.Estimator.checked_sum`): a
NaN, negative or infinite time is an error naming the kernel and the profile entry, never
a NaN latency to differentiate.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..estimator import Estimator
from ..graph import Layer, LayerGraph
from ..kinds import FEATURES, PRODUCT_KINDS

_NONE, _IN, _OUT, _BOTH = 0, 1, 2, 3
_COL = {name: i for i, name in enumerate(FEATURES)}


class WidthLatency:
    """``WidthLatency(estimator, graph)(multipliers) -> latency in ms`` (a torch scalar).

    ``group_of(layer) -> int`` assigns layers to multiplier groups (default: one global
    multiplier); the multiplier tensor then has ``num_groups`` entries. With all
    multipliers 1 the value equals ``estimator(graph)``. Whether the kernels read their
    weights from memory follows the weights at ``multipliers``
    (:meth:`~annette_torch.estimator.Estimator.reads_weights_from_memory`).
    """

    def __init__(self, estimator: Estimator, graph: LayerGraph,
                 group_of: Callable[[Layer], int] | None = None, num_groups: int = 1) -> None:
        self.estimator = estimator
        self.graph = graph
        self.num_groups = num_groups
        table = estimator.kernel_table(graph)
        self.table = table
        kernel_of = {name: k for k, names in enumerate(table.layers) for name in names}
        # an output reorder absorbs no layer: it scales with the map it is named after
        members = [names or (name,) for name, names in zip(table.names, table.layers)]
        children = graph.children
        group = np.zeros(len(table), dtype=np.int64)
        in_group = np.full(len(table), -1, dtype=np.int64)     # -1: fixed (network input)
        out_fixed = np.zeros(len(table), dtype=bool)
        for k, names in enumerate(members):
            first, last = graph[names[0]], graph[names[-1]]
            group[k] = group_of(first) if group_of else 0
            if first.parents:
                in_group[k] = kernel_of[first.parents[0]]
            out_fixed[k] = not children[last.name]
        for k in range(len(table)):  # input group = the producing kernel's group
            if in_group[k] >= 0:
                in_group[k] = group[in_group[k]]
        if group.size and (group.min() < 0 or group.max() >= num_groups):
            raise ValueError(f"group_of must return 0 .. {num_groups - 1}")
        self.group, self.in_group, self.out_fixed = group, in_group, out_fixed
        # a fused kernel (conv_pool, conv+bn+relu) scales like its primary layer
        product = np.array([graph[names[0]].kind in PRODUCT_KINDS and graph[names[0]].kind != "depthwise_conv"
                            for names in members])
        codes = np.zeros((len(table), len(FEATURES)), dtype=np.int64)
        # per-channel kernels scale everything with their input channels
        codes[:, [_COL["input_elems"], _COL["c"]]] = _IN
        for column, for_products in (("output_elems", _OUT), ("f", _OUT), ("ops", _BOTH), ("weight_elems", _BOTH)):
            codes[:, _COL[column]] = np.where(product, for_products, _IN)
        self.codes = torch.as_tensor(codes)
        self.base = torch.as_tensor(table.features)
        # per weights regime (read from memory or cached: the network's weights decide at each call)
        self._groups = {from_memory: [(table.kinds[rows[0]], rows, torch.as_tensor(rows), model)
                                      for rows, model in estimator.model_groups(table, from_memory=from_memory)]
                        for from_memory in estimator.weight_regimes()}
        self._executed = torch.as_tensor(np.flatnonzero(~table.free))

    def features(self, multipliers: torch.Tensor) -> torch.Tensor:
        """Kernel feature matrix at the given multipliers (differentiable); ``ValueError``
        unless there are ``num_groups`` of them, all finite and positive."""
        m = torch.as_tensor(multipliers, dtype=torch.float64).reshape(-1)
        if m.numel() != self.num_groups:
            raise ValueError(f"expected {self.num_groups} multipliers, got {m.numel()}")
        bad = ~(torch.isfinite(m.detach()) & (m.detach() > 0))
        if bool(bad.any()):
            group = int(torch.nonzero(bad)[0])
            raise ValueError(f"width multipliers must be finite and positive: multiplier {group} (of "
                             f"{self.num_groups}) is {float(m[group])}")
        one = torch.ones((), dtype=torch.float64)
        s_in = torch.where(torch.as_tensor(self.in_group >= 0), m[torch.as_tensor(self.in_group.clip(0))], one)
        s_out = torch.where(torch.as_tensor(self.out_fixed), one, m[torch.as_tensor(self.group)])
        s_in, s_out = s_in[:, None], s_out[:, None]
        scale = torch.where(self.codes == _IN, s_in, one)
        scale = torch.where(self.codes == _OUT, s_out, scale)
        scale = torch.where(self.codes == _BOTH, s_in * s_out, scale)
        return self.base * scale

    def __call__(self, multipliers: torch.Tensor) -> torch.Tensor:
        """Latency in ms at ``multipliers`` (see :meth:`features`); :class:`~annette_torch.
        estimator.EstimateError` naming the kernel whose predicted time is not a valid one."""
        feats = self.features(multipliers)
        weights = float(feats[self._executed, _COL["weight_elems"]].detach().sum())
        groups = self._groups[self.estimator.reads_weights_from_memory(weights)]
        total = torch.zeros((), dtype=torch.float64)
        for kind, rows, index, model in groups:
            seconds, _ = model.predict(feats[index], xp=torch)
            self.estimator.checked_sum(self.graph, self.table, kind, rows, seconds.detach().cpu().numpy())
            total = total + seconds.sum()
        return total * 1e3 + self.estimator.profile.overhead_ms
