"""A calibration campaign on a Ray cluster: the sweep measured by every device of a fleet.

    summaries = run_fleet_campaign("zcu102", "quick", "calibration/data", address="auto",
                                   backend_options={"config": "zcu102.toml"})

Every live node advertising the device resource (default: the backend's name, e.g.
``ray start ... --resources '{"zcu102": 1}'``) gets one
:class:`~annette_torch.fleet.measurer.NodeMeasurer`, which reports the device's
fingerprint. Nodes of one fingerprint are one *device* (several boards of one kind, or
CPU hosts of one CPU type and runtime): they share the sweep, each taking the next chunk
of :data:`~annette_torch.calibration.campaign.CHUNK` benchmarks when it is free. Nodes
of different fingerprints are different devices: each measures the whole sweep into its
own store. Only this process, the driver, writes the stores, one per fingerprint, through
:class:`~annette_torch.calibration.store.MeasurementStore` exactly as a local campaign
does (same folders, rows, ``protocol.json`` and locking; the protocol's canary reference
is timed once per store, on its first node): a benchmark is appended as soon as its
chunk comes back, so a driver killed with ``kill -9`` loses at most the chunks in
flight and the same command continues where it stopped. A node that dies (or whose
measurer is killed) loses nothing stored; its chunk goes back to the front of its
device's queue, for another node of the device or for the same node once its measurer
is started again (at most :data:`RESTARTS` times per node). Chunks a device could not
finish, because it lost all its nodes, are left for the next run.
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from ..atomic import atomic_path
from ..backends import get_backend
from ..calibration.campaign import (CHUNK, REPEATS, ROUNDS, CampaignSummary, _specs, check_options,
                                    store_protocol)
from ..calibration.store import MeasurementStore, fingerprint_folder, read_tables
from ..calibration.sweep import BenchmarkSpec
from ..measure.canary import check_drift
from ..measure.protocol import DEFAULT_STATISTIC, Protocol
from ..measure.record import write_record
from ..validation import integer
from .cluster import AUTO, FleetError, Node, connected, device_nodes, on_node, require_nodes
from .measurer import ChunkResult, NodeMeasurer

#: how often a node's measurer is started again after it died, before the node is left out
RESTARTS = 3
#: seconds a node's measurer may take to start (load its runtime) before the node is left out
START_TIMEOUT_S = 300


@dataclass(frozen=True)
class FleetSummary(CampaignSummary):
    """What one run of a fleet campaign did for one device: a campaign's summary, the
    device's nodes, the seconds before its first chunk was handed out (connecting,
    starting the measurers, the store's extras and canary reference) and what the fleet
    added per benchmark: each chunk's round trip seen by the driver (from handing it out
    to its rows being back, before they are written as a local campaign writes them)
    less the time its node spent measuring it, over its benchmarks (NaN when none came
    back)."""

    nodes: tuple[str, ...] = ()
    startup_s: float = 0.0
    overhead_ms_per_benchmark: float = float("nan")

    def __str__(self) -> str:
        overhead = (f", {self.overhead_ms_per_benchmark:.1f} ms per benchmark over measuring"
                    if math.isfinite(self.overhead_ms_per_benchmark) else "")
        return (super().__str__() + f"\nnodes: {', '.join(self.nodes) or 'none left'}; fleet start-up "
                f"{self.startup_s:.1f} s{overhead}")


class FleetWarning(UserWarning):
    """A node was left out of a fleet campaign or lost mid-run (the message names it and why)."""


@dataclass
class Device:
    """The nodes of one device fingerprint and their measurers (node -> actor handle)."""

    fingerprint: dict[str, Any]
    measurers: dict[Node, Any] = field(default_factory=dict)
    restarts: dict[Node, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The store folder's name, which names the device."""
        return fingerprint_folder(self.fingerprint)


