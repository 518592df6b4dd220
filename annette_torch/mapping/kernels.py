"""The mapping model: apply fusion rules to a LayerGraph and get the kernel table.

Walking the layers in execution order, a layer is fused into the kernel of one of its
parents when

* a rule (kernel's current kind, layer kind) exists and its condition holds for
  (kernel's primary layer, this layer),
* that parent is the kernel's current output and this layer is its only consumer
  (otherwise the intermediate tensor must be written out anyway).

A multi-input layer (a residual ``add``) joins, among the parents that qualify, the one
computed last, as compilers fuse an eltwise op into the later of its producers. Its
kernel is marked ``possibly-fused`` whenever the fused layer has several inputs, because
the target may have merged it elsewhere (the ANNETTE paper's third state). A fused kernel keeps the primary layer's dimensions;
its ops and weights are the sums over its layers, its inputs are what it reads from
outside, its output is that of its last layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.layer_graph import LayerGraph
from ..kinds import FEATURES
from .rules import FusionRule

_OPS, _IN, _OUT, _W = (FEATURES.index(k) for k in ("ops", "input_elems", "output_elems", "weight_elems"))


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

    def __len__(self) -> int:
        return len(self.names)


def map_kernels(graph: LayerGraph, rules: tuple[FusionRule, ...], optimize_graph: bool = False) -> KernelTable:
    """Kernel table of ``graph`` under ``rules``; with ``optimize_graph`` the layers a
    graph compiler removes (:attr:`LayerGraph.folded`: constant subgraphs, repeated
    parameter-free layers) are free kernels. Cached on the graph."""
    key = ("kernels", rules, optimize_graph)
    cached = graph._cache.get(key)
    if cached is None:
        cached = graph._cache[key] = _map(graph, rules, graph.folded if optimize_graph else frozenset())
    return cached


def _map(graph: LayerGraph, rules: tuple[FusionRule, ...], folded: frozenset[str]) -> KernelTable:
    by_pair: dict[tuple[str, str], list[FusionRule]] = {}
    for rule in rules:
        by_pair.setdefault((rule.primary, rule.secondary), []).append(rule)
    secondaries = {rule.secondary for rule in rules}
    children = graph.children
    feats = graph.features

    kernel_of: dict[str, int] = {}
    kinds: list[str] = []
    members: list[list[int]] = []
    fusion: list[str] = []
    rows: list[np.ndarray] = []
    for i, layer in enumerate(graph.layers):
        target = None
        if layer.kind in secondaries and not layer.free and layer.name not in folded:
            candidates = []
            for parent in layer.parents:
                k = kernel_of[parent]
                if graph.layers[members[k][-1]].name != parent or children[parent] != [layer.name]:
                    continue
                primary = graph.layers[members[k][0]]
                for rule in by_pair.get((kinds[k], layer.kind), ()):
                    if rule.applies(primary, layer):
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
        row[_IN] += max(0.0, feats[i, _IN] - feats[last, _OUT])
        row[_OUT] = feats[i, _OUT]
        members[target].append(i)
        kinds[target] = rule.result
        multi_input = len(layer.parents) > 1
        fusion[target] = "possibly-fused" if multi_input or fusion[target] == "possibly-fused" else "fused"
        kernel_of[layer.name] = target

    names = [graph.layers[m[0]].name for m in members]
    groups: dict[str, list[int]] = {}
    for k, kind in enumerate(kinds):
        groups.setdefault(kind, []).append(k)
    free = np.array([len(m) == 1 and (graph.layers[m[0]].free or graph.layers[m[0]].name in folded)
                     for m in members], dtype=bool)
    return KernelTable(
        names=names, kinds=kinds,
        layers=[tuple(graph.layers[j].name for j in m) for m in members],
        layer_kinds=[tuple(graph.layers[j].kind for j in m) for m in members],
        fusion=fusion, free=free,
        features=np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES)),
        groups={kind: np.array(idx, dtype=np.intp) for kind, idx in groups.items()},
    )
