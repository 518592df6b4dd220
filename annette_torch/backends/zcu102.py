"""``zcu102``: the DPU (DPUCZDX8G) of a Xilinx ZCU102 board, through the Vitis AI toolchain.

Per benchmark network, in a new work folder on the host (``dry_run`` prints each command):

1. **export**: the ``nn.Module`` is pickled to ``model.pt``; the source of its classes
   that are not part of torch goes to ``annette_model.py`` beside it, so the Vitis AI
   environment can load it without annette_torch (:func:`export_portable`).
2. **quantize**: ``zcu102_quantize.py`` (shipped beside this file) runs vai_q_pytorch's
   ``torch_quantizer`` (calib, then test and ``export_xmodel``) inside the Vitis AI
   environment: a docker image, a conda env or a local shell (``[vitis_ai] mode``).
3. **compile**: ``vai_c_xir -x quantized.xmodel -a arch.json -o compiled -n annette``.
4. **board**: over the system ``ssh``/``scp`` (BatchMode, ConnectTimeout): empty a work
   folder on the board, copy ``zcu102_runner.py`` and the xmodel there, run the runner
   (per-DPU-subgraph and end-to-end times with VART), optionally once more under
   ``vaitrace --txt_summary`` (``[board] profiler = "vaitrace"``: the DPU's hardware
   counter times, HW_RT), and copy the reports back. Every remote command has a
   timeout; a board that hangs (timeout) or reboots (ssh exit 255) is retried
   ``[board] retries`` times, then the benchmark fails with a :class:`BackendError`
   naming the step (the campaign records it and goes on).
5. **parse**: each DPU subgraph becomes one :class:`KernelRecord`; its ops are mapped
   to the benchmark's layers by vai_q_pytorch's op names (:func:`xmodel_scopes`).

The DPU runs whole subgraphs, so a fused chain (conv+bn+relu, conv+pool) is one
kernel holding several layers, which the matcher marks fused. Per-layer times inside
one subgraph need a model compiled for fine-grained profiling and vaitrace
``--fine_grained`` (Vitis AI <= 2.5; ``[board] fine_grained = true``). Layers the DPU
cannot run are placed in CPU subgraphs by the compiler; such a benchmark fails with an
error naming them, since this backend measures DPU kernels.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import pickle
import re
import shlex
import shutil
import tempfile
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from .base import Backend, BackendError, KernelRecord, Latency, Profiled, register_backend
from .remote import (SSH_CONNECTION_ERROR, BoardConfig, BoardConfigError, Command, CommandFailed, ReportError, Ssh,
                     example_config, run_command, runner_report, times_ms, with_retries)

EXAMPLE_CONFIG = example_config("zcu102")
HERE = Path(__file__).resolve().parent
QUANTIZE_SCRIPT = HERE / "zcu102_quantize.py"
RUNNER_SCRIPT = HERE / "zcu102_runner.py"
NET_NAME = "annette"
PORTABLE_MODULE = "annette_model"
# remote exit codes worth another attempt: ssh lost the board, coreutils timeout fired
TRANSIENT_CODES = (SSH_CONNECTION_ERROR, 124, 137)
# xmodel op types that only move or convert data (the input, quantization fixes, DDR transfers)
DATA_OP_TYPES = frozenset({"data", "data-fix", "const", "const-fix", "fix", "fix2float", "float2fix", "download",
                           "upload", "reshape", "reshape-fix", "transpose", "flatten", "squeeze", "identity"})
_XMODEL_NAME = re.compile(r"[^0-9A-Za-z]")


# --- export: a module the Vitis AI environment can load without annette_torch ---------------

def _custom_classes(model: nn.Module) -> list[type]:
    """Classes of ``model``'s modules (and their bases) defined outside torch, bases first."""
    ordered: list[type] = []

    def visit(cls: type) -> None:
        if cls in ordered or cls.__module__.split(".")[0] in ("torch", "builtins"):
            return
        for base in cls.__bases__:
            visit(base)
        ordered.append(cls)

    for module in model.modules():
        visit(type(module))
    return ordered


class _PortableModule:
    """Stands for the module :data:`PORTABLE_MODULE` in a pickle: loading imports it."""


