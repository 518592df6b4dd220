"""Learning the mapping model (fusion rules) from multi-layer benchmarks.

Every edge A -> B of a benchmark graph on which the estimator's mapping could fuse B
(B is A's only consumer, counted as the mapping counts them: through layers that pass a
tensor on unchanged and with removed repeats read as the layer they repeat,
:meth:`~annette_torch.graph.LayerGraph.see_through`) is an example. Its primary P is the
executed layer whose kernel ran A (A itself, or the layer A was fused into: a BatchNorm
folded into its conv at export counts as fused, so conv -> bn -> relu is two examples
with P = conv). The label is whether the target ran B in P's kernel too. A multi-input B
is one example: with P the parent whose kernel ran it, where one did (the latest such),
else the parent computed last; the mapping likewise fuses B into the latest parent whose
rule applies. (OpenVINO adds a sum of two convs in the conv it runs last, which need not
be the one traced last; a NAS cell's node adds a pool's output in its conv's kernel.) Edges
touching an optimized-out layer, or a layer a graph compiler removes
(:attr:`~annette_torch.graph.LayerGraph.folded`), say nothing about fusion and are skipped.

Per (P kind, B kind) pair:

* fused (almost) always: an unconditional rule ``P kind + B kind -> P kind``;
* (almost) never: no rule;
* in between: a small decision tree (depth 3) whose splits are :class:`Clause` s on the
  dimensions and attributes of P and B (``<layer>.<attr> <= v`` or ``> v``; ``c``/``f``
  ``multiple of`` 4, 8 or 16, the channel conditions of blocked layouts; whether the
  network returns B's result and whether B reads the network's input), chosen by Gini
  gain; every leaf where fusion wins becomes one rule with its path as the condition.
  The tree is kept only if it explains the examples better than the majority decision;
  otherwise the majority decides. (ONNX Runtime's residual add needs all three levels:
  its NCHWc conv takes the add in when its input channels are a multiple of 4, the
  network does not return the sum and its other operand is not the plain-layout input.)

A kernel keeps its primary layer's dimensions, so a product layer (conv, linear,
matmul) is never fused into a kernel of another kind: such a pair gets no rule (decision
``product``; on ONNX Runtime the matcher names a fused conv after the activation before it).

Clause values are read exactly as :meth:`Clause.holds` reads them (attributes first,
then dimensions), so a learned condition means at estimate time what it meant here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..graph import LayerGraph
from ..kinds import PRODUCT_KINDS
from ..mapping import READS_INPUT, RETURNED, Clause, FusionRule
from .table import StoreData, layer_groups

#: Attributes and dimensions a learned condition may test, on either layer.
CONDITION_ATTRS = ("n", "h", "w", "c", "f", "kh", "kw", "stride", "groups", "padding", "dilation")
#: Channel counts a learned condition may test for divisibility (blocked layouts: NCHW4c/8c/16c).
MULTIPLE_ATTRS = ("c", "f")
CHANNEL_BLOCKS = (4, 8, 16)


def fusion_examples(data: StoreData, benchmarks=None) -> pd.DataFrame:
    """One row per fusable edge (see module doc): benchmark, primary and secondary layer
    names and kinds, ``fused``, and ``returned`` (the names of the layers whose results
    the benchmark returns, as the mapping counts them); ``benchmarks`` limits it to those ids."""
    groups = layer_groups(data.layers)
    rows = []
    for benchmark, graph in data.graphs.items():
        if benchmarks is not None and benchmark not in benchmarks:
            continue
        folded = graph.folded        # constant or repeated layers: a compiler removes them, nothing fuses
        source, children = graph.see_through(folded)     # consumers as the mapping counts them
        returned = graph.returned_through(source)
        for layer in graph.layers:
            if layer.free or layer.name in folded or layer.name in source:
                continue
            parents = [p for p in dict.fromkeys(source.get(q, q) for q in layer.parents)
                       if children[p] == [layer.name] and not graph[p].free and p not in folded]
            if not parents:
                continue
            own = groups.get((benchmark, layer.name))
            into = [p for p in parents if groups.get((benchmark, p)) == own]
            parent = max(into or parents, key=graph.index.__getitem__)
            primary = groups.get((benchmark, parent))
            if primary is None or own is None:
                continue
            rows.append((benchmark, primary, graph[primary].kind, layer.name, layer.kind, bool(into), returned))
    return pd.DataFrame(rows, columns=["benchmark", "primary", "primary_kind", "secondary", "secondary_kind", "fused",
                                       "returned"])


def _scalar(layer, attr: str) -> float:
    """The number :meth:`Clause.holds` compares for ``attr`` (a tuple of equal numbers
    counts as that number); NaN when the layer lacks it or it is not one number."""
    value: Any = layer.attrs[attr] if attr in layer.attrs else layer.counts.dims.get(attr)
    if isinstance(value, (tuple, list)) and value and all(v == value[0] for v in value):
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def condition_features(examples: pd.DataFrame, graphs: dict[str, LayerGraph]) -> pd.DataFrame:
    """Per example, the value of every ``<primary|secondary>.<attr>`` in :data:`CONDITION_ATTRS`,
    ``<role>.<attr> multiple of <m>`` for :data:`MULTIPLE_ATTRS` and :data:`CHANNEL_BLOCKS`
    and ``secondary.returned`` and ``secondary.reads_input`` (1 or 0; NaN where the
    attribute is not one number; the mapping never fuses into a returned layer, and
    whether the primary reads the input is what its input channels say)."""
    columns = {}
    layers_of = {role: [graphs[b][name] for b, name in zip(examples["benchmark"], examples[role])]
                 for role in ("primary", "secondary")}
    for role, layers in layers_of.items():
        for attr in CONDITION_ATTRS:
            columns[f"{role}.{attr}"] = values = [_scalar(layer, attr) for layer in layers]
            if attr in MULTIPLE_ATTRS:
                for block in CHANNEL_BLOCKS:
                    columns[f"{role}.{attr} multiple of {block}"] = [
                        float(v % block == 0) if v.is_integer() else math.nan for v in values]
    secondaries = layers_of["secondary"]
    columns[f"secondary.{RETURNED}"] = [float(layer.name in returned)
                                        for layer, returned in zip(secondaries, examples["returned"])]
    columns[f"secondary.{READS_INPUT}"] = [float(layer.reads_input) for layer in secondaries]
    return pd.DataFrame(columns, index=examples.index)


def _split_clauses(column: str, value: float) -> tuple[Clause, Clause]:
    """The clauses of the rows at or below ``value`` in ``column`` and of those above it."""
    role, name = column.split(".", 1)
    if name in (RETURNED, READS_INPUT):
        return Clause(role, name, "==", False), Clause(role, name, "==", True)
    if " multiple of " in name:
        attr, block = name.split(" multiple of ")
        return Clause(role, attr, "not multiple of", int(block)), Clause(role, attr, "multiple of", int(block))
    value = int(value) if float(value).is_integer() else value
    return Clause(role, name, "<=", value), Clause(role, name, ">", value)


@dataclass(frozen=True)
class PairDecision:
    """What was learned for one (primary kind, secondary kind) pair."""

    primary: str
    secondary: str
    examples: int
    fused: int
    rules: tuple[FusionRule, ...]
    how: str            # "always", "never", "condition", "majority", "product"
    errors: int         # examples the decision gets wrong


def _gini(labels: np.ndarray) -> float:
    if len(labels) == 0:
        return 0.0
    p = labels.mean()
    return 2 * p * (1 - p)


def _best_split(x: pd.DataFrame, y: np.ndarray, min_leaf: int) -> tuple[str, float] | None:
    """The ``column <= value`` split with the largest Gini gain, among columns defined
    for every row; None if no split leaves ``min_leaf`` rows on each side and gains."""
    best, best_gain = None, 1e-12
    parent = _gini(y) * len(y)
    for column in x.columns:
        values = x[column].to_numpy()
        if np.isnan(values).any():
            continue
        for v in np.unique(values)[:-1]:
            left = values <= v
            n_left = int(left.sum())
            if n_left < min_leaf or len(y) - n_left < min_leaf:
                continue
            gain = parent - _gini(y[left]) * n_left - _gini(y[~left]) * (len(y) - n_left)
            if gain > best_gain:
                best, best_gain = (column, float(v)), gain
    return best


def _narrowed(path: tuple[Clause, ...], clause: Clause) -> tuple[Clause, ...]:
    """``path`` and ``clause``, without the earlier bound on the same attribute in the same
    direction that ``clause`` narrows (``h <= 10 and h <= 8`` is ``h <= 8``)."""
    if clause.op not in ("<=", ">"):
        return path + (clause,)
    kept = tuple(c for c in path if (c.layer, c.attr, c.op) != (clause.layer, clause.attr, clause.op))
    return kept + (clause,)


def _grow(x: pd.DataFrame, y: np.ndarray, path: tuple[Clause, ...], depth: int,
          min_leaf: int) -> list[tuple[tuple[Clause, ...], np.ndarray]]:
    """Leaves (condition path, labels) of a depth-limited tree of clause splits. A split
    that decides no more examples right than its node's majority is undone: it fits an
    exception rather than a condition, or its leaves all decide alike and kept it would
    print one rule as two (``c > 11 and c <= 67``, ``c > 11 and c > 67``)."""
    split = _best_split(x, y, min_leaf) if depth > 0 and 0 < y.sum() < len(y) else None
    if split is None:
        return [(path, y)]
    column, value = split
    at_most, above = _split_clauses(column, value)
    left = x[column].to_numpy() <= value
    leaves = (_grow(x[left], y[left], _narrowed(path, at_most), depth - 1, min_leaf)
              + _grow(x[~left], y[~left], _narrowed(path, above), depth - 1, min_leaf))
    if _errors(leaves) >= _errors([(path, y)]):
        return [(path, y)]
    return leaves


def _errors(leaves: list[tuple[tuple[Clause, ...], np.ndarray]]) -> int:
    """Examples the leaves' majority decisions get wrong (a tie decides "keep apart")."""
    return sum(int((labels != (labels.mean() > 0.5)).sum()) for _, labels in leaves)


