"""A budgeted calibration campaign that starts from a prior profile: spend ``minutes``
where the prior predicts this machine worst.

    summary = run_budgeted_campaign("openvino-cpu", "calib", minutes=30, prior="openvino-cpu")
    print(summary)                 # per family: measured, the prior's error; the fit command

The pool is a sweep (default ``full``), its benchmarks grouped by family (conv2d,
linear, pool2d, ...), each family in the fixed hash order :func:`run_campaign` uses.
Planning (:class:`Planner`, pure, from what the store holds):

1. **Pilot**: :data:`PILOT` benchmarks of every family, round robin.
2. **Allocation by expected error reduction**: the prior's error on a family is the mean
   ``|log(estimate / measured)|`` of its measured benchmarks (end to end; at least
   :data:`ERROR_FLOOR`, the measurement's own noise). A correction fitted to ``n``
   samples leaves an error falling like ``1 / sqrt(n)``, so one more benchmark of family
   ``f`` gains ``relevance_f * error_f * (1/sqrt(n_f) - 1/sqrt(n_f + 1))`` per second it
   costs (the family's mean measuring time in the store). Picking the largest gain
   greedily is the Neyman allocation of stratified sampling under a cost budget
   (``n_f`` proportional to ``relevance_f * error_f / sqrt(cost_f)``): the family where
   the prior is worst gets the most, with diminishing returns. ``relevance_f`` is 1, or
   with ``models`` (``calibrate --for``) how much of those networks' estimated time is in
   the kernel kinds the family's benchmarks hold (at least :data:`RELEVANCE_FLOOR`).
3. **Adaptive sampling within a family** (as nn-Meter samples more finely around the
   configurations its predictor gets most wrong): every other pick of a family is the
   unmeasured benchmark whose nearest measured neighbour (distance in log parameters) has
   the largest error; the others follow the pool order, to keep covering the family.

Anchoring: before its first benchmark, a campaign measures ``references`` (default
:data:`REFERENCES`) whole networks of the reference pool end to end into the store's
``references.csv`` (as ``annette-torch adapt`` draws and times them, about a minute of the budget;
once per store), and ``annette-torch fit`` corrects the profile it fits on them: small
benchmarks alone can predict whole networks 20 % off on some CPUs (docs/cross-cpu.md).

Running: chunks of up to :data:`~.campaign.CHUNK` benchmarks in interleaved rounds
through the campaign's worker, written through the normal store (append-only,
resumable). Before each chunk the campaign checks the clock: a benchmark is started
only if its estimated duration fits in what is left, that duration being the
protocol's inferences at the prior's estimate of the benchmark (``rounds * 2 * (warmup +
repeats)`` runs: the per-layer profile and the end-to-end timing) plus a fixed cost
per benchmark (export, compile, canary) learned from the chunks measured so far. The
first chunk of a run has :data:`FIRST_CHUNK` benchmarks, to learn that cost. A rerun
reads the store and continues the plan where it stopped.
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import numpy as np
from tqdm import tqdm

from ..backends import get_backend
from ..measure.canary import check_drift
from ..measure.networks import network_protocol
from ..measure.record import write_record
from ..measure.protocol import DEFAULT_STATISTIC, Protocol
from .campaign import (CHUNK, REPEATS, ROUNDS, STOP_AFTER_FAILURES, MeasuringWorker, _FailureRun, _specs,
                       check_options, measure_chunk, reference_canary, store_protocol)
from .store import MeasurementStore, read_references
from .sweep import BenchmarkSpec

#: whole reference networks a campaign measures first, for fit to anchor the profile on
REFERENCES = 10
#: benchmarks of every family measured before the prior's errors steer the plan
PILOT = 3
#: the smallest error a family is credited with: the measurement's own noise (2 %)
ERROR_FLOOR = 0.02
#: the least relevance a family keeps when the user's networks hold none of its kinds
RELEVANCE_FLOOR = 0.01
#: a family whose first benchmarks all failed this many times is given up
GIVE_UP_FAILURES = 3
#: benchmarks in a run's first chunk, which measures the fixed cost of a benchmark
FIRST_CHUNK = 2
#: the fixed cost of one benchmark (s) assumed before any was measured on this machine
DEFAULT_FIXED_S = 1.0
#: at most this many of a family's measured benchmarks are traced to score the prior
MAX_SCORED = 40


def _pool_order(spec: BenchmarkSpec) -> str:
    return spec.id.rsplit("-", 1)[1]


def _distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Between two benchmarks' parameters: summed |log| differences of the numbers, 1 per
    differing other value."""
    total = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            total += abs(math.log1p(abs(x)) - math.log1p(abs(y)))
        elif x != y:
            total += 1.0
    return total


