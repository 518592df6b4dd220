"""Activations, elementwise transcendental functions and softmax: one op per output
element for the simple ones, a small constant more for the transcendental ones (the
constant is a work estimate; hardware fits decide what an op costs)."""
from __future__ import annotations

from typing import Sequence

from torch import nn

from .registry import SameShapeKind, alias_kind, numel, register_kind


class _Activation(SameShapeKind):
    ops_per_element = 1.0

    def count_ops(self, attrs, in_shapes, out_shapes):
        return self.ops_per_element * numel(out_shapes[0])


@register_kind
class ReLU(_Activation):
    name = "relu"
    modules = (nn.ReLU,)
    ops = ("relu",)
    onnx_ops = ("Relu",)


@register_kind
class ReLU6(_Activation):
    name = "relu6"
    modules = (nn.ReLU6,)
    ops = ("relu6",)


@register_kind
class HardTanh(_Activation):
    name = "clamp"
    modules = (nn.Hardtanh,)
    ops = ("hardtanh", "clamp", "clip", "clamp_min", "clamp_max")
    onnx_ops = ("Clip",)

    def attrs_from_module(self, module):
        return {"min": module.min_val, "max": module.max_val}

    def attrs_from_call(self, args, kwargs):
        low = args[1] if len(args) > 1 else kwargs.get("min", kwargs.get("min_val"))
        high = args[2] if len(args) > 2 else kwargs.get("max", kwargs.get("max_val"))
        return {"min": low, "max": high}

    def resolve(self, attrs):
        return "relu6" if (attrs.get("min"), attrs.get("max")) == (0.0, 6.0) else "clamp"


@register_kind
class LeakyReLU(_Activation):
    name = "leaky_relu"
    modules = (nn.LeakyReLU, nn.PReLU, nn.ELU, nn.CELU, nn.SELU)
    ops = ("leaky_relu", "prelu", "elu", "celu", "selu")
    onnx_ops = ("LeakyRelu", "PRelu", "Elu", "Celu", "Selu")
    ops_per_element = 2.0


@register_kind
class SiLU(_Activation):
    name = "silu"
    modules = (nn.SiLU,)
    ops = ("silu",)
    onnx_ops = ("Swish",)
    export_ops = {"Sigmoid": 1, "Mul": 1}     # the export's x * sigmoid(x) (opset 20)
    ops_per_element = 4.0


@register_kind
class Hardswish(_Activation):
    name = "hardswish"
    modules = (nn.Hardswish,)
    ops = ("hardswish",)
    onnx_ops = ("HardSwish",)
    ops_per_element = 4.0


@register_kind
class Hardsigmoid(_Activation):
    name = "hardsigmoid"
    modules = (nn.Hardsigmoid,)
    ops = ("hardsigmoid",)
    onnx_ops = ("HardSigmoid",)
    ops_per_element = 3.0


@register_kind
class Sigmoid(_Activation):
    name = "sigmoid"
    modules = (nn.Sigmoid,)
    ops = ("sigmoid",)
    onnx_ops = ("Sigmoid",)
    ops_per_element = 4.0


@register_kind
class GELU(_Activation):
    name = "gelu"
    modules = (nn.GELU,)
    ops = ("gelu",)
    onnx_ops = ("Gelu",)
    ops_per_element = 8.0


@register_kind
class Tanh(_Activation):
    name = "tanh"
    modules = (nn.Tanh,)
    ops = ("tanh",)
    onnx_ops = ("Tanh",)
    ops_per_element = 4.0


@register_kind
class Mish(_Activation):
    name = "mish"
    modules = (nn.Mish, nn.Softplus)
    ops = ("mish", "softplus")
    onnx_ops = ("Mish", "Softplus")
    ops_per_element = 6.0


def reduces_contiguous(dim: int | None, shape: Sequence[int]) -> bool:
    """Whether a softmax along ``dim`` (None: torch's implicit dim) of a tensor of
    ``shape`` reduces over adjacent elements: the last axis, or one followed by size-1
    axes only."""
    rank = len(shape)
    if rank == 0:
        return True
    if dim is None:
        dim = 0 if rank in (1, 3) else 1
    return all(size == 1 for size in shape[int(dim) % rank + 1:])


@register_kind
class Softmax(_Activation):
    """Softmax along adjacent elements (attention's over keys, a classifier's over
    classes); along a strided axis (a feature map's channels) it is ``softmax_strided``,
    which runtimes may run much slower (ONNX Runtime transposes it: 12 ns per element
    against 0.1 on the profiles' Zen 4)."""
    name = "softmax"
    modules = (nn.Softmax, nn.LogSoftmax)
    ops = ("softmax", "log_softmax")
    onnx_ops = ("Softmax", "LogSoftmax")
    ops_per_element = 5.0

    def attrs_from_module(self, module):
        return {"dim": module.dim}

    def attrs_from_call(self, args, kwargs):
        return {"dim": args[1] if len(args) > 1 else kwargs.get("dim")}

    def resolve(self, attrs):
        return "softmax_strided" if attrs.get("strided") else self.name

    def resolve_operands(self, attrs, is_weight, in_shapes=()):
        if in_shapes and not reduces_contiguous(attrs.get("dim"), in_shapes[0]):
            return "softmax_strided"
        return self.resolve(attrs)


alias_kind("softmax_strided", Softmax)


@register_kind
class UnaryMath(_Activation):
    """Pointwise math without a dedicated kind (exp, sqrt, abs, ...)."""
    name = "unary"
    ops = ("exp", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "abs", "neg", "pow", "erf",
           "sin", "cos", "reciprocal", "square", "sign", "floor", "ceil", "round",
           "invert", "bitwise_not")
    onnx_ops = ("Exp", "Log", "Sqrt", "Abs", "Neg", "Pow", "Erf", "Sin", "Cos", "Reciprocal",
                "Sign", "Floor", "Ceil", "Round", "Not")
