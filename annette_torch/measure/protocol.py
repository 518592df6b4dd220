"""The measuring protocol: how calibration, adaptation and ground truth are all timed.

One measurement session times a list of items (networks, benchmarks) in interleaved
rounds, ``A B C A B C ...`` rather than ``A A A B B B``, so that a slow minute on a
shared machine hits one round of many items instead of every run of one. With ``drift="canary"``, before every
item and once after the last, a fixed small network, the *canary*
(:mod:`.canary`), is timed; each round of an item is then divided by its drift
factor, the geometric mean of the canary before and after it over the canary's
*reference* time (``drift="canary"``). The reference is recorded beside the results
(``protocol.json``, :mod:`.record`) the first time a folder is measured, so later
sessions are expressed against the same machine state; without one the session times
the canary :data:`REFERENCE_BURSTS` times in a row at its start (about two seconds) and
takes the 10th percentile of those timings (:func:`canary_reference`): the machine's fast
state, which one burst is not on a host whose slow spells last 0.5-2 s. A session's value
for an item is ``statistic`` of all its corrected runs pooled over the rounds
(``across_rounds="pool"``) or the median over rounds of each round's ``statistic``
(``"median"``). ``annette-torch noise``
shows on a given machine whether the correction pays: the round-to-round differences of
a few small networks with and without it.

The default statistic is the 10th percentile (``"p10"``). Evidence:
``benchmarks/session_agreement.py`` reads the accuracy benchmark's results files,
which hold 2 to 8 sessions each of the same 71 networks, measured minutes to hours
apart on this project's shared machine. Between consecutive sessions the pooled p10
differed less than the median in 27 of 29 (backend, set, session pair) cases, by
6.0 % against 8.7 % on average, e.g. 1.05 % against 6.71 % for the NAS-Bench-201 cells
on OpenVINO bf16 (``benchmarks/results/session-agreement.txt``): noise on a shared
machine only ever slows runs down, and a low percentile of many runs ignores the
slowed ones, where the minimum is the one luckiest run. The same data says what drift
correction can do at most: one factor per session pair removes only 0.5 to 1 point of
those differences; most of the disagreement is noise that hit one network and not the
others, which is what interleaving spreads out. The default drift correction is "none":
measured twice minutes apart on a quiet shared machine, the accuracy benchmark's networks
agreed to 0.91 % as timed against 3.51 % canary-corrected (``benchmarks/reproducibility.py``,
docs/accuracy.md); the canary's own noise outweighed the drift. On a host with slow spells
(docs/cross-cpu.md, 2026-12-05) the canary and the median over rounds are what made two
passes agree: ``--rounds 12 --compile once --drift canary --across-rounds median``. The
statistic is a parameter (:data:`STATISTICS`); calibration stores and ground truth record
theirs (:mod:`.record`), and a folder is never continued with another.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar

import numpy as np

T = TypeVar("T")

#: statistics of pooled runs a protocol may use: minimum, 10th and 25th percentile, median
STATISTICS: tuple[str, ...] = ("min", "p10", "p25", "median")
DEFAULT_STATISTIC = "p10"
#: drift corrections: against the canary, or none
DRIFTS: tuple[str, ...] = ("canary", "none")
#: how to combine an item's rounds: the statistic of all runs pooled, or the median of each round's statistic
ACROSS_ROUNDS: tuple[str, ...] = ("pool", "median")
#: the canary's timings in a row at a session's start that make its reference, when none is recorded
REFERENCE_BURSTS = 500
_PERCENTILE = {"p10": 10.0, "p25": 25.0, "median": 50.0}


def statistic_ms(runs_ms: Sequence[float], statistic: str) -> float:
    """``statistic`` (one of :data:`STATISTICS`, percentiles with numpy's linear
    interpolation) of at least one run time."""
    runs = np.asarray(runs_ms, dtype=float)
    if runs.size == 0:
        raise ValueError("a statistic needs at least one run")
    if statistic == "min":
        return float(runs.min())
    if statistic not in _PERCENTILE:
        raise ValueError(f"unknown statistic {statistic!r}; statistics are {', '.join(STATISTICS)}")
    return float(np.percentile(runs, _PERCENTILE[statistic]))


def canary_reference(canary: Callable[[], Sequence[float]], statistic: str) -> tuple[float, list[float]]:
    """The canary's reference time and the runs it rests on: ``canary()`` timed
    :data:`REFERENCE_BURSTS` times in a row, each timing reduced to ``statistic``, and the
    10th percentile of those values, the machine's fast state (a single timing may fall in a
    slow spell of a shared host: three sessions' one-timing references lay 0.126-0.209 ms
    apart, these 0.124-0.125 ms; docs/cross-cpu.md)."""
    bursts = [list(canary()) for _ in range(REFERENCE_BURSTS)]
    reference = float(np.percentile([statistic_ms(runs, statistic) for runs in bursts], 10))
    return reference, [t for runs in bursts for t in runs]


def spread_of(runs_ms: Sequence[float]) -> float:
    """(p90 - p10) / median of the runs, the relative noise :class:`~annette_torch.backends.Latency` reports."""
    p10, median, p90 = np.percentile(np.asarray(runs_ms, dtype=float), [10, 50, 90])
    return float((p90 - p10) / median) if median > 0 else 0.0


@dataclass(frozen=True)
class Protocol:
    """How to measure: ``rounds`` interleaved rounds per item, each ``warmup`` untimed
    then ``repeats`` timed inferences; ``statistic`` of the pooled, drift-corrected runs;
    ``drift`` correction "canary" (timed ``canary_repeats`` times before every item) or
    "none"; ``compile_once``: whole networks (:func:`~.networks.measure_networks`) are
    compiled once and kept for all their rounds instead of anew every round (rounds then
    cost only their runs: ``--rounds 12 --compile once`` for a noisy host,
    docs/cross-cpu.md); ``across_rounds``: an item's value is ``statistic`` of its runs
    pooled over the rounds ("pool") or the median over rounds of each round's ``statistic``
    ("median": one slow round cannot move it; with the canary, one badly corrected round
    neither). The canary's 20 runs cost a few milliseconds per item and round; on a
    simulated quiet machine its own noise made corrected rounds 40 % noisier than
    uncorrected ones with 5 runs and 9 % with 20, while on a drifting one (1 % a second)
    the correction cut the round-to-round difference from 3.2 % to 0.25 %
    (``benchmarks/drift_correction.py``)."""

    rounds: int = 3
    warmup: int = 5
    repeats: int = 10
    statistic: str = DEFAULT_STATISTIC
    drift: str = "none"
    canary_repeats: int = 20
    compile_once: bool = False
    across_rounds: str = "pool"

    def __post_init__(self) -> None:
        for name, low in (("rounds", 1), ("warmup", 0), ("repeats", 1), ("canary_repeats", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"protocol: {name} must be an int >= {low}, got {value!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"protocol: statistic must be one of {', '.join(STATISTICS)}, got {self.statistic!r}")
        if self.drift not in DRIFTS:
            raise ValueError(f"protocol: drift must be one of {', '.join(DRIFTS)}, got {self.drift!r}")
        if self.across_rounds not in ACROSS_ROUNDS:
            raise ValueError(f"protocol: across_rounds must be one of {', '.join(ACROSS_ROUNDS)}, "
                             f"got {self.across_rounds!r}")
        if not isinstance(self.compile_once, bool):
            raise ValueError(f"protocol: compile_once must be True or False, got {self.compile_once!r}")

    def to_json(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return asdict(self)

    def __str__(self) -> str:
        drift = "canary drift correction" if self.drift == "canary" else "no drift correction"
        compiled = "compiled once" if self.compile_once else "compiled anew each round"
        return (f"{self.rounds} interleaved round(s) of {self.warmup} warm-up + {self.repeats} timed runs, "
                f"{describe_statistic(self.statistic, self.across_rounds)}, {drift}, {compiled}")


def describe_statistic(statistic: str, across_rounds: str) -> str:
    """How an item's value is taken from its runs, in words: "p10 of the pooled runs"."""
    return (f"median over rounds of each round's {statistic}" if across_rounds == "median"
            else f"{statistic} of the pooled runs")


