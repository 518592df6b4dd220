"""Reference networks: what a few-shot adaptation measures on the new device.

:func:`reference_pool` is a fixed pool of networks that are quick to measure (a few
seconds each, the largest about 0.25 s per inference on one CPU thread) and span the
sizes and regimes the estimator is used on, in three sets: ``mobile`` (torchvision
classifiers below 1 GFLOP at batch 1, 224x224), ``large`` (torchvision classifiers of
1.8 to 15 GFLOPs, with dense, grouped, attention and big fully connected layers) and
``nb201`` (NAS-Bench-201 cell networks at 1x3x32x32: many small kernels, where runtimes
differ most in dispatch cost). :func:`draw` picks k of them with a seed, stratified by
set and (``size=``, as ``annette-torch adapt`` draws them) across the sizes within each,
so k >= 3 measures all three and a fitted correction is not extrapolated far beyond the
sizes it saw. The NAS-Bench-201 cells are sampled with seed 7, not the
accuracy benchmark's seed 201, so they are not the benchmark's networks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import numpy as np
from torch import nn

from ..nas.nasbench201 import NB201Network, sample_architectures

T = TypeVar("T")

#: torchvision classifiers of the pool (batch 1, 224x224), by set
REFERENCE_TORCHVISION = {
    "mobile": ("mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "squeezenet1_0", "shufflenet_v2_x1_0",
               "mnasnet1_0", "efficientnet_b0", "regnet_x_400mf", "regnet_y_400mf"),
    "large": ("resnet18", "resnet50", "densenet121", "googlenet", "alexnet", "convnext_tiny", "swin_t", "vgg11"),
}
#: NAS-Bench-201 cell networks of the pool (1x3x32x32), sampled with this seed
REFERENCE_NB201_SEED = 7
REFERENCE_NB201_COUNT = 20


@dataclass(frozen=True)
class Network:
    """One network to measure and estimate: its set, name, input shape and a builder."""

    set: str
    name: str
    input_shape: tuple[int, ...]
    build: Callable[[], nn.Module]


#: torchvision builders that warn unless told how to initialize (the weights are random either way)
_INIT_WEIGHTS = {"googlenet": {"init_weights": False}, "inception_v3": {"init_weights": False}}


def torchvision_model(name: str) -> nn.Module:
    """torchvision classifier ``name`` with random weights, in eval mode."""
    import torchvision
    return torchvision.models.get_model(name, weights=None, **_INIT_WEIGHTS.get(name, {})).eval()


def reference_pool() -> list[Network]:
    """The fixed pool: :data:`REFERENCE_TORCHVISION` (sets ``mobile`` and ``large``) and
    :data:`REFERENCE_NB201_COUNT` NAS-Bench-201 cell networks (set ``nb201``)."""
    zoo = [Network(group, m, (1, 3, 224, 224), lambda m=m: torchvision_model(m))
           for group, names in REFERENCE_TORCHVISION.items() for m in names]
    cells = sample_architectures(REFERENCE_NB201_COUNT, seed=REFERENCE_NB201_SEED)
    return zoo + [Network("nb201", a, (1, 3, 32, 32), lambda a=a: NB201Network(a).eval()) for a in cells]


def draw(items: Sequence[T], k: int, seed: int, group: Callable[[T], str] = lambda item: item.set,
         size: Callable[[T], float] | None = None) -> list[T]:
    """``k`` of ``items`` drawn without replacement by ``seed``, stratified by ``group``:
    each group gets a share of ``k`` proportional to its size (largest remainders), at
    least one when ``k`` is at least the number of groups. With ``size`` (e.g. a
    network's operations), a group's share spans its sizes: its members sorted by size
    are cut into as many runs of near-equal length as it gets items, and one is drawn
    from each run. Same items, k and seed: same draw, in the order of ``items``."""
    if not 0 <= k <= len(items):
        raise ValueError(f"cannot draw {k} of {len(items)} networks; k must be between 0 and {len(items)}")
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(group(item), []).append(index)
    sizes = np.array([len(g) for g in groups.values()], float)
    share = sizes / sizes.sum() * k
    counts = np.floor(share).astype(int)
    if k >= len(groups):
        counts = np.maximum(counts, 1)
    while counts.sum() > k:                      # the minimum of one overshot: take from the largest
        counts[np.argmax(counts - share)] -= 1
    for index in np.argsort(-(share - counts), kind="stable")[: k - counts.sum()]:
        counts[index] += 1
    rng = np.random.default_rng(seed)
    chosen = []
    for members, count in zip(groups.values(), counts):
        count = min(count, len(members))
        if size is None:
            chosen += list(rng.choice(members, size=count, replace=False))
        elif count:
            by_size = sorted(members, key=lambda i: (size(items[i]), i))
            chosen += [int(rng.choice(run)) for run in np.array_split(np.array(by_size), count)]
    return [items[i] for i in sorted(chosen)]
