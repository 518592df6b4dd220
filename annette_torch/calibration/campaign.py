"""A calibration campaign: measure every benchmark of a sweep on one backend into a store.

    summary = run_campaign("openvino-cpu", "quick", "calibration/data", threads=1)

Benchmarks run one at a time in a worker process, so one that hangs is killed after
``timeout_s`` and one that crashes the runtime takes only the worker down; both are
recorded as failed with their error, and the campaign goes on with a new worker. All
measuring happens there (the backend's store extras too), in a process the backend may
set up for measuring (:meth:`~annette_torch.backends.Backend.prepare_process`); the
campaign's own process is left as it was. What the store already holds is skipped, so
an interrupted campaign (even ``kill -9``) is resumed by running the same command
again. The worker's console output (runtime logs) goes to ``worker.log`` in the store
folder. ``minutes`` bounds the wall time of one run of the campaign, for campaigns done
in chunks.
"""
from __future__ import annotations

import datetime
import multiprocessing
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Iterator, Sequence

from tqdm import tqdm

from ..backends import get_backend
from ..graph.errors import first_line
from ..validation import integer, number
from .store import MeasurementStore
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

    def __str__(self) -> str:
        left = self.benchmarks - self.already_done - self.measured - self.failed
        return (f"{self.measured} benchmarks measured ({self.layer_rows} layer rows), {self.failed} failed, "
                f"{self.already_done} already in the store, {left} left; {self.wall_s:.0f} s; store {self.store}")


NOISY_SPREAD = 0.25      # a timing this spread out, above the profilers' resolution, is re-measured
_RESOLVED_MS = 0.05      # times below this are dominated by the microsecond resolution of the profilers
_ATTEMPTS = 3


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


def measure_benchmark(spec: BenchmarkSpec, backend: Any, warmup: int, repeats: int) -> tuple[dict, list[dict]]:
    """Build, trace, profile and match one benchmark: (network row, layer rows). On a
    shared machine a burst of load can spoil one measurement: when a resolved time's
    spread exceeds :data:`NOISY_SPREAD`, the benchmark is measured again (at most
    three attempts) and the least noisy attempt is kept."""
    from .matcher import match_kernels

    start = time.perf_counter()
    model, input_shape, graph, layer_paths = _built(spec)
    best = None
    for _ in range(_ATTEMPTS):
        profiled = backend.profile(model, input_shape, layer_paths, warmup=warmup, repeats=repeats)
        rows = match_kernels(graph, profiled.kernels)
        noise = _noise(profiled.latency, rows)
        if best is None or noise < best[0]:
            best = (noise, profiled, rows)
        if noise <= NOISY_SPREAD:
            break
    _, profiled, rows = best
    network = {"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "ok", "error": "",
               "time_ms": profiled.latency.median_ms, "spread": profiled.latency.spread, "repeats": repeats,
               "layers_sum_ms": sum(row["time_ms"] for row in rows),
               "kernels": sum(k.status == "EXECUTED" for k in profiled.kernels),
               "wall_s": time.perf_counter() - start}
    return network, rows


def _serve(connection: Connection, backend_name: str, options: dict[str, Any], warmup: int, repeats: int,
           log_path: str) -> None:
    """Worker loop: set the process up for the backend (:meth:`Backend.prepare_process`),
    then answer each request: ("extras", folder) with ("ok",) once the backend's store
    extras are written there, ("benchmark", spec as JSON) with ("ok", network, rows);
    either with ("failed", error) when it fails. The runtimes' own console output goes to
    ``log_path``, away from the progress bar."""
    import warnings
    warnings.filterwarnings("ignore")
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    backend = get_backend(backend_name, **options)
    backend.prepare_process()
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
            else:
                network, rows = measure_benchmark(BenchmarkSpec.from_json(argument), backend, warmup, repeats)
                connection.send(("ok", network, rows))
        except Exception as error:  # recorded in the store, the campaign goes on
            connection.send(("failed", f"{type(error).__name__}: {first_line(error)}"))


_STARTUP_TIMEOUT_S = 300


class _Worker:
    """A worker process that measures one benchmark at a time; restarted after a kill."""

    def __init__(self, backend_name: str, options: dict[str, Any], warmup: int, repeats: int, log_path: str) -> None:
        self._args = (backend_name, options, warmup, repeats, log_path)
        self._process = None

    def _start(self) -> None:
        """Start a worker and wait until its runtime is loaded, so that start-up time does
        not count against the first benchmark's timeout."""
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, *self._args), daemon=True)
        self._process.start()
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

    def run(self, spec: BenchmarkSpec, timeout_s: float) -> tuple:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._connection.send(("benchmark", spec.to_json()))
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


