"""Counting conventions: how a profile's layer models were fitted to count a layer.

annette_torch counts every layer one way (:mod:`annette_torch.kinds`): ops 2 per
multiply-accumulate and 1 per pooling-window tap, inputs as every tensor a layer reads.
Parameters fitted elsewhere were fitted under that estimator's counts, and reproduce its
times only when the layers are counted the same way. A profile states where its counts
differ, as data (``"counting"`` in the profile JSON)::

    {"ops_scale": {"max_pool": 2.0, ...},   # a kind's ops times this factor
     "first_input_only": ["concat"],        # a kind reads only its first input
     "all_taps": [{"kind": "conv", "condition": [{"layer": "primary", "attr": "padding",
                   "op": ">", "value": 18}]}],   # these dilated convs compute their padding
     "post_op_inputs": false}               # a kernel's inputs are its primary layer's

The published ANNETTE board profiles use the first two (see
``calibration/published/build_board_profiles.py`` for why). ``all_taps`` comes from the
backend a profile is fitted for (:attr:`annette_torch.backends.Backend.counting`): eager
PyTorch's oneDNN runs a dilated conv with a large padding as im2col + GEMM, computing the
taps in the padding that annette_torch's count leaves out (``benchmarks/dilated_convs.py``
shows the implementation it picks per conv).

``post_op_inputs`` (default true) says whether a kernel's input elements include what the
layers fused after its primary layer read from outside it (a residual add's second
input). Profiles fitted since 2026-12-06 say false: their kernel models see the primary
layer's own features, and the fused layers' cost per output element
(:mod:`annette_torch.fit.fused`) carries what they read. Counted in, a conv's model met
input sizes its plain kernels never had, and the fused add, to cancel them, came out at a
negative cost that made every conv + add cheaper than the same conv alone (NAS-Bench-201's
3x3 convs with their node sums, 0.037 ms estimated against 0.042 measured in context;
docs/accuracy.md, session 28).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..graph.layer_graph import LayerGraph
from ..kinds import FEATURES
from ..kinds.conv import all_taps_ops, skips_padding
from .rules import Clause

_OPS, _IN = FEATURES.index("ops"), FEATURES.index("input_elems")


@dataclass(frozen=True)
class Counting:
    """Per-kind changes to annette_torch's layer counts (see the module docstring)."""

    ops_scale: tuple[tuple[str, float], ...] = ()
    first_input_only: tuple[str, ...] = ()
    all_taps: tuple[tuple[str, tuple[Clause, ...]], ...] = ()    # (conv kind, condition on the layer)
    post_op_inputs: bool = True

    def computes_all_taps(self, layer) -> bool:
        """Whether ``layer``, a dilated padded conv, computes the taps in its padding here."""
        rules = [condition for kind, condition in self.all_taps if kind == layer.kind]
        return bool(rules) and skips_padding(layer.attrs) and any(
            all(clause.holds(layer, layer) for clause in condition) for condition in rules)

    def features(self, graph: LayerGraph) -> np.ndarray:
        """``graph.features`` counted this way (cached on the graph)."""
        key = ("counting", self)
        if key not in graph._cache:
            feats = graph.features.copy()
            kinds = np.array([layer.kind for layer in graph.layers], dtype=object)
            if self.all_taps:
                for i, layer in enumerate(graph.layers):
                    if layer.output_shapes and self.computes_all_taps(layer):
                        feats[i, _OPS] = all_taps_ops(layer.attrs, layer.output_shapes[0])
            for kind, scale in self.ops_scale:
                feats[kinds == kind, _OPS] *= scale
            for i in np.flatnonzero(np.isin(kinds, self.first_input_only)):
                shapes = graph.layers[i].input_shapes
                if shapes:
                    feats[i, _IN] = float(math.prod(shapes[0]))
            graph._cache[key] = feats
        return graph._cache[key]

    def with_all_taps_of(self, backend_counting: dict) -> Counting | None:
        """This counting with ``all_taps`` replaced by those of a backend's ``counting``
        (what that target computes); ``None`` when nothing is left to count otherwise."""
        counting = replace(self, all_taps=Counting.from_dict({"all_taps": backend_counting.get("all_taps", [])}).all_taps)
        return None if counting == Counting() else counting

    def to_dict(self) -> dict:
        data = {"ops_scale": dict(self.ops_scale), "first_input_only": list(self.first_input_only)}
        if self.all_taps:
            data["all_taps"] = [{"kind": kind, "condition": [c.to_dict() for c in condition]}
                                for kind, condition in self.all_taps]
        if not self.post_op_inputs:
            data["post_op_inputs"] = False
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Counting:
        """Validate and build; a ``ValueError`` names the offending key."""
        if not isinstance(data, dict) or set(data) - {"ops_scale", "first_input_only", "all_taps", "post_op_inputs"}:
            raise ValueError("counting: expected an object with 'ops_scale', 'first_input_only', 'all_taps' and/or "
                             "'post_op_inputs'")
        scales = data.get("ops_scale") or {}
        if not isinstance(scales, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                for v in scales.values()):
            raise ValueError(f"counting.ops_scale: expected an object of layer kind -> factor > 0, got {scales!r}")
        first = data.get("first_input_only") or []
        if not isinstance(first, list) or not all(isinstance(k, str) for k in first):
            raise ValueError(f"counting.first_input_only: expected a list of layer kinds, got {first!r}")
        entries = data.get("all_taps") or []
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and set(e) == {"kind", "condition"} and e["kind"] in ("conv", "depthwise_conv")
                and isinstance(e["condition"], list) for e in entries):
            raise ValueError("counting.all_taps: expected a list of {'kind': 'conv' or 'depthwise_conv', "
                             f"'condition': [clauses]}}, got {entries!r}")
        try:
            all_taps = tuple((e["kind"], tuple(Clause(**c) for c in e["condition"])) for e in entries)
        except TypeError as error:
            raise ValueError(f"counting.all_taps: a clause needs layer, attr, op and value ({error})") from error
        post_op_inputs = data.get("post_op_inputs", True)
        if not isinstance(post_op_inputs, bool):
            raise ValueError(f"counting.post_op_inputs: expected true or false, got {post_op_inputs!r}")
        return cls(tuple(sorted((str(k), float(v)) for k, v in scales.items())), tuple(sorted(first)), all_taps,
                   post_op_inputs)
