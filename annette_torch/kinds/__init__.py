"""Layer kinds: one registry (:mod:`.registry`) filled by the modules of this package."""
# Importing the kind modules registers their kinds.
from . import (activation, attention, conv, elementwise, linear, norm, pool,  # noqa: F401
               recurrent, tensor_ops)
from .registry import (FEATURES, KINDS, LayerCounts, LayerKind, canonical_op, kind_for_module,
                       kind_for_onnx, kind_for_op, layer_counts, register_kind)

__all__ = ["FEATURES", "KINDS", "LayerCounts", "LayerKind", "canonical_op", "kind_for_module",
           "kind_for_onnx", "kind_for_op", "layer_counts", "register_kind"]
