"""The layer-kind registry: which torch calls make a layer kind, and how it is counted.

Every layer kind is one class decorated with :func:`register_kind`, living beside its
siblings in this package. A kind declares

* ``modules``: ``nn.Module`` classes that *are* this kind when called (leaf modules),
* ``ops``: canonical names of functions and tensor methods that are this kind
  (see :func:`canonical_op`; ``torch.add``, ``operator.add``, ``Tensor.__add__`` and
  ``Tensor.add_`` are all ``"add"``),
* ``onnx_ops``: ONNX operator types that are this kind (used by the ONNX importer),
* ``export_ops``: further ONNX operator types ``torch.onnx.export`` writes for one layer
  of this kind, with how many nodes of each (a decomposition: scaled-dot-product attention
  as two MatMuls, a Softmax, ...), which tie a runtime's kernels to the layer but import as
  kinds of their own,
* ``attrs_from_module`` / ``attrs_from_call``: the layer's attributes (kernel, stride, ...),
* ``count``: operations (2 per multiply-accumulate) and the dimensions the layer
  models need (``h``, ``w``, ``c``, ``f``, ``kh``, ``kw``, ``stride``, ``groups``).

Element counts (input, output, weight elements) are computed once in :func:`layer_counts`
from the shapes; a kind supplies ``ops`` and its dimensions, and ``read_elems`` when its
kernel reads less than all of its operands (an embedding gathers rows of its table).
Adding a kind is one new class; nothing else changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch

Shape = tuple[int, ...]

#: Numeric per-layer features, in the column order used by kernel tables.
FEATURES: tuple[str, ...] = (
    "ops", "input_elems", "output_elems", "weight_elems",
    "n", "h", "w", "c", "f", "kh", "kw", "stride", "groups",
)


def numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


@dataclass(frozen=True)
class LayerCounts:
    """What the layer models need to know about one layer (ops count 2 per MAC).

    ``input_elems`` and ``weight_elems`` are what the kernel reads; ``stored_weight_elems``
    is what its weights hold in memory (more than it reads for an embedding; the same as
    ``weight_elems`` when not given).
    """

    ops: float
    input_elems: int
    output_elems: int
    weight_elems: int
    dims: dict[str, int] = field(default_factory=dict)
    stored_weight_elems: int | None = None

    def __post_init__(self) -> None:
        if self.stored_weight_elems is None:
            object.__setattr__(self, "stored_weight_elems", self.weight_elems)

    def row(self) -> tuple[float, ...]:
        """Values in :data:`FEATURES` order (missing dimensions are 1)."""
        d = self.dims
        return (float(self.ops), float(self.input_elems), float(self.output_elems),
                float(self.weight_elems)) + tuple(float(d.get(k, 1)) for k in FEATURES[4:])


class LayerKind:
    """Base class of a layer kind; subclasses override what differs."""

    name: ClassVar[str] = ""
    modules: ClassVar[tuple[type, ...]] = ()
    ops: ClassVar[tuple[str, ...]] = ()
    onnx_ops: ClassVar[tuple[str, ...]] = ()
    export_ops: ClassVar[dict[str, int]] = {}
    #: endings of other libraries' class names for this layer (see :meth:`claims`)
    module_names: ClassVar[tuple[str, ...]] = ()
    #: A free layer costs nothing at run time (identity, dropout, views).
    free: ClassVar[bool] = False

    def claims(self, module: Any) -> bool:
        """Whether a module whose class name ends in one of :attr:`module_names` is this
        layer (it has the attributes the kind reads); by default no."""
        return False

    def attrs_from_module(self, module: Any) -> dict[str, Any]:
        return {}

    def attrs_from_call(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        return {}

    def resolve(self, attrs: dict[str, Any]) -> str:
        """The kind name to record; a kind may specialise itself (conv -> depthwise_conv)."""
        return self.name

    def resolve_operands(self, attrs: dict[str, Any], is_weight: Sequence[bool],
                         in_shapes: Sequence[Shape] = ()) -> str:
        """The kind name to record given which tensor operands are weights (parameters or
        constants) and the operands' shapes; by default :meth:`resolve`."""
        return self.resolve(attrs)

    def count_ops(self, attrs: dict, in_shapes: list[Shape], out_shapes: list[Shape]) -> float:
        """Operations of the layer; elementwise kinds default to one per output element."""
        return float(sum(numel(s) for s in out_shapes))

    def dims(self, attrs: dict, in_shapes: list[Shape], out_shapes: list[Shape]) -> dict[str, int]:
        """Layer-model dimensions; by default those of the first output (NC[D]HW / N..C)."""
        return default_dims(out_shapes[0] if out_shapes else ())

    def read_elems(self, attrs: dict, in_shapes: list[Shape], input_elems: int,
                   weight_elems: int) -> tuple[int, int]:
        """(input, weight) elements the kernel reads, given those its operands and
        parameters hold; by default all of them."""
        return input_elems, weight_elems

    def meta_output(self, attrs: dict, tensors: list[Any], kwargs: dict) -> Any | None:
        """The output on the meta device without running the op, or None to run it.

        Shape propagation is the slow part of tracing; kinds whose output shape is
        obvious (same as the input, or broadcast of the inputs) answer here and must
        raise ``ValueError`` for inputs the real op would reject. ``tensors`` are the
        call's tensor operands in order, ``kwargs`` its keyword arguments.
        """
        return None


