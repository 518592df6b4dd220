"""Data movement: concatenation, splitting, reshaping, layout changes, padding,
resampling, embedding lookups, and the free kinds (identity, dropout, views).

None of these multiply; ``ops`` is zero except for interpolation (a few ops per output
element). Their time is memory traffic, which the roofline models from input and output
element counts. Views (reshape, flatten, squeeze, expand, meshgrid, identity, dropout in
inference) and dtype casts (mostly of index tensors, or fused into their consumer) are
``free``: they cost no kernel. Window extraction (``unfold``) is a copy like ``repeat``.
"""
from __future__ import annotations

import torch
from torch import nn

from .registry import LayerKind, SameShapeKind, default_dims, numel, register_kind


class _DataMovement(LayerKind):
    def count_ops(self, attrs, in_shapes, out_shapes):
        return 0.0


@register_kind
class Concat(_DataMovement):
    name = "concat"
    ops = ("cat", "stack", "hstack", "vstack", "column_stack")
    onnx_ops = ("Concat",)

    def attrs_from_call(self, args, kwargs):
        return {"dim": args[1] if len(args) > 1 else kwargs.get("dim", 0)}


@register_kind
class Split(_DataMovement):
    name = "split"
    ops = ("split", "chunk", "unbind", "tensor_split", "split_with_sizes", "unsafe_split")
    onnx_ops = ("Split",)


@register_kind
class Permute(_DataMovement):
    """Layout changes that move data (a transpose materialises a copy on most targets)."""
    name = "permute"
    ops = ("permute", "transpose", "t", "movedim", "contiguous", "roll", "flip", "pixel_shuffle", "pixel_unshuffle",
           "repeat", "tile", "repeat_interleave", "clone", "copy")   # copy: Tensor.copy_ into another tensor
    onnx_ops = ("Transpose", "DepthToSpace", "SpaceToDepth", "Tile")


@register_kind
class ChannelShuffle(_DataMovement):
    """ShuffleNet's channel shuffle: ``nn.ChannelShuffle``, ``F.channel_shuffle``, and the
    transpose of ``x.view(n, g, c // g, h, w).transpose(1, 2)...view(n, c, h, w)``
    (:func:`~annette_torch.graph.recognize.mark_channel_shuffles`), which a graph compiler
    may run as one kernel of its own (OpenVINO's ``ShuffleChannels``) and which profiles
    without a model of their own answer as a permute."""
    name = "channel_shuffle"
    modules = (nn.ChannelShuffle,)
    ops = ("channel_shuffle", "native_channel_shuffle")
    export_ops = {"Transpose": 1}


@register_kind
class Slice(_DataMovement):
    """Indexing and slicing of a tensor (x[:, 0], narrow, select, gather)."""
    name = "slice"
    ops = ("getitem", "narrow", "select", "index_select", "gather", "take", "masked_select",
           "torchvision.models.swin_transformer._get_relative_position_bias")
    onnx_ops = ("Slice", "Gather", "GatherElements", "GatherND")

    def attrs_from_call(self, args, kwargs):
        """``view``: every argument after the tensor is basic (ints, slices, ``None``,
        ``...``: ``x[:, :16]``, ``narrow``, ``select``), so the result is a window of the
        input, not a gather (tensor or list indices); ``index``: those arguments as text,
        tensors by shape (two slices of one tensor are the same layer only if it matches)."""
        rest = [i for a in args[1:] for i in (a if isinstance(a, tuple) else (a,))]
        basic = all(isinstance(i, (int, slice, type(None), type(Ellipsis))) and not isinstance(i, bool) for i in rest)
        described = [f"tensor{tuple(i.shape)}" if isinstance(i, torch.Tensor) else repr(i) for i in rest]
        attrs = {"view": basic and bool(rest), "index": ", ".join(described + [f"{k}={v!r}" for k, v in kwargs.items()])}
        if rest and any(i is None for i in rest) and all(i is None or i is Ellipsis or (isinstance(i, slice) and i == slice(None))
                                                         for i in rest):
            attrs["new_axes_only"] = True        # x[:, :, None]: an unsqueeze, which every target runs as a view
        return attrs

    def resolve(self, attrs):
        """``reshape`` (a free view) for an index that only inserts axes, else ``slice``."""
        return "reshape" if attrs.get("new_axes_only") else self.name


@register_kind
class Reshape(_DataMovement):
    name = "reshape"
    free = True
    modules = (nn.Flatten, nn.Unflatten)
    ops = ("view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "expand",
           "expand_as", "view_as", "reshape_as", "broadcast_to", "to", "type", "float",
           "type_as", "detach", "requires_grad", "real", "as_strided", "long", "half",
           "double", "bool", "bfloat16", "meshgrid", "broadcast_tensors")
    onnx_ops = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Cast", "CastLike", "Shape",
                "Constant", "ConstantOfShape")


@register_kind
class Identity(SameShapeKind, _DataMovement):
    name = "identity"
    free = True
    modules = (nn.Identity,)
    ops = ("identity",)
    onnx_ops = ("Identity",)


@register_kind
class Dropout(SameShapeKind, _DataMovement):
    """Dropout and stochastic depth: identity at inference."""
    name = "dropout"
    free = True
    modules = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
    ops = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "torchvision.ops.stochastic_depth.stochastic_depth")
    onnx_ops = ("Dropout",)