def check_options(threads: int = 1, minutes: float | None = None, timeout_s: float | None = None, warmup: int = 5,
                  repeats: int = 25) -> None:
    """:class:`~annette_torch.validation.DataError` naming the option unless ``threads`` and
    ``repeats`` are positive integers, ``warmup`` a non-negative one, ``minutes`` a
    non-negative number and ``timeout_s`` a positive one (None: no limit, the backend's
    timeout). Checked
    before a campaign opens its store: settings that fail every benchmark would record
    them all as failed."""
    integer(threads, "--threads (threads)", 1)
    integer(warmup, "--warmup (warmup)", 0)
    integer(repeats, "--repeats (repeats)", 1)
    if minutes is not None:
        number(minutes, "--minutes (minutes)", low=0)
    if timeout_s is not None:
        number(timeout_s, "--timeout (timeout_s, seconds per benchmark)", low=0, low_open=True)


def dry_run_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], threads: int = 1,
                     precision: str | None = None, warmup: int = 5, repeats: int = 25,
                     backend_options: dict[str, Any] | None = None) -> Iterator[tuple[BenchmarkSpec, list[str]]]:
    """For each benchmark of ``sweep``: the commands the backend would run for it
    (:meth:`~annette_torch.backends.Backend.dry_run`); nothing runs, nothing is stored."""
    check_options(threads, warmup=warmup, repeats=repeats)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    for spec in _specs(sweep):
        model, input_shape, _, layer_paths = _built(spec)
        yield spec, backend.dry_run(model, input_shape, layer_paths, warmup, repeats)


def run_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], out: str | os.PathLike,
                 threads: int = 1, precision: str | None = None, minutes: float | None = None,
                 timeout_s: float | None = None, warmup: int = 5, repeats: int = 25, progress: bool = True,
                 backend_options: dict[str, Any] | None = None, retry_failed: bool = False) -> CampaignSummary:
    """Measure the benchmarks of ``sweep`` (a sweep name, a CSV path, or specs) that the
    store under ``out`` lacks (see module doc). ``precision`` and ``timeout_s`` default
    to the backend's own (:attr:`Backend.precisions`, :attr:`Backend.benchmark_timeout_s`).
    ``backend_options`` go to the backend's constructor besides threads and precision
    (e.g. a board's ``config`` file). ``retry_failed``: measure again the benchmarks whose
    last attempt failed (a board that was down); a success is appended and supersedes
    the failure. Options are checked first (:func:`check_options`)."""
    check_options(threads, minutes, timeout_s, warmup, repeats)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    options = {"threads": threads, "precision": backend.precision, **(backend_options or {})}
    timeout_s = backend.benchmark_timeout_s if timeout_s is None else timeout_s
    specs = _specs(sweep)
    label = sweep if isinstance(sweep, str) else "benchmarks"
    start = time.monotonic()
    deadline = start + minutes * 60 if minutes is not None else None
    with MeasurementStore.open(out, backend.fingerprint()) as store:
        done = store.done(include_failed=not retry_failed)
        # a fixed pseudo-random order (by the id's hash) so that a campaign cut short by
        # --minutes still covers every family
        todo = sorted((s for s in specs if s.id not in done), key=lambda s: s.id.rsplit("-", 1)[1])
        worker = _Worker(backend_name, options, warmup, repeats, str(store.folder / "worker.log"))
        measured = failed = layer_rows = 0
        stopped_early = False
        try:
            if todo:
                worker.store_extras(store.folder)      # before the first benchmark, in the measuring process
            with tqdm(todo, desc=f"{backend_name} {label}", unit="bench", disable=not progress,
                      dynamic_ncols=True) as bar:
                for spec in bar:
                    if deadline is not None and time.monotonic() >= deadline:
                        stopped_early = True
                        break
                    began = time.perf_counter()
                    answer = worker.run(spec, timeout_s)
                    finished = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                    if answer[0] == "ok":
                        _, network, rows = answer
                        store.append({**network, "finished_utc": finished}, rows)
                        measured += 1
                        layer_rows += len(rows)
                    else:
                        store.append({"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(),
                                      "status": "failed", "error": answer[1],
                                      "wall_s": time.perf_counter() - began, "finished_utc": finished}, [])
                        failed += 1
                    bar.set_postfix(failed=failed)
        finally:
            worker.stop()
        return CampaignSummary(str(store.folder), len(specs), len(specs) - len(todo), measured, failed,
                               layer_rows, time.monotonic() - start, stopped_early)