def _portable_pickle(classes: Sequence[type]) -> types.ModuleType:
    """A pickle module for ``torch.save(..., pickle_module=)`` whose ``Pickler`` writes each
    of ``classes`` as ``PORTABLE_MODULE.<name>`` (``getattr`` of the module imported when
    loading), wherever the class itself lives."""
    portable, module = frozenset(classes), _PortableModule()

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, type) and obj in portable:
                return getattr, (module, obj.__name__)
            if obj is module:
                return importlib.import_module, (PORTABLE_MODULE,)
            return NotImplemented

    namespace = types.ModuleType("annette_portable_pickle")
    namespace.Pickler = Pickler
    return namespace


def export_portable(model: nn.Module, folder: str | os.PathLike) -> list[str]:
    """Write ``model`` to ``folder/model.pt`` (``torch.save`` of the whole module) and the
    source of its non-torch classes to ``folder/annette_model.py``, the pickle naming
    those classes as that file's, so that ``torch.load`` needs only torch and that file;
    the classes themselves and ``sys.modules`` are left untouched. Returns the class
    names. A class whose source cannot be read, or that is nested in a function or
    class, raises ``ValueError`` naming it. The classes' ``forward`` may use ``torch``,
    ``nn``, ``F`` (``torch.nn.functional``) and ``math``."""
    folder = Path(folder)
    classes = _custom_classes(model)
    sources = []
    for cls in classes:
        if "." in cls.__qualname__:
            raise ValueError(f"class {cls.__qualname__} is nested; the zcu102 backend can only ship module-level "
                             f"classes to the Vitis AI environment")
        try:
            sources.append(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError) as error:
            raise ValueError(f"cannot read the source of class {cls.__module__}.{cls.__qualname__} "
                             f"to ship it to the Vitis AI environment: {error}") from None
    header = ('"""Classes of one benchmark network, written by annette_torch for vai_q_pytorch."""\n'
              "from __future__ import annotations\n\nimport math\nfrom typing import *  # noqa: F403\n\n"
              "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n")
    (folder / f"{PORTABLE_MODULE}.py").write_text(header + "".join("\n\n" + s for s in sources))
    torch.save(model, folder / "model.pt", pickle_module=_portable_pickle(classes))
    return [cls.__name__ for cls in classes]


# --- xmodel op names -> module paths ----------------------------------------------------------

def xmodel_formal_name(name: str) -> str:
    """vai_q_pytorch's xmodel op name for a node name: every character that is not a
    letter or digit becomes ``_`` (``Net::Net/Conv2d[conv]/input.2`` →
    ``Net__Net_Conv2d_conv__input_2``)."""
    return _XMODEL_NAME.sub("_", name)


def xmodel_scopes(model: nn.Module, layer_paths: Sequence[str]) -> list[tuple[str, str]]:
    """For each module path in ``layer_paths``: the scope its xmodel op names contain,
    longest first. vai_q_pytorch names a node ``Top::Top/Class[attr]/.../output``
    (its trace scope: each module on the path as ``ClassName[attribute]``), so the
    layer ``block.conv`` of a ``Block`` holding a ``Conv2d`` owns the ops whose names
    contain ``Block_block__Conv2d_conv__``."""
    modules = dict(model.named_modules())
    scopes = []
    for path in dict.fromkeys(layer_paths):
        if not path or path not in modules:
            continue
        parts = path.split(".")
        segments = [f"{modules['.'.join(parts[:i + 1])]._get_name()}[{part}]" for i, part in enumerate(parts)]
        scopes.append((xmodel_formal_name("/".join(segments) + "/"), path))
    return sorted(scopes, key=lambda s: -len(s[0]))


def layer_of_op(op_name: str, scopes: Sequence[tuple[str, str]]) -> str:
    """The module path whose scope (from :func:`xmodel_scopes`) ``op_name`` contains at a
    name boundary, the longest such scope winning; ``""`` for ops of no layer (the input,
    its quantization)."""
    for scope, path in scopes:
        start = op_name.find(scope)
        while start != -1:
            if start == 0 or op_name[start - 1] == "_":
                return path
            start = op_name.find(scope, start + 1)
    return ""


# --- reports ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Subgraph:
    """One child subgraph of the compiled xmodel as the board runner reported it."""

    name: str
    device: str
    ops: tuple[tuple[str, str], ...]           # (name, type) in topological order
    children: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    runs_ms: tuple[float, ...]


