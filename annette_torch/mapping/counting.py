"""Counting conventions: how a profile's layer models were fitted to count a layer.

annette_torch counts every layer one way (:mod:`annette_torch.kinds`): ops 2 per
multiply-accumulate and 1 per pooling-window tap, inputs as every tensor a layer reads.
Parameters fitted elsewhere were fitted under that estimator's counts, and reproduce its
times only when the layers are counted the same way. A profile states where its counts
differ, as data (``"counting"`` in the profile JSON)::

    {"ops_scale": {"max_pool": 2.0, ...},   # a kind's ops times this factor
     "first_input_only": ["concat"]}        # a kind reads only its first input

The published ANNETTE board profiles use both (see
``calibration/published/build_board_profiles.py`` for why); fitted profiles count as
annette_torch does and have no ``counting``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.layer_graph import LayerGraph
from ..kinds import FEATURES

_OPS, _IN = FEATURES.index("ops"), FEATURES.index("input_elems")


@dataclass(frozen=True)
class Counting:
    """Per-kind changes to annette_torch's layer counts (see the module docstring)."""

    ops_scale: tuple[tuple[str, float], ...] = ()
    first_input_only: tuple[str, ...] = ()

    def features(self, graph: LayerGraph) -> np.ndarray:
        """``graph.features`` counted this way (cached on the graph)."""
        key = ("counting", self)
        if key not in graph._cache:
            feats = graph.features.copy()
            kinds = np.array([layer.kind for layer in graph.layers], dtype=object)
            for kind, scale in self.ops_scale:
                feats[kinds == kind, _OPS] *= scale
            for i in np.flatnonzero(np.isin(kinds, self.first_input_only)):
                shapes = graph.layers[i].input_shapes
                if shapes:
                    feats[i, _IN] = float(math.prod(shapes[0]))
            graph._cache[key] = feats
        return graph._cache[key]

    def to_dict(self) -> dict:
        return {"ops_scale": dict(self.ops_scale), "first_input_only": list(self.first_input_only)}

    @classmethod
    def from_dict(cls, data: Any) -> Counting:
        """Validate and build; a ``ValueError`` names the offending key."""
        if not isinstance(data, dict) or set(data) - {"ops_scale", "first_input_only"}:
            raise ValueError("counting: expected an object with 'ops_scale' and/or 'first_input_only'")
        scales = data.get("ops_scale") or {}
        if not isinstance(scales, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                for v in scales.values()):
            raise ValueError(f"counting.ops_scale: expected an object of layer kind -> factor > 0, got {scales!r}")
        first = data.get("first_input_only") or []
        if not isinstance(first, list) or not all(isinstance(k, str) for k in first):
            raise ValueError(f"counting.first_input_only: expected a list of layer kinds, got {first!r}")
        return cls(tuple(sorted((str(k), float(v)) for k, v in scales.items())), tuple(sorted(first)))
