"""The graph matcher: executed kernels → the original layers of the benchmark network.

A backend reports kernels, each with the module paths of the original layers it
computes (:class:`~annette_torch.backends.KernelRecord`). Per layer of the traced
benchmark network the matcher decides

* ``executed``: the layer is the first (in execution order) of at least one executed
  kernel, its *primary*; its time is the sum of those kernels' times, run by run;
* ``fused``: the layer is computed inside a kernel whose primary is another layer
  (``fused_into``); also a non-free layer that no kernel names whose only parent is
  executed or fused, since the exporter or runtime folded it there (BN into a conv);
* ``optimized_out``: no kernel computes it and nothing absorbed it (views, identities).

and for each edge layer → successor the paper's fusion state: ``fused`` when both end
in the same kernel, ``possibly-fused`` when they do but the successor has several
inputs (a residual add could have merged into either producer), ``not-fused`` otherwise.
When several layers share a module path (functional calls inside one module), a kernel
computes those its ONNX nodes name by op type and place (:attr:`KernelRecord.nodes`: the
second ``Mul`` of the path is the layer that exported the path's second ``Mul``, each
layer exporting its kind's ``onnx_ops`` once and its ``export_ops`` as often as they say:
a squeeze-excite's ``x.mean`` and ``x * gate``, an attention's two MatMuls), and otherwise
the last of them, the module's output.
Executed kernels that compute no original layer (layout reorders the runtime inserted)
are kept as rows with an empty ``layer``, so the sum of rows still covers the network;
except where a runtime renamed what it computes: a nameless kernel whose type computes
one kind (:data:`RENAMED_KERNELS`: OpenVINO merges the slices of one tensor into a
``VariadicSplit_<id>`` and moves a layer norm after a token select as ``MVN_<id>``) is
the kernel of the layers of that kind no kernel names, when it is the only such kernel;
and when exactly one non-free layer is computed by no kernel, the nameless kernels other
than layout reorders are its kernels (a runtime that decomposed the layer and lost its
name, as OpenVINO does for GroupNorm).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.base import KernelRecord
from ..graph.layer_graph import EXPORT_DROPPED_OPS, Layer, LayerGraph
from ..kinds import FEATURES, KINDS
from ..measure.protocol import spread_of, statistic_ms


LAYOUT_KERNELS = frozenset({"Reorder", "ReorderInput", "ReorderOutput"})   # layout changes runtimes insert
#: kernel types that only move data: a product layer (a conv, an attention) whose kernels are
#: all of these ran its products inside a kernel given to another layer
MOVEMENT_KERNELS = LAYOUT_KERNELS | {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Concat",
                                     "Concatenation", "Split", "VariadicSplit", "Slice", "StridedSlice", "Gather"}
#: kernel type -> the layer kinds it computes, for kernels a runtime names after itself
RENAMED_KERNELS = {"VariadicSplit": ("slice", "split"), "Split": ("slice", "split"), "StridedSlice": ("slice",),
                   "Slice": ("slice",), "Gather": ("slice",), "MVN": ("layer_norm",)}
#: kernel type -> the layer kind it computes, for kernels a runtime made of several nodes and
#: named after one the layer does not export (OpenVINO's ``ShuffleChannels``: a channel
#: shuffle's Reshape, Transpose, Reshape, named after the second Reshape)
PATTERN_KERNELS = {"ShuffleChannels": "channel_shuffle"}


def _summary(runs: np.ndarray, statistic: str) -> tuple[float, float]:
    """(``statistic`` of the runs, their spread (p90 - p10) / median)."""
    return statistic_ms(runs, statistic), spread_of(runs)


def _exported_nodes(layer: Layer, op_type: str) -> int:
    """How many ``op_type`` nodes ``torch.onnx.export`` writes for ``layer`` (0 for a free
    one and for a copy the export drops, ``.contiguous()``)."""
    kind = KINDS.get(layer.kind)
    if kind is None or layer.free or layer.op in EXPORT_DROPPED_OPS:
        return 0
    return 1 if op_type in kind.onnx_ops else kind.export_ops.get(op_type, 0)


def _pattern_layer(graph: LayerGraph, kernel: KernelRecord, path: str, layers: list[str]) -> list[str]:
    """The layer of :data:`PATTERN_KERNELS`' kind that ``kernel`` computes, if its type is
    one of them: of the layers at ``path``, the only one of that kind, or the one whose two
    Reshape nodes include the node the kernel is named after (where the path's Reshapes
    are all theirs), else the last; where ``path`` holds none (each call its own module),
    the one the path's last layer views back, through views and dropped copies; ``[]``
    for other kernels or where there is no such layer."""
    kind = PATTERN_KERNELS.get(kernel.kernel_type)
    if kind is None:
        return []
    candidates = [name for name in layers if graph[name].kind == kind]
    if len(candidates) > 1:
        places = [place // 2 for node_path, op_type, place, count in kernel.nodes
                  if node_path == path and op_type == "Reshape" and count == 2 * len(candidates)]
        return [candidates[places[0]] if places else candidates[-1]]
    viewed = graph.viewed_from(layers[-1])
    return candidates or ([viewed.name] if viewed.kind == kind else [])


def _computed_layers(graph: LayerGraph, kernel: KernelRecord, at_path: dict[str, list[str]]) -> set[str]:
    """The layers ``kernel`` computes: the layer of each module path it names; of a path
    several layers share, those its nodes name (the n-th node of an op type at the path is
    the layer that exported it, counting each layer's nodes of that type in order, where
    the path's layers account for all of them: a shape computation's own Concat or Mul
    nodes leave their type unattributed), else the path's last layer."""
    names: set[str] = set()
    for path in kernel.layers:
        layers = at_path.get(path)
        if not layers:
            continue
        picked = _pattern_layer(graph, kernel, path, layers)
        if not picked and len(layers) > 1:
            for node_path, op_type, place, count in kernel.nodes:
                if node_path == path:
                    exporters = [name for name in layers for _ in range(_exported_nodes(graph[name], op_type))]
                    if len(exporters) == count:
                        picked.append(exporters[place])
        names.update(picked or layers[-1:])
    return names