def decide_pair(primary: str, secondary: str, x: pd.DataFrame, y: np.ndarray, tolerance: float = 0.05,
                depth: int = 3, min_leaf: int = 2) -> PairDecision:
    """Rules for one kind pair from its examples' condition features ``x`` and labels ``y``."""
    n, fused = len(y), int(y.sum())
    if secondary in PRODUCT_KINDS and primary not in PRODUCT_KINDS:
        return PairDecision(primary, secondary, n, fused, (), "product", fused)
    unconditional = (FusionRule(primary, secondary, primary),)
    if fused >= (1 - tolerance) * n:
        return PairDecision(primary, secondary, n, fused, unconditional, "always", n - fused)
    if fused <= tolerance * n:
        return PairDecision(primary, secondary, n, fused, (), "never", fused)
    leaves = _grow(x, y, (), depth, min_leaf)
    rules = tuple(FusionRule(primary, secondary, primary, path) for path, labels in leaves if labels.mean() > 0.5)
    errors = _errors(leaves)
    majority_errors = min(fused, n - fused)
    if rules and errors < majority_errors:
        return PairDecision(primary, secondary, n, fused, rules, "condition", errors)
    if fused > n - fused:
        return PairDecision(primary, secondary, n, fused, unconditional, "majority", n - fused)
    return PairDecision(primary, secondary, n, fused, (), "majority", fused)