class Fleet:
    """The measurers of every node advertising ``resource``, grouped into devices by fingerprint."""

    def __init__(self, ray: Any, backend_name: str, options: dict[str, Any], protocol: Protocol,
                 resource: str, address: str) -> None:
        self.ray, self.resource = ray, resource
        self._actor = ray.remote(NodeMeasurer)
        self._args = (backend_name, options, protocol.warmup, protocol.repeats, protocol.canary_repeats)
        self.devices: dict[str, Device] = {}
        nodes = require_nodes(ray, resource, address)
        started = {node: self._start(node) for node in nodes}
        for node, actor in started.items():
            try:
                fingerprint = ray.get(actor.fingerprint.remote(), timeout=START_TIMEOUT_S)
            except Exception as error:  # noqa: BLE001 - a node that cannot start is left out, the others go on
                self._leave_out(node, actor, f"its measurer did not start ({_reason(error)})")
                continue
            device = self.devices.setdefault(fingerprint_folder(fingerprint), Device(fingerprint))
            device.measurers[node] = actor
            device.restarts[node] = 0
        if not self.devices:
            raise FleetError(f"no node advertising {resource!r} could start a measurer; see the warnings")

    def _start(self, node: Node) -> Any:
        return self._actor.options(resources={self.resource: 1}, num_cpus=0, max_restarts=0,
                                   scheduling_strategy=on_node(self.ray, node)).remote(*self._args)

    def _leave_out(self, node: Node, actor: Any, why: str) -> None:
        warnings.warn(f"node {node.label} left out: {why}", FleetWarning, stacklevel=3)
        self.ray.kill(actor)

    def lost(self, device: Device, node: Node, error: Exception) -> None:
        """The measurer of ``node`` died or cannot be reached: end it for good (a measurer
        only unreachable for a moment must neither finish the chunk nor hold the device)
        and start another there unless the node is gone or has used up its :data:`RESTARTS`."""
        actor = device.measurers.pop(node, None)
        if actor is not None:
            self.ray.kill(actor)
        alive = any(n.node_id == node.node_id for n in device_nodes(self.ray, self.resource))
        if not alive or device.restarts[node] >= RESTARTS:
            warnings.warn(f"node {node.label} lost ({_reason(error)}); its chunk goes to the other nodes of "
                          f"{device.name}" + ("" if alive else "; the node is gone"), FleetWarning, stacklevel=2)
            return
        device.restarts[node] += 1
        warnings.warn(f"the measurer on node {node.label} was lost ({_reason(error)}); its chunk goes back to the "
                      f"queue of {device.name} and the node gets a new measurer "
                      f"({device.restarts[node]} of {RESTARTS})", FleetWarning, stacklevel=2)
        device.measurers[node] = self._start(node)

    def stop(self) -> None:
        """Stop every measurer (and its measuring worker)."""
        for device in self.devices.values():
            for actor in device.measurers.values():
                self.ray.kill(actor)


