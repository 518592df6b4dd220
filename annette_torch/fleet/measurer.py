"""What runs on a fleet node: a Ray actor that measures on the device beside it.

One :class:`NodeMeasurer` per node, pinned to it (:func:`~.cluster.on_node`) and holding
the node's device resource, so a device measures one chunk at a time. It measures
exactly as a local campaign does, through the campaign's own
:class:`~annette_torch.calibration.campaign.MeasuringWorker` (a worker process with the
per-round timeout, restarted after a crash) and
:func:`~annette_torch.calibration.campaign.measure_chunk`, but writes nothing: the rows
go back to the driver, the only writer of the stores. The runtimes' console output goes
to ``annette_torch-fleet/<backend>-worker.log`` in the node's temporary folder.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..calibration.campaign import MeasuringWorker, measure_chunk, reference_canary
from ..calibration.sweep import BenchmarkSpec
from ..measure.protocol import Protocol


@dataclass
class ChunkResult:
    """What a node measured of one chunk: per benchmark (network row, layer rows), in
    the order they finished, the chunk's canary values and the seconds measuring took
    on the node."""

    benchmarks: list[tuple[dict, list[dict]]] = field(default_factory=list)
    canary_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def node_log_path(backend_name: str) -> Path:
    """Where a node's measuring worker writes the runtimes' console output."""
    folder = Path(tempfile.gettempdir()) / "annette_torch-fleet"
    folder.mkdir(exist_ok=True)
    return folder / f"{backend_name}-worker.log"


class NodeMeasurer:
    """The measuring end of a fleet on one node (a Ray actor: ``ray.remote(NodeMeasurer)``).

    ``options`` go to the backend's constructor (threads, precision, a board's config
    file, which must exist at that path on the node)."""

    def __init__(self, backend_name: str, options: dict[str, Any], warmup: int, repeats: int,
                 canary_repeats: int) -> None:
        self.backend_name = backend_name
        self.options = dict(options)
        self.worker = MeasuringWorker(backend_name, self.options, warmup, repeats, canary_repeats,
                                      str(node_log_path(backend_name)))

    def fingerprint(self) -> dict[str, Any]:
        """The device's fingerprint as measured here (the store it goes to)."""
        return get_backend(self.backend_name, **self.options).fingerprint()

    def where(self) -> dict[str, Any]:
        """The Ray node id and process id this measurer runs in (for tests and operators)."""
        import ray
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def store_extras(self) -> dict[str, bytes]:
        """The backend's store extras, measured here: file name -> content, for the driver to write."""
        with tempfile.TemporaryDirectory() as folder:
            self.worker.store_extras(folder)
            return {p.name: p.read_bytes() for p in Path(folder).iterdir() if p.is_file()}

    def reference(self, protocol: Protocol, timeout_s: float) -> float:
        """The canary's reference time on this device (:func:`reference_canary`)."""
        return reference_canary(self.worker, protocol, timeout_s)

    def measure(self, specs: list[str], protocol: Protocol, reference_ms: float | None,
                timeout_s: float) -> ChunkResult:
        """One chunk (benchmark specs as JSON) measured with ``protocol`` (:func:`measure_chunk`)."""
        start = time.perf_counter()
        result = ChunkResult()
        chunk = [BenchmarkSpec.from_json(spec) for spec in specs]
        result.canary_ms = measure_chunk(chunk, self.worker, protocol, reference_ms,
                                         lambda network, rows: result.benchmarks.append((network, rows)), timeout_s)
        result.wall_s = time.perf_counter() - start
        return result

    def stop(self) -> None:
        """Stop the measuring worker process."""
        self.worker.stop()
