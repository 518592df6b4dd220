"""Measure a list of networks end to end on one backend with the protocol.

    session = measure_networks(backend, [(key, build, input_shape), ...], Protocol())
    session.measured[key].time_ms          # the protocol's statistic, drift-corrected
    print(session.report())                # machine state before and over the session

Each round builds and compiles a network anew (``build()``, then
:meth:`~annette_torch.backends.Backend.measure`), so a session of large models keeps one
in memory at a time; with ``Protocol(compile_once=True)`` each network is compiled once
(:meth:`~annette_torch.backends.Backend.prepared`) and kept until its last round, so
rounds cost only their runs and many rounds are cheap, while every network of the
session is held in memory at once.
Before the first network the machine is checked (:mod:`.machine_load`: steal, busy
CPUs, load, and the canary's spread as the noise), warning when it is too busy.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, Sequence

from tqdm import tqdm
from torch import nn

from ..backends.base import BackendError
from .canary import can_time_canary, canary_timer
from .machine_load import CpuTimes, MachineState, between, machine_state, read_cpu_times
from .protocol import DEFAULT_STATISTIC, ItemFailed, Measured, Protocol, Session, canary_reference, combine, \
    interleave, spread_of

Item = tuple[Hashable, Callable[[], nn.Module], Sequence[int]]
#: how ``adapt``, ``check`` and a campaign's reference networks time whole networks where the
#: runtime keeps a compiled model (the accuracy benchmark's ground-truth protocol): 12 rounds of
#: each network compiled once, each round's p10 against the canary timed beside it, the median
#: over rounds. With 3 pooled rounds compiled anew (:class:`Protocol`'s defaults), ``adapt``'s
#: reference networks ran 5-11 % slower than that ground truth measured them minutes before,
#: and the adapted profiles scored 8.6-10.3 % (torch-cpu) and 6.7-6.9 % (openvino-cpu) on it
#: against 5.4-6.8 % and 6.0-6.1 % (docs/accuracy.md, session 27)
NETWORK_PROTOCOL = Protocol(rounds=12, warmup=5, repeats=10, drift="canary", compile_once=True,
                            across_rounds="median")
#: seconds the machine check watches /proc/stat for before a session
CHECK_INTERVAL_S = 1.0


def network_protocol(backend) -> Protocol:
    """The protocol whole networks are timed with on ``backend`` unless told otherwise:
    :data:`NETWORK_PROTOCOL` where it times a compiled model again cheaply (the CPU
    runtimes, CUDA), :class:`Protocol`'s defaults on a board, which compiles and deploys
    every network anew (no canary, no model kept between rounds)."""
    return NETWORK_PROTOCOL if can_time_canary(backend) else Protocol()


@dataclass
class NetworkSession:
    """What :func:`measure_networks` measured (``measured``: key -> :class:`Measured`),
    what failed (key -> message), the protocol session (canary values, reference) and
    the machine's state before (``before``) and over the session (``during``)."""

    protocol: Protocol
    measured: dict[Hashable, Measured]
    failures: dict[Hashable, str]
    session: Session
    before: MachineState
    during: MachineState

    def report(self) -> str:
        """:func:`machine_report` of this session."""
        return machine_report(self.before, self.during, self.session)


def machine_report(before: MachineState, during: MachineState, session: Session) -> str:
    """Lines on the machine before measuring and during ``session`` (with the canary's
    reference time and the session's wall time), then one per warning the session's own
    state calls for (the check before it warned when it was made)."""
    reference = f"; canary reference {session.reference_ms:.4g} ms" if session.reference_ms else ""
    return (f"machine before measuring: {before}\n"
            f"machine while measuring: {during}{reference}; {session.wall_s:.0f} s"
            + "".join(f"\nwarning: while measuring: {warning}" for warning in during.warnings))


def session_state(start: CpuTimes | None, threads: int, session: Session) -> MachineState:
    """The machine's state over ``session``, which began when ``start`` was read: steal,
    load and the canary's drift (:meth:`~.protocol.Session.canary_spread`)."""
    return between(start, read_cpu_times(), threads, interval_s=session.wall_s, drift=session.canary_spread())


@contextlib.contextmanager
def protocol_canary(backend, protocol: Protocol) -> Iterator[Callable[[], Sequence[float]] | None]:
    """The canary timer of ``backend`` for ``protocol`` (None where the backend cannot time
    it cheaply): the machine check's noise, and with ``drift="canary"`` the correction."""
    if not can_time_canary(backend):
        yield None
        return
    with canary_timer(backend, protocol.warmup, protocol.canary_repeats) as canary:
        yield canary


