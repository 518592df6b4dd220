"""Latency lookup tables and expected latency under architecture weights (FBNet,
ProxylessNAS).

A supernet has positions; each position holds candidate blocks (ops) with a fixed input
shape. The table holds each candidate's estimated time, built through a
:class:`SignatureCache` so identical blocks (same signature) are traced and estimated
once. The expected latency of the architecture distribution is

    E[T] = fixed_ms + sum_p sum_c softmax(logits_p / tau)_c * T[p, c]

(or Gumbel-softmax samples instead of the softmax), differentiable in the logits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .cache import SignatureCache

#: One candidate: (signature, build function). A position: (input shape, candidates).
Candidate = tuple[Hashable, Callable[[], nn.Module]]
Position = tuple[tuple[int, ...], Sequence[Candidate]]


@dataclass
class LatencyLUT:
    """``table_ms[p, c]``: time of candidate c at position p; ``valid`` marks real entries
    (positions may have fewer candidates than the widest one); ``fixed_ms`` is the time
    of everything that is not searched (stem, head, per-inference overhead)."""

    table_ms: torch.Tensor
    valid: torch.Tensor
    fixed_ms: float = 0.0

    @classmethod
    def build(cls, cache: SignatureCache, positions: Sequence[Position],
              fixed: Sequence[tuple[Hashable, Callable[[], nn.Module], tuple[int, ...]]] = ()) -> LatencyLUT:
        """Estimate every candidate of every position (and the fixed blocks) once."""
        width = max(len(candidates) for _, candidates in positions)
        table = torch.zeros(len(positions), width, dtype=torch.float64)
        valid = torch.zeros(len(positions), width, dtype=torch.bool)
        for p, (shape, candidates) in enumerate(positions):
            for c, (signature, build) in enumerate(candidates):
                table[p, c] = cache.block(signature, build, shape).time_ms
                valid[p, c] = True
        fixed_ms = cache.blocks_cost(fixed).time_ms if fixed else cache.estimator.profile.overhead_ms
        return cls(table, valid, fixed_ms)

    def latency_ms(self, choices: Sequence[int]) -> float:
        """Time of one discrete architecture (one candidate index per position)."""
        if len(choices) != len(self.table_ms):
            raise ValueError(f"need one choice per position ({len(self.table_ms)}), got {len(choices)}")
        rows = torch.arange(len(choices))
        index = torch.as_tensor(list(choices))
        if not bool(self.valid[rows, index].all()):
            raise ValueError(f"choices {list(choices)} name a candidate a position does not have")
        return float(self.table_ms[rows, index].sum()) + self.fixed_ms

    def derive(self, logits: torch.Tensor) -> list[int]:
        """The discrete architecture: the most likely valid candidate per position."""
        return [int(c) for c in logits.detach().masked_fill(~self.valid, float("-inf")).argmax(dim=1)]

    def weights(self, logits: torch.Tensor, tau: float = 1.0, gumbel: bool = False,
                hard: bool = False) -> torch.Tensor:
        """Architecture weights per position: softmax (or Gumbel-softmax) over the valid
        candidates; invalid entries get weight 0."""
        if logits.shape != self.table_ms.shape:
            raise ValueError(f"logits must have shape {tuple(self.table_ms.shape)}, got {tuple(logits.shape)}")
        masked = logits.masked_fill(~self.valid, float("-inf"))
        if gumbel:
            return F.gumbel_softmax(masked, tau=tau, hard=hard, dim=-1)
        return torch.softmax(masked / tau, dim=-1)

    def expected_ms(self, logits: torch.Tensor, tau: float = 1.0, gumbel: bool = False,
                    hard: bool = False) -> torch.Tensor:
        """Expected latency under the architecture weights; differentiable in ``logits``."""
        probs = self.weights(logits, tau, gumbel, hard)
        return (probs * self.table_ms.to(probs.dtype)).sum() + self.fixed_ms


class LatencyLoss(nn.Module):
    """Latency-penalised loss for supernet training.

    * ``mode="additive"`` (ProxylessNAS): ``task + weight * E[T] / target_ms``;
    * ``mode="multiplicative"`` (MnasNet's reward as a loss, FBNet's product form):
      ``task * (E[T] / target_ms) ** weight``. FBNet's ``log(T) ** beta`` is not used: it
      is undefined for the sub-millisecond latencies small targets have.

    ``target_ms`` normalises latency (default: the expected latency under uniform
    weights). The last expected latency is kept in ``last_ms`` for logging.
    """

    def __init__(self, lut: LatencyLUT, weight: float = 0.1, mode: str = "additive",
                 target_ms: float | None = None, tau: float = 1.0, gumbel: bool = False) -> None:
        super().__init__()
        if mode not in ("additive", "multiplicative"):
            raise ValueError(f"mode must be 'additive' or 'multiplicative', got {mode!r}")
        self.lut, self.weight, self.mode, self.tau, self.gumbel = lut, weight, mode, tau, gumbel
        uniform = torch.zeros_like(lut.table_ms)
        self.target_ms = float(target_ms) if target_ms else float(lut.expected_ms(uniform))
        self.last_ms = float("nan")

    def forward(self, task_loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        expected = self.lut.expected_ms(logits, self.tau, self.gumbel)
        self.last_ms = float(expected.detach())
        ratio = expected.to(task_loss.dtype) / self.target_ms
        if self.mode == "additive":
            return task_loss + self.weight * ratio
        return task_loss * ratio ** self.weight
