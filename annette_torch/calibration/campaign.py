"""A calibration campaign: measure every benchmark of a sweep on one backend into a store.

    summary = run_campaign("openvino-cpu", "quick", "calibration/data", threads=1)

Benchmarks are measured with the measuring protocol (:mod:`annette_torch.measure.protocol`)
in chunks of :data:`CHUNK` benchmarks: the chunk's benchmarks take turns in ``rounds``
interleaved rounds (each a per-layer profile of ``warmup`` + ``repeats`` inferences and
the end-to-end time), the canary is timed before each, each round's runs are divided by
its drift factor, and a layer's or network's time is ``statistic`` of its pooled runs.
The store's ``protocol.json`` (:mod:`annette_torch.measure.record`) records the statistic,
the drift correction and the canary's reference time, so every later run of the campaign
is expressed against the same machine state; a store measured with another protocol (or
before protocols, which is the median of one round without drift correction) is never
continued with this one.

Measuring happens one request at a time in a worker process, so a benchmark that hangs
is killed after ``timeout_s`` (per round) and one that crashes the runtime takes only the
worker down; both are recorded as failed with their error, and the campaign goes on with
a new worker. All measuring happens there (the canary and the backend's store extras
too), in a process the backend may set up for measuring
(:meth:`~annette_torch.backends.Backend.prepare_process`); the campaign's own process is
left as it was. A benchmark is committed to the store once its last round and the canary
after it are done; what the store already holds is skipped, so an interrupted campaign
(even ``kill -9``) loses at most the chunk in progress and is resumed by running the same
command again. The worker's console output (runtime logs) goes to ``worker.log`` in the
store folder. ``minutes`` bounds the wall time of one run of the campaign, for campaigns
done in chunks: near the limit chunks shrink to what fits, so a run ends within about
one benchmark of it. The same chunks, with the same worker and :func:`measure_chunk`,
run on the nodes of a Ray cluster in a fleet campaign (:mod:`annette_torch.fleet`).

Settings in range can still fail every benchmark (a ``--timeout`` shorter than any
round, a runtime that cannot start, a board that is down). When
``stop_after_failures`` (default :data:`STOP_AFTER_FAILURES`) benchmarks in a row fail
with the same error, the campaign stops with :class:`CampaignStopped` and records none
of them: they are measured again when the command runs again with the cause fixed.
Failures are committed only once a success or another error breaks their run (or the
campaign ends), so an interrupted campaign measures its last failures again.
"""
from __future__ import annotations

import contextlib
import datetime
import math
import multiprocessing
import os
import re
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Sequence

from tqdm import tqdm

from ..backends import Latency, Profiled, get_backend
from ..graph.errors import first_line
from ..measure.canary import canary_timer, check_drift
from ..measure.machine_load import MachineState, between, read_cpu_times
from ..measure.protocol import (DEFAULT_STATISTIC, ItemFailed, Protocol, canary_reference, interleave, spread_of,
                                statistic_ms)
from ..measure.record import LEGACY, differences, new_record, read_record, write_record
from ..validation import integer, number
from .store import MeasurementStore, StoreError
from .sweep import BenchmarkSpec, load_sweep


@dataclass(frozen=True)
class CampaignSummary:
    """What one run of a campaign did."""

    store: str
    benchmarks: int          # in the sweep
    already_done: int        # skipped because the store held them
    measured: int            # measured now
    failed: int              # recorded as failed now
    layer_rows: int          # layer rows written now
    wall_s: float
    stopped_early: bool      # the time limit ended this run before the sweep did
    machine: MachineState | None = None     # steal and load over this run, the canary's spread as noise

    def __str__(self) -> str:
        left = self.benchmarks - self.already_done - self.measured - self.failed
        machine = f"\nmachine while measuring: {self.machine}" if self.machine is not None and self.measured else ""
        return (f"{self.measured} benchmarks measured ({self.layer_rows} layer rows), {self.failed} failed, "
                f"{self.already_done} already in the store, {left} left; {self.wall_s:.0f} s; store {self.store}"
                + machine)


NOISY_SPREAD = 0.25      # a timing this spread out, above the profilers' resolution, is re-measured
_RESOLVED_MS = 0.05      # times below this are dominated by the microsecond resolution of the profilers
_ATTEMPTS = 3
#: benchmarks that take turns in one chunk's interleaved rounds
CHUNK = 8
#: the campaign's default rounds and timed inferences per round (about the 25 runs of one round before)
ROUNDS, REPEATS = 2, 12
#: benchmarks in a row failing with the same error that stop a campaign (:class:`CampaignStopped`)
STOP_AFTER_FAILURES = 5


