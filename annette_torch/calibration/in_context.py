"""``calibrate --for MODEL ...``: measure the kernels of the networks a user cares about, in context.

    summary = calibrate_for(["torchvision:resnet18"], "openvino-cpu", "measured")
    Estimator("openvino-cpu", measured=summary.folder)(model)      # their kernels as measured

Each network is profiled whole with the backend's per-layer profiling
(:meth:`~annette_torch.backends.Backend.profile`) in the measuring protocol's
interleaved rounds (:mod:`annette_torch.measure.protocol`: optionally drift correction against the
canary, ``statistic`` of the pooled runs); the graph matcher
(:func:`~annette_torch.calibration.matcher.match_kernels`) gives each layer the time of
the runtime kernels it is the first layer of. The estimator's kernels (its profile's
mapping of the same traced graph) are tied to those times through the layers they
compute: the layers of one estimator kernel, and the layers the runtime fused into one
of its kernels, form groups (connected components); a group with one estimator kernel
gives it the group's time (``tie`` "exact"), a group with several (the runtime fused
more than the profile's rules say) is split between them in proportion to the layer
models' predictions ("shared"), so a network's kernels still add up to what the runtime
spent in them. Runtime kernels that compute no layer (layout reorders) and groups with
only free kernels are reported, not stored.

Per-layer profiling costs time of its own, and it is not the network's time: a network
of small kernels summed 16 % above its end-to-end time on OpenVINO (a NAS-Bench-201 cell,
1.78 against 1.54 ms, 2026-12-01), and the reorders tied to no layer are real time the
estimator has no kernel for. So before they are stored, a network's tied times are scaled
by one factor, its end-to-end time (less the profile's per-inference overhead) over
their sum (``scale`` in the summary line): the table's kernels of that network add up to
what the network took end to end.

Kernels are stored by signature (:mod:`annette_torch.measure.kernel_table`); where a
signature occurs several times in a network the median of its occurrences is kept. A
network whose kernels are all in the table already is not measured again, and a kernel
already in the table is never written again: each distinct kernel is measured once.
Measuring runs in this process (as ``adapt`` does); the torch thread count is restored.

``method="end-to-end"`` (``--method end-to-end``) profiles nothing: it times the networks
whole and fits their kernels' times to those times (:mod:`.end_to_end`).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx
import torch
from tqdm import tqdm

from ..atomic import atomic_path
from ..backends import Backend, BackendError, KernelRecord, OnnxBackend, Profiled, get_backend
from ..backends.base import _scope_of, random_input, torch_threads
from ..estimator import Estimator
from ..graph import LayerGraph, trace
from ..kinds import FEATURES
from ..mapping import OUTPUT_REORDER
from ..measure.kernel_table import (KERNELS_FILE, MATCHING, MeasuredKernels, append_kernels, kernel_signatures,
                                   signature_features, write_scale)
from ..measure.machine_load import read_cpu_times
from ..measure.networks import check_machine, machine_report, measure_networks, protocol_canary, session_state
from ..measure.protocol import ItemFailed, Protocol, combine, interleave, statistic_ms
from ..measure.record import LEGACY, differences, new_record, read_record, write_record
from ..profiles import builtin_names, load_profile
from .campaign import merge_rounds
from .end_to_end import NETWORKS_FILE, KernelFit, append_network, fit_kernel_times, kernel_rows, network_kernels, \
    read_networks
from .matcher import match_kernels
from .store import StoreError, fingerprint_folder


#: how ``calibrate --for`` finds the kernels' times: profiled in context, or fitted to end-to-end times
METHODS = ("profile", "end-to-end")


@dataclass
class NetworkResult:
    """What ``calibrate --for`` found for one network: its measured end-to-end time, the
    sum of its kernels as tied, the time tied to no kernel, the estimate from the layer
    models alone and with the table, how many of its kernels were new, and the factor its
    kernels were stored with (end-to-end time less overhead over their sum)."""

    name: str
    measured_ms: float
    kernels_ms: float
    untied_ms: float
    model_ms: float
    table_ms: float
    new_kernels: int
    kernels: int
    scale: float = 1.0
    profiled: bool = True

    def __str__(self) -> str:
        if not self.profiled:
            return (f"{self.name}: measured {self.measured_ms:.4g} ms end to end; estimate {self.table_ms:.4g} ms "
                    f"with the fitted table, {self.model_ms:.4g} ms from the layer models; {self.kernels} distinct "
                    f"kernels")
        return (f"{self.name}: measured {self.measured_ms:.4g} ms end to end; its kernels {self.kernels_ms:.4g} ms "
                f"(+{self.untied_ms:.3g} ms in kernels tied to no layer; stored x{self.scale:.3f} to add up to the "
                f"end-to-end time); estimate {self.table_ms:.4g} ms with the "
                f"table, {self.model_ms:.4g} ms from the layer models; {self.new_kernels} of {self.kernels} "
                f"distinct kernels new")


@dataclass
class InContextSummary:
    """One run of ``calibrate --for``: the table's folder, per network its result (or
    that it was not measured because its kernels are in the table or in a network
    measured before it, or its failure), the machine's state before and while measuring
    (lines, :func:`~annette_torch.measure.networks.machine_report`) and the end-to-end fit."""

    folder: Path
    results: list[NetworkResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    machine: str = ""
    fit: KernelFit | None = None


def profile_for(backend: Backend) -> str:
    """The built-in profile of ``backend``'s backend, threads and precision; ``ValueError`` if none."""
    wanted = {"backend": backend.name, "threads": backend.threads, "precision": backend.precision}
    for name in builtin_names():
        fingerprint = load_profile(name).fingerprint
        if all(fingerprint.get(k) == v for k, v in wanted.items()) and load_profile(name).training is None:
            return name
    raise ValueError(f"no built-in profile describes {backend.name} with {backend.threads} thread(s) and "
                     f"{backend.precision}; give --profile (one fitted or adapted for it)")


