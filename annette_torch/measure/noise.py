"""``annette-torch noise``: how reproducible are timings on this machine, right now?

A fixed set of small networks (:func:`noise_networks`: a ResNet-style block, a
depthwise-separable block, a small MLP and a NAS-Bench-201 cell, each a millisecond or
so on one CPU thread) is measured in interleaved rounds with the measuring protocol, and
per network the *round-to-round* difference is reported: the mean over consecutive
rounds of |value(r+1) - value(r)| / the network's value, with each round's value the
statistic of its runs, as timed and drift-corrected against the canary. Beside it:
steal time and busy CPUs before the session, steal and load over it, and the spread of
the canary. A quiet machine shows well under 1 %; a noisy one several percent, which is
then the floor under any accuracy figure measured on it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from .networks import NetworkSession, measure_networks
from .protocol import Protocol

NOISE_PROTOCOL = Protocol(rounds=5, warmup=3, repeats=10)


class _Residual(nn.Module):
    """conv-bn-relu-conv-bn + identity, relu: a ResNet basic block at 32 channels."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + x)


def _fixed(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """``build`` with the global RNG left as found and the model in eval mode."""
    def built() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return build().eval()
    return built


def noise_networks() -> list[tuple[str, Callable[[], nn.Module], tuple[int, ...]]]:
    """The fixed networks of the noise check: (name, builder, input shape)."""
    from ..nas.nasbench201 import NB201Network

    separable = lambda: nn.Sequential(  # noqa: E731
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.BatchNorm2d(32), nn.ReLU6(),
        nn.Conv2d(32, 64, 1), nn.BatchNorm2d(64), nn.ReLU6())
    mlp = lambda: nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256), nn.LayerNorm(256))  # noqa: E731
    cell = "|nor_conv_3x3~0|+|nor_conv_1x1~0|skip_connect~1|+|nor_conv_3x3~0|avg_pool_3x3~1|nor_conv_3x3~2|"
    return [("residual block 32x28x28", _fixed(_Residual), (1, 32, 28, 28)),
            ("separable block 32x56x56", _fixed(separable), (1, 32, 56, 56)),
            ("mlp 256-512-256, batch 16", _fixed(mlp), (16, 256)),
            ("nb201 cell network C=8 N=1", _fixed(lambda: NB201Network(cell, C=8, N=1)), (1, 3, 32, 32))]


def round_to_round(values: list[float]) -> float:
    """Mean |difference| of consecutive values over their mean (0 for fewer than two)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return 0.0
    return float(np.mean(np.abs(np.diff(values))) / np.mean(values))


@dataclass
class NoiseReport:
    """A noise session: the protocol session of :func:`measure_networks` and, per
    network, the round-to-round difference as timed and drift-corrected."""

    session: NetworkSession
    raw: dict[str, float]
    corrected: dict[str, float]

    def __str__(self) -> str:
        protocol = self.session.protocol
        lines = [f"{protocol}", self.session.report(), "",
                 f"{'network':<30}{'ms':>9}{'rounds':>8}{'round-to-round |diff|':>24}{'drift-corrected':>17}"]
        for name, measured in self.session.measured.items():
            lines.append(f"{name:<30}{measured.time_ms:9.4f}{len(measured.factors):8d}{self.raw[name]:23.2%} "
                         f"{self.corrected[name]:16.2%}")
        if self.raw:
            lines.append(f"{'mean':<47}{np.mean(list(self.raw.values())):23.2%} "
                         f"{np.mean(list(self.corrected.values())):16.2%}")
        lines += [f"failed: {name}: {message}" for name, message in self.session.failures.items()]
        return "\n".join(lines)


def measure_noise(backend, protocol: Protocol = NOISE_PROTOCOL, minutes: float | None = None,
                  progress: bool = True) -> NoiseReport:
    """Measure :func:`noise_networks` on ``backend`` in ``protocol.rounds`` interleaved
    rounds, more until ``minutes`` have passed if given, and report their round-to-round
    reproducibility (see module doc)."""
    if protocol.rounds < 2 and not minutes:
        raise ValueError("the noise check compares rounds: give at least 2 rounds or --minutes")
    deadline = time.monotonic() + minutes * 60 if minutes else None
    session = measure_networks(backend, noise_networks(), protocol, deadline=deadline, progress=progress)
    raw = {k: round_to_round(m.round_values(corrected=False)) for k, m in session.measured.items()}
    corrected = {k: round_to_round(m.round_values()) for k, m in session.measured.items()}
    return NoiseReport(session, raw, corrected)
