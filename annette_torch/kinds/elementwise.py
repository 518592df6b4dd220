"""Elementwise binary arithmetic (add, mul, sub, div, ...) with broadcasting.

ops = output elements. The inputs are every tensor operand, so a residual add reads two
activations and a scalar multiply reads one; ``c`` etc. are those of the output.
"""
from __future__ import annotations

from .registry import BroadcastKind, LayerKind, register_kind


@register_kind
class Add(BroadcastKind):
    name = "add"
    ops = ("add",)
    onnx_ops = ("Add", "Sum")


@register_kind
class Mul(BroadcastKind):
    name = "mul"
    ops = ("mul",)
    onnx_ops = ("Mul",)


@register_kind
class Sub(BroadcastKind):
    name = "sub"
    ops = ("sub", "rsub")
    onnx_ops = ("Sub",)


@register_kind
class Div(BroadcastKind):
    name = "div"
    ops = ("div", "floordiv", "mod", "remainder", "fmod")
    onnx_ops = ("Div", "Mod")


@register_kind
class Compare(LayerKind):
    """Comparisons, masks and selection (where, masked_fill, maximum, ...). Their result
    dtype (bool for comparisons) differs from their inputs', so the op itself runs on meta."""
    name = "compare"
    ops = ("eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "maximum", "minimum",
           "logical_and", "logical_or", "logical_not", "and", "or", "lerp", "addcmul", "addcdiv")
    onnx_ops = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Max",
                "Min", "And", "Or")
