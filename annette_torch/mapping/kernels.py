"""The mapping model: apply fusion rules to a LayerGraph and get the kernel table.

Walking the layers in execution order, a layer is fused into the kernel of one of its
parents when

* a rule (kernel's current kind, layer kind) exists and its condition holds for
  (kernel's primary layer, this layer),
* that parent is the kernel's current output and this layer is its only consumer, and
  the parent is not itself a graph output (otherwise the intermediate tensor must be
  written out anyway).

A multi-input layer (a residual ``add``) joins, among the parents that qualify, the one
computed last, as compilers fuse an eltwise op into the later of its producers. Its
kernel is marked ``possibly-fused`` whenever the fused layer has several inputs, because
the target may have merged it elsewhere (the ANNETTE paper's third state). A fused kernel keeps the primary layer's dimensions;
its ops and weights are the sums over its layers, its inputs are what it reads from
outside (or only its primary layer's inputs, where the profile's counting says
``post_op_inputs: false``: :mod:`.counting`), its output is that of its last layer.

Layers the target removes are free kernels and fuse with nothing; those that pass their
input on unchanged (a slice of a whole tensor, ``x + 0``, and on every target an identity
or an inference-mode dropout: :meth:`~annette_torch.graph.LayerGraph.see_through`) are also looked through: their
consumers fuse as if they read the layer before them (``sum(terms)``'s ``0 + terms[0]``
keeps the residual add fusing into its conv; timm's ``BatchNormAct2d`` puts an identity
``drop`` between the batch norm and its activation, which the runtimes fuse into the conv).
A removed repeat (:attr:`~annette_torch.graph.LayerGraph.repeats`) reads as the layer it
repeats, so a NAS cell node whose edges each apply the same ReLU has one consumer, and
the ReLU fuses into the kernel that computed the node where a rule allows.

A target that compiles connected elementwise layers into one kernel whatever their
consumers (OpenVINO's Snippets "Subgraph"; ``merge_elementwise``) gets a second pass:
kernels made only of :data:`ELEMENTWISE_KINDS` layers that read one another are merged
into one kernel of kind :data:`ELEMENTWISE_SUBGRAPH`, which reads each outside tensor
once and writes the tensors read outside it (NAS-Bench-201's ``x * 0`` edges and branch
sums between cells: one pass over memory, not one per op).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..graph.layer_graph import LayerGraph
from ..kinds import FEATURES
from .counting import Counting
from .rules import FusionRule

_OPS, _IN, _OUT, _W, _C, _F, _GROUPS = (FEATURES.index(k) for k in ("ops", "input_elems", "output_elems",
                                                                      "weight_elems", "c", "f", "groups"))


@dataclass(frozen=True)
class KernelTable:
    """One row per executed kernel, column arrays for vectorized layer models."""

    names: list[str]                 # the primary layer's name
    kinds: list[str]                 # kernel kind: a layer kind or a rule's result
    layers: list[tuple[str, ...]]    # the layers each kernel absorbed, primary first
    layer_kinds: list[tuple[str, ...]]  # their kinds
    fusion: list[str]                # "not-fused", "fused" or "possibly-fused"
    free: np.ndarray                 # bool: a free kernel costs nothing (views, identity)
    features: np.ndarray             # (kernels x FEATURES)
    groups: dict[str, np.ndarray]    # kernel kind -> row indices
    #: per kernel, the input elements its fused layers read from outside that ``features``
    #: leaves out (``Counting.post_op_inputs`` false); None: none left out
    omitted_inputs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)


NO_INPUT_GRAD = ":no-input-grad"   # kind suffix of a training kernel whose inputs need no gradient

#: layer kinds a ``merge_elementwise`` target compiles into one kernel when they read one another;
#: an inference batch norm is a per-channel multiply-add (one on a re-parameterizable block's
#: branch, not fused into a conv, runs inside the add after it: timm ``repghostnet_050`` in context)
ELEMENTWISE_KINDS = frozenset({"add", "sub", "mul", "div", "batch_norm", "relu", "relu6", "clamp", "leaky_relu",
                               "silu", "hardswish", "hardsigmoid", "sigmoid", "gelu", "tanh", "mish", "unary"})
#: the kind of a kernel that merged several elementwise kernels
ELEMENTWISE_SUBGRAPH = "eltwise_subgraph"


def removed_layers(graph: LayerGraph, optimize_graph: bool = False, remove_dead: bool | None = None,
                   remove_identity_slices: bool = False, fold_layout_transposes: bool = False,
                   split_shuffles_in_place: bool = False) -> frozenset[str]:
    """The layers of ``graph`` a target's compiler removes: with ``optimize_graph``
    :attr:`LayerGraph.folded` (constant subgraphs, repeated parameter-free layers, dead
    layers and copies the export drops), with ``remove_dead`` (default: ``optimize_graph``)
    the :attr:`LayerGraph.dead` ones, with ``remove_identity_slices``
    :attr:`LayerGraph.identity_slices`, with ``fold_layout_transposes``
    :attr:`LayerGraph.layout_transposes`, with ``split_shuffles_in_place``
    :attr:`LayerGraph.shuffle_splits`."""
    removed = graph.folded if optimize_graph else frozenset()
    if optimize_graph if remove_dead is None else remove_dead:
        removed = removed | graph.dead
    if remove_identity_slices:
        removed = removed | graph.identity_slices
    if split_shuffles_in_place:
        removed = removed | graph.shuffle_splits
    return removed | graph.layout_transposes if fold_layout_transposes else removed


def map_kernels(graph: LayerGraph, rules: tuple[FusionRule, ...], optimize_graph: bool = False,
                input_requires_grad: bool | None = None, counting: Counting | None = None,
                remove_dead: bool | None = None, remove_identity_slices: bool = False,
                merge_elementwise: bool = False, reorder_outputs: bool = False,
                fold_layout_transposes: bool = False, group_split_convs: bool = False,
                split_shuffles_in_place: bool = False) -> KernelTable:
    """Kernel table of ``graph`` under ``rules``, its layers counted as ``counting`` says
    (:mod:`.counting`; default: annette_torch's counts); the layers the target's compiler
    removes (:func:`removed_layers` of ``optimize_graph``, ``remove_dead``,
    ``remove_identity_slices``, ``fold_layout_transposes`` and ``split_shuffles_in_place``)
    are free kernels; with
    ``merge_elementwise`` connected elementwise kernels merge into one (see the module
    doc). For a training pass, ``input_requires_grad`` says whether the network input requires grad (a data batch does not; a calibration
    benchmark's input does): a kernel with weights whose inputs need no gradient (the
    first conv of a network, or one after ``detach``) computes only its weights'
    gradients, so its kind gets the suffix :data:`NO_INPUT_GRAD`. With ``reorder_outputs``
    (a target that computes in a blocked or channels-last layout and converts what the
    network returns to plain NCHW) each returned feature map gets an :data:`OUTPUT_REORDER`
    kernel (:func:`_with_output_reorders`). With ``group_split_convs`` (OpenVINO) each
    :attr:`LayerGraph.split_conv_groups` split, its convs and their concat run as one
    grouped conv (:func:`_grouped_conv_row`). Cached on the graph."""
    key = ("kernels", rules, optimize_graph, input_requires_grad, counting, remove_dead, remove_identity_slices,
           merge_elementwise, reorder_outputs, fold_layout_transposes, group_split_convs, split_shuffles_in_place)
    cached = graph._cache.get(key)
    if cached is None:
        feats = graph.features if counting is None else counting.features(graph)
        removed = removed_layers(graph, optimize_graph, remove_dead, remove_identity_slices, fold_layout_transposes,
                                 split_shuffles_in_place)
        grouped = {concat: group for concat, group in graph.split_conv_groups.items()
                   if concat not in removed and not removed.intersection((group[0], *group[1]))} \
            if group_split_convs else {}
        cached = _map(graph, rules, removed, feats, merge_elementwise, counting is None or counting.post_op_inputs,
                      grouped)
        if input_requires_grad is not None:
            cached = _mark_no_input_grad(graph, cached, input_requires_grad)
        if reorder_outputs:
            cached = _with_output_reorders(graph, cached)
        graph._cache[key] = cached
    return cached


#: the kind of the kernel a layout-changing target runs to hand a returned feature map back in NCHW
OUTPUT_REORDER = "output_reorder"


#: the smallest returned map that gets a reorder kernel: in the openvino-cpu store (2026-12-01)
#: 98-100 % of the conv-derived maps of 3,000 elements or more have one, 37 % of those of
#: 1,000-3,000 and 12 % of smaller ones (OpenVINO writes small maps in plain layout directly)
REORDER_MIN_ELEMS = 3000
#: layer kinds that write their feature map in the target's own layout (blocked or channels-last)
LAYOUT_KINDS = frozenset({"conv", "depthwise_conv", "conv_transpose"})


def _from_a_conv(graph: LayerGraph, name: str) -> bool:
    """Whether layer ``name``'s map descends from a :data:`LAYOUT_KINDS` layer through
    feature maps only (4-D outputs): the layout a conv chose propagates through the
    elementwise, pooling and resampling layers after it; a network's input, and layers
    that read only it, stay in plain NCHW."""
    seen, todo = set(), [name]
    while todo:
        layer = graph[todo.pop()]
        if layer.kind in LAYOUT_KINDS:
            return True
        for parent in layer.parents:
            shapes = graph[parent].output_shapes
            if parent not in seen and shapes and len(shapes[0]) == 4:
                seen.add(parent)
                todo.append(parent)
    return False


def _with_output_reorders(graph: LayerGraph, table: KernelTable) -> KernelTable:
    """``table`` and one :data:`OUTPUT_REORDER` kernel per returned feature map: a layer
    in :attr:`LayerGraph.outputs` computed by a non-free kernel, whose first output is
    (n, c, h, w) with ``c`` > 1, ``h*w`` > 1 (a 1-channel or 1x1 map is the same in every
    layout) and at least :data:`REORDER_MIN_ELEMS` elements, and which descends from a
    conv (:func:`_from_a_conv`). The kernel is named after that layer and absorbs no layer (``layers``
    is empty); it reads and writes the map (``input_elems`` = ``output_elems``, no ops)."""
    computed = {name for k, names in enumerate(table.layers) if not table.free[k] for name in names}
    rows = []
    for name in dict.fromkeys(graph.outputs or ()):
        shape = graph[name].output_shapes[0] if graph[name].output_shapes else ()
        if name in computed and len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] > 1 \
                and math.prod(shape) >= REORDER_MIN_ELEMS and _from_a_conv(graph, name):
            n, c, h, w = shape
            row = np.zeros(len(FEATURES))
            row[[_IN, _OUT]] = n * c * h * w
            row[[FEATURES.index(d) for d in ("n", "h", "w", "c", "f", "kh", "kw", "stride", "groups")]] = \
                (n, h, w, c, c, 1, 1, 1, 1)
            rows.append((name, row))
    if not rows:
        return table
    kinds = list(table.kinds) + [OUTPUT_REORDER] * len(rows)
    return replace(table, names=list(table.names) + [name for name, _ in rows], kinds=kinds,
                   layers=list(table.layers) + [()] * len(rows), layer_kinds=list(table.layer_kinds) + [()] * len(rows),
                   fusion=list(table.fusion) + ["not-fused"] * len(rows),
                   free=np.concatenate([table.free, np.zeros(len(rows), dtype=bool)]),
                   features=np.vstack([table.features, np.array([row for _, row in rows])]), groups=_groups(kinds),
                   omitted_inputs=None if table.omitted_inputs is None
                   else np.concatenate([table.omitted_inputs, np.zeros(len(rows))]))


def _mark_no_input_grad(graph: LayerGraph, table: KernelTable, input_requires_grad: bool) -> KernelTable:
    """``table`` with :data:`NO_INPUT_GRAD` appended to the kinds of weighted kernels whose
    primary layer reads only tensors that do not require grad (propagated from the input:
    a layer's output requires grad if an input does or it has weights; ``detach`` stops it)."""
    requires: dict[str, bool] = {}
    for layer in graph.layers:
        if layer.op == "detach":
            requires[layer.name] = False
        else:
            reads = [requires[p] for p in layer.parents] if layer.parents else [input_requires_grad]
            requires[layer.name] = any(reads) or layer.counts.weight_elems > 0
    kinds = list(table.kinds)
    for k, name in enumerate(table.names):
        layer = graph[name]
        if not table.free[k] and layer.counts.weight_elems > 0 and \
                not any(requires[p] for p in layer.parents) and not (input_requires_grad and not layer.parents):
            kinds[k] += NO_INPUT_GRAD
    return replace(table, kinds=kinds, groups=_groups(kinds))


def _groups(kinds: list[str]) -> dict[str, np.ndarray]:
    """Kernel kind -> indices of the kernels of that kind."""
    groups: dict[str, list[int]] = {}
    for k, kind in enumerate(kinds):
        groups.setdefault(kind, []).append(k)
    return {kind: np.array(idx, dtype=np.intp) for kind, idx in groups.items()}


def _post_op_reads(feats: np.ndarray, producer: int, layer: int) -> float:
    """The input elements fused layer ``layer`` reads besides ``producer``'s output (a
    residual add's second input)."""
    return max(0.0, feats[layer, _IN] - feats[producer, _OUT])


def _grouped_conv_row(feats: np.ndarray, convs: list[int]) -> tuple[str, np.ndarray]:
    """(kind, features) of the grouped conv that runs the parallel ``convs`` (rows of
    ``feats``, one split's parts): their ops, inputs, outputs and weights summed, their
    channels joined, one group each; a depthwise conv where each group reads one channel."""
    row = feats[convs[0]].copy()
    for column in (_OPS, _IN, _OUT, _W, _C, _F, _GROUPS):
        row[column] = feats[convs, column].sum()
    return ("depthwise_conv" if row[_GROUPS] == row[_C] else "conv"), row


def _map(graph: LayerGraph, rules: tuple[FusionRule, ...], folded: frozenset[str], feats: np.ndarray,
         merge_elementwise: bool = False, post_op_inputs: bool = True,
         grouped: dict[str, tuple[str, tuple[str, ...]]] | None = None) -> KernelTable:
    """The kernel table (see the module doc); ``grouped``: concat -> (split, convs) that
    run as one grouped conv, a kernel listing the first conv, the split, the other convs
    and the concat, which later layers fuse into as into a conv."""
    by_pair: dict[tuple[str, str], list[FusionRule]] = {}
    for rule in rules:
        by_pair.setdefault((rule.primary, rule.secondary), []).append(rule)
    secondaries = {rule.secondary for rule in rules}
    source, children = graph.see_through(folded)
    returned = graph.returned_through(source)

    grouped = grouped or {}
    joined = {name for split, convs in grouped.values() for name in (split, *convs)}   # run by their concat's kernel
    kernel_of: dict[str, int] = {}
    kinds: list[str] = []
    members: list[list[int]] = []
    fusion: list[str] = []
    rows: list[np.ndarray] = []
    for i, layer in enumerate(graph.layers):
        if layer.name in joined:
            continue
        if layer.name in grouped:
            split, convs = grouped[layer.name]
            ids = [graph.index[c] for c in convs]
            kind, row = _grouped_conv_row(feats, ids)
            for name in (split, *convs, layer.name):
                kernel_of[name] = len(kinds)
            kinds.append(kind)
            members.append([ids[0], graph.index[split], *ids[1:], i])
            fusion.append("fused")
            rows.append(row)
            continue
        target = None
        if layer.kind in secondaries and not layer.free and layer.name not in folded:
            candidates = []
            for parent in dict.fromkeys(source.get(p, p) for p in layer.parents):
                k = kernel_of[parent]
                if graph.layers[members[k][-1]].name != parent or children[parent] != [layer.name] \
                        or parent in returned:
                    continue
                primary = graph.layers[members[k][0]]
                if primary.free or primary.name in folded:       # a constant or a view: no kernel to join
                    continue
                for rule in by_pair.get((kinds[k], layer.kind), ()):
                    if rule.applies(primary, layer, returned):
                        candidates.append((graph.index[parent], k, rule))
                        break
            if candidates:
                _, target, rule = max(candidates)
        if target is None:
            kernel_of[layer.name] = len(kinds)
            kinds.append(layer.kind)
            members.append([i])
            fusion.append("not-fused")
            rows.append(feats[i].copy())
            continue
        row = rows[target]
        last = members[target][-1]
        row[_OPS] += feats[i, _OPS]
        row[_W] += feats[i, _W]
        if post_op_inputs:      # Counting.post_op_inputs
            row[_IN] += _post_op_reads(feats, last, i)
        row[_OUT] = feats[i, _OUT]
        members[target].append(i)
        kinds[target] = rule.result
        multi_input = len(layer.parents) > 1
        fusion[target] = "possibly-fused" if multi_input or fusion[target] == "possibly-fused" else "fused"
        kernel_of[layer.name] = target

    if merge_elementwise:
        members, kinds, fusion, rows = _merge_elementwise(graph, children, source, returned, folded, feats,
                                                          kernel_of, members, kinds, fusion, rows)
    names = [graph.layers[m[0]].name for m in members]
    grouping = {graph.index[name] for name in joined}      # the grouped convs' own layers, no post-ops
    free = np.array([len(m) == 1 and (graph.layers[m[0]].free or graph.layers[m[0]].name in folded)
                     for m in members], dtype=bool)
    omitted = None if post_op_inputs else np.array(
        [0.0 if kind == ELEMENTWISE_SUBGRAPH else sum(_post_op_reads(feats, before, i) for before, i in zip(m, m[1:])
                                                      if before not in grouping)
         for m, kind in zip(members, kinds)])
    return KernelTable(
        names=names, kinds=kinds,
        layers=[tuple(graph.layers[j].name for j in m) for m in members],
        layer_kinds=[tuple(graph.layers[j].kind for j in m) for m in members],
        fusion=fusion, free=free,
        features=np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES)),
        groups=_groups(kinds), omitted_inputs=omitted,
    )


