"""Attention: scaled-dot-product attention, nn.MultiheadAttention and window attention.

* scaled_dot_product_attention(q, k, v): ops = 2*B*H*L*S*E (q @ k^T) + 2*B*H*L*S*Ev (@ v).
* nn.MultiheadAttention: input projections of q, k, v, the two attention products and
  the output projection (2 per MAC), as its forward computes them.
* torchvision's ``shifted_window_attention`` (Swin v1/v2): qkv projection, the two
  products inside each (padded) window and the output projection.
Softmax, scaling and masking are elementwise and not counted, like the flop counter.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .registry import LayerKind, register_kind, tuple_of


@register_kind
class ScaledDotProductAttention(LayerKind):
    name = "attention"
    ops = ("scaled_dot_product_attention",)
    onnx_ops = ("Attention",)
    # the TorchScript export's decomposition (opset 20 has no attention op): q and k scaled
    # by the scale's root (Mul), k transposed, two MatMuls and a Softmax; the scale's own
    # shape arithmetic (Shape, Sqrt, Div, ...) is left out: its node count varies
    export_ops = {"Mul": 2, "Transpose": 1, "MatMul": 2, "Softmax": 1}

    def count_ops(self, attrs, in_shapes, out_shapes):
        q, k, v = in_shapes[:3]
        bh = math.prod(q[:-2])
        return 2.0 * bh * q[-2] * k[-2] * q[-1] + 2.0 * bh * q[-2] * k[-2] * v[-1]

    def dims(self, attrs, in_shapes, out_shapes):
        q, k = in_shapes[:2]
        return {"n": math.prod(q[:-2]), "h": q[-2], "w": k[-2], "c": q[-1], "f": in_shapes[2][-1]}


@register_kind
class MultiheadAttention(LayerKind):
    name = "multihead_attention"
    modules = (nn.MultiheadAttention,)

    def attrs_from_module(self, module):
        return {"embed_dim": module.embed_dim, "num_heads": module.num_heads,
                "kdim": module.kdim, "vdim": module.vdim, "batch_first": module.batch_first}

    def meta_output(self, attrs, tensors, kwargs):
        """(output, attention weights or None) as ``nn.MultiheadAttention.forward`` returns
        them, for query/key/value given positionally (otherwise the op is run)."""
        if len(tensors) != 3 or any(k in kwargs for k in ("key_padding_mask", "attn_mask", "is_causal")):
            return None
        query, key, value = tensors
        if query.shape[-1] != attrs["embed_dim"] or key.shape[-1] != attrs["kdim"] or value.shape[-1] != attrs["vdim"]:
            raise ValueError(f"expected query/key/value feature sizes {attrs['embed_dim']}/{attrs['kdim']}/"
                             f"{attrs['vdim']}, got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        output = torch.empty(query.shape, dtype=query.dtype, device="meta")
        if not kwargs.get("need_weights", True):
            return output, None
        n, length, source = self._lns(attrs, [tuple(query.shape), tuple(key.shape)])
        heads = () if kwargs.get("average_attn_weights", True) else (attrs["num_heads"],)
        batch = (n,) if query.dim() == 3 else ()
        return output, torch.empty(batch + heads + (length, source), dtype=query.dtype, device="meta")

    def _lns(self, attrs, in_shapes):
        q, k = in_shapes[0], in_shapes[1] if len(in_shapes) > 1 else in_shapes[0]
        if len(q) == 2:  # unbatched (L, E)
            return 1, q[0], k[0]
        if attrs["batch_first"]:
            return q[0], q[1], k[1]
        return q[1], q[0], k[0]

    def count_ops(self, attrs, in_shapes, out_shapes):
        n, l, s = self._lns(attrs, in_shapes)
        e, kd, vd = attrs["embed_dim"], attrs["kdim"], attrs["vdim"]
        projections = n * (l * e * e + s * kd * e + s * vd * e + l * e * e)
        products = 2 * n * l * s * e
        return 2.0 * (projections + products)

    def dims(self, attrs, in_shapes, out_shapes):
        n, l, s = self._lns(attrs, in_shapes)
        return {"n": n, "h": l, "w": s, "c": attrs["embed_dim"], "f": attrs["embed_dim"]}


@register_kind
class WindowAttention(LayerKind):
    name = "window_attention"
    ops = ("torchvision.models.swin_transformer.shifted_window_attention",)

    def attrs_from_call(self, args, kwargs):
        names = ("input", "qkv_weight", "proj_weight", "relative_position_bias", "window_size",
                 "num_heads", "shift_size")
        bound = dict(zip(names, args)) | kwargs
        return {"window_size": tuple_of(bound["window_size"], 2), "num_heads": int(bound["num_heads"]),
                "shift_size": tuple_of(bound["shift_size"], 2)}

    def _padded(self, attrs, x):
        b, h, w, c = x
        wh, ww = attrs["window_size"]
        return b, math.ceil(h / wh) * wh, math.ceil(w / ww) * ww, c

    def count_ops(self, attrs, in_shapes, out_shapes):
        b, ph, pw, c = self._padded(attrs, in_shapes[0])
        tokens = b * ph * pw
        window = attrs["window_size"][0] * attrs["window_size"][1]
        return 2.0 * (tokens * c * 3 * c + 2 * tokens * window * c + tokens * c * c)

    def dims(self, attrs, in_shapes, out_shapes):
        b, ph, pw, c = self._padded(attrs, in_shapes[0])
        return {"n": b, "h": ph, "w": pw, "c": c, "f": c,
                "kh": attrs["window_size"][0], "kw": attrs["window_size"][1]}