@dataclass
class FamilyState:
    """What the store says about one family: its measured benchmarks' parameters and the
    prior's ``|log error|`` on each (scored ones), ok and failed counts, the mean measuring
    seconds per benchmark, and its pool benchmarks not yet measured, in pool order."""

    family: str
    todo: list[BenchmarkSpec]
    ok: int = 0
    failed: int = 0
    scored: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    seconds: float = float("nan")

    @property
    def error(self) -> float | None:
        """The prior's mean |log error| on the family (None before any is scored)."""
        if not self.scored:
            return None
        return max(float(np.mean([e for _, e in self.scored])), ERROR_FLOOR)

    @property
    def given_up(self) -> bool:
        return self.ok == 0 and self.failed >= GIVE_UP_FAILURES


class Planner:
    """Which benchmarks to measure next (the module doc's steps 1-3), from ``families``
    (family -> :class:`FamilyState`) and ``relevance`` (family -> weight, default 1)."""

    def __init__(self, families: dict[str, FamilyState], relevance: dict[str, float] | None = None,
                 pilot: int = PILOT) -> None:
        self.families = families
        self.relevance = relevance or {}
        self.pilot = pilot

    def _cost(self, state: FamilyState) -> float:
        known = [s.seconds for s in self.families.values() if math.isfinite(s.seconds)]
        if math.isfinite(state.seconds):
            return max(state.seconds, 1e-3)
        return max(float(np.mean(known)), 1e-3) if known else 1.0

    def gain(self, state: FamilyState, planned: int = 0) -> float:
        """The expected error reduction per second of one more benchmark of ``state``'s
        family, ``planned`` more already planned."""
        n = max(state.ok + planned, 1)
        error = state.error if state.error is not None else ERROR_FLOOR
        relevance = self.relevance.get(state.family, 1.0)
        return relevance * error * (1 / math.sqrt(n) - 1 / math.sqrt(n + 1)) / self._cost(state)

    def _pick(self, state: FamilyState, taken: set[str], picks: int) -> BenchmarkSpec | None:
        """The next benchmark of a family: by pool order, or (every other pick after the
        pilot) the one nearest the measured benchmark with the largest error."""
        left = [s for s in state.todo if s.id not in taken]
        if not left:
            return None
        after_pilot = state.ok + picks - self.pilot
        if after_pilot < 0 or after_pilot % 2 == 0 or not state.scored:
            return left[0]
        worst_params = max(state.scored, key=lambda item: item[1])[0]
        return min(left, key=lambda s: _distance(s.params, worst_params))

    def next(self, size: int) -> list[BenchmarkSpec]:
        """Up to ``size`` benchmarks to measure next, in planning order."""
        planned: dict[str, int] = {}
        taken: set[str] = set()
        chosen = []
        for _ in range(size):
            open_states = [s for s in self.families.values() if not s.given_up
                           and any(spec.id not in taken for spec in s.todo)]
            if not open_states:
                break
            piloting = [s for s in open_states if s.ok + s.failed + planned.get(s.family, 0) < self.pilot]
            if piloting:
                state = min(piloting, key=lambda s: (s.ok + s.failed + planned.get(s.family, 0), s.family))
            else:
                state = max(open_states, key=lambda s: (self.gain(s, planned.get(s.family, 0)), s.family))
            spec = self._pick(state, taken, planned.get(state.family, 0))
            planned[state.family] = planned.get(state.family, 0) + 1
            taken.add(spec.id)
            chosen.append(spec)
        return chosen