def match_kernels(graph: LayerGraph, kernels: list[KernelRecord], statistic: str = "median") -> list[dict[str, Any]]:
    """One row per layer of ``graph`` (in execution order), then one per executed kernel
    that computes no layer; see the module docstring for the columns' meaning. A row's
    ``time_ms`` is ``statistic`` (:data:`~annette_torch.measure.protocol.STATISTICS`) of its
    runs, ``spread`` their (p90 - p10) / median."""
    at_path: dict[str, list[str]] = {}
    for layer in graph.layers:
        at_path.setdefault(layer.module_path, []).append(layer.name)
    executed = [k for k in kernels if k.status == "EXECUTED"]
    runs = max((len(k.runs_ms) for k in executed), default=0)

    primary_kernels: dict[str, list[KernelRecord]] = {}
    group: dict[str, str] = {}          # layer -> primary layer of the kernel computing it
    orphans: list[KernelRecord] = []
    computed = [(kernel, sorted(_computed_layers(graph, kernel, at_path), key=graph.index.get))
                for kernel in executed]                                  # each kernel's layers, primary first
    for kernel, names in computed:
        if not names:
            orphans.append(kernel)
            continue
        primary_kernels.setdefault(names[0], []).append(kernel)
        group[names[0]] = names[0]
    for _, names in computed:            # after all primaries: a layer that is primary somewhere stays so
        for name in names[1:]:
            group.setdefault(name, names[0])
    for kernel_type, kinds in RENAMED_KERNELS.items():   # renamed by the runtime: the kind's unnamed layers
        renamed = [k for k in orphans if k.kernel_type == kernel_type]
        unnamed = [layer.name for layer in graph.layers
                   if layer.kind in kinds and not layer.free and layer.name not in group]
        if len(renamed) == 1 and unnamed:
            primary_kernels[unnamed[0]] = renamed
            group.update((name, unnamed[0]) for name in unnamed)
            orphans.remove(renamed[0])
    for layer in graph.layers:          # folded away (no node computes it): into its only parent
        if layer.name not in group and not layer.free and len(layer.parents) == 1 and layer.parents[0] in group:
            group[layer.name] = group[layer.parents[0]]
    unaccounted = [layer.name for layer in graph.layers if layer.name not in group and not layer.free]
    computing_orphans = [k for k in orphans if k.kernel_type not in LAYOUT_KERNELS]
    if len(unaccounted) == 1 and computing_orphans:
        # a runtime that decomposed a layer and lost its name (OpenVINO's GroupNorm -> MVN):
        # the only layer nothing computes owns the orphan compute kernels
        primary_kernels[unaccounted[0]] = computing_orphans
        group[unaccounted[0]] = unaccounted[0]
        orphans = [k for k in orphans if k.kernel_type in LAYOUT_KERNELS]

    children = graph.children
    rows = []
    features = graph.features
    for i, layer in enumerate(graph.layers):
        own = primary_kernels.get(layer.name, [])
        if own:
            status = "executed"
            total = np.sum([np.resize(np.asarray(k.runs_ms, dtype=float), runs) for k in own], axis=0)
            time_ms, spread = _summary(total, statistic)
        else:
            status = "fused" if layer.name in group else "optimized_out"
            time_ms, spread = 0.0, 0.0
        computing = own or primary_kernels.get(group.get(layer.name, ""), [])
        successors = children[layer.name]
        states = []
        for child in successors:
            together = layer.name in group and group.get(child) == group[layer.name]
            multi_input = len(graph[child].input_shapes) > 1 or len(graph[child].parents) > 1
            states.append(("possibly-fused" if multi_input else "fused") if together else "not-fused")
        rows.append({
            "layer": layer.name, "kind": layer.kind, "op": layer.op, "status": status,
            "kernel": ";".join(k.name for k in computing),
            "kernel_type": ";".join(k.kernel_type for k in computing),
            "exec_type": ";".join(k.exec_type for k in computing),
            "fused_into": group[layer.name] if status == "fused" else "",
            "successors": ";".join(successors), "fusion": ";".join(states),
            "time_ms": time_ms, "spread": spread,
            **{name: features[i, j] for j, name in enumerate(FEATURES)},
        })
    for kernel in orphans:
        time_ms, spread = _summary(np.asarray(kernel.runs_ms, dtype=float), statistic)
        rows.append({"layer": "", "kind": "", "op": "", "status": "executed", "kernel": kernel.name,
                     "kernel_type": kernel.kernel_type, "exec_type": kernel.exec_type, "fused_into": "",
                     "successors": "", "fusion": "", "time_ms": time_ms, "spread": spread,
                     **{name: 0.0 for name in FEATURES}})
    return rows
