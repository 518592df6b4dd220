"""``ncs2``: an Intel Neural Compute Stick 2 (Myriad X VPU) through OpenVINO's MYRIAD plugin.

The MYRIAD plugin exists only up to OpenVINO 2022.3, which does not install beside the
OpenVINO this package uses, so the stick is driven through another interpreter (the
configuration's ``[openvino] python``, e.g. a venv with ``openvino==2022.3.*``). Per
benchmark network, in a new work folder (``dry_run`` prints each command):

1. **export**: ``torch.onnx.export`` of the module to ``model.onnx`` (as the
   ``openvino-cpu`` backend does), ``ncs2_runner.py`` copied beside it.
2. **run**: ``[openvino] profiler = "runner"`` (default): ``python ncs2_runner.py
   model.onnx --device MYRIAD --warmup W --repeats R --out result.json`` writes every
   node's performance counters per inference and end-to-end times as JSON
   (:func:`parse_runner_report`). ``profiler = "benchmark_app"``: OpenVINO's
   ``benchmark_app -d MYRIAD -pc -report_type detailed_counters`` writes its CSV reports
   (:func:`parse_detailed_counters`, :func:`parse_benchmark_report`); they hold one
   inference's counters and the median latency, so their spread is 0.
3. **parse**: each runtime node becomes one :class:`KernelRecord`; the ONNX node names
   it carries (``originalLayersNames`` where the plugin reports them, else its own
   name) lead to module paths as for the other ONNX backends.

A stick that hangs (timeout) or drops off the bus (runner exit code 4) is retried
``[openvino] retries`` times; then the benchmark fails with a :class:`BackendError`
naming the step, and the campaign goes on.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from torch import nn

from .base import (Backend, BackendError, KernelRecord, Latency, Profiled, export_onnx, onnx_node_places, onnx_scopes,
                   place_kernels, register_backend)
from .remote import (BoardConfig, Command, CommandFailed, ReportError, example_config, run_command, runner_report,
                     times_ms, with_retries)

EXAMPLE_CONFIG = example_config("ncs2")
RUNNER_SCRIPT = Path(__file__).resolve().parent / "ncs2_runner.py"
RUNNER_COMPILE_FAILED = 3
RUNNER_DEVICE_FAILED = 4
STATUSES = ("EXECUTED", "NOT_RUN", "OPTIMIZED_OUT")


def _status(text: str, where: str) -> str:
    """``EXECUTED`` from ``EXECUTED``, ``Status.EXECUTED`` or ``ProfilingInfo.Status.EXECUTED``."""
    status = text.strip().rsplit(".", 1)[-1].upper()
    if status not in STATUSES:
        raise ReportError(f"{where}: unknown status {text!r} (expected one of {', '.join(STATUSES)})")
    return status


def parse_runner_report(text: str, source: str = "result.json") -> tuple[list[KernelRecord], list[float]]:
    """``ncs2_runner.py``'s JSON → (kernels with the ONNX names each computes in
    ``layers``, end-to-end times in ms); :class:`ReportError` names what is malformed."""
    data = runner_report(text, source, "annette-ncs2-runner", "ncs2_runner.py")
    layers = data.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ReportError(f"{source}: 'layers' must be a non-empty list (were performance counters on?)")
    kernels = []
    for i, layer in enumerate(layers):
        where = f"{source}: layers[{i}]"
        if not isinstance(layer, dict) or not all(isinstance(layer.get(k), str) for k in ("name", "type", "status")):
            raise ReportError(f"{where} needs string name, type and status")
        runs = times_ms(layer.get("real_time_ms"), f"{where} ({layer['name']}): real_time_ms")
        if not runs:
            raise ReportError(f"{where} ({layer['name']}): real_time_ms is empty")
        originals = layer.get("original_names") or []
        if not isinstance(originals, list) or not all(isinstance(n, str) for n in originals):
            raise ReportError(f"{where}: original_names must be a list of strings")
        kernels.append(KernelRecord(layer["name"], layer["type"], str(layer.get("exec_type", "")),
                                    _status(layer["status"], where), runs,
                                    tuple(originals) or (layer["name"],)))
    end_to_end = times_ms(data.get("end_to_end_ms"), f"{source}: end_to_end_ms")
    if not end_to_end:
        raise ReportError(f"{source}: end_to_end_ms is empty")
    return kernels, list(end_to_end)


_COUNTER_HEADER = ["layerName", "execStatus", "layerType", "execType", "realTime (ms)", "cpuTime (ms)"]


def parse_detailed_counters(text: str, source: str = "benchmark_detailed_counters_report.csv") -> list[KernelRecord]:
    """``benchmark_app -pc -report_type detailed_counters``'s CSV (``;``-separated): one
    block per infer request, each a header ``layerName;execStatus;layerType;execType;
    realTime (ms);cpuTime (ms)``, one row per node and a ``Total`` row, blocks separated
    by a blank line. Each block is one inference; a node's times across blocks are its
    runs. :class:`ReportError` when no block is complete or a row is malformed."""
    rows = list(csv.reader(io.StringIO(text), delimiter=";"))
    kernels: dict[str, dict[str, Any]] = {}
    blocks = 0
    in_block = False
    for number, row in enumerate(rows, start=1):
        where = f"{source} line {number}"
        if not row or not any(cell.strip() for cell in row):
            if in_block:
                raise ReportError(f"{where}: a block ends without its 'Total' row (cut short?)")
            continue
        if [c.strip() for c in row] == _COUNTER_HEADER:
            in_block = True
            continue
        if not in_block:
            raise ReportError(f"{where}: expected the header {';'.join(_COUNTER_HEADER)}, got {';'.join(row)}")
        if row[0] == "Total":
            in_block = False
            blocks += 1
            continue
        if len(row) != len(_COUNTER_HEADER):
            raise ReportError(f"{where}: {len(row)} fields, expected {len(_COUNTER_HEADER)}")
        name, status, kind, exec_type, real, _cpu = row
        try:
            time_ms = float(real)
        except ValueError:
            raise ReportError(f"{where}: realTime {real!r} is not a number") from None
        entry = kernels.setdefault(name, {"kind": kind, "exec": exec_type, "status": _status(status, where),
                                          "runs": []})
        entry["runs"].append(time_ms)
    if in_block:
        raise ReportError(f"{source}: the last block has no 'Total' row (cut short?)")
    if not blocks or not kernels:
        raise ReportError(f"{source} holds no performance counters (was benchmark_app run with -pc?)")
    return [KernelRecord(name, e["kind"], e["exec"], e["status"], tuple(e["runs"]), (name,))
            for name, e in kernels.items()]


def parse_benchmark_report(text: str, source: str = "benchmark_report.csv") -> float:
    """The median latency (ms) from ``benchmark_app``'s ``benchmark_report.csv``: the
    ``latency (ms)`` row of its ``Execution results`` section (``key;value`` rows)."""
    section = ""
    for line in text.splitlines():
        if ";" not in line:
            section = line.strip()
            continue
        key, _, value = line.partition(";")
        if section == "Execution results" and key.strip() in ("latency (ms)", "Median latency (ms)",
                                                              "median latency (ms)"):
            try:
                return float(value)
            except ValueError:
                raise ReportError(f"{source}: latency {value!r} is not a number") from None
    raise ReportError(f"{source} has no 'latency (ms)' row under 'Execution results'")


def to_module_paths(kernels: Sequence[KernelRecord], places: dict[str, tuple[str, str, int, int]],
                    layer_paths: Sequence[str]) -> list[KernelRecord]:
    """:func:`~annette_torch.backends.base.place_kernels` of the runner's kernels, a MYRIAD
    stage suffix after ``@`` ignored."""
    return place_kernels(kernels, places, layer_paths, alias=lambda name: name.split("@", 1)[0])


@register_backend
class Ncs2(Backend):
    """An NCS2 through OpenVINO 2022.3's MYRIAD plugin in another interpreter (module
    docstring). ``config``: the configuration file
    (example: ``annette_torch/backends/boards/ncs2.example.toml``). ``threads`` must be 1; ``precision`` is
    ``f16``, the Myriad X's arithmetic."""

    name = "ncs2"
    precisions = ("f16",)
    benchmark_timeout_s = 1200.0          # export, compile for MYRIAD and runs in another interpreter

    def __init__(self, threads: int = 1, precision: str | None = None, config: str | os.PathLike | None = None) -> None:
        super().__init__(threads, precision)
        if threads != 1:
            raise ValueError("backend 'ncs2' runs one inference at a time; use --threads 1")
        cfg = BoardConfig(config, EXAMPLE_CONFIG)
        self.config_path = str(cfg.path)
        self.python = cfg.get("openvino", "python", kind=str,
                              what="a Python interpreter with openvino 2022.3, e.g. /opt/ov2022/bin/python")
        self.device = cfg.get("openvino", "device", "MYRIAD", str)
        self.profiler = cfg.choice("openvino", "profiler", ("runner", "benchmark_app"), "runner")
        self.benchmark_app = cfg.get("openvino", "benchmark_app", "benchmark_app", str)
        self.timeout_s = cfg.seconds("openvino", "timeout_s", 300.0)
        self.retries = cfg.count("openvino", "retries", 1)
        self.retry_wait_s = cfg.get("openvino", "retry_wait_s", 10.0, (int, float))
        env = cfg.get("openvino", "env", {}, dict)
        if not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{cfg.path}: [openvino] env must map names to strings")
        self.env = dict(env)
        self.work_dir = cfg.get("openvino", "work_dir", "", str)
        self.keep_work = cfg.get("openvino", "keep_work", False, bool)
        self._info: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Ncs2(config={self.config_path!r}, python={self.python!r}, device={self.device!r})"

    def info_command(self) -> Command:
        return Command((self.python, str(RUNNER_SCRIPT), "--info"), 120.0,
                       "ask the OpenVINO 2022.3 interpreter for its devices", "[openvino] python", self.env)

    def device_info(self) -> dict[str, Any]:
        """OpenVINO version, devices and the device's full name from the configured
        interpreter (cached); :class:`BackendError` (step "reach the device") naming the
        config key when the interpreter, its OpenVINO or the stick is missing."""
        if self._info is None:
            try:
                data = json.loads(run_command(self.info_command()).strip().splitlines()[-1])
            except CommandFailed as error:
                hint = ("" if "not found" in str(error) else
                        f"; [openvino] python in {self.config_path} must be an interpreter with "
                        f"openvino 2022.3 (pip install 'openvino==2022.3.*')")
                raise BackendError(self.name, "reach the device", RuntimeError(f"{error}{hint}")) from error
            except (json.JSONDecodeError, IndexError) as error:
                raise BackendError(self.name, "reach the device", RuntimeError(
                    f"ncs2_runner.py --info printed no JSON: {error}")) from error
            if self.device not in data.get("devices", []):
                raise BackendError(self.name, "reach the device", RuntimeError(
                    f"OpenVINO {data.get('openvino', '?')} sees no {self.device} device (it sees "
                    f"{', '.join(data.get('devices', [])) or 'none'}): plug in the NCS2 and install OpenVINO's "
                    f"udev rules for it, or set [openvino] device in {self.config_path}"))
            self._info = data
        return self._info

    def runtime_version(self) -> str:
        return str(self.device_info()["openvino"])

    def fingerprint(self) -> dict[str, Any]:
        """Backend, OpenVINO version, the device's full name as ``cpu``, threads, precision."""
        info = self.device_info()
        return {"backend": self.name, "runtime_version": self.runtime_version(),
                "cpu": info.get("device_name") or self.device, "threads": self.threads, "precision": self.precision}

    def run_command_for(self, work: Path, warmup: int, repeats: int) -> Command:
        """The command that profiles ``work/model.onnx`` with the configured profiler."""
        if self.profiler == "runner":
            return Command((self.python, str(work / RUNNER_SCRIPT.name), str(work / "model.onnx"), "--device",
                            self.device, "--warmup", str(warmup), "--repeats", str(repeats), "--out",
                            str(work / "result.json")), self.timeout_s, f"profile on {self.device}",
                           "[openvino] python", self.env)
        return Command((self.benchmark_app, "-m", str(work / "model.onnx"), "-d", self.device, "-hint", "latency",
                        "-api", "sync", "-nireq", "1", "-niter", str(repeats), "-pc", "-report_type", "detailed_counters",
                        "-report_folder", str(work)), self.timeout_s, f"profile on {self.device} with benchmark_app",
                       "[openvino] benchmark_app", self.env)

    def dry_run(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> list[str]:
        work = Path(self.work_dir or tempfile.gettempdir()) / "annette-ncs2-XXXXXX"
        return [f"# work folder: {work} (a new one per benchmark; model.onnx and {RUNNER_SCRIPT.name} are "
                f"written there first)", str(self.run_command_for(work, warmup, repeats))]

    @contextlib.contextmanager
    def work_folder(self) -> Iterator[Path]:
        """A new work folder, removed afterwards unless ``[openvino] keep_work``."""
        if self.work_dir:
            Path(self.work_dir).mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="annette-ncs2-", dir=self.work_dir or None))
        try:
            yield folder
        finally:
            if not self.keep_work:
                shutil.rmtree(folder, ignore_errors=True)

    def profile(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> Profiled:
        """Export to ONNX, run the profiler in the OpenVINO 2022.3 interpreter, parse."""
        self.check_one_input(input_shape)
        self.device_info()
        with self.work_folder() as work:
            with self.step("export"):
                export_onnx(model, input_shape, work / "model.onnx")
                import onnx

                graph = onnx.load(str(work / "model.onnx"), load_external_data=False).graph
                places = onnx_node_places(graph, onnx_scopes(graph, {name for name, _ in model.named_modules()}))
                shutil.copy(RUNNER_SCRIPT, work / RUNNER_SCRIPT.name)
            command = self.run_command_for(work, warmup, repeats)

            def attempt() -> None:
                for stale in ("result.json", "benchmark_detailed_counters_report.csv", "benchmark_report.csv"):
                    (work / stale).unlink(missing_ok=True)
                run_command(command, cwd=work, transient_codes=(RUNNER_DEVICE_FAILED,))

            with_retries(self.name, f"run on {self.device}", attempt, self.retries, self.retry_wait_s)
            with self.step("parse the report"):
                if self.profiler == "runner":
                    kernels, end_to_end = parse_runner_report((work / "result.json").read_text())
                else:
                    kernels = parse_detailed_counters(
                        (work / "benchmark_detailed_counters_report.csv").read_text())
                    end_to_end = [parse_benchmark_report((work / "benchmark_report.csv").read_text())]
                kernels = to_module_paths(kernels, places, layer_paths)
        return Profiled(kernels, Latency.from_runs(end_to_end, self.threads))

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5, repeats: int = 20) -> Latency:
        """End-to-end latency on the stick (the same run as :meth:`profile`)."""
        return self.profile(model, input_shape, [], warmup, repeats).latency