class PriorScorer:
    """The prior's estimates and ``|log error|`` of benchmarks, each traced once."""

    def __init__(self, prior: Any) -> None:
        from ..estimator import Estimator
        from ..profiles.fingerprint import ProfileMismatchWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileMismatchWarning)      # the prior describes another machine
            # a benchmark runs in a loop: its weights stay cached
            self.estimator = Estimator(prior, weights_from_memory=False)
        self._ms: dict[str, float] = {}

    def estimate_ms(self, spec: BenchmarkSpec) -> float:
        """The prior's estimate of ``spec``'s benchmark (ms). The benchmarks compute what the
        compiler folds on purpose (an ``eltwise`` division by a constant), so the
        estimator's warning about such work, meant for a user's network, is not raised."""
        if spec.id not in self._ms:
            from ..estimator import FreeWorkWarning
            from ..graph import trace
            from .generator import build_benchmark

            module, input_shape = build_benchmark(spec)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FreeWorkWarning)
                self._ms[spec.id] = self.estimator(trace(module, input_shape=input_shape, name=spec.id))
        return self._ms[spec.id]

    def error(self, spec: BenchmarkSpec, measured_ms: float) -> float:
        """``|log(estimate / measured)|`` of one benchmark (an estimate of 0 counts as 1 ns)."""
        return abs(math.log(max(self.estimate_ms(spec), 1e-6) / measured_ms))


def family_states(pool: Sequence[BenchmarkSpec], networks: Any, scorer: PriorScorer) -> dict[str, FamilyState]:
    """Per family of ``pool`` (and of the store's ``networks``), what the store holds and
    what is left to measure; the prior scored on up to :data:`MAX_SCORED` of each family's
    measured benchmarks (the last ones)."""
    done = set(networks["benchmark"])
    families: dict[str, FamilyState] = {}
    for spec in sorted(pool, key=_pool_order):
        families.setdefault(spec.family, FamilyState(spec.family, []))
        if spec.id not in done:
            families[spec.family].todo.append(spec)
    last = networks.drop_duplicates("benchmark", keep="last")
    for family, rows in last.groupby("family"):
        state = families.setdefault(family, FamilyState(family, []))
        ok = rows[rows["status"] == "ok"]
        state.ok, state.failed = len(ok), int((rows["status"] != "ok").sum())
        walls = rows["wall_s"].astype(float)
        state.seconds = float(walls.mean()) if walls.notna().any() else float("nan")
        for spec_json, measured in zip(ok["spec"].iloc[-MAX_SCORED:], ok["time_ms"].iloc[-MAX_SCORED:]):
            spec = BenchmarkSpec.from_json(spec_json)
            if measured > 0:
                state.scored.append((spec.params, scorer.error(spec, float(measured))))
    return families


def family_relevance(prior: Any, models: Sequence[str], families: dict[str, FamilyState],
                     scorer: PriorScorer) -> dict[str, float]:
    """Per family, the share of the ``models``' estimated time (by the prior) in kernel kinds
    the family's benchmarks hold, each kind weighted by its share of the family's kernels
    (of its first pool benchmark); at least :data:`RELEVANCE_FLOOR`."""
    from ..graph import trace
    from ..models_source import trace_model
    from .generator import build_benchmark

    estimator = scorer.estimator
    user: dict[str, float] = {}
    for model in models:
        report = estimator.report(trace_model(model))
        times = report[report["bound"] != "free"].groupby("kind")["time_ms"].sum()
        for kind, ms in (times / times.sum()).items():
            user[kind] = user.get(kind, 0.0) + float(ms) / len(models)
    relevance = {}
    for family, state in families.items():
        specs = state.todo[:1]
        if not specs:
            relevance[family] = RELEVANCE_FLOOR
            continue
        module, input_shape = build_benchmark(specs[0])
        table = estimator.kernel_table(trace(module, input_shape=input_shape))
        kinds = [k for k, free in zip(table.kinds, table.free) if not free]
        share = sum(user.get(k, 0.0) for k in kinds) / max(len(kinds), 1)
        relevance[family] = max(share, RELEVANCE_FLOOR)
    return relevance