def tie_kernels(table: Any, rows: list[dict[str, Any]], predicted_ms: np.ndarray,
                output_reorders: str = "") -> tuple[np.ndarray, list[str], float]:
    """Per kernel of the estimator's kernel ``table``: the measured time tied to it (NaN
    for free kernels) and how ("exact" or "shared", see module doc), plus the
    milliseconds tied to no kernel; ``rows`` are the matcher's layer rows of the same
    graph, ``predicted_ms`` the layer models' times of the kernels. The runtime rows with
    no layer whose kernel name matches ``output_reorders`` (the backend's
    :attr:`~annette_torch.backends.Backend.output_reorders`) are tied to the table's
    :data:`~annette_torch.mapping.OUTPUT_REORDER` kernels."""
    reorders = list(table.groups.get(OUTPUT_REORDER, ())) if output_reorders else []
    reorder_ms = sum(row["time_ms"] for row in rows
                     if not row["layer"] and reorders and re.search(output_reorders, row["kernel"] or ""))
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    for layers in table.layers:
        for name in layers[1:]:
            union(name, layers[0])
    for row in rows:
        if row["layer"] and row["status"] == "fused" and row["fused_into"]:
            union(row["layer"], row["fused_into"])
    time_of: dict[str, float] = {}
    untied = -reorder_ms
    for row in rows:
        if not row["layer"]:
            untied += row["time_ms"]
        elif row["status"] == "executed":
            root = find(row["layer"])
            time_of[root] = time_of.get(root, 0.0) + row["time_ms"]
    members: dict[str, list[int]] = {}
    for k, layers in enumerate(table.layers):
        if not table.free[k] and layers:
            members.setdefault(find(layers[0]), []).append(k)
    if reorder_ms:
        members[(OUTPUT_REORDER,)] = reorders        # a key no layer name can be
        time_of[(OUTPUT_REORDER,)] = reorder_ms
    untied += sum(t for root, t in time_of.items() if root not in members)
    times = np.full(len(table), math.nan)
    ties = [""] * len(table)
    for root, kernels in members.items():
        total = time_of.get(root, 0.0)
        share = np.maximum(predicted_ms[kernels], 0.0)
        share = share / share.sum() if len(kernels) > 1 and share.sum() > 0 else np.full(len(kernels), 1 / len(kernels))
        for k, part in zip(kernels, share):
            times[k], ties[k] = total * part, "exact" if len(kernels) == 1 else "shared"
    return times, ties, untied