class CampaignStopped(RuntimeError):
    """Several benchmarks in a row failed with the same error: most likely the campaign's
    settings or its machine, not the benchmarks. None of them was recorded as failed."""


def failure_kind(error: str) -> str:
    """What a failure message says, its numbers left out (``timeout: no result after # s
    (worker killed)``): two benchmarks failing alike have the same kind."""
    return re.sub(r"\d+(?:\.\d+)?", "#", error.strip().splitlines()[0] if error.strip() else "")


def cause_hint(error: str, timeout_s: float) -> str:
    """What to fix when measuring failed with ``error`` under a ``timeout_s`` per round."""
    if failure_kind(error).startswith("timeout"):
        return f"--timeout {timeout_s:g} s is shorter than one round of measuring; give a longer one"
    return "Check the backend's settings and worker.log in the store folder"


class _FailureRun:
    """The failures since the last success, held back from the store while they are all
    of one kind: committed (``store.append`` of a failed row) when a success or a failure
    of another kind ends the run, or at :meth:`flush`; :class:`CampaignStopped` once
    ``limit`` benchmarks failed alike (0: never)."""

    def __init__(self, store: MeasurementStore, counts: dict[str, int], limit: int, timeout_s: float) -> None:
        self.store, self.counts, self.limit, self.timeout_s = store, counts, limit, timeout_s
        self.pending: list[tuple[BenchmarkSpec, str, float]] = []

    def failed(self, spec: BenchmarkSpec, error: str, wall_s: float) -> None:
        if self.pending and failure_kind(self.pending[-1][1]) != failure_kind(error):
            self.flush()
        self.pending.append((spec, error, wall_s))
        if self.limit and len(self.pending) >= self.limit:
            held = len(self.pending)
            self.pending = []
            raise CampaignStopped(
                f"stopped the campaign: {held} benchmarks in a row failed with the same error ({error}); the cause is "
                f"most likely a setting of the campaign or the machine, not the benchmarks, so none of them was "
                f"recorded as failed. {cause_hint(error, self.timeout_s)}, then run the same command again "
                f"({self.counts['measured']} benchmark(s) measured by this run are in {self.store.folder})")

    def succeeded(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Commit the failures held back."""
        for spec, error, wall_s in self.pending:
            self.store.append({"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(),
                               "status": "failed", "error": error, "wall_s": wall_s, "finished_utc": _now()}, [])
            self.counts["failed"] += 1
        self.pending = []


def _noise(latency: Any, rows: list[dict]) -> float:
    """The largest spread among the network time and its layers' times that are long
    enough to be resolved (0 when none is)."""
    spreads = [row["spread"] for row in rows if row["time_ms"] >= _RESOLVED_MS]
    if latency.median_ms >= _RESOLVED_MS:
        spreads.append(latency.spread)
    return max(spreads, default=0.0)


def _specs(sweep: str | os.PathLike | Sequence[BenchmarkSpec]) -> list[BenchmarkSpec]:
    """The benchmarks of a sweep name or CSV path, or the given specs."""
    return load_sweep(sweep) if isinstance(sweep, (str, os.PathLike)) else list(sweep)


def _built(spec: BenchmarkSpec) -> tuple[Any, tuple[int, ...], Any, list[str]]:
    """(module, input shape, traced graph, module paths of its layers) of one benchmark."""
    from ..graph import trace
    from .generator import build_benchmark

    model, input_shape = build_benchmark(spec)
    graph = trace(model, input_shape=input_shape, name=spec.id)
    return model, input_shape, graph, [layer.module_path for layer in graph.layers]


def profile_round(built: tuple, backend: Any, warmup: int, repeats: int) -> Profiled:
    """One round of a built benchmark (:func:`_built`): its per-layer profile and
    end-to-end latency. On a shared machine a burst of load can spoil one measurement:
    when a resolved time's spread exceeds :data:`NOISY_SPREAD`, the round is measured
    again (at most three attempts) and the least noisy attempt is kept."""
    from .matcher import match_kernels

    model, input_shape, graph, layer_paths = built
    best = None
    for _ in range(_ATTEMPTS):
        profiled = backend.profile(model, input_shape, layer_paths, warmup=warmup, repeats=repeats)
        noise = _noise(profiled.latency, match_kernels(graph, profiled.kernels))
        if best is None or noise < best[0]:
            best = (noise, profiled)
        if noise <= NOISY_SPREAD:
            break
    return best[1]


def merge_rounds(rounds: Sequence[Profiled], factors: Sequence[float]) -> Profiled:
    """One profile of a benchmark from its rounds: each kernel's runs and the end-to-end
    runs of every round divided by that round's drift factor and pooled. Rounds whose
    kernels differ from the first round's (another compile chose other kernels) are left out."""
    def layout(profiled: Profiled) -> list[tuple[str, str]]:
        return [(k.name, k.status) for k in profiled.kernels]

    kept = [(r, f) for r, f in zip(rounds, factors) if layout(r) == layout(rounds[0])]
    kernels = [replace(kernel, runs_ms=tuple(t / f for r, f in kept for t in r.kernels[j].runs_ms))
               for j, kernel in enumerate(rounds[0].kernels)]
    runs = [t / f for r, f in kept for t in r.latency.runs_ms]
    return Profiled(kernels, Latency.from_runs(runs, rounds[0].latency.threads))


def benchmark_rows(spec: BenchmarkSpec, graph: Any, profiled: Profiled, statistic: str,
                   wall_s: float) -> tuple[dict, list[dict]]:
    """(network row, layer rows) of a benchmark from its (merged) profile, each time the
    ``statistic`` of its runs."""
    from .matcher import match_kernels

    rows = match_kernels(graph, profiled.kernels, statistic)
    latency = profiled.latency
    network = {"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "ok", "error": "",
               "time_ms": statistic_ms(latency.runs_ms, statistic), "spread": latency.spread,
               "repeats": len(latency.runs_ms), "layers_sum_ms": sum(row["time_ms"] for row in rows),
               "kernels": sum(k.status == "EXECUTED" for k in profiled.kernels), "wall_s": wall_s}
    return network, rows


def measure_benchmark(spec: BenchmarkSpec, backend: Any, warmup: int, repeats: int,
                      statistic: str = DEFAULT_STATISTIC) -> tuple[dict, list[dict]]:
    """Build, trace, profile (one round, :func:`profile_round`) and match one benchmark:
    (network row, layer rows)."""
    start = time.perf_counter()
    built = _built(spec)
    profiled = profile_round(built, backend, warmup, repeats)
    return benchmark_rows(spec, built[2], profiled, statistic, time.perf_counter() - start)


def _serve(connection: Connection, backend_name: str, options: dict[str, Any], warmup: int, repeats: int,
           canary_repeats: int, log_path: str) -> None:
    """Worker loop: set the process up for the backend (:meth:`Backend.prepare_process`),
    then answer each request, with ("failed", error) when it fails:

    * ("extras", folder): the backend's store extras written there; ("ok",)
    * ("canary", None): the canary timed (compiled and warmed up at the first request); ("ok", runs_ms)
    * ("round", spec as JSON): one round of the benchmark (:func:`profile_round`); ("ok", profile)
    * ("rows", (spec as JSON, merged profile, statistic, wall_s)): ("ok", network row, layer rows)

    Built benchmarks are kept between their rounds (the last :data:`CHUNK` * 2). The
    runtimes' own console output goes to ``log_path``, away from the progress bar."""
    import warnings
    warnings.filterwarnings("ignore")
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    backend = get_backend(backend_name, **options)
    backend.prepare_process()
    built: dict[str, tuple] = {}
    with contextlib.ExitStack() as stack:
        canary = None
        connection.send(("ready",))
        while True:
            try:
                request, argument = connection.recv()
            except EOFError:
                return
            try:
                if request == "extras":
                    backend.store_extras(argument)
                    connection.send(("ok",))
                elif request == "canary":
                    if canary is None:
                        canary = stack.enter_context(canary_timer(backend, warmup, canary_repeats))
                    connection.send(("ok", list(canary())))
                elif request == "round":
                    spec = BenchmarkSpec.from_json(argument)
                    if spec.id not in built:
                        while len(built) >= 2 * CHUNK:
                            built.pop(next(iter(built)))
                        built[spec.id] = _built(spec)
                    connection.send(("ok", profile_round(built[spec.id], backend, warmup, repeats)))
                else:
                    spec_json, profiled, statistic, wall_s = argument
                    spec = BenchmarkSpec.from_json(spec_json)
                    graph = built.pop(spec.id)[2] if spec.id in built else _built(spec)[2]
                    connection.send(("ok", *benchmark_rows(spec, graph, profiled, statistic, wall_s)))
            except Exception as error:  # recorded in the store, the campaign goes on
                connection.send(("failed", f"{type(error).__name__}: {first_line(error)}"))


_STARTUP_TIMEOUT_S = 300


class MeasuringWorker:
    """A worker process that measures one benchmark at a time; restarted after a kill
    (the campaign's, and each fleet node's: :mod:`annette_torch.fleet`)."""

    def __init__(self, backend_name: str, options: dict[str, Any], warmup: int, repeats: int, canary_repeats: int,
                 log_path: str) -> None:
        self._args = (backend_name, options, warmup, repeats, canary_repeats, log_path)
        self._process = None

    def _start(self) -> None:
        """Start a worker and wait until its runtime is loaded, so that start-up time does
        not count against the first benchmark's timeout."""
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, *self._args), daemon=True)
        process.start()             # may raise (a script without a main guard): nothing to stop then
        self._process = process
        child.close()
        if not self._connection.poll(_STARTUP_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"the calibration worker did not start within {_STARTUP_TIMEOUT_S} s")
        try:
            self._connection.recv()
        except EOFError:
            code = self._process.exitcode
            self.stop()
            raise RuntimeError(f"the calibration worker exited while starting (exit code {code}); "
                               f"see worker.log in the store folder") from None

    def store_extras(self, folder: os.PathLike) -> None:
        """Have the worker write the backend's store extras into ``folder`` (no time limit);
        ``RuntimeError`` with the worker's error when that fails."""
        if self._process is None or not self._process.is_alive():
            self._start()
        self._connection.send(("extras", str(folder)))
        try:
            answer = self._connection.recv()
        except (EOFError, ConnectionError):
            code = self._process.exitcode
            self.stop()
            raise RuntimeError(f"the calibration worker died (exit code {code}) while measuring the store's "
                               f"extras; see worker.log in the store folder") from None
        if answer[0] != "ok":
            raise RuntimeError(f"measuring the store's extras failed: {answer[1]}")

    def run(self, request: str, argument: Any, timeout_s: float) -> tuple:
        """The worker's answer to one request (see :func:`_serve`), or ("failed", why)
        when it took longer than ``timeout_s`` (the worker is killed) or the worker died."""
        if self._process is None or not self._process.is_alive():
            self._start()
        self._connection.send((request, argument))
        try:
            if self._connection.poll(timeout_s):
                return self._connection.recv()
            self.stop()
            return ("failed", f"timeout: no result after {timeout_s:.0f} s (worker killed)")
        except (EOFError, ConnectionError):
            code = self._process.exitcode if self._process else None
            self.stop()
            return ("failed", f"worker died (exit code {code}) while measuring")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._connection.close()
            self._process = None


