"""The canary: a fixed small network timed between the items of a measuring session.

It does a little of what the measured networks do (dense 3x3 convolutions, a strided
one, pooling, a 1x1 convolution, a fully connected layer: about 8 MFLOP, a few tenths
of a millisecond on one CPU thread), so that a machine slowed down by a neighbour, a
lower clock or a warmer chip slows the canary down about as much. Its weights are drawn
from a private generator and building it leaves the global RNG as found. Changing the
network changes :data:`CANARY_NAME`, so that a recorded reference time is never
compared with another canary's.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

CANARY_NAME = "canary-v1"
CANARY_INPUT_SHAPE = (1, 3, 48, 48)
#: untimed runs of the canary once it is compiled, and before each timing
CANARY_WARMUP, CALL_WARMUP = 20, 2


def canary_network() -> nn.Module:
    """The canary (see module doc), in eval mode, with fixed weights."""
    with torch.random.fork_rng(devices=[]):       # the layers' default initialisation draws from it
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return model.eval()


@contextlib.contextmanager
def canary_timer(backend, warmup: int, repeats: int) -> Iterator[Callable[[], Sequence[float]]]:
    """For the block, a function that times the canary ``repeats`` times on ``backend``
    and returns the run times in ms; the canary is compiled once (where the backend
    can) and warmed up ``warmup`` runs first (at least :data:`CANARY_WARMUP`), and each
    call starts with :data:`CALL_WARMUP` untimed runs (the first run after another
    network is slower: its caches were evicted)."""
    with backend.prepared(canary_network(), CANARY_INPUT_SHAPE) as timed:
        timed(max(warmup, CANARY_WARMUP), 1)
        yield lambda: timed(CALL_WARMUP, repeats).runs_ms


def can_time_canary(backend) -> bool:
    """Whether ``backend`` times a compiled model again cheaply (it overrides
    :meth:`~annette_torch.backends.Backend.prepared`), so that the canary can be timed
    between networks; the boards would compile and deploy it anew each time."""
    from ..backends.base import Backend

    return getattr(type(backend), "prepared", Backend.prepared) is not Backend.prepared


def check_drift(backend, drift: str) -> None:
    """``ValueError`` when ``drift`` is "canary" and ``backend`` cannot time the canary cheaply."""
    if drift == "canary" and not can_time_canary(backend):
        raise ValueError(f"drift correction against the canary needs a runtime that times a compiled model again "
                         f"cheaply; {backend.name} compiles and deploys every network anew: use --drift none")