@dataclass(frozen=True)
class RunnerReport:
    """``zcu102_runner.py``'s result: subgraphs in execution order and end-to-end times."""

    subgraphs: tuple[Subgraph, ...]
    end_to_end_ms: tuple[float, ...]


def _ops_of(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                              and isinstance(o.get("type"), str) for o in value):
        raise ReportError(f"{where}: 'ops' must be a list of {{name, type}} objects")
    return tuple((o["name"], o["type"]) for o in value)


def parse_runner_report(text: str, source: str = "result.json") -> RunnerReport:
    """Read ``zcu102_runner.py``'s JSON (format in its docstring); :class:`ReportError`
    names what is missing or malformed."""
    data = runner_report(text, source, "annette-zcu102-runner", "zcu102_runner.py")
    subgraphs = []
    for i, entry in enumerate(data.get("subgraphs") or []):
        where = f"{source}: subgraphs[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ReportError(f"{where} has no name")
        children = []
        for j, child in enumerate(entry.get("children") or []):
            if not isinstance(child, dict) or not isinstance(child.get("name"), str):
                raise ReportError(f"{where}.children[{j}] has no name")
            children.append((child["name"], _ops_of(child.get("ops", []), f"{where}.children[{j}]")))
        subgraphs.append(Subgraph(entry["name"], str(entry.get("device", "")).upper(),
                                  _ops_of(entry.get("ops", []), where), tuple(children),
                                  times_ms(entry.get("runs_ms", []), f"{where}.runs_ms")))
    if not subgraphs:
        raise ReportError(f"{source} lists no subgraphs")
    dpu = [s for s in subgraphs if s.device == "DPU"]
    if not dpu:
        raise ReportError(f"{source}: the xmodel has no DPU subgraph")
    runs = {len(s.runs_ms) for s in dpu}
    if 0 in runs or len(runs) != 1:
        raise ReportError(f"{source}: every DPU subgraph needs the same, non-zero number of runs, got {sorted(runs)}")
    end_to_end = times_ms(data.get("end_to_end_ms"), f"{source}: end_to_end_ms")
    if not end_to_end:
        raise ReportError(f"{source}: end_to_end_ms is empty")
    return RunnerReport(tuple(subgraphs), end_to_end)


@dataclass(frozen=True)
class VaitraceRow:
    """One row of vaitrace's text summary "DPU Summary" table: a subgraph on one DPU core."""

    dpu: str
    batch: int
    subgraph: str
    workload_gop: float
    time_ms: float          # HW_RT (the DPU's hardware counter) where reported, else the runtime column


def _number(text: str, where: str) -> float:
    text = text.strip()
    if text == "~0":                       # vaitrace: "close to 0, within (0, 0.001)"
        return 0.0
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ReportError(f"{where}: {text!r} is not a number") from None