def check_options(threads: int = 1, minutes: float | None = None, timeout_s: float | None = None,
                  stop_after_failures: int = STOP_AFTER_FAILURES) -> None:
    """:class:`~annette_torch.validation.DataError` naming the option unless ``threads`` is
    a positive integer, ``minutes`` a non-negative number, ``timeout_s`` a positive one
    (None: no limit, the backend's timeout) and ``stop_after_failures`` an integer >= 0.
    Checked, with the :class:`Protocol`'s own checks, before a campaign opens its store:
    settings that fail every benchmark would record them all as failed."""
    integer(threads, "--threads (threads)", 1)
    integer(stop_after_failures, "--stop-after-failures (stop_after_failures)", 0)
    if minutes is not None:
        number(minutes, "--minutes (minutes)", low=0)
    if timeout_s is not None:
        number(timeout_s, "--timeout (timeout_s, seconds per benchmark and round)", low=0, low_open=True)


def dry_run_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], threads: int = 1,
                     precision: str | None = None, warmup: int = 5, repeats: int = REPEATS,
                     backend_options: dict[str, Any] | None = None) -> Iterator[tuple[BenchmarkSpec, list[str]]]:
    """For each benchmark of ``sweep``: the commands the backend would run for it
    (:meth:`~annette_torch.backends.Backend.dry_run`); nothing runs, nothing is stored."""
    check_options(threads)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    for spec in _specs(sweep):
        model, input_shape, _, layer_paths = _built(spec)
        yield spec, backend.dry_run(model, input_shape, layer_paths, warmup, repeats)