@dataclass
class BudgetSummary:
    """What one run of a budgeted campaign did, per family and in all."""

    store: str
    prior: str
    minutes: float
    measured: int
    failed: int
    elapsed_s: float
    stopped_early: bool
    exhausted: bool
    families: list[dict[str, Any]]
    references: int = 0

    def __str__(self) -> str:
        lines = [f"{'family':<18}{'now':>5}{'in store':>10}{'failed':>8}{'prior error %':>15}{'relevance':>11}"]
        for row in self.families:
            error = "-" if row["error"] is None else f"{100 * (math.exp(row['error']) - 1):.1f}"
            lines.append(f"{row['family']:<18}{row['now']:>5}{row['ok']:>10}{row['failed']:>8}{error:>15}"
                         f"{row['relevance']:>11.2f}")
        lines.append(f"{self.measured} benchmarks measured now, {self.failed} failed; {self.elapsed_s:.0f} s of "
                     f"{60 * self.minutes:.0f}; store {self.store}")
        if self.stopped_early:
            lines.append("time budget spent; run the same command again to continue the plan")
        elif self.exhausted:
            lines.append("every benchmark of the pool is measured")
        anchor = (f"; it anchors the profile on the store's {self.references} reference networks"
                  if self.references else "")
        lines.append(f"fit with the prior{anchor}: annette-torch fit --data {self.store} --out PROFILE_DIR "
                     f"--prior {self.prior}")
        return "\n".join(lines)


def protocol_seconds(estimate_ms: float, protocol: Protocol) -> float:
    """The seconds the protocol's inferences of one benchmark take at ``estimate_ms`` each:
    ``rounds`` rounds of a per-layer profile and an end-to-end timing, each ``warmup +
    repeats`` inferences."""
    return protocol.rounds * 2 * (protocol.warmup + protocol.repeats) * estimate_ms / 1e3