@dataclass(frozen=True)
class Measured:
    """One item's measurement over a session's rounds.

    ``time_ms``: the protocol's statistic of ``runs_ms``, every round's runs divided by
    that round's drift factor, pooled (``across_rounds="pool"``) or per round with the
    median over rounds (``"median"``). ``factors``: per round, local canary time over
    the reference (1 without drift correction). ``raw_runs_ms``: the runs as timed.
    ``spread``: (p90 - p10) / median of ``runs_ms``.
    """

    time_ms: float
    statistic: str
    runs_ms: tuple[float, ...]
    raw_runs_ms: tuple[float, ...]
    round_sizes: tuple[int, ...]
    factors: tuple[float, ...]
    across_rounds: str = "pool"

    @property
    def spread(self) -> float:
        return spread_of(self.runs_ms)

    def value(self, statistic: str | None = None, corrected: bool = True) -> float:
        """``statistic`` (default: the session's) of the runs, drift-corrected or as timed,
        combined across rounds as the session did (pooled, or the median of the rounds)."""
        if self.across_rounds == "median":
            return float(np.median(self.round_values(statistic, corrected)))
        return statistic_ms(self.runs_ms if corrected else self.raw_runs_ms, statistic or self.statistic)

    def round_values(self, statistic: str | None = None, corrected: bool = True) -> list[float]:
        """``statistic`` of each round's runs, drift-corrected or as timed."""
        runs = np.asarray(self.runs_ms if corrected else self.raw_runs_ms)
        edges = np.cumsum((0,) + self.round_sizes)
        return [statistic_ms(runs[a:b], statistic or self.statistic) for a, b in zip(edges[:-1], edges[1:])]