def _reason(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"


@dataclass
class _DeviceRun:
    """One device's part of a run: its store, what is left, what was done, its progress bar."""

    device: Device
    store: MeasurementStore
    record: dict[str, Any]
    queue: deque
    total: int
    already_done: int
    bar: Any
    counts: dict[str, int] = field(default_factory=lambda: {"measured": 0, "failed": 0, "layer_rows": 0})
    busy: set = field(default_factory=set)
    nodes: set = field(default_factory=set)          # labels of the nodes that measured a chunk
    first_chunk_s: float | None = None               # seconds from the run's start to its first chunk
    overhead_s: float = 0.0                          # summed round trips less measuring time

    def commit(self, result: ChunkResult, round_trip_s: float, node: Node) -> None:
        """Append each benchmark of a returned chunk to the store (each its own commit)."""
        for network, rows in result.benchmarks:
            self.store.append(network, rows)
            self.counts["measured" if network["status"] == "ok" else "failed"] += 1
            self.counts["layer_rows"] += len(rows)
        self.overhead_s += round_trip_s - result.wall_s
        self.nodes.add(node.label)


def _todo(specs: Sequence[BenchmarkSpec], done: set[str]) -> list[BenchmarkSpec]:
    """What a store lacks, in the local campaign's order (by the id's hash)."""
    return sorted((s for s in specs if s.id not in done), key=lambda s: s.id.rsplit("-", 1)[1])


def _chunks(todo: list[BenchmarkSpec], size: int) -> deque:
    return deque(todo[i:i + size] for i in range(0, len(todo), size))


def run_fleet_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], out: str, address: str = AUTO,
                       resource: str | None = None, threads: int = 1, precision: str | None = None,
                       minutes: float | None = None, timeout_s: float | None = None, warmup: int = 5,
                       repeats: int = REPEATS, progress: bool = True, backend_options: dict[str, Any] | None = None,
                       retry_failed: bool = False, rounds: int = ROUNDS, statistic: str = DEFAULT_STATISTIC,
                       drift: str = "none", chunk: int = CHUNK) -> list[FleetSummary]:
    """Measure the benchmarks of ``sweep`` that each device's store under ``out`` lacks
    on the fleet at ``address`` (see module doc; :func:`~.cluster.connected` for the
    addresses), one summary per device. The options are a local campaign's
    (:func:`~annette_torch.calibration.campaign.run_campaign`); ``resource``: the custom
    resource the device's nodes advertise (default the backend's name); ``chunk``:
    benchmarks per Ray task (they take turns in interleaved rounds on one node).
    ``minutes``: no chunk is handed out after that; the run ends when those in flight return."""
    check_options(threads, minutes, timeout_s)
    integer(chunk, "--ray-chunk (chunk)", 1)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    check_drift(backend, drift)
    protocol = Protocol(rounds=rounds, warmup=warmup, repeats=repeats, statistic=statistic, drift=drift)
    options = {"threads": threads, "precision": backend.precision, **(backend_options or {})}
    timeout_s = backend.benchmark_timeout_s if timeout_s is None else timeout_s
    resource = resource or backend_name
    specs = _specs(sweep)
    start = time.monotonic()
    deadline = None if minutes is None else start + minutes * 60
    with connected(address, resource, threads) as ray:
        fleet = Fleet(ray, backend_name, options, protocol, resource, address)
        try:
            with contextlib.ExitStack() as stack:
                runs = []
                for position, device in enumerate(fleet.devices.values()):
                    store = stack.enter_context(MeasurementStore.open(out, device.fingerprint))
                    record = store_protocol(store, protocol)
                    todo = _todo(specs, store.done(include_failed=not retry_failed))
                    bar = stack.enter_context(tqdm(total=len(todo), desc=device.name, unit="benchmark",
                                                   position=position, disable=not progress, dynamic_ncols=True))
                    runs.append(_DeviceRun(device, store, record, _chunks(todo, chunk), len(specs),
                                           len(specs) - len(todo), bar))
                for run in runs:
                    if run.queue:
                        _prepare(ray, fleet, run, protocol, timeout_s)
                stopped_early = _schedule(ray, fleet, runs, protocol, timeout_s, deadline, start)
                wall_s = time.monotonic() - start
                return [_summary(r, wall_s, stopped_early) for r in runs]
        finally:
            fleet.stop()


def _summary(run: _DeviceRun, wall_s: float, stopped_early: bool) -> FleetSummary:
    done = run.counts["measured"] + run.counts["failed"]
    return FleetSummary(str(run.store.folder), run.total, run.already_done, run.counts["measured"],
                        run.counts["failed"], run.counts["layer_rows"], wall_s, stopped_early and bool(run.queue),
                        nodes=tuple(sorted(run.nodes)), startup_s=run.first_chunk_s or 0.0,
                        overhead_ms_per_benchmark=run.overhead_s / done * 1e3 if done else float("nan"))


def _prepare(ray: Any, fleet: Fleet, run: _DeviceRun, protocol: Protocol, timeout_s: float) -> None:
    """Before a store's first benchmark, on one of its device's nodes: the backend's store
    extras (written here) and, with canary drift correction, the canary's reference time
    when the store has none (recorded here)."""
    while run.device.measurers:
        node, actor = next(iter(run.device.measurers.items()))
        try:
            for name, content in ray.get(actor.store_extras.remote()).items():
                with atomic_path(run.store.folder / name) as tmp:
                    tmp.write_bytes(content)
            if protocol.drift == "canary" and run.record.get("canary_ms") is None:
                run.record["canary_ms"] = ray.get(actor.reference.remote(protocol, timeout_s))
                write_record(run.store.folder, run.record)
            return
        except ray.exceptions.RayActorError as error:
            fleet.lost(run.device, node, error)
    raise FleetError(f"every node of {run.device.name} was lost before its first benchmark")