class SameShapeKind(LayerKind):
    """Kinds whose output has the shape and dtype of their first input."""

    def meta_output(self, attrs, tensors, kwargs):
        if len(tensors) != 1 or "dtype" in kwargs or not tensors[0].dtype.is_floating_point:
            return None  # integer inputs may change dtype (sqrt of an int tensor is float)
        x = tensors[0]  # torch.empty is ~10x faster than empty_like on meta
        return torch.empty(x.shape, dtype=x.dtype, device="meta")


class BroadcastKind(LayerKind):
    """Elementwise kinds whose output is the broadcast of their tensor operands."""

    def meta_output(self, attrs, tensors, kwargs):
        if len(tensors) != 2 or not all(t.dtype.is_floating_point for t in tensors):
            return None  # integer division and mixed dtypes follow rules best left to torch
        a, b = tensors
        shape = torch.broadcast_shapes(a.shape, b.shape)
        return torch.empty(shape, dtype=torch.promote_types(a.dtype, b.dtype), device="meta")


def default_dims(shape: Sequence[int]) -> dict[str, int]:
    """n, h, w, c of an activation: NCHW for rank >= 3 images, N..C for sequences/vectors.

    Rank 3 tensors are read as (N, L, C) token sequences when they come from
    transformers; callers that know better (convs, pools) pass their own dims.
    """
    shape = tuple(shape)
    if len(shape) == 0:
        return {"n": 1, "h": 1, "w": 1, "c": 1, "f": 1}
    if len(shape) == 1:
        return {"n": 1, "h": 1, "w": 1, "c": shape[0], "f": shape[0]}
    if len(shape) == 2:
        return {"n": shape[0], "h": 1, "w": 1, "c": shape[1], "f": shape[1]}
    if len(shape) == 3:
        return {"n": shape[0], "h": shape[1], "w": 1, "c": shape[2], "f": shape[2]}
    spatial = shape[2:]
    return {"n": shape[0], "c": shape[1], "f": shape[1],
            "h": int(math.prod(spatial[:-1])), "w": spatial[-1]}


KINDS: dict[str, LayerKind] = {}
_BY_MODULE: dict[type, LayerKind] = {}
_BY_OP: dict[str, LayerKind] = {}
_BY_ONNX: dict[str, LayerKind] = {}
_BY_NAME_ENDING: list[tuple[str, LayerKind]] = []     # (class name ending, kind): LayerKind.module_names


def register_kind(cls: type[LayerKind]) -> type[LayerKind]:
    """Class decorator: add a kind to the registry (names must be unique)."""
    kind = cls()
    if not kind.name or kind.name in KINDS:
        raise ValueError(f"layer kind {cls.__name__} needs a new, unique name (got {kind.name!r})")
    KINDS[kind.name] = kind
    for table, keys in ((_BY_MODULE, kind.modules), (_BY_OP, kind.ops), (_BY_ONNX, kind.onnx_ops)):
        for key in keys:
            if key in table:
                raise ValueError(f"{key!r} is claimed by both {table[key].name} and {kind.name}")
            table[key] = kind
    _BY_NAME_ENDING.extend((ending, kind) for ending in kind.module_names)
    return cls


