"""The NAS-Bench-201 search space (Dong & Yang, ICLR 2020): cell DAGs and the CIFAR network.

A cell has 4 nodes; node 0 is the cell input and node j (1..3) is the sum over i < j of
``op_{i->j}(x_i)``; node 3 is the cell output. Each of the 6 edges is one of :data:`OPS`.
Architectures are written as in NAS-Bench-201, edges grouped by target node::

    |nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|

The network is the benchmark's CIFAR skeleton: stem conv 3x3 + BN to ``C`` channels, three
stages of ``N`` cells (``C``, ``2C``, ``4C`` channels) joined by ResNet reduction blocks,
then BN + ReLU, global average pooling and a linear classifier. ``none`` edges do no work:
they are left out of the sums, and so are ``skip_connect`` / ``avg_pool_3x3`` edges whose
source is known to be zero; a node with no remaining input is ``zeros_like`` its cell input,
and nodes the cell output does not use are not computed.
"""
from __future__ import annotations

import random
from typing import Sequence

import torch
from torch import nn

#: The edge operations, in NAS-Bench-201's order.
OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
#: (source, target) node of each of the 6 edges, in arch-string order.
EDGES = ((0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3))


def parse_arch(arch: str) -> tuple[str, ...]:
    """The 6 edge ops of a NAS-Bench-201 arch string, in :data:`EDGES` order; ``ValueError``
    naming what is wrong otherwise."""
    if not isinstance(arch, str):
        raise TypeError(f"an arch string is a str, got {type(arch).__name__}")
    nodes = arch.split("+")
    if len(nodes) != 3:
        raise ValueError(f"arch {arch!r}: expected 3 node groups joined by '+', got {len(nodes)}")
    ops = []
    for target, group in enumerate(nodes, start=1):
        if not (group.startswith("|") and group.endswith("|") and len(group) > 1):
            raise ValueError(f"arch {arch!r}: node group {group!r} must start and end with '|'")
        entries = group[1:-1].split("|")
        if len(entries) != target:
            raise ValueError(f"arch {arch!r}: node {target} needs {target} inputs, got {len(entries)} in {group!r}")
        for source, entry in enumerate(entries):
            op, sep, index = entry.partition("~")
            if not sep or index != str(source):
                raise ValueError(f"arch {arch!r}: entry {entry!r} of node {target} must be 'op~{source}'")
            if op not in OPS:
                raise ValueError(f"arch {arch!r}: unknown op {op!r}; ops are {', '.join(OPS)}")
            ops.append(op)
    return tuple(ops)


def arch_string(ops: Sequence[str]) -> str:
    """The NAS-Bench-201 arch string of 6 edge ops in :data:`EDGES` order."""
    ops = tuple(ops)
    if len(ops) != len(EDGES) or any(op not in OPS for op in ops):
        raise ValueError(f"an architecture is {len(EDGES)} ops out of {', '.join(OPS)}; got {ops!r}")
    groups, start = [], 0
    for target in (1, 2, 3):
        groups.append("|" + "|".join(f"{op}~{i}" for i, op in enumerate(ops[start:start + target])) + "|")
        start += target
    return "+".join(groups)


