"""Fully connected layers and matrix products.

* linear: ops = 2 * rows * in_features * out_features (rows = all leading dims).
* matmul (``@``, matmul, mm, bmm, addmm, baddbmm): ops = 2 * batch * M * K * N with
  broadcasting over batch dims; the addition in addmm/baddbmm is not counted.
* einsum with two operands: ops = 2 * product of the sizes of all distinct indices.

Dimensions for the layer models: ``c`` = K (reduced), ``f`` = N (output features),
``h`` = M (rows), ``n`` = batch.
"""
from __future__ import annotations

import math

from torch import nn

from .registry import LayerKind, register_kind


@register_kind
class Linear(LayerKind):
    name = "linear"
    modules = (nn.Linear,)
    ops = ("linear",)
    onnx_ops = ("Gemm",)

    def attrs_from_module(self, module):
        return {"in_features": module.in_features, "out_features": module.out_features,
                "bias": module.bias is not None}

    def attrs_from_call(self, args, kwargs):
        weight = args[1] if len(args) > 1 else kwargs["weight"]
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
                "bias": bias is not None}

    def count_ops(self, attrs, in_shapes, out_shapes):
        rows = math.prod(out_shapes[0][:-1])
        return 2.0 * rows * attrs["in_features"] * attrs["out_features"]

    def dims(self, attrs, in_shapes, out_shapes):
        out = out_shapes[0]
        return {"n": out[0] if len(out) > 1 else 1, "h": math.prod(out[1:-1]) if len(out) > 2 else 1,
                "w": 1, "c": attrs["in_features"], "f": attrs["out_features"]}


def _matmul_mkn(a: tuple, b: tuple) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of a broadcasting matmul of shapes a and b."""
    a = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (width - len(batch_a)) + batch_a
    batch_b = (1,) * (width - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return batch, a[-2], a[-1], b[-1]


@register_kind
class MatMul(LayerKind):
    name = "matmul"
    ops = ("matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm")
    onnx_ops = ("MatMul",)

    def attrs_from_call(self, args, kwargs):
        return {}

    @staticmethod
    def _operands(in_shapes):
        # addmm/baddbmm take (bias, a, b): the last two are the matrix operands.
        return in_shapes[-2], in_shapes[-1]

    def count_ops(self, attrs, in_shapes, out_shapes):
        batch, m, k, n = _matmul_mkn(*self._operands(in_shapes))
        return 2.0 * batch * m * k * n

    def dims(self, attrs, in_shapes, out_shapes):
        batch, m, k, n = _matmul_mkn(*self._operands(in_shapes))
        return {"n": batch, "h": m, "w": 1, "c": k, "f": n}


@register_kind
class Einsum(LayerKind):
    name = "einsum"
    ops = ("einsum",)
    onnx_ops = ("Einsum",)

    def attrs_from_call(self, args, kwargs):
        equation = args[0] if isinstance(args[0], str) else kwargs["equation"]
        return {"equation": equation.replace(" ", "")}

    def _sizes(self, attrs, in_shapes):
        lhs = attrs["equation"].split("->")[0].split(",")
        sizes: dict[str, int] = {}
        for term, shape in zip(lhs, in_shapes):
            if "..." in term:
                head, tail = term.split("...")
                n_ell = len(shape) - len(head) - len(tail)
                sizes["..."] = max(sizes.get("...", 1), math.prod(shape[len(head):len(head) + n_ell]))
                term, shape = head + tail, shape[:len(head)] + shape[len(head) + n_ell:]
            for letter, size in zip(term, shape):
                sizes[letter] = max(sizes.get(letter, 1), int(size))
        return sizes

    def count_ops(self, attrs, in_shapes, out_shapes):
        sizes = self._sizes(attrs, in_shapes)
        factor = 2.0 if len(in_shapes) > 1 else 1.0
        return factor * math.prod(sizes.values())

    def dims(self, attrs, in_shapes, out_shapes):
        out = out_shapes[0]
        sizes = self._sizes(attrs, in_shapes)
        reduced = math.prod(v for k, v in sizes.items() if k not in attrs["equation"].split("->")[-1])
        return {"n": out[0] if out else 1, "h": math.prod(out[1:-1]) if len(out) > 2 else 1,
                "w": 1, "c": reduced, "f": out[-1] if out else 1}
