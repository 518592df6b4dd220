"""Latency lookup tables and expected latency under architecture weights (FBNet,
ProxylessNAS).

A supernet has positions; each position holds candidate blocks (ops) with a fixed input
shape. The table holds each candidate's estimated time, built through a
:class:`SignatureCache` so identical blocks (same signature) are traced and estimated
once. The expected latency of the architecture distribution is

    E[T] = fixed_ms + sum_p sum_c softmax(logits_p / tau)_c * T[p, c]

(or Gumbel-softmax samples instead of the softmax), differentiable in the logits.

A network small enough keeps its weights cached between inferences, and its kernels run
faster than in one that reads them from memory
(:meth:`~annette_torch.estimator.Estimator.reads_weights_from_memory`). A table built from
a profile that knows the size (``weight_cache_bytes``) holds both times per candidate
(:class:`CachedWeights`) and each candidate's weights; the weights of an architecture
(expected under the weights' distribution) pick the times that apply.

No latency here is NaN: a table's valid entries and ``fixed_ms`` must be finite and
non-negative, logits must not be NaN or +inf, ``tau``, ``target_ms`` and the loss weight
must be finite (positive where they divide), and a position whose valid candidates all
have logit -inf is an error naming it (its softmax would be NaN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import number
from .cache import SignatureCache, progress_bar

#: One candidate: (signature, build function). A position: (input shape, candidates).
Candidate = tuple[Hashable, Callable[[], nn.Module]]
Position = tuple[tuple[int, ...], Sequence[Candidate]]


def _scalar(value: object) -> object:
    """A one-element tensor as a Python number (for the checks); anything else as it is."""
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value


def _check_times(table_ms: torch.Tensor, valid: torch.Tensor, what: str) -> None:
    """``ValueError`` naming the first valid entry of ``table_ms`` that is not a finite time >= 0."""
    times = table_ms.detach()
    bad = valid & ~(torch.isfinite(times) & (times >= 0))
    if bool(bad.any()):
        p, c = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"LatencyLUT: {what}[{p}, {c}] is {float(times[p, c])}; the time of a valid "
                         f"candidate must be a finite number of ms >= 0")


@dataclass
class CachedWeights:
    """What a :class:`LatencyLUT` needs for networks that keep their weights cached:
    ``table_ms`` and ``fixed_ms`` as the LUT's, in such a network; ``weight_elems[p, c]``
    and ``fixed_weight_elems`` the weights of each candidate and of the fixed part; a
    network of at most ``max_weight_elems`` weights is such a network."""

    table_ms: torch.Tensor
    fixed_ms: float
    weight_elems: torch.Tensor
    fixed_weight_elems: float
    max_weight_elems: float


@dataclass
class LatencyLUT:
    """``table_ms[p, c]``: time of candidate c at position p; ``valid`` marks real entries
    (positions may have fewer candidates than the widest one); ``fixed_ms`` is the time
    of everything that is not searched (stem, head, per-inference overhead), all in a
    network that reads its weights from memory unless ``cached`` says when they stay
    cached and what then applies."""

    table_ms: torch.Tensor
    valid: torch.Tensor
    fixed_ms: float = 0.0
    cached: CachedWeights | None = None

    def __post_init__(self) -> None:
        """``ValueError`` unless ``valid`` is a boolean mask of the table's shape, every
        valid entry a finite time >= 0 and ``fixed_ms`` one too; invalid entries become 0
        (so that weight 0 times them is 0, not NaN)."""
        self.table_ms, self.valid = torch.as_tensor(self.table_ms), torch.as_tensor(self.valid)
        if self.table_ms.ndim != 2 or self.valid.dtype != torch.bool or self.valid.shape != self.table_ms.shape:
            raise ValueError(f"LatencyLUT: table_ms must be a (positions x candidates) tensor and valid a boolean "
                             f"mask of its shape, got {tuple(self.table_ms.shape)} and {self.valid.dtype} "
                             f"{tuple(self.valid.shape)}")
        _check_times(self.table_ms, self.valid, "table_ms")
        if not bool(self.valid.any(dim=1).all()):
            raise ValueError(f"LatencyLUT: position {int(torch.nonzero(~self.valid.any(dim=1))[0])} has no valid "
                             f"candidate")
        self.fixed_ms = number(_scalar(self.fixed_ms), "LatencyLUT: fixed_ms", low=0)
        self.table_ms = self.table_ms.masked_fill(~self.valid, 0.0)
        if self.cached is not None:
            cached = self.cached
            cached.table_ms, cached.weight_elems = torch.as_tensor(cached.table_ms), torch.as_tensor(cached.weight_elems)
            if cached.table_ms.shape != self.table_ms.shape or cached.weight_elems.shape != self.table_ms.shape:
                raise ValueError(f"LatencyLUT: the cached table and weights must have the table's shape "
                                 f"{tuple(self.table_ms.shape)}, got {tuple(cached.table_ms.shape)} and "
                                 f"{tuple(cached.weight_elems.shape)}")
            _check_times(cached.table_ms, self.valid, "cached.table_ms")
            cached.fixed_ms = number(_scalar(cached.fixed_ms), "LatencyLUT: cached.fixed_ms", low=0)
            cached.table_ms = cached.table_ms.masked_fill(~self.valid, 0.0)
            cached.weight_elems = cached.weight_elems.masked_fill(~self.valid, 0.0)

    def _times(self, weight_elems: float) -> tuple[torch.Tensor, float]:
        """(table, fixed time) of a network of ``weight_elems`` weights."""
        cached = self.cached
        if cached is not None and cached.fixed_weight_elems + weight_elems <= cached.max_weight_elems:
            return cached.table_ms, cached.fixed_ms
        return self.table_ms, self.fixed_ms

    @classmethod
    def build(cls, cache: SignatureCache, positions: Sequence[Position],
              fixed: Sequence[tuple[Hashable, Callable[[], nn.Module], tuple[int, ...]]] = (),
              progress: bool | None = None) -> LatencyLUT:
        """Estimate every candidate of every position (and the fixed blocks) once, with a
        progress bar when it takes a while (``progress``: see :mod:`.cache`)."""
        if not positions or not all(len(candidates) for _, candidates in positions):
            raise ValueError("LatencyLUT.build needs at least one position, each with at least one candidate")
        width = max(len(candidates) for _, candidates in positions)
        table = torch.zeros(len(positions), width, dtype=torch.float64)
        cached_table, weights = torch.zeros_like(table), torch.zeros_like(table)
        valid = torch.zeros(len(positions), width, dtype=torch.bool)
        with progress_bar(total=sum(len(candidates) for _, candidates in positions), desc="latency table",
                          progress=progress) as bar:
            for p, (shape, candidates) in enumerate(positions):
                for c, (signature, build) in enumerate(candidates):
                    cost = cache.block(signature, build, shape)
                    table[p, c], cached_table[p, c], weights[p, c] = cost.time_ms, cost.cached_ms, cost.weights
                    valid[p, c] = True
                    bar.update(1)
        fixed_costs = [cache.block(signature, build, shape) for signature, build, shape in fixed]
        rest_ms = (fixed_costs[-1].output_reorder_ms if fixed_costs else 0.0) + cache.estimator.profile.overhead_ms
        fixed_ms = sum(cost.time_ms for cost in fixed_costs) + rest_ms
        limit = cache.estimator.max_cached_weight_elems
        if limit is None or limit == float("inf"):       # one regime for every network
            return cls(table, valid, fixed_ms)
        return cls(table, valid, fixed_ms, CachedWeights(cached_table, sum(cost.cached_ms for cost in fixed_costs) + rest_ms,
                                                         weights, sum(cost.weights for cost in fixed_costs), limit))

    def latency_ms(self, choices: Sequence[int]) -> float:
        """Time of one discrete architecture (one candidate index per position)."""
        if len(choices) != len(self.table_ms):
            raise ValueError(f"need one choice per position ({len(self.table_ms)}), got {len(choices)}")
        rows = torch.arange(len(choices))
        index = torch.as_tensor(list(choices))
        if not bool(self.valid[rows, index].all()):
            raise ValueError(f"choices {list(choices)} name a candidate a position does not have")
        weights = float(self.cached.weight_elems[rows, index].sum()) if self.cached is not None else 0.0
        table, fixed_ms = self._times(weights)
        return float(table[rows, index].sum()) + fixed_ms

    def derive(self, logits: torch.Tensor) -> list[int]:
        """The discrete architecture: the most likely valid candidate per position."""
        return [int(c) for c in logits.detach().masked_fill(~self.valid, float("-inf")).argmax(dim=1)]

    def weights(self, logits: torch.Tensor, tau: float = 1.0, gumbel: bool = False,
                hard: bool = False) -> torch.Tensor:
        """Architecture weights per position: softmax (or Gumbel-softmax) over the valid
        candidates; invalid entries get weight 0."""
        if logits.shape != self.table_ms.shape:
            raise ValueError(f"logits must have shape {tuple(self.table_ms.shape)}, got {tuple(logits.shape)}")
        number(_scalar(tau), "LatencyLUT.weights: tau", low=0, low_open=True)
        values = logits.detach()
        bad = self.valid & (torch.isnan(values) | (values == float("inf")))
        if bool(bad.any()):
            p, c = (int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"logits[{p}, {c}] is {float(values[p, c])}; architecture logits must not be NaN or +inf")
        dead = ~(self.valid & (values > float("-inf"))).any(dim=1)
        if bool(dead.any()):
            raise ValueError(f"every valid candidate of position {int(torch.nonzero(dead)[0])} has logit -inf: "
                             f"its weights are undefined")
        masked = logits.masked_fill(~self.valid, float("-inf"))
        if gumbel:
            return F.gumbel_softmax(masked, tau=tau, hard=hard, dim=-1)
        return torch.softmax(masked / tau, dim=-1)

    def expected_ms(self, logits: torch.Tensor, tau: float = 1.0, gumbel: bool = False,
                    hard: bool = False) -> torch.Tensor:
        """Expected latency under the architecture weights; differentiable in ``logits``
        (the times that apply chosen by the expected weights, see the module doc)."""
        probs = self.weights(logits, tau, gumbel, hard)
        weights = float((probs.detach() * self.cached.weight_elems).sum()) if self.cached is not None else 0.0
        table, fixed_ms = self._times(weights)
        return (probs * table.to(probs.dtype)).sum() + fixed_ms


class LatencyLoss(nn.Module):
    """Latency-penalised loss for supernet training.

    * ``mode="additive"`` (ProxylessNAS): ``task + weight * E[T] / target_ms``;
    * ``mode="multiplicative"`` (MnasNet's reward as a loss, FBNet's product form):
      ``task * (E[T] / target_ms) ** weight``. FBNet's ``log(T) ** beta`` is not used: it
      is undefined for the sub-millisecond latencies small targets have.

    ``target_ms`` normalises latency (default: the expected latency under uniform
    weights; it must be positive). The last expected latency is kept in ``last_ms`` for logging.
    """

    def __init__(self, lut: LatencyLUT, weight: float = 0.1, mode: str = "additive",
                 target_ms: float | None = None, tau: float = 1.0, gumbel: bool = False) -> None:
        super().__init__()
        if mode not in ("additive", "multiplicative"):
            raise ValueError(f"mode must be 'additive' or 'multiplicative', got {mode!r}")
        self.lut, self.mode, self.tau, self.gumbel = lut, mode, tau, gumbel
        self.weight = number(_scalar(weight), "LatencyLoss: weight", low=0)
        number(_scalar(tau), "LatencyLoss: tau", low=0, low_open=True)
        uniform = torch.zeros_like(lut.table_ms)
        target = float(lut.expected_ms(uniform)) if target_ms is None else target_ms
        self.target_ms = number(_scalar(target), "LatencyLoss: target_ms" + (" (the expected latency under uniform weights)"
                                                                    if target_ms is None else ""), low=0, low_open=True)
        self.last_ms = float("nan")

    def forward(self, task_loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        expected = self.lut.expected_ms(logits, self.tau, self.gumbel)
        self.last_ms = float(expected.detach())
        ratio = expected.to(task_loss.dtype) / self.target_ms
        if self.mode == "additive":
            return task_loss + self.weight * ratio
        return task_loss * ratio ** self.weight