def combine(rounds_runs_ms: Sequence[Sequence[float]], factors: Sequence[float], statistic: str,
            across_rounds: str = "pool") -> Measured:
    """The :class:`Measured` of one item from its runs per round and the rounds' drift factors."""
    if len(rounds_runs_ms) != len(factors) or not rounds_runs_ms:
        raise ValueError(f"need one drift factor per round and at least one round, got {len(rounds_runs_ms)} "
                         f"round(s) and {len(factors)} factor(s)")
    if across_rounds not in ACROSS_ROUNDS:
        raise ValueError(f"across_rounds must be one of {', '.join(ACROSS_ROUNDS)}, got {across_rounds!r}")
    raw = [np.asarray(runs, dtype=float) for runs in rounds_runs_ms]
    corrected = np.concatenate([runs / f for runs, f in zip(raw, factors)])
    measured = Measured(math.nan, statistic, tuple(map(float, corrected)),
                        tuple(float(t) for runs in raw for t in runs), tuple(len(r) for r in raw),
                        tuple(float(f) for f in factors), across_rounds)
    return replace(measured, time_ms=measured.value())


class ItemFailed(Exception):
    """An item could not be measured in one round; the session drops it and goes on."""


@dataclass
class Session(Generic[T]):
    """What :func:`interleave` did: each item's results per round (``results``), failed
    items with their message, every canary value in order (the statistic of each
    canary timing) and the reference they are expressed against."""

    statistic: str
    reference_ms: float | None
    results: dict[Hashable, list[T]] = field(default_factory=dict)
    failures: dict[Hashable, str] = field(default_factory=dict)
    canary_ms: list[float] = field(default_factory=list)
    reference_runs_ms: list[float] = field(default_factory=list)
    _positions: dict[Hashable, list[tuple[int, int]]] = field(default_factory=dict)
    wall_s: float = 0.0

    def factors(self, key: Hashable) -> list[float]:
        """Per round of ``key``: the geometric mean of the canary times before and after
        it, over the reference (all 1 without a canary)."""
        if self.reference_ms is None:
            return [1.0] * len(self.results[key])
        return [math.sqrt(self.canary_ms[a] * self.canary_ms[b]) / self.reference_ms for a, b in self._positions[key]]

    def canary_spread(self) -> float | None:
        """(p90 - p10) / median of the canary values: how much the machine drifted (None without a canary)."""
        return spread_of(self.canary_ms) if len(self.canary_ms) > 1 else None


def interleave(keys: Sequence[Hashable], measure: Callable[[Hashable], T], protocol: Protocol,
               canary: Callable[[], Sequence[float]] | None = None, reference_ms: float | None = None,
               on_finished: Callable[[Hashable, list[T], list[float]], None] | None = None,
               deadline: float | None = None, progress: Any = None) -> Session[T]:
    """Measure every key ``protocol.rounds`` times in interleaved rounds (more rounds while
    ``time.monotonic()`` is before ``deadline``, if given), ``canary()`` (which returns run
    times in ms) before each item and after the last when ``protocol.drift`` is "canary".

    ``measure(key)`` returns one round's result or raises :class:`ItemFailed`, which drops
    the key (recorded in ``failures``) from this and later rounds. Without
    ``reference_ms`` the reference is :func:`canary_reference`, timed first.
    ``on_finished(key, results, factors)`` is
    called once a key's last round and the canary after it are done, so callers can
    commit it before the session ends. ``progress``: a tqdm bar updated per item-round.
    """
    start = time.monotonic()
    use_canary = protocol.drift == "canary" and canary is not None
    if protocol.drift == "canary" and canary is None:
        raise ValueError("protocol.drift is 'canary' but no canary was given")
    session: Session[T] = Session(protocol.statistic, None)
    if use_canary:
        if reference_ms is None:
            reference_ms, session.reference_runs_ms = canary_reference(canary, protocol.statistic)
        if not (math.isfinite(reference_ms) and reference_ms > 0):
            raise ValueError(f"the canary's reference time must be a positive number of ms, got {reference_ms!r}")
        session.reference_ms = float(reference_ms)
    live = list(dict.fromkeys(keys))
    session.results = {key: [] for key in live}
    session._positions = {key: [] for key in live}
    waiting: list[Hashable] = []        # keys done with their last round, waiting for the canary after it
    notified: set[Hashable] = set()

    def tick() -> None:
        if use_canary:
            session.canary_ms.append(statistic_ms(canary(), protocol.statistic))
        for key in waiting:
            notified.add(key)
            if on_finished is not None:
                on_finished(key, session.results[key], session.factors(key))
        waiting.clear()

    round_index = 0
    while live and (round_index < protocol.rounds or (deadline is not None and time.monotonic() < deadline)):
        last = deadline is None and round_index + 1 == protocol.rounds     # with a deadline: known only after it
        for key in list(live):
            tick()
            before = len(session.canary_ms) - 1
            try:
                result = measure(key)
            except ItemFailed as error:
                session.failures[key] = str(error)
                del session.results[key], session._positions[key]
                live.remove(key)
                continue
            finally:
                if progress is not None:
                    progress.update(1)
            session.results[key].append(result)
            session._positions[key].append((before, before + 1))
            if last:
                waiting.append(key)
        round_index += 1
    waiting.extend(key for key in live if key not in notified and key not in waiting)
    tick()
    session.wall_s = time.monotonic() - start
    return session