def _onnx_profile(backend: OnnxBackend, path: str, graph: LayerGraph, warmup: int, repeats: int) -> Profiled:
    """The per-layer profile of an ONNX file (whose imported layers are named by their
    nodes), kernels tied to node names, and its end-to-end latency."""
    model = onnx.load(path, load_external_data=False).graph
    scope = {node.name: node.name for node in model.node}
    for node in model.node:
        for output in node.output:
            scope.setdefault(output, node.name)
    known = {layer.module_path for layer in graph.layers}
    shape = graph.input_shapes[0]
    with backend.step("run"):
        kernels = backend.profile_onnx(Path(path), random_input(shape), warmup, repeats)
    kernels = [KernelRecord(k.name, k.kernel_type, k.exec_type, k.status, k.runs_ms,
                            tuple(dict.fromkeys(s for n in k.layers if (s := _scope_of(n, scope)) in known)))
               for k in kernels]
    return Profiled(kernels, backend.measure_onnx(path, shape, warmup, repeats))


@dataclass
class Network:
    """A network to measure in context: its name, its traced graph, and the torch module
    or (for an ONNX file, ``module`` None) the file's path."""

    name: str
    graph: LayerGraph
    module: Any
    path: str | None


def resolve_network(spec: str, input_shape: tuple[int, ...] | None = None,
                    command: str = "calibrate --for") -> Network:
    """The network a spec names (as ``annette-torch estimate`` takes them), traced once at
    ``input_shape`` (default: its own); backends feed one float input, so models with
    several inputs or token ids are refused with a ``ValueError`` naming ``command``."""
    from ..models_source import resolve_model

    resolved = resolve_model(spec, input_shape)
    if resolved.graph is not None:
        graph, module = resolved.graph, None
    else:
        shapes = [tuple(input_shape)] if input_shape else list(resolved.input_shapes)
        if len(shapes) != 1 or resolved.token_inputs or resolved.input_dtype != torch.float32:
            raise ValueError(f"{spec}: {command} measures networks of one float input (what the backends "
                             f"feed); give --input-shape for one, e.g. 1,3,224,224")
        with torch_threads(1):
            graph = trace(resolved.module, input_shape=shapes[0], name=resolved.name)
        module = resolved.module
    if len(graph.input_shapes) != 1:
        raise ValueError(f"{spec}: {command} measures networks of one input; this one has "
                         f"{len(graph.input_shapes)}")
    return Network(resolved.name, graph, module, spec if module is None else None)


def onnx_files(networks: Sequence[Network]) -> list[str]:
    """The names of the networks among ``networks`` given as ONNX files (no torch module)."""
    return [net.name for net in networks if net.module is None]


def check_runnable(backend: Backend, networks: Sequence[Network], command: str = "calibrate --for") -> None:
    """``ValueError`` naming the ONNX files among ``networks`` where ``backend`` runs torch
    modules only."""
    files = onnx_files(networks)
    if files and not isinstance(backend, OnnxBackend):
        raise ValueError(f"{command}: {backend.name} cannot run an ONNX file ({', '.join(files)}); use an ONNX "
                         f"backend (onnxruntime-cpu, openvino-cpu)")


def profile_network(backend: Backend, net: Network, warmup: int, repeats: int) -> Profiled:
    """One per-layer profile of ``net`` on ``backend`` (its kernels tied to the graph's
    layers) and its end-to-end latency; an ONNX file needs an ONNX backend
    (:func:`check_runnable`)."""
    if net.module is None:
        return _onnx_profile(backend, net.path, net.graph, warmup, repeats)
    return backend.profile(net.module, net.graph.input_shapes[0], [layer.module_path for layer in net.graph.layers],
                           warmup=warmup, repeats=repeats)


@contextlib.contextmanager
def _locked_table(root: str | os.PathLike, backend: Backend, protocol: Protocol):
    """The table folder for ``backend`` under ``root``, locked, with its fingerprint and
    protocol record checked (``StoreError`` when another run holds it or it was measured
    otherwise); yields (folder, record)."""
    fingerprint = backend.fingerprint()
    folder = Path(root) / fingerprint_folder(fingerprint)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{folder} is in use by another calibrate --for") from None
        fingerprint_path = folder / "fingerprint.json"
        if fingerprint_path.exists():
            recorded = json.loads(fingerprint_path.read_text())
            if recorded != fingerprint:
                raise StoreError(f"{fingerprint_path} records {recorded}, not {fingerprint}")
        else:
            with atomic_path(fingerprint_path) as tmp:
                tmp.write_text(json.dumps(fingerprint, indent=1) + "\n")
        record = read_record(folder)
        if record is None:
            record = dict(LEGACY) if (folder / KERNELS_FILE).exists() else new_record(protocol)
            write_record(folder, record)
        found = differences(record, protocol)
        if found:
            raise StoreError(f"{folder} holds kernels measured with {', '.join(found)}; continue it with "
                             f"--statistic {record['statistic']} --drift {record['drift']} --across-rounds "
                             f"{record.get('across_rounds', 'pool')}, or use another --out")
        yield folder, record