def store_protocol(store: MeasurementStore, protocol: Protocol) -> dict[str, Any]:
    """The store's protocol record, started for ``protocol`` when the store is new;
    ``StoreError`` when the store holds measurements of another protocol (a store without
    a record but with measurements holds the legacy median of one round)."""
    record = read_record(store.folder)
    if record is None:
        record = dict(LEGACY) if (store.networks()["status"] == "ok").any() else new_record(protocol)
    found = differences(record, protocol)
    if found:
        raise StoreError(f"{store.folder} holds measurements with {', '.join(found)}; continue it with "
                         f"--statistic {record['statistic']} --drift {record['drift']}, or measure into another --out")
    if read_record(store.folder) is None:
        write_record(store.folder, record)
    return record


def run_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], out: str | os.PathLike,
                 threads: int = 1, precision: str | None = None, minutes: float | None = None,
                 timeout_s: float | None = None, warmup: int = 5, repeats: int = REPEATS, progress: bool = True,
                 backend_options: dict[str, Any] | None = None, retry_failed: bool = False, rounds: int = ROUNDS,
                 statistic: str = DEFAULT_STATISTIC, drift: str = "none",
                 stop_after_failures: int = STOP_AFTER_FAILURES) -> CampaignSummary:
    """Measure the benchmarks of ``sweep`` (a sweep name, a CSV path, or specs) that the
    store under ``out`` lacks (see module doc) with the protocol of ``rounds``,
    ``warmup``, ``repeats``, ``statistic`` and ``drift`` (see :class:`~..measure.protocol.Protocol`).
    ``precision`` and ``timeout_s`` default to the backend's own
    (:attr:`Backend.precisions`, :attr:`Backend.benchmark_timeout_s`, per round).
    ``backend_options`` go to the backend's constructor besides threads and precision
    (e.g. a board's ``config`` file). ``retry_failed``: measure again the benchmarks whose
    last attempt failed (a board that was down); a success is appended and supersedes
    the failure. ``stop_after_failures``: stop with :class:`CampaignStopped`, recording
    none of them, when that many benchmarks in a row fail with the same error (0: never).
    Options are checked first (:func:`check_options`)."""
    check_options(threads, minutes, timeout_s, stop_after_failures)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    check_drift(backend, drift)
    protocol = Protocol(rounds=rounds, warmup=warmup, repeats=repeats, statistic=statistic, drift=drift)
    options = {"threads": threads, "precision": backend.precision, **(backend_options or {})}
    timeout_s = backend.benchmark_timeout_s if timeout_s is None else timeout_s
    specs = _specs(sweep)
    label = sweep if isinstance(sweep, str) else "benchmarks"
    start = time.monotonic()
    deadline = start + minutes * 60 if minutes is not None else None
    with MeasurementStore.open(out, backend.fingerprint()) as store:
        record = store_protocol(store, protocol)
        done = store.done(include_failed=not retry_failed)
        # a fixed pseudo-random order (by the id's hash) so that a campaign cut short by
        # --minutes still covers every family
        todo = sorted((s for s in specs if s.id not in done), key=lambda s: s.id.rsplit("-", 1)[1])
        worker = MeasuringWorker(backend_name, options, warmup, repeats, protocol.canary_repeats,
                         str(store.folder / "worker.log"))
        counts = {"measured": 0, "failed": 0, "layer_rows": 0}
        failures = _FailureRun(store, counts, stop_after_failures, timeout_s)

        def commit(network: dict, rows: list[dict]) -> None:
            store.append(network, rows)
            counts["measured"] += 1
            counts["layer_rows"] += len(rows)

        stopped_early = False
        cpu_start = read_cpu_times()
        canary_values: list[float] = []
        try:
            if todo:
                worker.store_extras(store.folder)      # before the first benchmark, in the measuring process
                if protocol.drift == "canary" and record.get("canary_ms") is None:
                    record["canary_ms"] = reference_canary(worker, protocol, timeout_s)
                    write_record(store.folder, record)
            with tqdm(total=len(todo) * rounds, desc=f"{backend_name} {label}", unit="round", disable=not progress,
                      dynamic_ncols=True) as bar:
                position, benchmark_s = 0, None
                while position < len(todo):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        stopped_early = True
                        break
                    size = CHUNK if remaining is None or benchmark_s is None else \
                        max(1, min(CHUNK, math.floor(remaining / benchmark_s)))
                    chunk = todo[position:position + size]
                    canary_values += measure_chunk(chunk, worker, protocol, record.get("canary_ms"), commit,
                                                   timeout_s, bar, failures)
                    position += len(chunk)
                    benchmark_s = (time.monotonic() - start) / position
                    bar.set_postfix(failed=counts["failed"] + len(failures.pending))
            failures.flush()
        finally:
            worker.stop()
        machine = between(cpu_start, read_cpu_times(), threads, interval_s=time.monotonic() - start,
                          drift=spread_of(canary_values) if len(canary_values) > 1 else None)
        return CampaignSummary(str(store.folder), len(specs), len(specs) - len(todo), counts["measured"],
                               counts["failed"], counts["layer_rows"], time.monotonic() - start, stopped_early, machine)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def reference_canary(worker: MeasuringWorker, protocol: Protocol, timeout_s: float) -> float:
    """The canary's reference time (:func:`~annette_torch.measure.protocol.canary_reference`)
    for the ``protocol``'s statistic, timed in ``worker``."""
    return canary_reference(lambda: _canary(worker, timeout_s), protocol.statistic)[0]


