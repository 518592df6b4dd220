"""Signature caches: estimate identical kernels and blocks once.

Two levels, both keyed by *signatures* (hashable descriptions that fully determine the
prediction):

* a **kernel** signature is (kernel kind, its feature row): what every layer model reads,
  so equal signatures have equal predicted times, whatever network they sit in;
* a **block** key is a signature chosen by the search space (block type and
  configuration) plus the block's input shape, and stands for a traced sub-network; a
  cached block skips tracing, which is what makes thousands of candidates per second
  possible.

Blocks are estimated in isolation: fusion across a block boundary is not modelled (in the
MobileNetV2-style space every fusable chain lies inside a block).

Estimating many candidates (:meth:`SignatureCache.candidates`, and building a
:class:`~annette_torch.nas.LatencyLUT`) shows a tqdm progress bar once the call has run
for :data:`PROGRESS_DELAY_S` (so when it traces, not when the cache answers), on a
terminal only; ``progress=False`` turns it off, ``True`` on. The bar leaves nothing
behind when it closes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from ..estimator import Estimator
from ..graph import LayerGraph, trace
from ..kinds import FEATURES
from ..mapping import OUTPUT_REORDER

_OPS, _WEIGHTS = FEATURES.index("ops"), FEATURES.index("weight_elems")
#: seconds a call estimating many candidates runs before its progress bar appears
PROGRESS_DELAY_S = 0.5


def progress_bar(iterable: Iterable | None = None, total: int | None = None, desc: str = "",
                 progress: bool | None = None) -> tqdm:
    """A tqdm bar over ``iterable`` (or of ``total`` steps) that appears after
    :data:`PROGRESS_DELAY_S` and disappears when closed; ``progress``: None shows it on
    a terminal only, False never, True always."""
    return tqdm(iterable, total=total, desc=desc, unit="candidate", leave=False, dynamic_ncols=True,
                delay=PROGRESS_DELAY_S, disable=None if progress is None else not progress)


@dataclass(frozen=True)
class BlockCost:
    """Estimated time and size of one block (or of a candidate: its blocks summed).

    A block's ``time_ms`` leaves out the reorder of its output into NCHW that a target
    like OpenVINO runs when a network returns a feature map (``output_reorder_ms``): a
    block's output feeds the next block, and only the last block's is returned.

    A block's ``time_ms`` is its time in a network that reads its weights from memory at
    each inference, ``cached_ms`` in one small enough to keep them cached (the network's
    weights decide, :meth:`~annette_torch.estimator.Estimator.reads_weights_from_memory`);
    a candidate's ``time_ms`` is the one its weights decide, and ``cached_ms`` is None."""

    time_ms: float
    ops: float
    weights: float   # parameter and buffer elements
    output_reorder_ms: float = 0.0
    cached_ms: float | None = None


def _trace_block(build: Callable[[], nn.Module], input_shape: tuple[int, ...]) -> LayerGraph:
    """Trace ``build()`` built on the meta device (no weight initialisation: only shapes
    matter); on the CPU when it cannot be built or traced there."""
    try:
        with torch.device("meta"):
            module = build().eval()
        return trace(module, input_shape=input_shape)
    except (NotImplementedError, RuntimeError):  # TraceError is a RuntimeError
        return trace(build().eval(), input_shape=input_shape)