def calibrate_for(specs: Sequence[str], backend_name: str, out: str | os.PathLike, profile: str | None = None,
                  threads: int = 1, precision: str | None = None, protocol: Protocol = Protocol(),
                  input_shape: tuple[int, ...] | None = None, progress: bool = True,
                  backend_options: dict[str, Any] | None = None, method: str = "profile") -> InContextSummary:
    """Measure the distinct kernels of the networks ``specs`` (as ``annette-torch
    estimate`` takes them) on the backend into the table under ``out``, keyed by the
    kernels of ``profile`` (default: the built-in profile of the backend,
    :func:`profile_for`): profiled in context (``method`` "profile", see the module doc)
    or fitted to the end-to-end times of these and the networks measured into the table
    before ("end-to-end", :mod:`.end_to_end`)."""
    if method not in METHODS:
        raise ValueError(f"calibrate --for: method must be one of {', '.join(METHODS)}, got {method!r}")
    backend = get_backend(backend_name, threads=threads, precision=precision, **(backend_options or {}))
    profile = profile or profile_for(backend)
    estimator = Estimator(profile)
    differ = [k for k in MATCHING if estimator.profile.fingerprint.get(k) != backend.fingerprint().get(k)]
    if differ:
        raise ValueError(f"profile {estimator.profile.name!r} describes another {', '.join(differ)} than "
                         f"{backend_name} with {threads} thread(s) and {backend.precision}")
    networks = [resolve_network(spec, input_shape) for spec in specs]
    check_runnable(backend, networks)
    files = onnx_files(networks)
    if method == "end-to-end" and files:
        raise ValueError(f"calibrate --for --method end-to-end times networks built in torch; {', '.join(files)}: "
                         f"an ONNX file, use --method profile")
    with _locked_table(out, backend, protocol) as (folder, record):
        if method == "end-to-end":
            return _end_to_end(networks, backend, estimator, folder, record, protocol, progress)
        known = MeasuredKernels.load(folder).times_ms
        summary = InContextSummary(folder)
        todo: dict[str, Network] = {}
        scheduled = set(known)
        for net in networks:
            table = estimator.kernel_table(net.graph)
            wanted = {s for s, free in zip(kernel_signatures(table), table.free) if not free}
            if wanted <= scheduled:        # in the table, or measured with a network before it
                summary.skipped.append(net.name)
            elif net.name not in todo:
                todo[net.name] = net
                scheduled |= wanted
        if not todo:
            return summary

        def measure(name: str) -> Profiled:
            try:
                return profile_network(backend, todo[name], protocol.warmup, protocol.repeats)
            except BackendError as error:
                raise ItemFailed(str(error)) from error

        def finished(name: str, rounds: list[Profiled], factors: list[float]) -> None:
            end_to_end_ms = None
            if protocol.across_rounds == "median":        # the network's time as the ground truth takes it
                end_to_end_ms = combine([r.latency.runs_ms for r in rounds], factors, protocol.statistic,
                                        "median").time_ms
            result, rows = _kernel_rows(todo[name], merge_rounds(rounds, factors), estimator, known,
                                        protocol.statistic, backend.output_reorders, end_to_end_ms)
            append_kernels(folder / KERNELS_FILE, rows)
            known.update({row["signature"]: row["time_ms"] for row in rows})
            result.table_ms = Estimator(estimator.profile, measured=MeasuredKernels.load(folder))(todo[name].graph)
            summary.results.append(result)

        with protocol_canary(backend, protocol) as canary:
            before, reference_ms = check_machine(canary, backend.threads, protocol.statistic)
            start = read_cpu_times()
            if protocol.drift != "canary":
                canary = None
            elif reference_ms is not None and record.get("canary_ms") is None:
                record["canary_ms"] = reference_ms
                write_record(folder, record)
            with tqdm(total=len(todo) * protocol.rounds, desc=f"profile on {backend_name}", unit="run",
                      disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
                session = interleave(list(todo), measure, protocol, canary, record.get("canary_ms"), finished,
                                     progress=bar)
        summary.machine = machine_report(before, session_state(start, backend.threads, session), session)
        summary.failures = session.failures
    return summary


def _end_to_end(networks: list[Network], backend: Backend, estimator: Estimator, folder: Path,
                record: dict[str, Any], protocol: Protocol, progress: bool) -> InContextSummary:
    """Time ``networks`` end to end into the table ``folder``'s ``networks.csv`` (each row
    as soon as it is measured), then fit the kernels of every network recorded there and
    append their times to ``kernels.csv`` and the fit's scale to ``scale.json`` (:mod:`.end_to_end`)."""
    unique = {net.name: net for net in networks}
    kernels = {name: network_kernels(estimator, net.graph) for name, net in unique.items()}
    items = [(name, lambda net=net: net.module, net.graph.input_shapes[0]) for name, net in unique.items()]

    def started(reference_ms: float | None) -> None:
        if reference_ms is not None and record.get("canary_ms") is None:
            record["canary_ms"] = reference_ms
            write_record(folder, record)

    session = measure_networks(backend, items, protocol, reference_ms=record.get("canary_ms"), on_start=started,
                               on_measured=lambda name, measured: append_network(
                                   folder / NETWORKS_FILE, name, measured.time_ms, kernels[name]),
                               progress=progress)
    summary = InContextSummary(folder, failures=dict(session.failures), machine=session.report())
    recorded = read_networks(folder / NETWORKS_FILE)
    if not recorded:
        return summary
    summary.fit = fit_kernel_times(recorded, estimator.profile.overhead_ms)
    write_scale(folder, summary.fit.scale, len(recorded))
    append_kernels(folder / KERNELS_FILE, kernel_rows(summary.fit, recorded))
    with_table = Estimator(estimator.profile, measured=MeasuredKernels.load(folder))
    for name, measured in session.measured.items():
        graph = unique[name].graph
        summary.results.append(NetworkResult(
            name, measured.time_ms, math.nan, 0.0, estimator(graph), with_table(graph), 0, len(kernels[name]),
            summary.fit.scale, profiled=False))
    return summary


def _kernel_rows(net: Network, profiled: Profiled, estimator: Estimator, known: dict[str, float],
                 statistic: str, output_reorders: str = "",
                 end_to_end_ms: float | None = None) -> tuple[NetworkResult, list[dict[str, Any]]]:
    """The network's result and the table rows of its kernels not in ``known``
    (``output_reorders``: the backend's pattern of output-reorder kernel names), its
    kernels scaled to ``end_to_end_ms`` (default: ``statistic`` of the pooled runs)."""
    graph = net.graph
    rows = match_kernels(graph, profiled.kernels, statistic)
    times = estimator.kernel_times(graph)
    table = times.table
    tied, ties, untied = tie_kernels(table, rows, times.time_ms, output_reorders)
    measured_ms = statistic_ms(profiled.latency.runs_ms, statistic) if end_to_end_ms is None else end_to_end_ms
    kernels_ms = float(np.nansum(tied))
    scale = (measured_ms - estimator.profile.overhead_ms) / kernels_ms if kernels_ms > 0 else 1.0
    scaled = tied * max(scale, 0.0)
    signatures, keyed = kernel_signatures(table), signature_features(table)
    occurrences: dict[str, list[int]] = {}
    for k, s in enumerate(signatures):
        if not table.free[k]:
            occurrences.setdefault(s, []).append(k)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    new = []
    for s, kernels in occurrences.items():
        if s in known:
            continue
        exact = [k for k in kernels if ties[k] == "exact"]
        chosen = exact or kernels
        first = chosen[0]
        new.append({"signature": s, "kind": table.kinds[first], "fused": "+".join(table.layer_kinds[first][1:]),
                    **{name: float(keyed[first, j]) for j, name in enumerate(FEATURES)},
                    "time_ms": float(np.median(scaled[chosen])), "spread": _spread(rows, table.layers[first]),
                    "occurrences": len(kernels), "tie": ties[first], "network": net.name, "measured_utc": now})
    result = NetworkResult(net.name, measured_ms, kernels_ms, untied, float(times.time_ms.sum())
                           + estimator.profile.overhead_ms, math.nan, len(new), len(occurrences), scale)
    return result, new


def _spread(rows: list[dict[str, Any]], layers: Sequence[str]) -> float:
    """The largest spread of the executed layer rows among ``layers`` (0 if none ran)."""
    names = set(layers)
    return max((row["spread"] for row in rows if row["layer"] in names and row["status"] == "executed"), default=0.0)