def sample_architectures(n: int, seed: int) -> list[str]:
    """``n`` distinct arch strings drawn uniformly from the 5^6 = 15625 cells (same ``seed``,
    same list)."""
    size = len(OPS) ** len(EDGES)
    if not 0 <= n <= size:
        raise ValueError(f"can sample 0 to {size} distinct architectures, asked for {n}")
    indices = random.Random(seed).sample(range(size), n)
    return [arch_string([OPS[index // len(OPS) ** e % len(OPS)] for e in range(len(EDGES))])
            for index in indices]


class ReLUConvBN(nn.Sequential):
    """ReLU, convolution without bias, batch norm."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__(nn.ReLU(), nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False),
                         nn.BatchNorm2d(cout))


def edge_module(op: str, channels: int) -> nn.Module:
    """The module of one non-``none`` edge op on ``channels`` channels."""
    if op == "skip_connect":
        return nn.Identity()
    if op == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1)
    if op == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3)
    if op == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    raise ValueError(f"no module for op {op!r}; ops are {', '.join(OPS[1:])}")


def cell_plan(ops: Sequence[str]) -> tuple[list[tuple[int, int, str]], set[int], bool]:
    """(edges that do work as (source, target, op), nodes the cell output uses, whether the
    output depends on the cell input) of a cell of 6 ``ops``. ``none`` edges, and
    ``skip_connect`` / ``avg_pool_3x3`` edges from a node that is all zeros, add nothing."""
    zero = [False, True, True, True]          # which nodes are known to be all zeros
    varies = [True, False, False, False]      # which nodes depend on the cell input
    kept = []
    for (source, target), op in zip(EDGES, ops):
        if op == "none" or (zero[source] and op in ("skip_connect", "avg_pool_3x3")):
            continue
        kept.append((source, target, op))
        zero[target] = False
        varies[target] = varies[target] or varies[source]
    live = {3}
    for source, target, _ in reversed(kept):  # targets in descending order
        if target in live:
            live.add(source)
    return kept, live, varies[3]


class Cell(nn.Module):
    """One NAS-Bench-201 cell. ``edges`` holds a module per edge that does work, keyed
    ``"<source>_<target>"``; edges into nodes the output does not use keep their modules
    (so parameter counts are the benchmark's) but are not run. ``depends_on_input``: False
    when every path from the input to the output passes a ``none`` edge (the cell, and a
    network of it, computes a constant)."""

    def __init__(self, ops: Sequence[str], channels: int) -> None:
        super().__init__()
        self.ops = tuple(ops)
        kept, live, self.depends_on_input = cell_plan(self.ops)
        self.edges = nn.ModuleDict({f"{s}_{t}": edge_module(op, channels) for s, t, op in kept})
        self.inputs = {t: [(s, f"{s}_{t}") for s, t_, _ in kept if t_ == t] for t in (1, 2, 3) if t in live}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = {0: x}
        for target, inputs in self.inputs.items():
            terms = [self.edges[key](nodes[source]) for source, key in inputs]
            node = torch.zeros_like(x) if not terms else terms[0]
            for term in terms[1:]:
                node = node + term
            nodes[target] = node
        return nodes[3]


class ResNetReduction(nn.Module):
    """NAS-Bench-201's reduction block: ReLU-conv3x3/2-BN, ReLU-conv3x3-BN, plus a shortcut
    of 2x2 average pooling and a 1x1 conv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv_a = ReLUConvBN(cin, cout, 3, stride=2)
        self.conv_b = ReLUConvBN(cout, cout, 3)
        self.downsample = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(cin, cout, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(x) + self.conv_b(self.conv_a(x))


class NB201Network(nn.Module):
    """The NAS-Bench-201 CIFAR network of ``arch`` (an arch string or 6 ops) with ``N``
    cells per stage, ``C`` stem channels and ``num_classes`` outputs; returns the logits.
    ``depends_on_input`` is False when the cell computes a constant (see :class:`Cell`):
    then so does the network, and a runtime folds it to a constant with no input."""

    def __init__(self, arch: str | Sequence[str], C: int = 16, N: int = 5, num_classes: int = 10) -> None:
        super().__init__()
        self.ops = parse_arch(arch) if isinstance(arch, str) else parse_arch(arch_string(arch))
        self.arch = arch_string(self.ops)
        self.stem = nn.Sequential(nn.Conv2d(3, C, 3, padding=1, bias=False), nn.BatchNorm2d(C))
        blocks: list[nn.Module] = []
        for stage, channels in enumerate((C, 2 * C, 4 * C)):
            if stage:
                blocks.append(ResNetReduction(channels // 2, channels))
            blocks += [Cell(self.ops, channels) for _ in range(N)]
        self.cells = nn.Sequential(*blocks)
        self.depends_on_input = cell_plan(self.ops)[2]
        self.lastact = nn.Sequential(nn.BatchNorm2d(4 * C), nn.ReLU())
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(4 * C, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lastact(self.cells(self.stem(x)))
        return self.classifier(torch.flatten(self.global_pooling(x), 1))
