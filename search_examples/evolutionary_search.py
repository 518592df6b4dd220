"""Regularized evolution (Real et al., 2019) over the MobileNetV2-style space, scored by
the latency estimator, then the best candidates measured on this machine.

Search: a population of random architectures; each cycle draws a tournament sample,
mutates its best member (one field of one stage: kernel, expansion, width or depth) and
adds the child, and removes the oldest member. Candidates are estimated through
``SignatureCache(estimator).blocks_cost(space.blocks(arch))``: each distinct block is
traced once, so a candidate costs a few dictionary lookups.

Objectives (all bounds given are constraints):

* ``--max-ms T``: the largest proxy score with estimated latency <= T ms. The proxy score
  is the candidate's MOPs (2 ops per multiply-accumulate) as a capacity proxy, larger is
  better. It is a proxy, not accuracy: nothing here is trained or evaluated.
* otherwise, ``--max-mops`` / ``--max-mweights`` (and ``--min-mops``): the lowest
  estimated latency within those bounds. With upper bounds only, the answer is simply
  the smallest network; ``--min-mops`` asks for the fastest network with at least that
  much capacity.
* no bound at all: ``--max-ms`` defaults to MobileNetV2's estimated latency.

Infeasible candidates rank below feasible ones, by how far they exceed the bounds, so
the search can walk into a tight budget. At the end the top-K distinct feasible
networks ever evaluated are printed, built with ``space.build(arch)`` and measured
on ``--measure-backend`` (one thread); a table compares predicted and measured times and
gives their Spearman rank correlation. The last line, ``SUMMARY {json}``, is for tools.

    python search_examples/evolutionary_search.py --max-mops 300 --min-mops 250
    python search_examples/evolutionary_search.py --max-ms 5 --profile zcu102-dpu
    python search_examples/evolutionary_search.py --smoke     # resolution 96, a few seconds
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from annette_torch import Estimator
from annette_torch.backends import available_backends, cpu_model, get_backend
from annette_torch.measure import Protocol
from annette_torch.measure.networks import measure_networks, network_protocol
from annette_torch.estimator import DEFAULT_PROFILE
from annette_torch.nas import BlockCost, MobileNetV2Space, SignatureCache, StageChoice
from annette_torch.profiles.fingerprint import mismatch

Arch = tuple[StageChoice, ...]
SMOKE = {"resolution": 96, "cycles": 300, "population": 24, "sample": 6, "top": 3,
         "rounds": 2, "warmup": 2, "repeats": 3}


@dataclass(frozen=True)
class Budget:
    """Bounds on a candidate, in ms, MOPs and millions of weight elements; ``None``: no bound."""

    max_ms: float | None = None
    max_mops: float | None = None
    min_mops: float | None = None
    max_mweights: float | None = None

    def violation(self, cost: BlockCost) -> float:
        """Summed relative distance outside the bounds; 0 when ``cost`` fits."""
        ms, mops, mweights = cost.time_ms, cost.ops / 1e6, cost.weights / 1e6
        checks = [(ms, self.max_ms, 1), (mops, self.max_mops, 1), (mops, self.min_mops, -1),
                  (mweights, self.max_mweights, 1)]
        return sum(max(0.0, sign * (value - bound) / bound) for value, bound, sign in checks if bound)

    def bounds(self) -> dict[str, float]:
        return {name: value for name, value in vars(self).items() if value is not None}


@dataclass(frozen=True)
class Candidate:
    arch: Arch
    cost: BlockCost
    fitness: tuple[bool, float, float]   # (feasible, -violation, objective): larger is better


class Search:
    """Evaluates architectures through the signature cache and keeps every result."""

    def __init__(self, space: MobileNetV2Space, cache: SignatureCache, budget: Budget) -> None:
        self.space, self.cache, self.budget = space, cache, budget
        self.maximize_ops = budget.max_ms is not None
        self.history: dict[tuple, Candidate] = {}
        self.evaluated = 0

    def evaluate(self, arch: Arch) -> Candidate:
        blocks = self.space.blocks(arch)
        cost = self.cache.blocks_cost(blocks)
        violation = self.budget.violation(cost)
        objective = cost.ops if self.maximize_ops else -cost.time_ms
        candidate = Candidate(arch, cost, (violation == 0, -violation, objective))
        # keyed by the block signatures: choices that round to the same channels are one network
        self.history.setdefault(tuple(signature for signature, _, _ in blocks), candidate)
        self.evaluated += 1
        return candidate

    def evolve(self, rng: random.Random, population_size: int, sample_size: int, cycles: int) -> None:
        """Regularized evolution: tournament selection, mutation, removal of the oldest."""
        population = deque(self.evaluate(self.space.sample(rng)) for _ in range(population_size))
        for _ in range(cycles):
            parent = max(rng.sample(list(population), sample_size), key=lambda c: c.fitness)
            population.append(self.evaluate(self.space.mutate(parent.arch, rng)))
            population.popleft()

    def top(self, k: int) -> list[Candidate]:
        """The ``k`` best distinct feasible networks evaluated."""
        feasible = [c for c in self.history.values() if c.fitness[0]]
        return sorted(feasible, key=lambda c: c.fitness, reverse=True)[:k]


def arch_text(arch: Arch) -> str:
    """Stages as ``k<kernel>e<expansion>w<width>d<depth>``, space-separated."""
    return " ".join(f"k{s.kernel}e{s.expansion}w{s.width:g}d{s.depth}" for s in arch)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bounds = parser.add_argument_group("budget (see the module docstring)")
    bounds.add_argument("--max-ms", type=float, help="estimated latency bound; maximise MOPs under it")
    bounds.add_argument("--max-mops", type=float, help="at most this many million ops")
    bounds.add_argument("--min-mops", type=float, help="at least this many million ops")
    bounds.add_argument("--max-mweights", type=float,
                        help="at most this many million weight elements (parameters and buffers)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="built-in profile name or .json path")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--cycles", type=int, default=2000, help="mutations after the initial population")
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--sample", type=int, default=16, help="tournament sample size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=5, help="architectures to print and measure")
    parser.add_argument("--measure-backend", default="openvino-cpu", choices=available_backends())
    parser.add_argument("--rounds", type=int, default=12, help="interleaved measuring rounds over the top candidates")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per candidate and round")
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per candidate and round")
    parser.add_argument("--smoke", action="store_true",
                        help="quick run: " + ", ".join(f"{k}={v}" for k, v in SMOKE.items()))
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    if args.sample > args.population:
        parser.error("--sample must not exceed --population")
    bounds = (args.max_ms, args.max_mops, args.min_mops, args.max_mweights)
    if any(bound is not None and bound <= 0 for bound in bounds):
        parser.error("budget bounds must be positive")
    return args


def make_budget(args: argparse.Namespace, space: MobileNetV2Space, cache: SignatureCache) -> Budget:
    budget = Budget(args.max_ms, args.max_mops, args.min_mops, args.max_mweights)
    if budget.bounds():
        return budget
    reference_ms = cache.blocks_cost(space.blocks(space.mobilenet_v2())).time_ms
    print(f"no budget given: --max-ms defaults to MobileNetV2's estimated latency, {reference_ms:.3f} ms")
    return Budget(max_ms=reference_ms)


def print_header(args: argparse.Namespace, estimator: Estimator, budget: Budget) -> None:
    device = estimator.profile.fingerprint.get("device", estimator.profile.name)
    goal = ("maximise MOPs (a capacity proxy, not accuracy)" if budget.max_ms is not None
            else "minimise estimated latency")
    print(f"regularized evolution on MobileNetV2Space(resolution={args.resolution}): population "
          f"{args.population}, sample {args.sample}, {args.cycles} cycles, seed {args.seed}")
    print(f"objective: {goal}; bounds: {budget.bounds()}")
    print(f"predicted: profile {estimator.profile.name!r} ({device}); measured: {args.measure_backend}, "
          f"1 thread, on {cpu_model()}")
    fingerprint = estimator.profile.fingerprint
    if fingerprint.get("backend") == args.measure_backend and not mismatch(estimator.profile):
        print("The profile was calibrated with this backend on this CPU: predicted and measured times are "
              "comparable in absolute terms.")
    else:
        print(f"The profile describes {fingerprint.get('backend')} on {device}, not {args.measure_backend} on this "
              "CPU: absolute predicted and measured times differ; compare the ranking.")


def print_search(search: Search, seconds: float, top: list[Candidate]) -> None:
    cache = search.cache
    print(f"\nsearch: {search.evaluated} candidates evaluated ({len(search.history)} distinct networks) in "
          f"{seconds:.2f} s, {search.evaluated / seconds:,.0f} candidates/s; block cache "
          f"{cache.hits} hits / {cache.misses} misses, kernel cache {cache.kernel_hits} hits / "
          f"{cache.kernel_misses} misses")
    width = max(len(arch_text(c.arch)) for c in top) + 2
    print(f"\ntop {len(top)} (stages 2-7 as k<kernel>e<expansion>w<width>d<depth>):")
    print(f"{'#':>2}  {'architecture':<{width}}{'est ms':>9}{'MOPs':>9}{'M weights':>11}")
    for rank, c in enumerate(top, 1):
        print(f"{rank:>2}  {arch_text(c.arch):<{width}}{c.cost.time_ms:>9.3f}{c.cost.ops / 1e6:>9.1f}"
              f"{c.cost.weights / 1e6:>11.3f}")


def measure(args: argparse.Namespace, space: MobileNetV2Space, top: list[Candidate]) -> tuple[list, Protocol]:
    """The top candidates measured as ``adapt`` and the accuracy benchmark time whole networks
    (:func:`~annette_torch.measure.networks.network_protocol`: interleaved rounds, each
    network compiled once, each round's p10 against a canary, the median over rounds) with
    the rounds and runs of ``args``; and that protocol."""
    backend = get_backend(args.measure_backend, threads=1)
    shape = (1, 3, args.resolution, args.resolution)
    protocol = dataclasses.replace(network_protocol(backend), rounds=args.rounds, warmup=args.warmup,
                                   repeats=args.repeats)
    session = measure_networks(backend, [(i, lambda c=c: space.build(c.arch), shape) for i, c in enumerate(top)],
                               protocol, progress=False)
    if session.failures:
        raise SystemExit(f"measuring failed: {next(iter(session.failures.values()))}")
    return [session.measured[i] for i in range(len(top))], protocol


def print_measured(args: argparse.Namespace, top: list[Candidate], measured: list, protocol: Protocol) -> float | None:
    """Predicted-vs-measured table; returns the Spearman correlation (None under 3 candidates)."""
    print(f"\npredicted vs measured ({args.measure_backend}, 1 thread, {protocol}; "
          f"spread = (p90 - p10) / median):")
    print(f"{'#':>2}{'predicted ms':>14}{'measured ms':>13}{'spread':>8}{'measured/predicted':>20}")
    for rank, (c, m) in enumerate(zip(top, measured), 1):
        print(f"{rank:>2}{c.cost.time_ms:>14.3f}{m.time_ms:>13.3f}{m.spread:>8.1%}"
              f"{m.time_ms / c.cost.time_ms:>20.2f}")
    if len(top) < 3:
        print("Spearman rank correlation: n/a (needs at least 3 candidates)")
        return None
    predicted = np.array([c.cost.time_ms for c in top])
    rho = float(pd.Series(predicted).corr(pd.Series([m.time_ms for m in measured]), method="spearman"))
    print(f"Spearman rank correlation (predicted vs measured, {len(top)} candidates): {rho:+.3f}")
    predicted_range = np.ptp(predicted) / np.median(predicted)
    noise = float(np.median([m.spread for m in measured]))
    if predicted_range < noise:
        print(f"note: the predicted times span {predicted_range:.1%}, less than the median run-to-run "
              f"spread ({noise:.1%}); this ranking is mostly measurement noise")
    return rho


def summary(search: Search, top: list[Candidate], measured: list, rho: float | None) -> str:
    rows = [{"arch": [[s.kernel, s.expansion, s.width, s.depth] for s in c.arch],
             "est_ms": c.cost.time_ms, "mops": c.cost.ops / 1e6, "mweights": c.cost.weights / 1e6,
             "measured_ms": m.time_ms, "spread": m.spread} for c, m in zip(top, measured)]
    return "SUMMARY " + json.dumps({"resolution": search.space.resolution, "budget": search.budget.bounds(),
                                    "maximize_mops": search.maximize_ops, "evaluated": search.evaluated,
                                    "spearman": rho, "top": rows})


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    space = MobileNetV2Space(resolution=args.resolution)
    estimator = Estimator(args.profile)
    cache = SignatureCache(estimator)
    budget = make_budget(args, space, cache)
    print_header(args, estimator, budget)
    search = Search(space, cache, budget)
    start = time.perf_counter()
    search.evolve(random.Random(args.seed), args.population, args.sample, args.cycles)
    seconds = time.perf_counter() - start
    top = search.top(args.top)
    if not top:
        raise SystemExit("no evaluated candidate fits the budget; loosen it or raise --cycles")
    print_search(search, seconds, top)
    measured, protocol = measure(args, space, top)
    rho = print_measured(args, top, measured, protocol)
    print(summary(search, top, measured, rho))


if __name__ == "__main__":
    main()
