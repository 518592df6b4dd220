"""Layer kinds: one registry (:mod:`.registry`) filled by the modules of this package."""
# Importing the kind modules registers their kinds.
from . import (activation, attention, conv, elementwise, linear, norm, pool,  # noqa: F401
               recurrent, selection, tensor_ops)
from .registry import (FEATURES, KINDS, LayerCounts, LayerKind, canonical_op, kind_for_module,
                       kind_for_onnx, kind_for_op, layer_counts, register_kind)

#: Kinds that multiply tensors (2 ops per multiply-accumulate): the work that
#: ``torch.utils.flop_counter`` counts too, and what "FLOPs" usually means for a network.
PRODUCT_KINDS = ("conv", "depthwise_conv", "conv_transpose", "linear", "bilinear", "matmul", "einsum",
                 "attention", "multihead_attention", "window_attention", "rnn")

__all__ = ["FEATURES", "KINDS", "PRODUCT_KINDS", "LayerCounts", "LayerKind", "canonical_op", "kind_for_module",
           "kind_for_onnx", "kind_for_op", "layer_counts", "register_kind"]