@register_kind
class Constant(_DataMovement):
    """Tensors created without tensor inputs (arange, zeros, ones, full, as_tensor of Python numbers, ...)."""
    name = "constant"
    free = True
    ops = ("arange", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
           "empty_like", "new_zeros", "new_ones", "new_full", "new_empty", "tensor", "linspace",
           "eye", "rand", "randn", "randn_like", "rand_like", "zero", "fill", "normal", "uniform",
           "as_tensor", "scalar_tensor")
    onnx_ops = ("RandomNormalLike", "RandomUniformLike", "EyeLike")


@register_kind
class Pad(_DataMovement):
    name = "pad"
    modules = (nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.ConstantPad1d, nn.ConstantPad2d,
               nn.ConstantPad3d, nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d,
               nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d)
    ops = ("pad", "torchvision.models.swin_transformer._patch_merging_pad")
    onnx_ops = ("Pad",)

    def attrs_from_module(self, module):
        return {"padding": tuple(module.padding)}


@register_kind
class Unfold(_DataMovement):
    """Sliding windows: im2col (``F.unfold``, ``nn.Unfold``) and ``Tensor.unfold`` (a view
    whose copy happens in the reshape after it, which is free here). The output holds every
    window, so it is up to kernel-size times the input; ``h``, ``w``, ``c`` are the input's."""
    name = "unfold"
    modules = (nn.Unfold,)
    ops = ("unfold",)

    def dims(self, attrs, in_shapes, out_shapes):
        return default_dims(in_shapes[0] if in_shapes else out_shapes[0])


@register_kind
class Fold(LayerKind):
    """col2im (``F.fold``, ``nn.Fold``): overlapping windows are summed back into an image,
    ops = one add per input element."""
    name = "fold"
    modules = (nn.Fold,)
    ops = ("fold",)

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(in_shapes[0])) if in_shapes else 0.0


@register_kind
class Upsample(LayerKind):
    """Nearest/bilinear/bicubic resampling: ops = output elements * taps per output."""
    name = "upsample"
    modules = (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)
    ops = ("interpolate", "upsample", "upsample_nearest", "upsample_bilinear")
    onnx_ops = ("Resize", "Upsample")
    _TAPS = {"nearest": 1, "nearest-exact": 1, "linear": 2, "bilinear": 4, "bicubic": 16,
             "trilinear": 8, "area": 4}

    def attrs_from_module(self, module):
        return {"mode": module.mode}

    def attrs_from_call(self, args, kwargs):
        return {"mode": kwargs.get("mode", args[3] if len(args) > 3 else "nearest")}

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(out_shapes[0]) * self._TAPS.get(attrs.get("mode", "nearest"), 1))


@register_kind
class GridSample(LayerKind):
    """Sampling an image at a grid of points (``F.grid_sample``, RAFT's correlation lookup):
    ops = output elements * taps per output (4 bilinear, 1 nearest, 16 bicubic)."""
    name = "grid_sample"
    ops = ("grid_sample",)
    onnx_ops = ("GridSample",)
    _TAPS = {"bilinear": 4, "nearest": 1, "bicubic": 16}

    def attrs_from_call(self, args, kwargs):
        return {"mode": kwargs.get("mode", args[2] if len(args) > 2 else "bilinear")}

    def count_ops(self, attrs, in_shapes, out_shapes):
        return float(numel(out_shapes[0]) * self._TAPS.get(attrs.get("mode", "bilinear"), 4))


@register_kind
class Embedding(_DataMovement):
    """Table lookups: the kernel reads its indices and the rows they pick (indices x
    ``embedding_dim`` weight elements, an upper bound when indices repeat), not the whole
    table, which only counts as stored weights. ``one_hot`` is a lookup in the identity:
    no table."""
    name = "embedding"
    modules = (nn.Embedding, nn.EmbeddingBag)
    ops = ("embedding", "embedding_bag", "one_hot")

    def attrs_from_module(self, module):
        return {"num_embeddings": module.num_embeddings, "embedding_dim": module.embedding_dim}

    def attrs_from_call(self, args, kwargs):
        table = args[1] if len(args) > 1 else kwargs.get("weight")   # F.embedding(input, weight)
        if isinstance(table, torch.Tensor) and table.dim() == 2:
            return {"num_embeddings": int(table.shape[0]), "embedding_dim": int(table.shape[1])}
        return {}

    def read_elems(self, attrs, in_shapes, input_elems, weight_elems):
        if "embedding_dim" not in attrs or not in_shapes:
            return input_elems, weight_elems
        rows = numel(in_shapes[0]) * attrs["embedding_dim"]
        if weight_elems:                    # the table is a parameter
            return input_elems, min(rows, weight_elems)
        table = attrs["num_embeddings"] * attrs["embedding_dim"]   # a computed table is an operand
        return input_elems - table + min(rows, table), 0


@register_kind
class Unknown(LayerKind):
    """A tensor-producing call no kind claims. ``ops`` come from torch's flop counter when
    the tracer could run it (attrs["flops"]), else one per output element."""
    name = "unknown"

    def count_ops(self, attrs, in_shapes, out_shapes):
        flops = attrs.get("flops")
        return float(flops) if flops else float(sum(numel(s) for s in out_shapes))
