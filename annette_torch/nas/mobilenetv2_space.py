"""A MobileNetV2-style search space: per stage, kernel size, expansion ratio, width and depth.

The skeleton is MobileNetV2's (stem conv 3x3/2 to 32 channels, seven stages of inverted
residual blocks, 1x1 conv to 1280, global pool, classifier). An architecture chooses, for
each of the six searchable stages (the first, t=1 stage is fixed), a :class:`StageChoice`.
Widths are the stage's base channels times the width multiplier, rounded to a multiple
of 8, as MobileNetV2 does.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable, Hashable

from torch import nn

#: MobileNetV2's stages: (expansion t, channels c, blocks n, first stride s).
BASE_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1))


def round8(channels: float) -> int:
    """Round to the nearest multiple of 8, never down by more than 10% (MobileNetV2)."""
    rounded = max(8, int(channels + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * channels else rounded


@dataclass(frozen=True)
class StageChoice:
    kernel: int = 3
    expansion: int = 6
    width: float = 1.0
    depth: int = 2


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand (skipped for t=1), kxk depthwise, 1x1 project, residual
    when the shape is kept."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int, kernel: int) -> None:
        super().__init__()
        hidden = cin * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


def _stem(cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6())


def _head(cin: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, classes))


Block = tuple[Hashable, Callable[[], nn.Module], tuple[int, ...]]


@dataclass(frozen=True)
class MobileNetV2Space:
    """The space; an architecture is a tuple of six :class:`StageChoice`."""

    resolution: int = 224
    classes: int = 1000
    kernels: tuple[int, ...] = (3, 5, 7)
    expansions: tuple[int, ...] = (3, 4, 6)
    widths: tuple[float, ...] = (0.75, 1.0, 1.25)
    depth_deltas: tuple[int, ...] = (-1, 0, 1)   # blocks relative to MobileNetV2's stage depth

    @property
    def num_stages(self) -> int:
        return len(BASE_STAGES) - 1

    def depths(self, stage: int) -> tuple[int, ...]:
        base = BASE_STAGES[stage + 1][2]
        return tuple(sorted({max(1, base + d) for d in self.depth_deltas}))

    def mobilenet_v2(self) -> tuple[StageChoice, ...]:
        """MobileNetV2 itself (kernel 3, t=6, width 1, original depths)."""
        return tuple(StageChoice(3, 6, 1.0, n) for _, _, n, _ in BASE_STAGES[1:])

    def sample(self, rng: random.Random) -> tuple[StageChoice, ...]:
        return tuple(StageChoice(rng.choice(self.kernels), rng.choice(self.expansions),
                                 rng.choice(self.widths), rng.choice(self.depths(i)))
                     for i in range(self.num_stages))

    def mutate(self, arch: tuple[StageChoice, ...], rng: random.Random) -> tuple[StageChoice, ...]:
        """Change one field of one stage to another allowed value."""
        stage = rng.randrange(self.num_stages)
        field, options = rng.choice([("kernel", self.kernels), ("expansion", self.expansions),
                                     ("width", self.widths), ("depth", self.depths(stage))])
        current = getattr(arch[stage], field)
        choices = [v for v in options if v != current] or [current]
        changed = replace(arch[stage], **{field: rng.choice(choices)})
        return arch[:stage] + (changed,) + arch[stage + 1:]

    def blocks(self, arch: tuple[StageChoice, ...], batch: int = 1) -> list[Block]:
        """(signature, build, input shape) of every block of ``arch``, in order.

        A block's signature holds everything that shapes it, so identical blocks anywhere
        in any candidate share one estimate.
        """
        if len(arch) != self.num_stages:
            raise ValueError(f"an architecture has {self.num_stages} stage choices, got {len(arch)}")
        size = self.resolution // 2
        blocks: list[Block] = [(("stem", 32, self.resolution, batch), lambda: _stem(32),
                                (batch, 3, self.resolution, self.resolution))]
        cin = 32
        t0, c0, n0, s0 = BASE_STAGES[0]  # the fixed first stage: kernel 3, width 1
        stages = [(t0, 3, 1.0, n0, c0, s0)] + [(c.expansion, c.kernel, c.width, c.depth, base_c, s)
                                               for c, (_, base_c, _, s) in zip(arch, BASE_STAGES[1:])]
        for expansion, kernel, width, depth, base_c, first_stride in stages:
            cout = round8(base_c * width)
            for i in range(depth):
                stride = first_stride if i == 0 else 1
                signature = ("mbconv", cin, cout, stride, expansion, kernel, size, batch)
                blocks.append((signature, _factory(cin, cout, stride, expansion, kernel),
                               (batch, cin, size, size)))
                size = (size + 2 * (kernel // 2) - kernel) // stride + 1
                cin = cout
        blocks.append((("head", cin, size, self.classes, batch),
                       lambda cin=cin, classes=self.classes: _head(cin, classes), (batch, cin, size, size)))
        return blocks

    def build(self, arch: tuple[StageChoice, ...]) -> nn.Module:
        """The whole network (random weights, eval mode)."""
        return nn.Sequential(*(build() for _, build, _ in self.blocks(arch))).eval()


def _factory(cin: int, cout: int, stride: int, expansion: int, kernel: int) -> Callable[[], nn.Module]:
    return lambda: InvertedResidual(cin, cout, stride, expansion, kernel)
