"""Convolutions: Conv1d/2d/3d (grouped, depthwise, dilated, strided) and ConvTranspose.

ops = 2 * N * prod(output spatial) * out_channels * (in_channels / groups) * prod(kernel)
for a convolution, and the same with input spatial for a transposed convolution (each
input pixel scatters a kernel-sized patch), matching ``torch.utils.flop_counter``.
Bias additions are not counted, as in the flop counter. A dilated, padded convolution
counts only the taps that fall inside its input: OpenVINO and oneDNN's direct kernels skip
those in the padding, which for DeepLab's atrous pyramid (dilation 12-36 on a 20x20 map)
are most of them (OpenVINO ran the dilation-24 conv in 2.0 ms, the dilation-1 count
predicts 14.9 ms); the flop counter counts them all. A target that computes them (eager
PyTorch, where oneDNN falls back to im2col + GEMM for large paddings) says so in its
profile's counting (:class:`~annette_torch.mapping.Counting`, ``all_taps``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .registry import LayerKind, alias_kind, register_kind, tuple_of


def _conv_attrs(module) -> dict:
    nd = len(module.kernel_size)
    return {
        "in_channels": module.in_channels, "out_channels": module.out_channels,
        "kernel_size": tuple(module.kernel_size), "stride": tuple(module.stride),
        "padding": module.padding if isinstance(module.padding, str) else tuple(module.padding),
        "dilation": tuple(module.dilation), "groups": module.groups, "spatial_dims": nd,
        "bias": module.bias is not None,
    }


def _call_attrs(args, kwargs, transposed: bool) -> dict:
    names = ("input", "weight", "bias", "stride", "padding") + (
        ("output_padding", "groups", "dilation") if transposed else ("dilation", "groups"))
    bound = dict(zip(names, args)) | kwargs
    weight = bound["weight"]
    nd = weight.dim() - 2
    groups = int(bound.get("groups", 1))
    w0, w1 = weight.shape[0], weight.shape[1]
    in_ch, out_ch = (w0, w1 * groups) if transposed else (w1 * groups, w0)
    padding = bound.get("padding", 0)
    return {
        "in_channels": in_ch, "out_channels": out_ch, "kernel_size": tuple(weight.shape[2:]),
        "stride": tuple_of(bound.get("stride", 1), nd),
        "padding": padding if isinstance(padding, str) else tuple_of(padding, nd),
        "dilation": tuple_of(bound.get("dilation", 1), nd), "groups": groups,
        "spatial_dims": nd, "bias": bound.get("bias") is not None,
    }


def _split(shape, attrs) -> tuple[int, tuple[int, ...]]:
    """(batch, spatial sizes) of a conv activation, batched (N, C, *S) or not (C, *S)."""
    nd = attrs["spatial_dims"]
    return math.prod(shape[:-nd - 1]) or 1, tuple(shape[-nd:])


def _taps_inside(in_spatial, out_spatial, attrs) -> int:
    """Kernel taps, summed over the output positions, that read the input rather than its
    padding (each spatial dimension independently)."""
    total = 1
    for size, out, k, stride, pad, dil in zip(in_spatial, out_spatial, attrs["kernel_size"], attrs["stride"],
                                             attrs["padding"], attrs["dilation"]):
        total *= sum(0 <= o * stride - pad + t * dil < size for o in range(out) for t in range(k))
    return total


def skips_padding(attrs) -> bool:
    """Whether the op count leaves out taps in the padding: a dilated, padded conv."""
    padding = attrs["padding"]
    return not isinstance(padding, str) and any(d > 1 for d in attrs["dilation"]) and any(padding)


def all_taps_ops(attrs, out_shape) -> float:
    """A conv's ops counting every kernel tap at every output position, those in the
    padding too (what a runtime computing the conv as im2col + GEMM does)."""
    batch, spatial = _split(out_shape, attrs)
    taps = math.prod(spatial) * math.prod(attrs["kernel_size"])
    return 2.0 * batch * attrs["out_channels"] * (attrs["in_channels"] // attrs["groups"]) * taps


def _conv_dims(attrs, spatial) -> dict:
    ks = attrs["kernel_size"]
    kh = int(math.prod(ks[:-1])) if len(ks) > 1 else 1
    return {
        "h": int(math.prod(spatial[:-1])) if len(spatial) > 1 else 1, "w": spatial[-1],
        "c": attrs["in_channels"], "f": attrs["out_channels"],
        "kh": kh, "kw": ks[-1], "stride": attrs["stride"][-1], "groups": attrs["groups"],
    }


@register_kind
class Conv(LayerKind):
    name = "conv"
    modules = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
    ops = ("conv1d", "conv2d", "conv3d")
    onnx_ops = ("Conv",)

    def attrs_from_module(self, module):
        return _conv_attrs(module)

    def attrs_from_call(self, args, kwargs):
        return _call_attrs(args, kwargs, transposed=False)

    def resolve(self, attrs):
        g = attrs["groups"]
        return "depthwise_conv" if g > 1 and g == attrs["in_channels"] else "conv"

    def count_ops(self, attrs, in_shapes, out_shapes):
        if in_shapes and skips_padding(attrs):
            batch, spatial = _split(out_shapes[0], attrs)
            taps = _taps_inside(_split(in_shapes[0], attrs)[1], spatial, attrs)
            return 2.0 * batch * attrs["out_channels"] * (attrs["in_channels"] // attrs["groups"]) * taps
        return all_taps_ops(attrs, out_shapes[0])

    def dims(self, attrs, in_shapes, out_shapes):
        batch, spatial = _split(out_shapes[0], attrs)
        return {"n": batch} | _conv_dims(attrs, spatial)

    def meta_output(self, attrs, tensors, kwargs):
        """The output of a conv module from the shape formula (torch's meta kernel costs
        ~10x more); inputs torch would reject raise ``ValueError``."""
        if len(tensors) != 1:
            return None  # the functional form: weight and bias are operands, run the op
        x, nd = tensors[0], attrs["spatial_dims"]
        if x.dim() not in (nd + 1, nd + 2) or x.shape[-nd - 1] != attrs["in_channels"]:
            raise ValueError(f"expected a ({nd + 1}D or {nd + 2}D) input with {attrs['in_channels']} "
                             f"channels, got {tuple(x.shape)}")
        spatial = tuple(x.shape[-nd:])
        if attrs["padding"] == "same":
            out = spatial
        else:
            padding = (0,) * nd if attrs["padding"] == "valid" else attrs["padding"]
            out = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1 for i, p, d, k, s in
                        zip(spatial, padding, attrs["dilation"], attrs["kernel_size"], attrs["stride"]))
        if min(out) < 1:
            raise ValueError(f"input {tuple(x.shape)} is smaller than the kernel {attrs['kernel_size']}")
        shape = tuple(x.shape[:-nd - 1]) + (attrs["out_channels"],) + out
        return torch.empty(shape, dtype=x.dtype, device="meta")


alias_kind("depthwise_conv", Conv)


@register_kind
class ConvTranspose(LayerKind):
    name = "conv_transpose"
    modules = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    ops = ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    onnx_ops = ("ConvTranspose",)

    def attrs_from_module(self, module):
        return _conv_attrs(module) | {"output_padding": tuple(module.output_padding)}

    def attrs_from_call(self, args, kwargs):
        return _call_attrs(args, kwargs, transposed=True)

    def count_ops(self, attrs, in_shapes, out_shapes):
        batch, spatial = _split(in_shapes[0], attrs)
        macs = (batch * math.prod(spatial) * attrs["in_channels"]
                * (attrs["out_channels"] // attrs["groups"]) * math.prod(attrs["kernel_size"]))
        return 2.0 * macs

    def dims(self, attrs, in_shapes, out_shapes):
        batch, spatial = _split(out_shapes[0], attrs)
        return {"n": batch} | _conv_dims(attrs, spatial)