class SignatureCache:
    """Memoises kernel and block estimates of one :class:`Estimator`.

    ``hits``/``misses`` count block lookups; ``kernel_hits``/``kernel_misses`` kernels.
    """

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self.kernels: dict[tuple, float] = {}
        self.blocks: dict[Hashable, BlockCost] = {}
        self.hits = self.misses = self.kernel_hits = self.kernel_misses = 0

    def graph_time_ms(self, graph: LayerGraph) -> float:
        """Sum of the kernel times of ``graph``; unseen kernel signatures are predicted (one
        vectorized call per kind) and remembered. Equals ``estimator(graph)`` minus the
        profile's per-inference overhead; a predicted time that is NaN, negative or
        infinite is an :class:`~annette_torch.estimator.EstimateError` naming the kernel, as
        in an estimate (never a NaN in the cache)."""
        return self._graph_ms(graph)[0]

    def _graph_ms(self, graph: LayerGraph, from_memory: bool | None = None) -> tuple[float, float]:
        """(sum of the kernel times of ``graph``, the part in its output reorders), as
        :meth:`graph_time_ms` computes and caches them; ``from_memory``: whether the
        kernels read their weights from memory (None: as ``graph``'s weights decide)."""
        table = self.estimator.kernel_table(graph)
        if from_memory is None:
            from_memory = self.estimator.table_reads_weights_from_memory(table)
        keys = [(kind, fused[1:], row.tobytes(), from_memory)
                for kind, fused, row in zip(table.kinds, table.layer_kinds, table.features)]
        measured = self.estimator.measured_ms(table)
        for i in np.flatnonzero(np.isfinite(measured)):
            self.kernels.setdefault(keys[i], float(measured[i]))
        missing = [i for i, key in enumerate(keys) if key not in self.kernels and not table.free[i]]
        self.kernel_misses += len(missing)
        self.kernel_hits += len(keys) - len(missing) - int(table.free.sum())
        by_kind: dict[str, list[int]] = {}
        for i in missing:
            by_kind.setdefault(table.kinds[i], []).append(i)
        for kind, rows in by_kind.items():
            model = self.estimator.group_model(table, kind, np.array(rows), from_memory)
            seconds, _ = model.predict(table.features[rows])
            self.estimator.checked_sum(graph, table, kind, np.array(rows), np.atleast_1d(seconds))
            for i, s in zip(rows, np.atleast_1d(seconds)):
                self.kernels[keys[i]] = float(s) * 1e3
        times = [self.kernels[key] if not table.free[i] else 0.0 for i, key in enumerate(keys)]
        return float(sum(times)), float(sum(t for t, kind in zip(times, table.kinds) if kind == OUTPUT_REORDER))

    def block(self, signature: Hashable, build: Callable[[], nn.Module],
              input_shape: tuple[int, ...]) -> BlockCost:
        """Cost of the block ``signature`` names at ``input_shape``; ``build()`` and tracing
        run only on a miss."""
        key = (signature, tuple(input_shape))
        cost = self.blocks.get(key)
        if cost is not None:
            self.hits += 1
            return cost
        self.misses += 1
        graph = _trace_block(build, input_shape)
        regimes = self.estimator.weight_regimes()
        total, reorders = self._graph_ms(graph, max(regimes))      # from memory if any network reads them so
        cached = self._graph_ms(graph, False)[0] if len(regimes) == 2 else total
        cost = BlockCost(total - reorders, float(graph.features[:, _OPS].sum()), float(graph.features[:, _WEIGHTS].sum()),
                         reorders, cached - reorders)
        self.blocks[key] = cost
        return cost

    def blocks_cost(self, blocks: Iterable[tuple[Hashable, Callable[[], nn.Module], tuple[int, ...]]]) -> BlockCost:
        """Summed cost of (signature, build, input_shape) blocks, plus the overhead once and
        the last block's output reorder (the network returns that block's output), each
        block at its time in a network of the blocks' summed weights (:class:`BlockCost`)."""
        costs = [self.block(signature, build, shape) for signature, build, shape in blocks]
        weights = sum(cost.weights for cost in costs)
        from_memory = self.estimator.reads_weights_from_memory(weights)
        reorder_ms = costs[-1].output_reorder_ms if costs else 0.0
        time_ms = sum(cost.time_ms if from_memory else cost.cached_ms for cost in costs)
        return BlockCost(time_ms + reorder_ms + self.estimator.profile.overhead_ms,
                         sum(cost.ops for cost in costs), weights, reorder_ms)

    def candidates(self, space, archs: Iterable, progress: bool | None = None) -> list[BlockCost]:
        """Batched estimation of many architectures of one space (anything with a
        ``blocks(arch)`` method returning (signature, build, input shape) triples), with a
        progress bar when it takes a while (see the module doc for ``progress``)."""
        with progress_bar(archs, desc="candidates", progress=progress) as bar:
            return [self.blocks_cost(space.blocks(arch)) for arch in bar]
