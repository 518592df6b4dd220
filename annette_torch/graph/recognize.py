"""Turn one recorded torch call (a leaf module or a function/method) into a :class:`Layer`.

Both capture methods (FX symbolic tracing and the eager fallback) record calls as
(target, argument values, output value, where each tensor argument came from); this
module is the one place that decides the layer kind, attributes and counts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from ..kinds import KINDS, canonical_op, kind_for_module, kind_for_op, layer_counts
from ..kinds.registry import LayerKind
from .layer_graph import Layer

#: Calls that only do bookkeeping on shapes/tuples; they never become layers.
BOOKKEEPING_OPS = frozenset({
    "size", "dim", "getattr", "numel", "_assert", "eq_int", "len", "int", "float_int",
    "contiguous_format", "is_contiguous", "device", "dtype", "shape", "__get__", "get",
    "requires_grad_", "data_ptr", "item", "tolist", "stride", "storage_offset", "_assert_async",
    "element_size", "is_floating_point", "nelement", "ndimension",
})


@dataclass
class CallRecord:
    """A torch call as captured: target, its arguments and output, and data sources.

    ``inputs`` lists every tensor operand in call order with its source: the names of the
    layers that produced it (``()`` for a graph input), or ``None`` when it is a parameter
    or constant (a weight).
    """

    name: str
    module_path: str
    target: Any            # an nn.Module instance, a callable or a method name
    args: tuple
    kwargs: dict
    output: Any
    inputs: list[tuple[torch.Tensor, tuple[str, ...] | None]]


def is_leaf_module(module: nn.Module) -> bool:
    """Leaf modules are recorded whole: registered kinds and torch.nn's own layers."""
    if kind_for_module(module) is not None:
        return True
    klass = type(module)
    return (klass.__module__.startswith("torch.nn")
            and not isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict)))


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def op_label(target: Any) -> str:
    if isinstance(target, nn.Module):
        return type(target).__name__
    return canonical_op(target)


def classify(target: Any, args: tuple, kwargs: dict) -> tuple[LayerKind, dict]:
    """Kind and attributes of a call; unclaimed calls are the ``unknown`` kind, and so
    are calls whose attributes cannot be read (the reason is kept in the attributes)."""
    if isinstance(target, nn.Module):
        kind, label = kind_for_module(target), type(target).__qualname__
    else:
        label = canonical_op(target)
        kind = kind_for_op(label)
    if kind is None:
        return KINDS["unknown"], {"op": label}
    try:
        attrs = kind.attrs_from_module(target) if isinstance(target, nn.Module) else kind.attrs_from_call(args, kwargs)
    except Exception as error:  # noqa: BLE001 - an unusual call signature
        return KINDS["unknown"], {"op": label, "note": f"{kind.name} attributes unreadable: {error}"}
    return kind, attrs


def module_weight_elems(module: nn.Module) -> int:
    params = sum(p.numel() for p in module.parameters())
    buffers = sum(b.numel() for b in module.buffers())
    return int(params + buffers)


def build_layer(record: CallRecord, classified: tuple[LayerKind, dict] | None = None,
                flops: float | None = None) -> Layer:
    """Classify (unless ``classified`` is given) and count one call. ``flops`` (from
    torch's flop counter) is used for unknown kinds only."""
    kind, attrs = classified or classify(record.target, record.args, record.kwargs)
    if kind.name == "unknown" and flops:
        attrs["flops"] = flops
    in_shapes = [tuple(t.shape) for t, _ in record.inputs]
    out_shapes = [tuple(t.shape) for t in tensor_leaves(record.output)]
    is_weight = [src is None for _, src in record.inputs]
    module_weights = module_weight_elems(record.target) if isinstance(record.target, nn.Module) else 0
    counts = layer_counts(kind, attrs, in_shapes, out_shapes, is_weight, module_weights)
    parents: list[str] = []
    for _, src in record.inputs:
        for parent in src or ():
            if parent not in parents:
                parents.append(parent)
    return Layer(
        name=record.name, kind=kind.resolve_operands(attrs, is_weight, in_shapes), op=op_label(record.target),
        module_path=record.module_path, input_shapes=tuple(in_shapes),
        output_shapes=tuple(out_shapes), attrs=attrs, parents=tuple(parents), counts=counts,
        reads_input=any(src == () for _, src in record.inputs),
    )


def _is_channel_shuffle(layer: Layer, by_name: dict[str, Layer], consumers: dict[str, list[str]]) -> bool:
    """Whether ``layer`` is the transpose of ``x.view(n, g, c // g, h, w).transpose(1, 2)``
    ``[.contiguous()].view(n, c, h, w)``: see :func:`mark_channel_shuffles`."""
    if layer.kind != "permute" or len(layer.input_shapes) != 1 or len(layer.parents) != 1:
        return False
    shape = layer.input_shapes[0]
    if len(shape) != 5 or min(shape[1:3]) < 2 or layer.output_shapes != ((shape[0], shape[2], shape[1], *shape[3:]),):
        return False
    merged = (shape[0], shape[1] * shape[2], *shape[3:])
    split = by_name[layer.parents[0]]
    if split.kind != "reshape" or split.input_shapes[:1] != (merged,):
        return False
    after = consumers.get(layer.name, [])
    while len(after) == 1 and by_name[after[0]].op == "contiguous":
        after = consumers.get(after[0], [])
    return len(after) == 1 and by_name[after[0]].kind == "reshape" and by_name[after[0]].output_shapes == (merged,)


def mark_channel_shuffles(layers: list[Layer]) -> list[Layer]:
    """``layers`` with each permute that is the middle of a channel shuffle written out
    (ShuffleNet's ``x.view(n, g, c // g, h, w)``, ``.transpose(1, 2)``, an optional
    ``.contiguous()``, ``.view(n, c, h, w)``) as a ``channel_shuffle`` layer: a graph
    compiler runs the three as one kernel of its own, not as a transpose."""
    by_name = {layer.name: layer for layer in layers}
    consumers: dict[str, list[str]] = {}
    for layer in layers:
        for parent in layer.parents:
            consumers.setdefault(parent, []).append(layer.name)
    return [replace(layer, kind="channel_shuffle") if _is_channel_shuffle(layer, by_name, consumers) else layer
            for layer in layers]