def _canary(worker: MeasuringWorker, timeout_s: float) -> list[float]:
    answer = worker.run("canary", None, timeout_s)
    if answer[0] != "ok":
        raise CampaignStopped(f"stopped the campaign: timing the canary (the drift reference measured before "
                              f"each benchmark) failed: {answer[1]}. {cause_hint(answer[1], timeout_s)}, then "
                              f"run the same command again (worker.log in the store folder has the runtime's output)")
    return answer[1]


class _CommitFailures:
    """The failures of a chunk without a :class:`_FailureRun`: each committed as a failed
    row (no layer rows) through ``commit``."""

    def __init__(self, commit: Callable[[dict, list[dict]], None]) -> None:
        self.commit = commit

    def failed(self, spec: BenchmarkSpec, error: str, wall_s: float) -> None:
        self.commit({"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "failed",
                     "error": error, "wall_s": wall_s, "finished_utc": _now()}, [])

    def succeeded(self) -> None:
        pass


def measure_chunk(chunk: list[BenchmarkSpec], worker: MeasuringWorker, protocol: Protocol,
                  reference_ms: float | None, commit: Callable[[dict, list[dict]], None], timeout_s: float,
                  bar: Any = None, failures: Any = None) -> list[float]:
    """Measure one chunk in interleaved rounds in ``worker``, the drift expressed against
    the canary's ``reference_ms`` (:func:`reference_canary`; needed with canary drift
    correction), and hand each benchmark to ``commit(network row, layer rows)`` as soon as
    it is done; returns the canary values of the chunk. A failed round or row goes to
    ``failures.failed(spec, error, wall_s)`` and a round that worked to
    ``failures.succeeded()`` (a campaign's :class:`_FailureRun`); without ``failures``,
    each failed benchmark is committed as a failed row. ``bar``: a tqdm bar updated per round."""
    by_id = {spec.id: spec for spec in chunk}
    walls: dict[str, float] = {spec.id: 0.0 for spec in chunk}
    failures = _CommitFailures(commit) if failures is None else failures

    def ask(request: str, argument: Any) -> tuple:
        return worker.run(request, argument, timeout_s)

    def measure(key: str) -> Profiled:
        began = time.perf_counter()
        answer = ask("round", by_id[key].to_json())
        walls[key] += time.perf_counter() - began
        if answer[0] != "ok":
            failures.failed(by_id[key], answer[1], walls[key])
            raise ItemFailed(answer[1])
        failures.succeeded()
        return answer[1]

    def finished(key: str, rounds: list[Profiled], factors: list[float]) -> None:
        spec = by_id[key]
        answer = ask("rows", (spec.to_json(), merge_rounds(rounds, factors), protocol.statistic, walls[key]))
        if answer[0] != "ok":
            failures.failed(spec, answer[1], walls[key])
            return
        _, network, rows = answer
        commit({**network, "finished_utc": _now()}, rows)

    use_canary = protocol.drift == "canary"
    if use_canary and reference_ms is None:
        raise ValueError("canary drift correction needs the canary's reference time (reference_canary)")
    session = interleave(list(by_id), measure, protocol, (lambda: _canary(worker, timeout_s)) if use_canary else None,
                         reference_ms, finished, progress=bar)
    return session.canary_ms