def learn_rules(data: StoreData, benchmarks=None, tolerance: float = 0.05,
                depth: int = 3) -> tuple[tuple[FusionRule, ...], list[PairDecision]]:
    """Fusion rules learned from the store's edges (all benchmarks, or ``benchmarks``),
    and the decision behind each kind pair, pairs in order of first appearance."""
    examples = fusion_examples(data, benchmarks)
    if examples.empty:
        return (), []
    features = condition_features(examples, data.graphs)
    decisions = []
    for (primary, secondary), index in examples.groupby(["primary_kind", "secondary_kind"], sort=False).groups.items():
        decisions.append(decide_pair(primary, secondary, features.loc[index],
                                     examples.loc[index, "fused"].to_numpy(dtype=int), tolerance, depth))
    rules = tuple(rule for decision in decisions for rule in decision.rules)
    return rules, decisions


def rule_accuracy(data: StoreData, rules: tuple[FusionRule, ...], benchmarks=None) -> float:
    """Share of fusable edges (of ``benchmarks``, or all) on which ``rules`` decide as the
    target did: fuse when the target fused, keep apart when it did not."""
    examples = fusion_examples(data, benchmarks)
    if examples.empty:
        return float("nan")
    by_pair: dict[tuple[str, str], list[FusionRule]] = {}
    for rule in rules:
        by_pair.setdefault((rule.primary, rule.secondary), []).append(rule)
    right = 0
    for row in examples.itertuples():
        graph = data.graphs[row.benchmark]
        primary, secondary = graph[row.primary], graph[row.secondary]
        fuses = any(rule.applies(primary, secondary, row.returned)
                    for rule in by_pair.get((row.primary_kind, row.secondary_kind), ()))
        right += fuses == row.fused
    return right / len(examples)


def describe_rule(rule: FusionRule) -> str:
    """``conv + relu -> conv [if secondary.kh <= 2]``."""
    text = f"{rule.primary} + {rule.secondary} -> {rule.result}"
    if rule.condition:
        text += " if " + " and ".join(f"{c.layer}.{c.attr} {c.op} {c.value}" for c in rule.condition)
    return text
