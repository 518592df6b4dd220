"""LayerGraph: the traced network, one node per layer, in execution order."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..kinds import FEATURES, KINDS, LayerCounts
from ..kinds.elementwise import is_identity_arithmetic

#: kinds that pass their one input on unchanged wherever they run
PASS_THROUGH = frozenset({"identity", "dropout"})
#: ops the ONNX export writes as nothing (``.contiguous()``) or as an Identity (``.clone()``)
EXPORT_DROPPED_OPS = frozenset({"contiguous", "clone"})
#: kinds whose layers read and write a feature map in the layout the compiler chooses for them
CONV_KINDS = frozenset({"conv", "depthwise_conv"})

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Layer:
    """One layer of a traced network.

    ``name`` is unique in its graph; ``parents`` are names of the layers whose outputs it
    reads (graph inputs and parameters are not layers); ``module_path`` is the dotted path
    of the ``nn.Module`` it came from (``""`` for code in the top-level forward);
    ``op`` says which torch call produced it (a module class or a function name);
    ``reads_input``: it reads a graph input directly (so it is never a constant).
    """

    name: str
    kind: str
    op: str
    module_path: str
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    attrs: dict[str, Any]
    parents: tuple[str, ...]
    counts: LayerCounts
    reads_input: bool = False

    @property
    def free(self) -> bool:
        return KINDS[self.kind].free if self.kind in KINDS else False


@dataclass
class LayerGraph:
    """Layers in a valid execution (topological) order, plus how they were captured.

    The graph is treated as immutable after tracing: derived data (the feature matrix,
    children, kernel tables per mapping) is computed once and cached. ``outputs`` names
    the layers whose results the network returns and ``written`` those an in-place write
    involves (its inputs, and the write itself when it is a layer): together they decide
    which layers are :attr:`dead`.
    """

    layers: list[Layer]
    input_shapes: tuple[tuple[int, ...], ...] = ()
    method: str = "fx"
    model_name: str = ""
    parameter_sizes: tuple[int, ...] | None = None   # elements of each trainable parameter (None: unknown)
    outputs: tuple[str, ...] | None = None    # layers whose results the network returns (None: unknown)
    written: tuple[str, ...] = ()             # layers an in-place write reads or is (copy_, setitem, add_)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.index = {layer.name: i for i, layer in enumerate(self.layers)}
        if len(self.index) != len(self.layers):
            raise ValueError("layer names in a LayerGraph must be unique")
        unknown = [name for name in (self.outputs or ()) + tuple(self.written) if name not in self.index]
        if unknown:
            raise ValueError(f"LayerGraph outputs/written name layers it does not have: {unknown}")

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def dead(self) -> frozenset[str]:
        """Names of the layers whose results never reach an output: no path leads from
        them to a returned layer or an in-place write (a NAS cell's branch into a ``none``
        edge). Empty when the outputs are unknown."""
        if "dead" not in self._cache:
            if self.outputs is None:
                self._cache["dead"] = frozenset()
            else:
                live = set(self.outputs) | set(self.written)
                for layer in reversed(self.layers):
                    if layer.name in live:
                        live.update(layer.parents)
                self._cache["dead"] = frozenset(self.index.keys() - live)
        return self._cache["dead"]

    @property
    def identity_arithmetic(self) -> frozenset[str]:
        """Names of the layers that return their one tensor operand unchanged: ``x + 0``,
        ``x - 0``, ``x * 1``, ``x / 1`` with a Python number (``sum(terms)`` starts with
        ``0 + terms[0]``). The ONNX export drops the integer ones; OpenVINO and ONNX Runtime
        remove the others."""
        if "identity_arithmetic" not in self._cache:
            self._cache["identity_arithmetic"] = frozenset(
                layer.name for layer in self.layers
                if len(layer.parents) <= 1 and len(layer.input_shapes) == 1 and layer.output_shapes == layer.input_shapes
                and is_identity_arithmetic(layer.kind, layer.op, layer.attrs))
        return self._cache["identity_arithmetic"]

    @property
    def folded(self) -> frozenset[str]:
        """Names of the layers a graph compiler removes: the :attr:`dead` ones, the
        :attr:`identity_arithmetic` ones, those
        computed from constants only (constant-kind layers such as ``zeros_like``, layers
        that read only parameters and buffers, such as LeViT's gather of its attention
        biases, which OpenVINO folds at compile time, and every layer all of whose parents
        are such layers: a conv applied to a NAS cell's zero node), and the :attr:`repeats`."""
        if "folded" not in self._cache:
            constant: set[str] = set()
            for layer in self.layers:
                if layer.kind == "constant" or (not layer.reads_input and all(p in constant for p in layer.parents)):
                    constant.add(layer.name)
            self._cache["folded"] = frozenset(constant | self.repeats.keys() | self.dead | self.identity_arithmetic
                                              | self.export_dropped)
        return self._cache["folded"]

    @property
    def export_dropped(self) -> frozenset[str]:
        """Names of the copies the ONNX export drops (:data:`EXPORT_DROPPED_OPS`: the
        ``.contiguous()`` after a transpose, a ``.clone()``): nothing runs for them on a
        target compiling the export; on eager PyTorch the transpose is a view and the
        contiguous copy is the one that runs."""
        if "export_dropped" not in self._cache:
            self._cache["export_dropped"] = frozenset(
                layer.name for layer in self.layers
                if layer.op in EXPORT_DROPPED_OPS and len(layer.parents) == 1
                and layer.output_shapes == layer.input_shapes)
        return self._cache["export_dropped"]

    @property
    def layout_transposes(self) -> frozenset[str]:
        """Names of the transposes between channels-last and channels-first that a compiler
        choosing each conv's memory layout runs as no copy (OpenVINO reads the conv's input
        channels-last): a transpose moving the last axis to position 1 whose every consumer,
        through reshapes and pass-through layers, is a conv ((N, HW, C) -> (N, C, HW) ->
        view -> conv; (N, H, W, C) -> (N, C, H, W) -> conv), and a (N, C, L) -> (N, L, C)
        transpose with one consumer of the flattened output of such a conv (the conv wrote
        channels-last). A (N, C, H, W) -> (N, H, W, C) permute of a conv's output is not one:
        OpenVINO runs it (ConvNeXt's before its layer norm), and so it does a transpose
        the network returns."""
        if "layout_transposes" not in self._cache:
            to_channels_first = {layer.name for layer in self.layers if self._moves_last_axis_to_1(layer)
                                 and (consumers := self._consumers_through(layer.name, self._is_view))
                                 and all(self[c].kind in CONV_KINDS for c in consumers)}
            from_conv = set()
            for layer in self.layers:
                shapes = layer.input_shapes[0] if len(layer.input_shapes) == 1 else ()
                if (layer.kind == "permute" and len(shapes) == 3 and shapes[1] != shapes[2] and len(layer.parents) == 1
                        and layer.output_shapes == ((shapes[0], shapes[2], shapes[1]),)
                        and len(self.children[layer.name]) == 1):
                    conv = self._producer_through(layer.parents[0], self._is_view)
                    if (conv.kind in CONV_KINDS and conv.parents
                            and self._producer_through(conv.parents[0], self._is_view).name in to_channels_first):
                        from_conv.add(layer.name)
            self._cache["layout_transposes"] = frozenset(to_channels_first | from_conv)
        return self._cache["layout_transposes"]

    @property
    def shuffle_splits(self) -> frozenset[str]:
        """Names of the splits (``chunk``, ``split``) that read a channel shuffle's output,
        through reshapes and dropped copies: ShuffleNetV2's ``x.chunk(2, dim=1)`` after the
        unit before it shuffled. OpenVINO writes its ``ShuffleChannels`` in plain layout and
        splits that in place, with no kernel."""
        if "shuffle_splits" not in self._cache:
            self._cache["shuffle_splits"] = frozenset(
                layer.name for layer in self.layers
                if layer.kind == "split" and len(layer.parents) == 1
                and self.viewed_from(layer.parents[0]).kind == "channel_shuffle")
        return self._cache["shuffle_splits"]

    @property
    def split_conv_groups(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Each channel concat that a compiler turns, with the split and the convs before it,
        into one grouped conv -> (the split, the convs in the concat's order): MixNet's
        grouped pointwise convs (``torch.split`` into equal parts, a 1x1 conv on each,
        ``torch.cat``). As OpenVINO's ``ConvolutionToGroupConvolutionFusion`` requires: a
        split into equal parts along the channels, whose every output a plain conv
        (``groups=1``, no bias: ONNX's bias is an add after the conv) reads; the convs of
        one shape, kernel, stride, padding and dilation, each read only by the concat; the
        concat along the channels of exactly those convs. Identities and dropped copies
        between them are looked through; a returned split or conv keeps the layers apart."""
        if "split_conv_groups" not in self._cache:
            returned = set(self.outputs or ()) | set(self.written)
            groups: dict[str, tuple[str, tuple[str, ...]]] = {}
            for layer in self.layers:
                if layer.kind != "concat" or layer.attrs.get("dim") not in (1, -len(layer.output_shapes[0]) + 1):
                    continue
                convs = [self._producer_through(p, self._passes) for p in layer.parents]
                if len(convs) < 2 or any(c.kind != "conv" or c.attrs.get("groups") != 1 or c.attrs.get("bias")
                                         or len(c.parents) != 1 or c.name in returned for c in convs):
                    continue
                split = self._producer_through(convs[0].parents[0], self._passes)
                if split.kind != "split" or split.name in returned or len(split.output_shapes) != len(convs):
                    continue
                shape = split.input_shapes[0] if len(split.input_shapes) == 1 else ()
                parts = set(split.output_shapes)
                if len(parts) != 1 or len(shape) < 3 or \
                        next(iter(parts)) != (shape[0], shape[1] // len(convs), *shape[2:]):
                    continue
                keys = {(c.input_shapes, c.output_shapes, c.attrs.get("kernel_size"), c.attrs.get("stride"),
                         c.attrs.get("padding"), c.attrs.get("dilation")) for c in convs}
                names = [c.name for c in convs]
                if len(keys) == 1 and len(set(names)) == len(names) \
                        and all(self._producer_through(c.parents[0], self._passes).name == split.name for c in convs) \
                        and all(self._consumers_through(c.name, self._passes) == [layer.name] for c in convs) \
                        and sorted(self._consumers_through(split.name, self._passes)) == sorted(names):
                    groups[layer.name] = (split.name, tuple(names))
            self._cache["split_conv_groups"] = groups
        return self._cache["split_conv_groups"]

    def _passes(self, layer: Layer) -> bool:
        """Whether ``layer`` hands its one input on to an exported graph unchanged (a pass-through
        layer or a copy the export drops; reshapes, unlike :meth:`_is_view`, are nodes)."""
        return layer.kind in PASS_THROUGH or layer.name in self.export_dropped

    def _moves_last_axis_to_1(self, layer: Layer) -> bool:
        """Whether ``layer`` is a transpose of one tensor (rank 3 or more) to (N, last axis, the rest)."""
        if layer.kind != "permute" or layer.op in EXPORT_DROPPED_OPS or len(layer.input_shapes) != 1:
            return False
        shape = layer.input_shapes[0]
        return (len(shape) >= 3 and shape[-1] != shape[1]
                and layer.output_shapes == ((shape[0], shape[-1], *shape[1:-1]),))

    def _is_view(self, layer: Layer) -> bool:
        return layer.kind == "reshape" or layer.kind in PASS_THROUGH or layer.name in self.export_dropped

    def _consumers_through(self, name: str, skips: Callable[[Layer], bool]) -> list[str]:
        """The layers reading ``name``'s output directly or through layers ``skips`` holds
        (:meth:`_is_view`: reshapes, pass-through layers and dropped copies), and any of
        those the network returns (a returned tensor is written out in its own layout)."""
        found = [name] if name in (self.outputs or ()) else []
        for child in self.children[name]:
            found += self._consumers_through(child, skips) if skips(self[child]) else [child]
        return found

    def viewed_from(self, name: str) -> Layer:
        """The layer that computed what ``name`` outputs, looking through reshapes,
        pass-through layers and dropped copies (:meth:`_is_view`); ``name``'s own layer
        where it is none of those."""
        return self._producer_through(name, self._is_view)

    def _producer_through(self, name: str, skips: Callable[[Layer], bool]) -> Layer:
        """The layer whose output ``name`` is, through one-input layers ``skips`` holds."""
        layer = self[name]
        while skips(layer) and len(layer.parents) == 1:
            layer = self[layer.parents[0]]
        return layer

    def passing(self, removed: frozenset[str] = frozenset()) -> frozenset[str]:
        """Names of the layers that pass the output of their one parent on unchanged: on
        every target the :data:`PASS_THROUGH` kinds, and of ``removed`` (what the target
        removes) the :attr:`identity_slices`, :attr:`identity_arithmetic`,
        :attr:`export_dropped` and :attr:`layout_transposes` layers (a conv after a removed
        transpose reads the transpose's input)."""
        unchanged = removed & (self.identity_slices | self.identity_arithmetic | self.export_dropped
                               | self.layout_transposes)
        return frozenset(layer.name for layer in self.layers if len(layer.parents) == 1
                         and (layer.kind in PASS_THROUGH or layer.name in unchanged))

    @property
    def repeats(self) -> dict[str, str]:
        """Each repeat of a parameter-free layer -> the first layer computing the same: the
        same op with the same attributes on the same inputs, where an input passed on
        unchanged (:meth:`passing`, with the :attr:`identity_arithmetic` layers removed)
        counts as the tensor it passes on and a repeat as the layer it repeats. Two 3x3
        average pools of one tensor are computed once; so are the ReLUs of a NAS cell's node
        and of its ``skip_connect`` copy. A layer reading a parent with several outputs (a
        split, a chunk) is never a repeat: the graph does not say which of them it reads."""
        if "repeats" not in self._cache:
            passing = self.passing(self.identity_arithmetic)
            same: dict[str, str] = {}           # a passing layer or a repeat -> the tensor it stands for
            repeats: dict[str, str] = {}
            first: dict[tuple, str] = {}
            for layer in self.layers:
                if layer.name in passing:
                    same[layer.name] = same.get(layer.parents[0], layer.parents[0])
                elif (layer.kind != "constant" and layer.counts.weight_elems == 0 and layer.parents and not layer.free
                      and all(len(self[p].output_shapes) <= 1 for p in layer.parents)):
                    inputs = tuple(same.get(p, p) for p in layer.parents)
                    key = (layer.kind, layer.op, inputs, layer.input_shapes, layer.output_shapes,
                           repr(sorted(layer.attrs.items())))
                    if key in first:
                        repeats[layer.name] = same[layer.name] = first[key]
                    else:
                        first[key] = layer.name
            self._cache["repeats"] = repeats
        return self._cache["repeats"]

    def see_through(self, removed: frozenset[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
        """(source, children) of the graph with the :meth:`passing` layers taken out and the
        removed :attr:`repeats` read as the layer they repeat, ``removed`` being what the
        target removes: ``source[name]`` is the layer whose output such a layer stands for,
        and a layer's children are those that read its output directly or through such
        layers (a NAS cell node's ReLU, computed once, is its only child however many edges
        apply it). Without such layers: ``({}, children)``."""
        passing = self.passing(removed)
        repeats = {name: first for name, first in self.repeats.items() if name in removed}
        source: dict[str, str] = {}
        for layer in self.layers:
            if layer.name in repeats:
                source[layer.name] = source.get(repeats[layer.name], repeats[layer.name])
            elif layer.name in passing:
                source[layer.name] = source.get(layer.parents[0], layer.parents[0])
        if not source:
            return source, self.children
        children: dict[str, list[str]] = {layer.name: [] for layer in self.layers}
        for layer in self.layers:
            if layer.name not in source:
                for parent in layer.parents:
                    children[source.get(parent, parent)].append(layer.name)
        return source, children

    def returned_through(self, source: dict[str, str]) -> frozenset[str]:
        """The layers whose results the network returns (:attr:`outputs`), each read as the
        layer it stands for in ``source`` (:meth:`see_through`)."""
        return frozenset(source.get(name, name) for name in self.outputs or ())

    @property
    def identity_slices(self) -> frozenset[str]:
        """Names of the slices that select their whole input (``x[:, :n]`` where ``x`` has
        ``n`` channels, GhostNet's ``cat(...)[:, :out_chs]``): basic indexing of one tensor
        whose output has the input's shape. A compiler that removes no-op slices (OpenVINO)
        runs nothing for them."""
        if "identity_slices" not in self._cache:
            self._cache["identity_slices"] = frozenset(
                layer.name for layer in self.layers
                if layer.kind == "slice" and layer.attrs.get("view") and len(layer.input_shapes) == 1
                and layer.output_shapes == layer.input_shapes)
        return self._cache["identity_slices"]

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __getitem__(self, name: str) -> Layer:
        return self.layers[self.index[name]]

    @property
    def features(self) -> np.ndarray:
        """(layers x FEATURES) float64 matrix of counts and dimensions, cached."""
        if "features" not in self._cache:
            rows = [layer.counts.row() for layer in self.layers]
            self._cache["features"] = np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
        return self._cache["features"]

    @property
    def children(self) -> dict[str, list[str]]:
        """Consumers of each layer's output, cached."""
        if "children" not in self._cache:
            children: dict[str, list[str]] = {layer.name: [] for layer in self.layers}
            for layer in self.layers:
                for parent in layer.parents:
                    children[parent].append(layer.name)
            self._cache["children"] = children
        return self._cache["children"]

    def kind_counts(self) -> collections.Counter:
        return collections.Counter(layer.kind for layer in self.layers)

    def unknown_layers(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.kind == "unknown"]

    def total(self, feature: str, kinds: str | tuple[str, ...] | None = None) -> float:
        """Sum of one feature (e.g. ``ops``) over all layers or over some kinds (one name
        or several)."""
        column = self.features[:, FEATURES.index(feature)]
        if kinds is None:
            return float(column.sum())
        if isinstance(kinds, str):
            kinds = (kinds,)
        mask = np.array([layer.kind in kinds for layer in self.layers], dtype=bool)
        return float(column[mask].sum()) if len(mask) else 0.0

    def to_frame(self) -> pd.DataFrame:
        """One row per layer: name, kind, op, module, shapes, parents and the features."""
        import pandas as pd  # imported on use: tracing and estimating need no pandas

        frame = pd.DataFrame(self.features, columns=list(FEATURES))
        frame.insert(0, "name", [layer.name for layer in self.layers])
        frame.insert(1, "kind", [layer.kind for layer in self.layers])
        frame.insert(2, "op", [layer.op for layer in self.layers])
        frame.insert(3, "module_path", [layer.module_path for layer in self.layers])
        frame["input_shapes"] = [layer.input_shapes for layer in self.layers]
        frame["output_shapes"] = [layer.output_shapes for layer in self.layers]
        frame["parents"] = [layer.parents for layer in self.layers]
        return frame

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}={v}" for k, v in self.kind_counts().most_common(6))
        return (f"LayerGraph({self.model_name or 'model'}: {len(self.layers)} layers via {self.method}; "
                f"{kinds}{', ...' if len(self.kind_counts()) > 6 else ''})")