def alias_kind(name: str, of: type[LayerKind]) -> None:
    """Register a second kind name sharing another kind's formulas (e.g. depthwise_conv)."""
    sub = type(f"{of.__name__}_{name}", (of,),
               {"name": name, "modules": (), "module_names": (), "ops": (), "onnx_ops": ()})
    register_kind(sub)


def kind_for_module(module: Any) -> LayerKind | None:
    """The kind of a module of a registered class, or of a subclass that keeps its
    ``forward`` (a subclass with its own forward, like torchvision's LayerNorm2d, is
    traced into instead); else of a class another library writes the same layer with,
    known by its name (a kind's ``module_names``: HuggingFace's ``LlamaRMSNorm``) when
    :meth:`LayerKind.claims` it."""
    for klass in type(module).__mro__:
        kind = _BY_MODULE.get(klass)
        if kind is not None:
            return kind if type(module).forward is klass.forward else None
    name = type(module).__name__
    for ending, kind in _BY_NAME_ENDING:
        if name.endswith(ending) and kind.claims(module):
            return kind
    return None


def kind_for_op(op_name: str) -> LayerKind | None:
    return _BY_OP.get(op_name)


def kind_for_onnx(op_type: str) -> LayerKind | None:
    return _BY_ONNX.get(op_type)


_RENAMES = {"truediv": "div", "true_divide": "div", "divide": "div", "multiply": "mul",
            "subtract": "sub", "concat": "cat", "concatenate": "cat", "swapaxes": "transpose",
            "swapdims": "transpose", "floor_divide": "floordiv", "absolute": "abs"}
_TORCH_MODULES = ("torch", "_operator", "operator", "builtins", "math")


def canonical_op(target: Any) -> str:
    """One name for every spelling of a function or tensor method.

    ``torch.add``, ``operator.add``, ``Tensor.add``, ``Tensor.add_``, ``Tensor.__add__``,
    ``Tensor.__radd__`` and ``Tensor.__iadd__`` are all ``"add"``. Functions from outside
    torch/operator/builtins keep their qualified name (``pkg.module.function``) so that a
    user's own ``relu`` is never mistaken for torch's.
    """
    if isinstance(target, str):
        name, module = target, "torch"
    else:
        name = getattr(target, "__name__", None) or type(target).__name__
        module = getattr(target, "__module__", None) or ""
        if module == "" and hasattr(target, "__objclass__"):  # method descriptors of Tensor
            module = "torch"
    if not module.split(".")[0] in _TORCH_MODULES:
        return f"{module}.{name}"
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name[:1] in ("r", "i") and name[1:] in ("add", "sub", "mul", "truediv", "floordiv",
                                                    "matmul", "and", "or", "pow", "mod", "div"):
            name = name[1:]
    elif name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return _RENAMES.get(name, name)


def layer_counts(kind: LayerKind, attrs: dict, in_shapes: list[Shape], out_shapes: list[Shape],
                 is_weight: Sequence[bool] = (), module_weight_elems: int = 0) -> LayerCounts:
    """Counts of one layer: element counts from the shapes, ops and dims from the kind.

    ``in_shapes`` are all tensor operands in call order; ``is_weight`` marks those that are
    parameters or constants (``F.linear(x, self.weight)``), which count as weights, not
    inputs. ``module_weight_elems`` adds the parameters and buffers of a leaf module.
    """
    flags = list(is_weight) + [False] * (len(in_shapes) - len(is_weight))
    inputs = sum(numel(s) for s, w in zip(in_shapes, flags) if not w)
    weights = module_weight_elems + sum(numel(s) for s, w in zip(in_shapes, flags) if w)
    read_inputs, read_weights = kind.read_elems(attrs, in_shapes, inputs, weights)
    return LayerCounts(
        ops=0.0 if kind.free else kind.count_ops(attrs, in_shapes, out_shapes),
        input_elems=read_inputs,
        output_elems=sum(numel(s) for s in out_shapes),
        weight_elems=read_weights,
        dims=kind.dims(attrs, in_shapes, out_shapes),
        stored_weight_elems=weights,
    )


def tuple_of(value: Any, n: int) -> tuple[int, ...]:
    """(3) -> (3, 3); (3, 5) -> (3, 5); used for kernel/stride/padding attributes."""
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),) * n