def check_machine(canary: Callable[[], Sequence[float]] | None, threads: int, statistic: str = DEFAULT_STATISTIC,
                  warn: bool = True, interval_s: float | None = None) -> tuple[MachineState, float | None]:
    """The machine's state (:func:`~.machine_load.machine_state`, watching ``interval_s``,
    default :data:`CHECK_INTERVAL_S`) with the spread of the canary's runs as its noise,
    and the canary's reference time for ``statistic`` (:func:`~.protocol.canary_reference`;
    None without a canary); warns when the machine is too busy."""
    state = machine_state(threads=threads, interval_s=CHECK_INTERVAL_S if interval_s is None else interval_s)
    reference_ms = None
    if canary is not None:
        reference_ms, runs = canary_reference(canary, statistic)
        state = dataclasses.replace(state, noise=spread_of(runs))
    if warn:
        state.warn()
    return state, reference_ms


def measure_networks(backend, items: Sequence[Item], protocol: Protocol = Protocol(),
                     reference_ms: float | None = None, on_start: Callable[[float | None], None] | None = None,
                     on_measured: Callable[[Hashable, Measured], None] | None = None,
                     deadline: float | None = None, progress: bool = True, warn: bool = True) -> NetworkSession:
    """Measure ``items`` (key, builder, input shape) on ``backend`` with ``protocol``.

    ``reference_ms``: the canary time to express the times against (a folder's recorded
    reference, :mod:`.record`); default the statistic of the canary's timings at the
    start. ``on_start(reference_ms)`` is called with the reference in use (None without
    drift correction) before the first network, ``on_measured(key, measured)`` as soon
    as a network is done.
    ``deadline``: keep adding rounds until ``time.monotonic()`` passes it. A network the
    backend fails on is dropped with its message in ``failures``."""
    shapes = {key: tuple(shape) for key, _, shape in items}
    builders = {key: build for key, build, _ in items}
    compiled: dict[Hashable, tuple[contextlib.ExitStack, Callable[[int, int], Any]]] = {}

    def timer(key: Hashable) -> Callable[[int, int], Any]:
        """The function that times ``key``: compiled for this round, or for the session."""
        if not protocol.compile_once:
            return lambda warmup, repeats: backend.measure(builders[key](), shapes[key], warmup=warmup,
                                                           repeats=repeats)
        if key not in compiled:
            stack = contextlib.ExitStack()       # holds nothing if prepared() fails
            compiled[key] = stack, stack.enter_context(backend.prepared(builders[key](), shapes[key]))
        return compiled[key][1]

    def release(key: Hashable) -> None:
        """Free ``key``'s compiled network, if one is held."""
        if key in compiled:
            compiled.pop(key)[0].close()

    def release_all() -> None:
        for key in list(compiled):
            release(key)

    def measure(key: Hashable) -> tuple[float, ...]:
        try:
            return tuple(timer(key)(protocol.warmup, protocol.repeats).runs_ms)
        except BackendError as error:
            release(key)
            raise ItemFailed(str(error)) from error

    def finished(key: Hashable, rounds: list, factors: list[float]) -> None:
        release(key)
        measured[key] = combine(rounds, factors, protocol.statistic, protocol.across_rounds)
        if on_measured is not None:
            on_measured(key, measured[key])

    measured: dict[Hashable, Measured] = {}
    with contextlib.ExitStack() as session_end, protocol_canary(backend, protocol) as canary:
        session_end.callback(release_all)
        before, session_reference_ms = check_machine(canary, backend.threads, protocol.statistic, warn)
        if protocol.drift != "canary":
            canary = None
        elif reference_ms is None:
            reference_ms = session_reference_ms
        if on_start is not None:
            on_start(reference_ms if canary is not None else None)
        start = read_cpu_times()
        with tqdm(total=len(shapes) * protocol.rounds, desc=f"measure on {backend.name} ({protocol.rounds} rounds)",
                  unit="run", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
            session = interleave(list(shapes), measure, protocol, canary, reference_ms, finished, deadline, bar)
        during = session_state(start, backend.threads, session)
    return NetworkSession(protocol, measured, session.failures, session, before, during)


def measured_json(measured: Measured) -> dict[str, Any]:
    """A :class:`Measured` as plain JSON: value, spread, per-round values raw and corrected, factors."""
    return {"time_ms": measured.time_ms, "statistic": measured.statistic, "spread": measured.spread,
            "round_ms": measured.round_values(), "raw_round_ms": measured.round_values(corrected=False),
            "factors": list(measured.factors), "runs_ms": list(measured.runs_ms),
            "raw_runs_ms": list(measured.raw_runs_ms)}
