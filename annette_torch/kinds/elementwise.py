"""Elementwise binary arithmetic (add, mul, sub, div, ...) with broadcasting.

ops = output elements. The inputs are every tensor operand, so a residual add reads two
activations and a scalar multiply reads one; ``c`` etc. are those of the output.
"""
from __future__ import annotations

import numbers

import torch

from .registry import BroadcastKind, LayerKind, register_kind


class _Arithmetic(BroadcastKind):
    """A binary op that records a Python-number operand: ``scalar`` (its value) and
    ``scalar_first`` (it is the first argument, as in ``0 + x``)."""

    def attrs_from_call(self, args, kwargs):
        if len(args) != 2 or kwargs:
            return {}
        first, second = args
        for value, tensor, is_first in ((first, second, True), (second, first, False)):
            if isinstance(tensor, torch.Tensor) and isinstance(value, numbers.Real) and not isinstance(value, bool):
                return {"scalar": value, "scalar_first": is_first}
        return {}


@register_kind
class Add(_Arithmetic):
    name = "add"
    ops = ("add",)
    onnx_ops = ("Add", "Sum")


@register_kind
class Mul(_Arithmetic):
    name = "mul"
    ops = ("mul",)
    onnx_ops = ("Mul",)


@register_kind
class Sub(_Arithmetic):
    name = "sub"
    ops = ("sub", "rsub", "diff")
    onnx_ops = ("Sub",)


@register_kind
class Div(_Arithmetic):
    name = "div"
    ops = ("div", "floordiv", "mod", "remainder", "fmod")
    onnx_ops = ("Div", "Mod")


def is_identity_arithmetic(kind: str, op: str, attrs: dict) -> bool:
    """Whether a layer of ``kind`` made by ``op`` with ``attrs`` returns its tensor
    operand unchanged: ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1``."""
    if "scalar" not in attrs:
        return False
    value, first = attrs["scalar"], attrs["scalar_first"]
    return ((kind == "add" and value == 0) or (kind == "mul" and value == 1)
            or (kind == "sub" and op == "sub" and value == 0 and not first)
            or (kind == "div" and op == "div" and value == 1 and not first))


@register_kind
class Compare(LayerKind):
    """Comparisons, masks and selection (where, masked_fill, maximum, ...). Their result
    dtype (bool for comparisons) differs from their inputs', so the op itself runs on meta."""
    name = "compare"
    ops = ("eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "maximum", "minimum",
           "logical_and", "logical_or", "logical_not", "and", "or", "lerp", "addcmul", "addcdiv")
    onnx_ops = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Max",
                "Min", "And", "Or")