def _merge_elementwise(graph: LayerGraph, children: dict[str, list[str]], source: dict[str, str],
                       returned: frozenset[str], folded: frozenset[str], feats: np.ndarray,
                       kernel_of: dict[str, int], members: list[list[int]], kinds: list[str],
                       fusion: list[str], rows: list[np.ndarray]):
    """(members, kinds, fusion, rows) with every set of elementwise-only kernels that read
    one another's outputs at their own size (a broadcast, such as squeeze-excite's gate, is
    not merged: OpenVINO runs it apart) merged into one :data:`ELEMENTWISE_SUBGRAPH` kernel
    (listed where its first layer ran), unless the merged kernel would wait for a kernel
    that waits for it. Its ops and weights are the sums over its layers; its inputs the
    outputs of the distinct layers outside it that it reads (the network input, for a
    layer with no parents); its output the outputs of its layers read outside it or
    returned."""
    def mergeable(k: int) -> bool:
        layers = [graph.layers[i] for i in members[k]]
        return all(layer.kind in ELEMENTWISE_KINDS and not layer.free and layer.name not in folded
                   for layer in layers)

    parent = list(range(len(members)))
    layers_of = {k: list(ids) for k, ids in enumerate(members)}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def reaches(src: int, dst: int) -> bool:
        """Whether a path leaves group ``src`` and enters group ``dst`` through another
        kernel (merging them would then make a kernel that waits for itself)."""
        limit = max(layers_of[dst])
        stack = [child for i in layers_of[src] for child in children[graph.layers[i].name]
                 if find(kernel_of[child]) not in (src, dst)]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if find(kernel_of[name]) == dst:
                return True
            if graph.index[name] < limit:
                stack.extend(children[name])
        return False

    ok = [mergeable(k) for k in range(len(members))]
    for k in range(len(members)):
        if not ok[k]:
            continue
        for i in members[k]:
            for child in children[graph.layers[i].name]:
                c = kernel_of[child]
                if not ok[c] or feats[graph.index[child], _OUT] != feats[i, _OUT]:   # a broadcast runs apart
                    continue
                a, b = find(k), find(c)
                if a != b and not reaches(a, b) and not reaches(b, a):
                    low, high = min(a, b), max(a, b)
                    parent[high] = low
                    layers_of[low] += layers_of.pop(high)
    roots: dict[int, list[int]] = {}
    for k in range(len(members)):
        roots.setdefault(find(k), []).append(k)
    if all(len(group) == 1 for group in roots.values()):
        return members, kinds, fusion, rows

    new_members, new_kinds, new_fusion, new_rows = [], [], [], []
    for root in sorted(roots):
        group = roots[root]
        if len(group) == 1:
            new_members.append(members[root])
            new_kinds.append(kinds[root])
            new_fusion.append(fusion[root])
            new_rows.append(rows[root])
            continue
        ids = sorted(i for k in group for i in members[k])
        inside = {graph.layers[i].name for i in ids}
        row = rows[root].copy()
        row[_OPS] = sum(rows[k][_OPS] for k in group)
        row[_W] = sum(rows[k][_W] for k in group)
        read: dict[str, float] = {}
        for i in ids:
            layer = graph.layers[i]
            if not layer.parents:
                read[""] = feats[i, _IN]
            for p in layer.parents:
                p = source.get(p, p)
                if p not in inside:
                    read[p] = feats[graph.index[p], _OUT]
        row[_IN] = sum(read.values())
        written = [feats[i, _OUT] for i in ids
                   if graph.layers[i].name in returned
                   or any(child not in inside for child in children[graph.layers[i].name])]
        row[_OUT] = sum(written) if written else feats[ids[-1], _OUT]
        new_members.append(ids)
        new_kinds.append(ELEMENTWISE_SUBGRAPH)
        new_fusion.append("fused")
        new_rows.append(row)
    return new_members, new_kinds, new_fusion, new_rows
