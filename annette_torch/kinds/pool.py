"""Pooling and reductions.

* max/avg pooling: ops = output elements * window size (one compare or add per input
  tap); ``kh``, ``kw`` and ``stride`` hold the window.
* adaptive pooling: the window is derived from input/output sizes; when the output is
  1x1 it is recorded as global pooling (``global_avg_pool`` / ``global_max_pool``).
* reductions (mean, sum, amax over dims) and scans (cumsum): one op per input element.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .registry import LayerKind, default_dims, numel, register_kind, tuple_of


def _pool_dims(kernel, stride, out_shape):
    """Dimensions of a pool whose window has ``len(kernel)`` spatial dims; the output is
    batched (N, C, *S) or not (C, *S)."""
    nd = len(kernel)
    spatial = tuple(out_shape[-nd:])
    channels = out_shape[-nd - 1] if len(out_shape) > nd else 1
    return {"n": math.prod(out_shape[:-nd - 1]) or 1, "c": channels, "f": channels,
            "h": math.prod(spatial[:-1]) if len(spatial) > 1 else 1, "w": spatial[-1],
            "kh": math.prod(kernel[:-1]) if len(kernel) > 1 else 1, "kw": kernel[-1],
            "stride": stride[-1]}


class _Pool(LayerKind):
    pool_type = ""

    def attrs_from_module(self, module):
        nd = int(type(module).__name__[-2])
        stride = module.stride if module.stride is not None else module.kernel_size
        return {"pool_type": self.pool_type, "kernel_size": tuple_of(module.kernel_size, nd),
                "stride": tuple_of(stride, nd), "padding": tuple_of(module.padding, nd)}

    def attrs_from_call(self, args, kwargs):
        names = ("input", "kernel_size", "stride", "padding")
        bound = dict(zip(names, args)) | kwargs
        size = bound["kernel_size"]
        # a tuple window says its rank; an int window is read as batched (N, C, *S) input
        nd = len(size) if isinstance(size, (tuple, list)) else max(bound["input"].dim() - 2, 1)
        stride = bound.get("stride") or bound["kernel_size"]
        return {"pool_type": self.pool_type, "kernel_size": tuple_of(bound["kernel_size"], nd),
                "stride": tuple_of(stride, nd), "padding": tuple_of(bound.get("padding", 0), nd)}

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(out_shapes[0]) * math.prod(attrs["kernel_size"]))

    def dims(self, attrs, in_shapes, out_shapes):
        return _pool_dims(attrs["kernel_size"], attrs["stride"], out_shapes[0])


@register_kind
class MaxPool(_Pool):
    name = "max_pool"
    pool_type = "max"
    modules = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
    ops = ("max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
           "max_pool2d_with_indices", "max_pool3d_with_indices")
    onnx_ops = ("MaxPool",)


@register_kind
class AvgPool(_Pool):
    name = "avg_pool"
    pool_type = "avg"
    modules = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
    ops = ("avg_pool1d", "avg_pool2d", "avg_pool3d")
    onnx_ops = ("AveragePool",)


class _AdaptivePool(LayerKind):
    pool_type = ""

    def attrs_from_module(self, module):
        return {"pool_type": self.pool_type, "output_size": module.output_size,
                "spatial_dims": int(type(module).__name__[-2])}

    def attrs_from_call(self, args, kwargs):
        return {"pool_type": self.pool_type,
                "output_size": args[1] if len(args) > 1 else kwargs.get("output_size")}

    def resolve(self, attrs):
        size = attrs["output_size"]
        sizes = size if isinstance(size, (tuple, list)) else (size,)
        return f"global_{self.pool_type}_pool" if all(s == 1 for s in sizes) else self.name

    @staticmethod
    def _window(in_shape, out_shape):
        return tuple(math.ceil(i / o) for i, o in zip(in_shape[2:], out_shape[2:])) or (1,)

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(in_shapes[0]))

    def dims(self, attrs, in_shapes, out_shapes):
        window = self._window(in_shapes[0], out_shapes[0])
        dims = _pool_dims(window, window, out_shapes[0])
        if math.prod(out_shapes[0][2:]) == 1:  # global pooling: the work is over the input
            dims |= {"h": math.prod(in_shapes[0][2:-1]) or 1, "w": in_shapes[0][-1]}
        return dims


@register_kind
class AdaptiveAvgPool(_AdaptivePool):
    name = "adaptive_avg_pool"
    pool_type = "avg"
    modules = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)
    ops = ("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d")

    def meta_output(self, attrs, tensors, kwargs):
        """(N, C, *output_size) without running torch's meta kernel, which imports
        torch._dynamo (about a second) the first time it runs."""
        size = attrs.get("output_size")
        spatial = len(size) if isinstance(size, (tuple, list)) else attrs.get("spatial_dims")
        if len(tensors) != 1 or size is None or spatial is None:
            return None  # e.g. F.adaptive_avg_pool2d(x, 1): the spatial rank is not known here
        x = tensors[0]
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * spatial
        if x.dim() not in (spatial + 1, spatial + 2):
            raise ValueError(f"expected a {spatial + 1}D or {spatial + 2}D input, got {tuple(x.shape)}")
        out = tuple(x.shape[-spatial + i] if s is None else int(s) for i, s in enumerate(sizes))
        return torch.empty(tuple(x.shape[:-spatial]) + out, dtype=x.dtype, device="meta")


@register_kind
class AdaptiveMaxPool(_AdaptivePool):
    name = "adaptive_max_pool"
    pool_type = "max"
    modules = (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
    ops = ("adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices")


@register_kind
class GlobalAvgPool(_AdaptivePool):
    name = "global_avg_pool"
    pool_type = "avg"
    onnx_ops = ("GlobalAveragePool",)


@register_kind
class GlobalMaxPool(_AdaptivePool):
    name = "global_max_pool"
    pool_type = "max"
    onnx_ops = ("GlobalMaxPool",)


@register_kind
class Reduce(LayerKind):
    """mean/sum/max/min/var over dimensions (x.mean((2, 3)) in many models) and scans."""
    name = "reduce"
    ops = ("mean", "sum", "amax", "amin", "max", "min", "var", "std", "prod", "norm",
           "logsumexp", "argmax", "argmin", "all", "any", "cumsum", "cumprod")
    onnx_ops = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                "ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin")

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(in_shapes[0])) if in_shapes else 0.0

    def dims(self, attrs, in_shapes, out_shapes):
        return default_dims(in_shapes[0] if in_shapes else out_shapes[0])
