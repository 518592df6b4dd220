"""The NAS-Bench-201 search space (Dong & Yang, ICLR 2020): cell DAGs and the CIFAR network.

A cell has 4 nodes; node 0 is the cell input and node j (1..3) is the sum over i < j of
``op_{i->j}(x_i)``; node 3 is the cell output. Each of the 6 edges is one of :data:`OPS`.
Architectures are written as in NAS-Bench-201, edges grouped by target node::

    |nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|

The network is the benchmark's CIFAR skeleton: stem conv 3x3 + BN to ``C`` channels, three
stages of ``N`` cells (``C``, ``2C``, ``4C`` channels) joined by ResNet reduction blocks,
then BN + ReLU, global average pooling and a linear classifier.

Cells are built as the benchmark's own code builds them (``InferCell`` of xautodl, the
NAS-Bench-201 reference implementation): every edge is a module and runs, ``none`` is the
``Zero`` op ``x.mul(0.)`` (so every node feeds node 3, the output), and each node is
Python's ``sum`` of its edges (``0 + first edge + ...``). Nothing is pruned for the
estimator: what a runtime removes (the ``0 +``) it removes from the network as users write
it. :data:`CELL_VERSION` names this construction.
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
#: How cells are built: 2 = the reference implementation's ``InferCell`` (this module);
#: 1 = cells without their ``none`` edges and unused nodes (before 2026-12-01). Latencies
#: measured on one construction say nothing about the other.
CELL_VERSION = 2


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


class Zero(nn.Module):
    """The ``none`` edge: ``x.mul(0.)``, as the reference implementation computes it (a
    multiplication a runtime still runs, not a constant)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(0.0)


def edge_module(op: str, channels: int) -> nn.Module:
    """The module of one edge op on ``channels`` channels."""
    if op == "none":
        return Zero()
    if op == "skip_connect":
        return nn.Identity()
    if op == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1)
    if op == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3)
    if op == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    raise ValueError(f"no module for op {op!r}; ops are {', '.join(OPS)}")


class Cell(nn.Module):
    """One NAS-Bench-201 cell as the reference implementation builds it: ``edges`` holds
    the module of each of the 6 edges, keyed ``"<source>_<target>"``; node j is the sum of
    ``edges[f"{i}_{j}"](node i)`` over i < j, all nodes are computed, node 3 is returned."""

    def __init__(self, ops: Sequence[str], channels: int) -> None:
        super().__init__()
        self.ops = tuple(ops)
        if len(self.ops) != len(EDGES):
            raise ValueError(f"a cell has {len(EDGES)} edge ops, got {len(self.ops)}: {self.ops!r}")
        self.edges = nn.ModuleDict({f"{s}_{t}": edge_module(op, channels) for (s, t), op in zip(EDGES, self.ops)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for target in (1, 2, 3):
            nodes.append(sum(self.edges[f"{source}_{target}"](nodes[source]) for source in range(target)))
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
    cells per stage, ``C`` stem channels and ``num_classes`` outputs; returns the logits."""

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
        self.lastact = nn.Sequential(nn.BatchNorm2d(4 * C), nn.ReLU())
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(4 * C, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lastact(self.cells(self.stem(x)))
        return self.classifier(torch.flatten(self.global_pooling(x), 1))
