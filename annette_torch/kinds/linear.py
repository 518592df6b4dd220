"""Fully connected layers and matrix products.

* linear: ops = 2 * rows * in_features * out_features (rows = all leading dims).
* matmul (``@``, matmul, mm, bmm, addmm, baddbmm): ops = 2 * batch * M * K * N with
  broadcasting over batch dims; the addition in addmm/baddbmm is not counted. A matmul of
  an activation by a weight is recorded as a ``linear`` layer (its counts stay these).
* einsum: the operands are contracted pairwise from left to right, as torch does (indices
  only one operand has and nothing later needs are summed out first, for free); each
  pair costs 2 * product of the sizes of its indices when it sums over one (a batched
  matmul), or 1 * that product when it does not (an outer/elementwise product, a ``mul``).
  One operand: one op per input element.

Dimensions for the layer models: ``c`` = K (reduced), ``f`` = N (output features),
``h`` = M (rows), ``n`` = batch.
"""
from __future__ import annotations

import collections
import math

import torch
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

    def meta_output(self, attrs, tensors, kwargs):
        """(..., out_features) without torch's meta decomposition (which imports torch._dynamo
        the first time it runs)."""
        x = tensors[0]
        if x.shape[-1:] != (attrs["in_features"],):
            raise ValueError(f"expected {attrs['in_features']} input features, got input {tuple(x.shape)}")
        return torch.empty(tuple(x.shape[:-1]) + (attrs["out_features"],), dtype=x.dtype, device="meta")

    def dims(self, attrs, in_shapes, out_shapes):
        out = out_shapes[0]
        return {"n": out[0] if len(out) > 1 else 1, "h": math.prod(out[1:-1]) if len(out) > 2 else 1,
                "w": 1, "c": attrs["in_features"], "f": attrs["out_features"]}


@register_kind
class Bilinear(LayerKind):
    """y = x1^T A x2 + b: ops = 2 * rows * out_features * in1_features * in2_features."""
    name = "bilinear"
    modules = (nn.Bilinear,)
    ops = ("bilinear",)

    def attrs_from_module(self, module):
        return {"in1_features": module.in1_features, "in2_features": module.in2_features,
                "out_features": module.out_features, "bias": module.bias is not None}

    def attrs_from_call(self, args, kwargs):
        weight = args[2] if len(args) > 2 else kwargs["weight"]
        return {"in1_features": int(weight.shape[1]), "in2_features": int(weight.shape[2]),
                "out_features": int(weight.shape[0]), "bias": (args[3] if len(args) > 3 else kwargs.get("bias")) is not None}

    def count_ops(self, attrs, in_shapes, out_shapes):
        rows = math.prod(out_shapes[0][:-1])
        return 2.0 * rows * attrs["out_features"] * attrs["in1_features"] * attrs["in2_features"]

    def dims(self, attrs, in_shapes, out_shapes):
        out = out_shapes[0]
        return {"n": out[0] if len(out) > 1 else 1, "h": math.prod(out[1:-1]) if len(out) > 2 else 1, "w": 1,
                "c": attrs["in1_features"] * attrs["in2_features"], "f": attrs["out_features"]}


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

    @staticmethod
    def _operands(in_shapes):
        # addmm/baddbmm take (bias, a, b): the last two are the matrix operands.
        return in_shapes[-2], in_shapes[-1]

    def resolve_operands(self, attrs, is_weight, in_shapes=()):
        """``linear`` when the right operand is a weight and the left one is not: HF GPT-2's
        ``Conv1D`` (``addmm(bias, x, weight)``), which exporters write as a Gemm and the
        runtimes run as a fully connected layer."""
        return "linear" if len(is_weight) >= 2 and is_weight[-1] and not is_weight[-2] else self.name

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

    @staticmethod
    def _terms(attrs, in_shapes) -> tuple[list[str], str, dict[str, int]]:
        """Indices of each operand and of the output (``.`` stands for an ellipsis, sized
        as the product of the dims it covers) and the size of every index."""
        equation = attrs["equation"].replace("...", ".")
        lhs, arrow, out = equation.partition("->")
        terms = lhs.split(",")
        sizes: dict[str, int] = {}
        for term, shape in zip(terms, in_shapes):
            shape = tuple(int(d) for d in shape)
            if "." in term:
                head, tail = term.split(".")
                n_ell = len(shape) - len(head) - len(tail)
                shape = shape[:len(head)] + (math.prod(shape[len(head):len(head) + n_ell]),) + shape[len(head) + n_ell:]
            for letter, size in zip(term, shape):
                sizes[letter] = max(sizes.get(letter, 1), size)
        if not arrow:  # implicit output: the indices used once, ellipsis first, then sorted
            counts = collections.Counter("".join(terms))
            out = ("." if "." in counts else "") + "".join(sorted(k for k, v in counts.items() if v == 1 and k != "."))
        return terms, out, sizes

    def count_ops(self, attrs, in_shapes, out_shapes):
        terms, out, sizes = self._terms(attrs, in_shapes)
        if len(terms) == 1:
            return float(math.prod(sizes[i] for i in set(terms[0])))
        ops, left = 0.0, set(terms[0])
        for i, term in enumerate(terms[1:], start=1):
            later = set(out).union(*terms[i + 1:])
            right = set(term)
            left, right = ({d for d in left if d in right or d in later},
                           {d for d in right if d in left or d in later})
            contracted = {d for d in left & right if d not in later}
            ops += (2.0 if contracted else 1.0) * math.prod(sizes[d] for d in left | right)
            left = (left | right) - contracted
        return ops

    def dims(self, attrs, in_shapes, out_shapes):
        out = out_shapes[0]
        _, out_indices, sizes = self._terms(attrs, in_shapes)
        reduced = math.prod(v for k, v in sizes.items() if k not in out_indices)
        return {"n": out[0] if out else 1, "h": math.prod(out[1:-1]) if len(out) > 2 else 1,
                "w": 1, "c": reduced, "f": out[-1] if out else 1}