def parse_vaitrace_summary(text: str, source: str = "vaitrace.txt") -> list[VaitraceRow]:
    """The "DPU Summary" table of ``vaitrace --txt_summary`` (Vitis AI 2.0 and later: an
    ASCII table of ``|``-separated columns between ``=`` rules, header ``DPU Id | Bat |
    DPU SubGraph | WL | SW_RT | HW_RT | Effic | LdWB | LdFM | StFM | AvgBw`` on edge
    boards, ``SubGraph`` and ``RT`` in 2.0). Subgraph names longer than 60 characters
    are shown as ``...`` plus their last 60. :class:`ReportError` when the table is
    missing or malformed."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("DPU Summary"))
    except StopIteration:
        raise ReportError(f"{source} has no 'DPU Summary' table (was vaitrace run with --txt_summary?)") from None
    body = lines[start + 1:]
    if len(body) < 3 or not body[0].startswith("=") or not set(body[2].strip()) <= {"-", "+"}:
        raise ReportError(f"{source}: the 'DPU Summary' table does not start with a '=' rule, a header "
                          f"and a '-+-' rule")
    header = [h.strip() for h in body[1].split("|")]
    name_col = next((h for h in ("DPU SubGraph", "SubGraph") if h in header), None)
    time_col = next((h for h in ("HW_RT", "RT", "SW_RT") if h in header), None)
    if name_col is None or time_col is None or "DPU Id" not in header:
        raise ReportError(f"{source}: the 'DPU Summary' header {header} lacks 'DPU Id', a subgraph column "
                          f"('DPU SubGraph') or a time column ('HW_RT', 'RT' or 'SW_RT')")
    rows = []
    for number, line in enumerate(body[3:], start=start + 5):
        if line.startswith("="):
            break
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != len(header):
            raise ReportError(f"{source} line {number}: {len(cells)} columns, the header has {len(header)}")
        cell = dict(zip(header, cells))
        where = f"{source} line {number}"
        rows.append(VaitraceRow(cell["DPU Id"], int(_number(cell.get("Bat", "1"), where)), cell[name_col],
                                _number(cell.get("WL", "0"), where), _number(cell[time_col], where)))
    else:
        raise ReportError(f"{source}: the 'DPU Summary' table is not closed by a '=' rule (cut short?)")
    if not rows:
        raise ReportError(f"{source}: the 'DPU Summary' table has no rows (did the runner reach the DPU?)")
    return rows


def _shown_as(name: str, shown: str) -> bool:
    """Whether vaitrace's ``shown`` subgraph name (``subgraph_`` dropped, long names as
    ``...`` + last 60 characters) is the xmodel subgraph ``name``."""
    name = name[len("subgraph_"):] if name.startswith("subgraph_") else name
    shown = shown[len("subgraph_"):] if shown.startswith("subgraph_") else shown
    return name == shown or (shown.startswith("...") and name.endswith(shown[3:]))


def parse_xdputil_query(text: str, source: str = "xdputil query") -> dict[str, Any]:
    """The board's DPU from ``xdputil query``'s JSON (log lines before it are skipped):
    ``arch`` (e.g. ``DPUCZDX8G_ISA1_B4096``), ``cores``, ``frequency_mhz`` and
    ``vai_version`` (from ``libvart-runner.so``'s version string)."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as error:
        raise ReportError(f"{source} did not print JSON: {error}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{source} did not print JSON (is the Vitis AI runtime installed on the board?)")
    kernels = [k for k in data.get("kernels", []) if isinstance(k, dict) and k.get("DPU Arch")]
    if not kernels:
        raise ReportError(f"{source} lists no DPU core: is the DPU bitstream loaded?")
    runner = str(data.get("VAI Version", {}).get("libvart-runner.so", ""))
    version = re.search(r"Version:\s*([0-9][0-9.]*[0-9])", runner)
    return {"arch": kernels[0]["DPU Arch"], "cores": len(kernels),
            "frequency_mhz": kernels[0].get("DPU Frequency (MHz)", ""),
            "vai_version": version.group(1) if version else "unknown"}


def dpu_kernels(report: RunnerReport, scopes: Sequence[tuple[str, str]], arch: str,
                vaitrace: Sequence[VaitraceRow] = ()) -> list[KernelRecord]:
    """One :class:`KernelRecord` per DPU subgraph of ``report`` (execution order): its
    layers are the module paths its ops belong to (:func:`layer_of_op`); its times are the
    runner's, or with ``vaitrace`` rows the DPU's hardware-counter times (one value per
    DPU core that ran it; vaitrace reports averages). When vaitrace rows name a DPU
    subgraph's child subgraphs (fine-grained profiling), each child is its own kernel.
    A subgraph on another device that computes a layer raises ``ValueError`` naming it."""
    for subgraph in report.subgraphs:
        if subgraph.device == "DPU":
            continue
        computing = [name for name, kind in subgraph.ops if kind not in DATA_OP_TYPES]
        layers = sorted({layer_of_op(name, scopes) for name in computing} - {""})
        if layers:
            kinds = sorted({kind for _, kind in subgraph.ops if kind not in DATA_OP_TYPES})
            raise ValueError(f"the DPU cannot run layer(s) {', '.join(layers)}: the compiler put them on the "
                             f"{subgraph.device or 'host'} (subgraph {subgraph.name}, op types {', '.join(kinds)}); "
                             f"the zcu102 backend measures DPU kernels only")
    kernels = []
    for subgraph in (s for s in report.subgraphs if s.device == "DPU"):
        parts = [(subgraph.name, subgraph.ops, subgraph.runs_ms)]
        if vaitrace:
            children = [(name, ops, ()) for name, ops in subgraph.children
                        if any(_shown_as(name, row.subgraph) for row in vaitrace)]
            if children:
                parts = children
        for name, ops, runs in parts:
            exec_type = arch
            if vaitrace:
                rows = [row for row in vaitrace if _shown_as(name, row.subgraph)]
                if not rows:
                    raise ReportError(f"vaitrace's DPU Summary has no row for subgraph {name}")
                runs = tuple(row.time_ms for row in rows)
                exec_type = ";".join(sorted({row.dpu for row in rows}))
            layers = tuple(dict.fromkeys(p for op, kind in ops if kind not in DATA_OP_TYPES
                                         and (p := layer_of_op(op, scopes))))
            kernels.append(KernelRecord(name=name, kernel_type="DPU", exec_type=exec_type, status="EXECUTED",
                                        runs_ms=tuple(runs), layers=layers))
    return kernels


# --- the backend -----------------------------------------------------------------------------

@register_backend
class Zcu102(Backend):
    """The ZCU102's DPU through Vitis AI (see the module docstring). ``config``: the board
    configuration file (example: ``annette_torch/backends/boards/zcu102.example.toml``). ``threads`` must be 1
    (one inference at a time); ``precision`` is ``int8``, the DPU's arithmetic."""

    name = "zcu102"
    precisions = ("int8",)
    benchmark_timeout_s = 3600.0          # quantize + compile + board runs, each with its own timeout

    def __init__(self, threads: int = 1, precision: str | None = None, config: str | os.PathLike | None = None) -> None:
        super().__init__(threads, precision)
        if threads != 1:
            raise ValueError("backend 'zcu102' runs one inference at a time; use --threads 1")
        cfg = BoardConfig(config, EXAMPLE_CONFIG)
        self.config_path = str(cfg.path)
        self.mode = cfg.choice("vitis_ai", "mode", ("docker", "conda", "local"))
        self.image = cfg.get("vitis_ai", "image", kind=str, what="the Vitis AI docker image") \
            if self.mode == "docker" else ""
        self.docker = cfg.get("vitis_ai", "docker", "docker", str)
        self.docker_args = cfg.strings("vitis_ai", "docker_args")
        self.conda = cfg.get("vitis_ai", "conda", "conda", str)
        self.conda_env = cfg.get("vitis_ai", "conda_env", kind=str, what="the conda env with vai_q_pytorch") \
            if self.mode == "conda" else ""
        self.activate = cfg.get("vitis_ai", "activate", "", str)
        self.python = cfg.get("vitis_ai", "python", "python", str)
        self.vai_c_xir = cfg.get("vitis_ai", "vai_c_xir", "vai_c_xir", str)
        self.arch = cfg.get("vitis_ai", "arch", kind=str, what="the DPU's arch.json, e.g. "
                            "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json")
        self.compiler_options = cfg.get("vitis_ai", "compiler_options", "", str)
        self.calib_batches = cfg.count("vitis_ai", "calib_batches", 8, 1)
        self.quantize_timeout_s = cfg.seconds("vitis_ai", "quantize_timeout_s", 900.0)
        self.compile_timeout_s = cfg.seconds("vitis_ai", "compile_timeout_s", 900.0)
        self.host_work_dir = cfg.get("vitis_ai", "work_dir", "", str)
        self.keep_work = cfg.get("vitis_ai", "keep_work", False, bool)
        self.ssh = Ssh.from_config(cfg, "board")
        self.board_work_dir = cfg.get("board", "work_dir", "/tmp/annette", str)
        self.board_python = cfg.get("board", "python", "python3", str)
        self.run_timeout_s = cfg.seconds("board", "run_timeout_s", 300.0)
        self.copy_timeout_s = cfg.seconds("board", "copy_timeout_s", 120.0)
        self.retries = cfg.count("board", "retries", 2)
        self.retry_wait_s = cfg.get("board", "retry_wait_s", 30.0, (int, float))
        self.profiler = cfg.choice("board", "profiler", ("runner", "vaitrace"), "runner")
        self.vaitrace = cfg.get("board", "vaitrace", "vaitrace", str)
        self.fine_grained = cfg.get("board", "fine_grained", False, bool)
        if self.fine_grained and self.profiler != "vaitrace":
            raise BoardConfigError(f"{cfg.path}: [board] fine_grained needs profiler = \"vaitrace\"")
        self._board: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Zcu102(config={self.config_path!r}, board={self.ssh.target})"

    # -- what the board is ----------------------------------------------------------------

    def board_info(self) -> dict[str, Any]:
        """The board's DPU and Vitis AI runtime (``xdputil query`` over SSH, cached);
        :class:`BackendError` (step "reach the board") when the board cannot be reached."""
        if self._board is None:
            query = self.ssh.run("xdputil query", self.copy_timeout_s, f"query the DPU on {self.ssh.target}")

            def attempt() -> dict[str, Any]:
                try:
                    return parse_xdputil_query(run_command(query, transient_codes=TRANSIENT_CODES))
                except CommandFailed as error:
                    if error.returncode == SSH_CONNECTION_ERROR:
                        raise CommandFailed(f"{error} (check [board] host, user, port and key in "
                                            f"{self.config_path}; the board must accept this key without a "
                                            f"password)", True, error.returncode) from None
                    raise

            with self.step("reach the board"):
                self._board = with_retries(self.name, "reach the board", attempt, self.retries, self.retry_wait_s)
        return self._board

    def runtime_version(self) -> str:
        return "vai" + self.board_info()["vai_version"]

    def fingerprint(self) -> dict[str, Any]:
        """Backend, Vitis AI runtime version, the DPU (arch, cores, MHz) as ``cpu``,
        threads, precision."""
        info = self.board_info()
        return {"backend": self.name, "runtime_version": self.runtime_version(),
                "cpu": f"{info['arch']} x{info['cores']} @ {info['frequency_mhz']} MHz", "threads": self.threads,
                "precision": self.precision}

    # -- commands -------------------------------------------------------------------------

    def in_vitis_ai(self, argv: Sequence[str], work: Path, timeout_s: float, what: str, key: str) -> Command:
        """``argv`` run inside the configured Vitis AI environment with ``work`` visible."""
        line = shlex.join(argv)
        if self.mode == "conda":
            return Command((self.conda, "run", "--no-capture-output", "-n", self.conda_env, *argv), timeout_s, what,
                           "[vitis_ai] conda")
        if self.mode == "local":
            if self.activate:
                return Command(("bash", "-c", f"{self.activate} && {line}"), timeout_s, what, key)
            return Command(tuple(argv), timeout_s, what, key)
        inner = f"timeout -k 10 {int(timeout_s)} {line}"
        script = (f"{self.activate} && {inner}" if self.activate else inner) + \
            f"; status=$?; chown -R {os.getuid()}:{os.getgid()} {shlex.quote(str(work))}; exit $status"
        return Command((self.docker, "run", "--rm", "-v", f"{work}:{work}", "-w", str(work), *self.docker_args,
                        self.image, "bash", "-c", script), timeout_s + 60, what, "[vitis_ai] docker")

    def host_commands(self, work: Path) -> list[Command]:
        """Quantize (vai_q_pytorch) and compile (vai_c_xir) in ``work``."""
        quantize = self.in_vitis_ai((self.python, str(work / QUANTIZE_SCRIPT.name), str(work)), work,
                                    self.quantize_timeout_s, "quantize with vai_q_pytorch", "[vitis_ai] python")
        compile_argv = [self.vai_c_xir, "-x", str(work / "quantized" / "quantized.xmodel"), "-a", self.arch,
                        "-o", str(work / "compiled"), "-n", NET_NAME]
        if self.compiler_options:
            compile_argv += ["--options", self.compiler_options]
        compile_ = self.in_vitis_ai(compile_argv, work, self.compile_timeout_s, "compile with vai_c_xir",
                                    "[vitis_ai] vai_c_xir")
        return [quantize, compile_]

    @property
    def remote_dir(self) -> str:
        return f"{self.board_work_dir.rstrip('/')}/run"

    def board_commands(self, work: Path, warmup: int, repeats: int) -> list[Command]:
        """Prepare the board's work folder, upload, run (and trace), download."""
        remote = self.remote_dir
        quoted = shlex.quote(remote)
        xmodel = f"{NET_NAME}.xmodel"
        runner_args = f"{xmodel} --warmup {warmup} --repeats {repeats}"
        budget = int(self.run_timeout_s)
        commands = [
            self.ssh.run(f"rm -rf {quoted} && mkdir -p {quoted}", self.copy_timeout_s,
                         "prepare the work folder on the board"),
            self.ssh.upload([work / RUNNER_SCRIPT.name, work / "compiled" / xmodel], remote, self.copy_timeout_s),
            self.ssh.run(f"cd {quoted} && timeout -k 10 {budget} {shlex.quote(self.board_python)} "
                         f"{RUNNER_SCRIPT.name} {runner_args} --out result.json", self.run_timeout_s + 30,
                         "run the benchmark on the board")]
        fetch = [f"{remote}/result.json"]
        if self.profiler == "vaitrace":
            fine = " --fine_grained" if self.fine_grained else ""
            commands.append(self.ssh.run(
                f"cd {quoted} && timeout -k 10 {budget} {shlex.quote(self.vaitrace)} -t {budget} --txt_summary "
                f"-o {quoted}/vaitrace.txt{fine} -p {quoted}/{RUNNER_SCRIPT.name} {runner_args} --out traced.json",
                self.run_timeout_s + 30, "trace the benchmark with vaitrace on the board"))
            fetch.append(f"{remote}/vaitrace.txt")
        commands.append(self.ssh.download(fetch, work, self.copy_timeout_s))
        return commands

    def dry_run(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> list[str]:
        work = Path(self.host_work_dir or tempfile.gettempdir()) / "annette-zcu102-XXXXXX"
        return ([f"# work folder: {work} (a new one per benchmark; model.pt, annette_model.py, "
                 f"{QUANTIZE_SCRIPT.name} and {RUNNER_SCRIPT.name} are written there first)"]
                + [str(c) for c in self.host_commands(work)]
                + [str(c) for c in self.board_commands(work, warmup, repeats)])

    # -- running --------------------------------------------------------------------------

    @contextlib.contextmanager
    def work_folder(self) -> Iterator[Path]:
        """A new host work folder, removed afterwards unless ``[vitis_ai] keep_work``."""
        root = self.host_work_dir or None
        if root:
            Path(root).mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="annette-zcu102-", dir=root))
        try:
            yield folder
        finally:
            if not self.keep_work:
                shutil.rmtree(folder, ignore_errors=True)

    def _host_step(self, step: str, command: Command, work: Path) -> None:
        try:
            run_command(command, cwd=work)
        except CommandFailed as error:
            raise BackendError(self.name, step, error) from error

    def profile(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> Profiled:
        """Export, quantize, compile, run on the board, parse (module docstring)."""
        self.check_one_input(input_shape)
        arch = self.board_info()["arch"]
        with self.work_folder() as work:
            with self.step("export"):
                export_portable(model, work)
                (work / "quantize.json").write_text(json.dumps(
                    {"input_shape": list(input_shape), "calib_batches": self.calib_batches, "seed": 0}))
                shutil.copy(QUANTIZE_SCRIPT, work / QUANTIZE_SCRIPT.name)
                shutil.copy(RUNNER_SCRIPT, work / RUNNER_SCRIPT.name)
            quantize, compile_ = self.host_commands(work)
            self._host_step("quantize", quantize, work)
            if not (work / "quantized" / "quantized.xmodel").is_file():
                raise BackendError(self.name, "quantize", FileNotFoundError("vai_q_pytorch wrote no xmodel"))
            self._host_step("compile", compile_, work)
            if not (work / "compiled" / f"{NET_NAME}.xmodel").is_file():
                raise BackendError(self.name, "compile", FileNotFoundError(
                    f"vai_c_xir wrote no {NET_NAME}.xmodel (is [vitis_ai] arch {self.arch!r} right?)"))
            commands = self.board_commands(work, warmup, repeats)

            def on_board() -> None:
                for path in ("result.json", "vaitrace.txt"):
                    (work / path).unlink(missing_ok=True)
                for command in commands:
                    run_command(command, cwd=work, transient_codes=TRANSIENT_CODES)

            with_retries(self.name, "run on the board", on_board, self.retries, self.retry_wait_s)
            with self.step("parse the board's report"):
                report = parse_runner_report((work / "result.json").read_text(), "result.json")
                rows = parse_vaitrace_summary((work / "vaitrace.txt").read_text(), "vaitrace.txt") \
                    if self.profiler == "vaitrace" else []
                kernels = dpu_kernels(report, xmodel_scopes(model, layer_paths), arch, rows)
        return Profiled(kernels, Latency.from_runs(report.end_to_end_ms, self.threads))

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5, repeats: int = 20) -> Latency:
        """End-to-end latency on the board (the same pipeline as :meth:`profile`)."""
        return self.profile(model, input_shape, [], warmup, repeats).latency
