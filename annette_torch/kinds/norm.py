"""Normalisation layers: ops = per-element work at inference.

BatchNorm in inference is a per-channel scale and shift (2 ops per element); LayerNorm
and GroupNorm compute statistics too (mean, variance, normalise, scale, shift: 5 ops
per element); RMSNorm has no mean to subtract and no shift (square, mean, normalise,
scale: 4 ops per element). None of these are counted by ``torch.utils.flop_counter``.
"""
from __future__ import annotations

from torch import nn

from .registry import SameShapeKind, numel, register_kind


def _maps_of_positions(shape) -> dict[str, int]:
    """Dims of an ``(N, C, L)`` activation read channels first: N maps of L positions."""
    return {"n": shape[0], "h": shape[2], "w": 1, "c": shape[1], "f": shape[1]}


@register_kind
class BatchNorm(SameShapeKind):
    name = "batch_norm"
    modules = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
    ops = ("batch_norm",)
    onnx_ops = ("BatchNormalization",)

    def attrs_from_module(self, module):
        return {"num_features": module.num_features, "eps": module.eps}

    def meta_output(self, attrs, tensors, kwargs):
        x = tensors[0] if len(tensors) == 1 else None
        if x is not None and "num_features" in attrs and (x.dim() < 2 or x.shape[1] != attrs["num_features"]):
            raise ValueError(f"expected {attrs['num_features']} channels in dim 1, got input {tuple(x.shape)}")
        return super().meta_output(attrs, tensors, kwargs)

    def count_ops(self, attrs, in_shapes, out_shapes):
        return 2.0 * numel(out_shapes[0])

    def dims(self, attrs, in_shapes, out_shapes):
        """Channels are dim 1 at every rank: ``(N, C)`` (LeViT's batch norm on its flattened
        tokens) is one map of N positions, as the calibration's maps are, not N images of
        one position; ``(N, C, L)`` is N maps of L positions."""
        shape = out_shapes[0] if out_shapes else ()
        if len(shape) == 2:
            return {"n": 1, "h": shape[0], "w": 1, "c": shape[1], "f": shape[1]}
        if len(shape) == 3:
            return _maps_of_positions(shape)
        return super().dims(attrs, in_shapes, out_shapes)


@register_kind
class LayerNorm(SameShapeKind):
    name = "layer_norm"
    modules = (nn.LayerNorm,)
    ops = ("layer_norm",)
    onnx_ops = ("LayerNormalization",)

    def attrs_from_module(self, module):
        return {"normalized_shape": tuple(module.normalized_shape)}

    def attrs_from_call(self, args, kwargs):
        shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
        return {"normalized_shape": tuple(shape) if shape is not None else ()}

    def meta_output(self, attrs, tensors, kwargs):
        norm = tuple(attrs.get("normalized_shape", ()))
        x = tensors[0] if tensors else None
        if x is not None and norm and tuple(x.shape[-len(norm):]) != norm:
            raise ValueError(f"normalized_shape {norm} does not match the last dims of input {tuple(x.shape)}")
        return super().meta_output(attrs, tensors, kwargs)

    def count_ops(self, attrs, in_shapes, out_shapes):
        return 5.0 * numel(out_shapes[0])


@register_kind
class RMSNorm(LayerNorm):
    """torch's RMSNorm, and HuggingFace's (``LlamaRMSNorm``, ``MistralRMSNorm``,
    ``Qwen2RMSNorm``, T5's ``T5LayerNorm``: ``weight * x * rsqrt(mean(x^2) + eps)``, one
    1-D weight), which the graph compilers fuse into one kernel as they do torch's."""
    name = "rms_norm"
    modules = (nn.RMSNorm,)
    module_names = ("RMSNorm", "T5LayerNorm")
    ops = ("rms_norm",)
    onnx_ops = ("RMSNormalization",)

    def claims(self, module):
        weight = getattr(module, "weight", None)
        return (isinstance(weight, nn.Parameter) and weight.dim() == 1
                and any(hasattr(module, eps) for eps in ("variance_epsilon", "eps")))

    def attrs_from_module(self, module):
        shape = getattr(module, "normalized_shape", None)
        return {"normalized_shape": tuple(shape) if shape is not None else tuple(module.weight.shape)}

    def count_ops(self, attrs, in_shapes, out_shapes):
        return 4.0 * numel(out_shapes[0])


@register_kind
class GroupNorm(SameShapeKind):
    name = "group_norm"
    modules = (nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d,
               nn.LocalResponseNorm)
    ops = ("group_norm", "instance_norm", "local_response_norm", "normalize")
    onnx_ops = ("GroupNormalization", "InstanceNormalization", "LpNormalization", "LRN")

    def attrs_from_module(self, module):
        return {"num_groups": getattr(module, "num_groups", None)}

    def attrs_from_call(self, args, kwargs):
        """``F.normalize(x, dim=-1)`` (token features) says along which axis it works."""
        return {"dim": kwargs["dim"]} if "dim" in kwargs else {}

    def dims(self, attrs, in_shapes, out_shapes):
        """Channels are dim 1 (group and instance norms, ``F.normalize``'s default), so
        ``(N, C, L)`` is N maps of L positions; ``F.normalize(x, dim=-1)`` on ``(N, L, C)``
        tokens keeps the sequence reading."""
        shape = out_shapes[0] if out_shapes else ()
        if len(shape) == 3 and attrs.get("dim", 1) in (1, -2):
            return _maps_of_positions(shape)
        return super().dims(attrs, in_shapes, out_shapes)

    def count_ops(self, attrs, in_shapes, out_shapes):
        return 5.0 * numel(out_shapes[0])