def run_budgeted_campaign(backend_name: str, out: str | os.PathLike, minutes: float, prior: Any = None,
                          pool: str | os.PathLike | Sequence[BenchmarkSpec] = "full", models: Sequence[str] = (),
                          threads: int = 1, precision: str | None = None, timeout_s: float | None = None,
                          warmup: int = 5, repeats: int = REPEATS, rounds: int = ROUNDS,
                          statistic: str = DEFAULT_STATISTIC, drift: str = "none", pilot: int = PILOT,
                          progress: bool = True, backend_options: dict[str, Any] | None = None,
                          references: int = REFERENCES, reference_pool: Sequence[Any] | None = None,
                          reference_protocol: Protocol | None = None,
                          clock: Callable[[], float] = time.monotonic) -> BudgetSummary:
    """Measure, within ``minutes`` by ``clock``, the benchmarks of ``pool`` the plan picks
    (module doc) into the store under ``out``; ``prior`` (a profile name, path or
    :class:`~annette_torch.profiles.Profile`) defaults to the built-in profile of the
    backend, threads and precision. First, unless the store holds them, ``references``
    whole networks of ``reference_pool`` (default
    :func:`~annette_torch.transfer.references.reference_pool`) are measured into it (0:
    none), timed with ``reference_protocol`` (default
    :func:`~annette_torch.measure.networks.network_protocol`: as ``adapt`` and the
    accuracy benchmark's ground truth time whole networks). Other options as for
    :func:`~.campaign.run_campaign`."""
    from ..profiles import load_profile
    from .in_context import profile_for

    check_options(threads, minutes, timeout_s)
    if minutes is None:
        raise ValueError("a budgeted campaign needs --minutes (its budget)")
    if references < 0:
        raise ValueError(f"--references must be 0 or more reference networks, got {references}")
    start = clock()
    deadline = start + minutes * 60
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    check_drift(backend, drift)
    protocol = Protocol(rounds=rounds, warmup=warmup, repeats=repeats, statistic=statistic, drift=drift)
    prior_profile = load_profile(prior if prior is not None else profile_for(backend))
    prior_label = str(prior) if isinstance(prior, (str, os.PathLike)) else prior_profile.name
    options = {"threads": threads, "precision": backend.precision, **(backend_options or {})}
    timeout_s = backend.benchmark_timeout_s if timeout_s is None else timeout_s
    specs = _specs(pool)
    scorer = PriorScorer(prior_profile)
    counts = {"measured": 0, "failed": 0, "layer_rows": 0}
    now: dict[str, int] = {}
    stopped_early = exhausted = False
    with MeasurementStore.open(out, backend.fingerprint()) as store:
        record = store_protocol(store, protocol)
        stored = len(read_references(store.folder))
        if references and not stored:
            stored = measure_references_into(store, backend, references,
                                             reference_protocol or network_protocol(backend), reference_pool)
        families = family_states(specs, store.networks(), scorer)
        relevance = family_relevance(prior_profile, models, families, scorer) if models else {}
        planner = Planner(families, relevance, pilot)
        known = store.networks()["wall_s"].astype(float).dropna()
        fixed_s = float(known.median()) if len(known) else DEFAULT_FIXED_S
        worker = MeasuringWorker(backend_name, options, warmup, repeats, protocol.canary_repeats,
                                 str(store.folder / "worker.log"))
        failures = _FailureRun(store, counts, STOP_AFTER_FAILURES, timeout_s)

        def commit(network: dict, rows: list[dict]) -> None:
            store.append(network, rows)
            counts["measured"] += 1
            counts["layer_rows"] += len(rows)

        size, extras = FIRST_CHUNK, False
        try:
            with tqdm(total=None, desc=f"{backend_name} budget", unit="round", disable=not progress,
                      dynamic_ncols=True) as bar:
                while True:
                    candidates = planner.next(size)
                    if not candidates:
                        exhausted = True
                        break
                    remaining, chunk, planned_s = deadline - clock(), [], 0.0
                    for spec in candidates:
                        needed = protocol_seconds(scorer.estimate_ms(spec), protocol) + fixed_s
                        if planned_s + needed > remaining:
                            break
                        chunk.append(spec)
                        planned_s += needed
                    if not chunk:
                        stopped_early = True
                        break
                    if not extras:
                        worker.store_extras(store.folder)      # before the first benchmark, in the measuring process
                        extras = True
                        if protocol.drift == "canary" and record.get("canary_ms") is None:
                            record["canary_ms"] = reference_canary(worker, protocol, timeout_s)
                            write_record(store.folder, record)
                    began = clock()
                    measure_chunk(chunk, worker, protocol, record.get("canary_ms"), commit, timeout_s, bar, failures)
                    failures.flush()
                    inferences = sum(protocol_seconds(scorer.estimate_ms(spec), protocol) for spec in chunk)
                    fixed_s = max((clock() - began - inferences) / len(chunk), 0.0)
                    for spec in chunk:
                        now[spec.family] = now.get(spec.family, 0) + 1
                    families = family_states(specs, store.networks(), scorer)
                    planner.families = families
                    size = CHUNK
        finally:
            worker.stop()
    table = [{"family": f, "now": now.get(f, 0), "ok": s.ok, "failed": s.failed, "error": s.error,
              "relevance": relevance.get(f, 1.0)} for f, s in sorted(families.items())]
    return BudgetSummary(str(store.folder), prior_label, minutes, counts["measured"], counts["failed"],
                         clock() - start, stopped_early, exhausted, table, stored)


def measure_references_into(store: MeasurementStore, backend: Any, k: int, protocol: Protocol,
                            pool: Sequence[Any] | None = None) -> int:
    """Measure ``k`` reference networks (seed 0, as ``annette-torch adapt`` draws them) on
    ``backend`` with ``protocol`` into ``store``'s ``references.csv``; returns how many
    were measured (a network the backend fails on is reported and left out)."""
    from ..transfer.adapt import measure_references

    print(f"measuring {k} reference networks end to end, for fit to anchor the profile on", file=sys.stderr)
    samples = measure_references(backend, k, 0, protocol, pool=pool)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    store.append_references([{"benchmark": s.name, "set": s.set, "time_ms": s.measured_ms, "finished_utc": stamp}
                             for s in samples])
    return len(samples)