def _schedule(ray: Any, fleet: Fleet, runs: list[_DeviceRun], protocol: Protocol, timeout_s: float,
              deadline: float | None, start: float) -> bool:
    """Hand each free node the next chunk of its device until every queue is empty (or
    ``deadline``, ``time.monotonic()``, has passed), committing chunks as they return;
    whether the deadline stopped it. ``start``: when the run started (for its summary)."""
    pending: dict[Any, tuple[_DeviceRun, Node, list[BenchmarkSpec], float]] = {}
    stopped_early = False
    while True:
        late = deadline is not None and time.monotonic() >= deadline
        stopped_early |= late and any(run.queue for run in runs)
        for run in runs:
            for node, actor in list(run.device.measurers.items()):
                if late or not run.queue or node in run.busy:
                    continue
                chunk = run.queue.popleft()
                ref = actor.measure.remote([s.to_json() for s in chunk], protocol, run.record.get("canary_ms"),
                                           timeout_s)
                pending[ref] = (run, node, chunk, time.perf_counter())
                run.busy.add(node)
                if run.first_chunk_s is None:
                    run.first_chunk_s = time.monotonic() - start
        if not pending:
            return stopped_early
        [ref], _ = ray.wait(list(pending), num_returns=1)
        run, node, chunk, handed_out = pending.pop(ref)
        run.busy.discard(node)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayActorError as error:      # the node or its measurer died: retried
            run.queue.appendleft(chunk)
            fleet.lost(run.device, node, error)
            continue
        except ray.exceptions.RayTaskError as error:       # the measurer failed (e.g. the canary): node left out
            run.queue.appendleft(chunk)
            run.device.restarts[node] = RESTARTS
            fleet.lost(run.device, node, error)
            continue
        run.commit(result, time.perf_counter() - handed_out, node)
        run.bar.update(len(result.benchmarks))
        run.bar.set_postfix(failed=run.counts["failed"], nodes=len(run.device.measurers))


@dataclass(frozen=True)
class DevicePlan:
    """What a fleet campaign would do for one device: its store folder, its nodes, the
    benchmarks it already holds and, per node, the chunks it would take first (later
    chunks go to whichever node is free)."""

    store: str
    nodes: tuple[Node, ...]
    benchmarks: int
    already_done: int
    first_chunks: dict[Node, list[str]]

    def __str__(self) -> str:
        left = self.benchmarks - self.already_done
        lines = [f"device {self.store}: {len(self.nodes)} node(s), {left} of {self.benchmarks} benchmarks to measure "
                 f"({self.already_done} in the store)"]
        for node in self.nodes:
            ids = self.first_chunks.get(node, [])
            lines.append(f"  node {node.label}: first {', '.join(ids) if ids else 'nothing'}")
        if left > sum(len(ids) for ids in self.first_chunks.values()):
            lines.append("  then each next chunk to whichever node of the device is free")
        return "\n".join(lines)


def plan_fleet_campaign(backend_name: str, sweep: str | Sequence[BenchmarkSpec], out: str, address: str = AUTO,
                        resource: str | None = None, threads: int = 1, precision: str | None = None,
                        backend_options: dict[str, Any] | None = None, retry_failed: bool = False,
                        chunk: int = CHUNK) -> list[DevicePlan]:
    """Which node of the fleet would measure what (``--dry-run --ray``): the devices
    (nodes grouped by the fingerprint their measurer reports), what each store under
    ``out`` holds and the first chunk of each node; nothing is measured or written."""
    check_options(threads)
    integer(chunk, "--ray-chunk (chunk)", 1)
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    options = {"threads": threads, "precision": backend.precision, **(backend_options or {})}
    resource = resource or backend_name
    specs = _specs(sweep)
    with connected(address, resource, threads) as ray:
        fleet = Fleet(ray, backend_name, options, Protocol(), resource, address)
        fleet.stop()
    plans = []
    for device in fleet.devices.values():
        folder = Path(out) / device.name
        done = set()
        if (folder / "networks.csv").exists():
            networks = read_tables(folder)[0]
            done = set(networks["benchmark"] if not retry_failed else networks.loc[networks["status"] == "ok",
                                                                                     "benchmark"])
        chunks = _chunks(_todo(specs, done), chunk)
        nodes = tuple(device.measurers)
        first = {node: [s.id for s in chunks[i]] for i, node in enumerate(nodes) if i < len(chunks)}
        plans.append(DevicePlan(str(folder), nodes, len(specs), len(specs) - sum(map(len, chunks)), first))
    return plans

