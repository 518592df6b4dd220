"""The backend registry, the :class:`Backend` contract and the shared timing code.

A backend is one runtime we can measure on this machine, in one file of this package,
registered with :func:`register_backend` under its ``name``. Constructor options
(``threads``, ``precision``) are stored as plain attributes; :meth:`Backend.measure`
times a module end to end and :meth:`Backend.fingerprint` says what was measured on.
Backends that run ONNX derive from :class:`OnnxBackend`: they only say how to compile a
file and how to run it once; export, inputs, timing and errors are shared here.
"""
from __future__ import annotations

import contextlib
import os
import platform
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Collection, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..graph.errors import first_line
from ..machine import cpu_id
from ..machine.cpu import proc_cpuinfo
from .onnx_symbolics import exportable_ops

BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available to :func:`get_backend` by its ``name``."""
    if not cls.name or cls.name in BACKENDS:
        raise ValueError(f"backend {cls.__name__} needs a new, unique name (got {cls.name!r})")
    BACKENDS[cls.name] = cls
    return cls


def available_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    return sorted(BACKENDS)


def get_backend(name: str, **options: Any) -> Backend:
    """A new backend ``name`` built with ``options`` (e.g. ``threads=1, precision="f32"``);
    a ``ValueError`` lists the available backends when ``name`` is unknown."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available backends: {', '.join(available_backends())}")
    return BACKENDS[name](**options)


class BackendError(RuntimeError):
    """A backend failed at one ``step`` ("export", "compile" or "run")."""

    def __init__(self, backend: str, step: str, error: BaseException) -> None:
        super().__init__(f"backend {backend!r} failed to {step}: {type(error).__name__}: {first_line(error)}")
        self.backend = backend
        self.step = step


@dataclass(frozen=True)
class Latency:
    """End-to-end times of repeated inferences of one input.

    ``median_ms``: median of ``runs_ms``. ``spread``: (90th - 10th percentile) / median of
    ``runs_ms`` (numpy's linear interpolation), a relative, outlier-tolerant noise measure;
    0.05 means the middle 80 % of runs lie within 5 % of the median's size. ``threads``:
    the thread count the runtime was given.
    """

    median_ms: float
    spread: float
    runs_ms: list[float]
    threads: int

    @classmethod
    def from_runs(cls, runs_ms: Sequence[float], threads: int) -> Latency:
        """Summarise ``runs_ms`` (at least one run)."""
        p10, median, p90 = np.percentile(runs_ms, [10, 50, 90])
        return cls(median_ms=float(median), spread=float((p90 - p10) / median),
                   runs_ms=[float(t) for t in runs_ms], threads=threads)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    return proc_cpuinfo().get("model name") or platform.processor() or platform.machine()


def random_input(input_shape: Sequence[int], seed: int = 0) -> np.ndarray:
    """A float32 array of ``input_shape`` drawn from the standard normal (fixed ``seed``)."""
    shape = tuple(input_shape)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def is_multi_input(input_shape: Sequence[int] | Sequence[Sequence[int]]) -> bool:
    """Whether ``input_shape`` is a tuple of shapes (a network with several inputs, such as
    a decode step's token and cache) rather than one shape."""
    return bool(input_shape) and isinstance(input_shape[0], (tuple, list))


def random_inputs(input_shape: Sequence[int] | Sequence[Sequence[int]]) -> list[np.ndarray]:
    """One :func:`random_input` per input: ``input_shape`` is one shape or a tuple of
    shapes; input ``i`` is drawn with seed ``i``."""
    shapes = input_shape if is_multi_input(input_shape) else [input_shape]
    return [random_input(shape, seed) for seed, shape in enumerate(shapes)]


def input_list(x: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """``x`` as a list of input arrays (one array is a one-input network's input)."""
    return [x] if isinstance(x, np.ndarray) else list(x)


def input_names(count: int) -> list[str]:
    """The ONNX input names :func:`export_onnx` gives a network of ``count`` inputs:
    ``input``, then ``input_1``, ``input_2``, ..."""
    return ["input"] + [f"input_{i}" for i in range(1, count)]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode for the block; each submodule's training flag is restored after."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in flags:
            m.training = training


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """``torch.set_num_threads(count)`` for the block; the previous count is restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def export_onnx(model: nn.Module, input_shape: Sequence[int] | Sequence[Sequence[int]] | None,
                path: str | os.PathLike, example_inputs: Sequence[torch.Tensor] | None = None) -> Path:
    """Export ``model`` in eval mode with the TorchScript exporter (``dynamo=False``) for one
    static input named ``input`` of ``input_shape``, or, for a tuple of shapes, one static
    input per shape (:func:`input_names`), or for the tensors ``example_inputs`` given
    instead (token ids), with the fused multi-head-attention fast path off, which cannot
    be exported, and the symbolics of :mod:`.onnx_symbolics` (``nn.RMSNorm``); returns
    ``path``."""
    example = (tuple(example_inputs) if example_inputs is not None
               else tuple(torch.from_numpy(x) for x in random_inputs(input_shape)))
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)   # its fused kernel has no ONNX export (ViT's attention)
    try:
        with warnings.catch_warnings(), eval_mode(model), torch.no_grad(), exportable_ops():
            warnings.filterwarnings("ignore", category=DeprecationWarning)  # the legacy exporter is chosen on purpose
            torch.onnx.export(model, example, str(path), dynamo=False, input_names=input_names(len(example)))
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return Path(path)


@dataclass(frozen=True)
class KernelRecord:
    """One kernel the runtime reported for one network: a row of its per-layer profile.

    ``name``/``kernel_type``/``exec_type``: the runtime's node name, layer type and
    implementation (e.g. ``/conv/Conv/WithoutBiases``, ``Convolution``,
    ``brgconv_avx512_f32``). ``status``: ``EXECUTED``, ``NOT_RUN`` or ``OPTIMIZED_OUT``.
    ``runs_ms``: its time in each timed inference. ``layers``: module paths of the
    original layers whose computation it holds, as the runtime names them (empty for
    kernels the runtime inserted itself, such as layout reorders). ``nodes``, where the
    export is known: per original ONNX node, (its module path, op type, its place among the
    nodes of that type and path, their number), which tells apart the layers of one module
    path (a squeeze-excite's functional ``x.mean`` and ``x * gate``).
    """

    name: str
    kernel_type: str
    exec_type: str
    status: str
    runs_ms: tuple[float, ...]
    layers: tuple[str, ...]
    nodes: tuple[tuple[str, str, int, int], ...] = ()


@dataclass(frozen=True)
class Profiled:
    """A network's per-layer profile (``kernels``) and its end-to-end ``latency``,
    measured separately without profiling enabled."""

    kernels: list[KernelRecord]
    latency: Latency


def onnx_scope(node_name: str, module_paths: Collection[str] = ()) -> str:
    """Module path of an ONNX node exported by ``torch.onnx.export``: ``/block/conv/Conv``
    → ``block.conv``; ``""`` for nodes from the top-level forward (``/Constant``).

    The exporter names a container's children by their path relative to the previous
    scope, so ``/layer1/layer1.0/conv1/Conv`` is ``layer1.0.conv1`` and
    ``/features/features.1/block/block.0/block.0.0/Conv`` is ``features.1.block.0.0``.
    Modules reached through a ``ModuleDict`` or ``ModuleList`` (which have no forward,
    so no scope) leave a level out: with ``module_paths`` (the model's submodule paths)
    ``/cells/cells.0/0_3/0_3.0/Conv`` is looked up as ``cells.0.edges.0_3.0``.
    """
    if not node_name.startswith("/"):
        return ""
    path = last = ""
    for scope in node_name.strip("/").split("/")[:-1]:
        if last and scope.startswith(last + "."):    # a container's child, named relative to it
            parent = path[: len(path) - len(last)].rstrip(".")
        else:
            parent = path
        candidate = f"{parent}.{scope}" if parent else scope
        if module_paths and candidate not in module_paths:
            prefix = f"{parent}." if parent else ""
            found = [p for p in module_paths if p.startswith(prefix) and p.endswith("." + scope)]
            candidate = min(found, key=len) if found else candidate
        path, last = candidate, scope
    return path


def onnx_scopes(graph: Any, module_paths: Collection[str] = ()) -> dict[str, str]:
    """Module path (:func:`onnx_scope`) of every node name and output tensor name of an
    exported ONNX graph (``onnx.GraphProto``)."""
    scope: dict[str, str] = {}
    for node in graph.node:
        scope[node.name] = onnx_scope(node.name, module_paths)
        for output in node.output:
            scope.setdefault(output, scope[node.name])
    return scope


def onnx_node_places(graph: Any, scope: dict[str, str]) -> dict[str, tuple[str, str, int, int]]:
    """(module path, op type, place among the nodes of that path and type, their number) of
    every node name and output tensor name of an exported ONNX graph, ``scope`` being its
    :func:`onnx_scopes`: the export writes a module's nodes in the order its forward ran."""
    count: dict[tuple[str, str], int] = {}
    placed = []
    for node in graph.node:
        key = (scope.get(node.name, ""), node.op_type)
        placed.append((node, *key, count.get(key, 0)))
        count[key] = count.get(key, 0) + 1
    places: dict[str, tuple[str, str, int, int]] = {}
    for node, path, op_type, place in placed:
        places[node.name] = (path, op_type, place, count[(path, op_type)])
        for output in node.output:
            places.setdefault(output, places[node.name])
    return places


def _scope_of(name: str, scope: dict[str, Any]) -> Any:
    """What ``scope`` holds for a runtime's original-node name (its module path, or its
    :func:`onnx_node_places` entry): an ONNX node or tensor name, or one the runtime derived
    from it by appending ``/suffix`` (``/conv/Conv/WithoutBiases``); ``""`` if none."""
    while name:
        if name in scope:
            return scope[name]
        name = name.rpartition("/")[0]
    return ""


def place_kernels(kernels: Sequence[KernelRecord], places: dict[str, tuple[str, str, int, int]],
                  layer_paths: Sequence[str], alias: Callable[[str], str] | None = None) -> list[KernelRecord]:
    """``kernels`` whose ``layers`` hold a runtime's names of ONNX nodes, with those replaced
    by the module paths among ``layer_paths`` and ``nodes`` set to the nodes' places there
    (``places``: :func:`onnx_node_places` of the export); a name found nowhere is looked up
    again as ``alias`` of it, where given."""
    known = set(layer_paths)
    placed = []
    for k in kernels:
        nodes = []
        for name in k.layers:
            place = _scope_of(name, places) or (_scope_of(alias(name), places) if alias else "")
            if place and place[0] in known:
                nodes.append(place)
        nodes = tuple(dict.fromkeys(nodes))
        placed.append(KernelRecord(k.name, k.kernel_type, k.exec_type, k.status, k.runs_ms,
                                   tuple(dict.fromkeys(path for path, *_ in nodes)), nodes))
    return placed


class Backend:
    """A runtime that times models on this machine; subclasses set ``name`` and
    ``precisions`` and implement :meth:`runtime_version` and :meth:`measure`.

    ``threads``: threads the runtime may use for one inference. ``precision``: the
    arithmetic precision asked for (one of ``precisions``; ``None``: the first).
    """

    name: ClassVar[str] = ""
    precisions: ClassVar[tuple[str, ...]] = ("f32",)      # the first is the default
    benchmark_timeout_s: ClassVar[float] = 120.0          # a calibration benchmark taking longer has hung
    optimizes_graph: ClassVar[bool] = True                # its compiler folds constants, merges repeats
    removes_identity_slices: ClassVar[bool] = False       # it runs nothing for a slice of its whole input
    folds_layout_transposes: ClassVar[bool] = False       # a conv reads/writes channels-last for a transpose next to it
    splits_shuffles_in_place: ClassVar[bool] = False      # it runs no kernel for a split of a channel shuffle's output
    merges_elementwise: ClassVar[bool] = False            # connected elementwise layers run as one kernel
    groups_split_convs: ClassVar[bool] = False            # a split's parallel convs and their concat run as one grouped conv
    output_reorders: ClassVar[str] = ""                   # regex of its kernels converting a returned map to NCHW
    fuses_layers: ClassVar[bool] = True                   # its compiler fuses layers (conv+bn+relu, ...)
    trains: ClassVar[bool] = False                        # it times training passes, not inferences
    counting: ClassVar[dict[str, Any]] = {}               # where it counts layers otherwise (a profile's "counting")

    def __init__(self, threads: int = 1, precision: str | None = None) -> None:
        precision = self.precisions[0] if precision is None else precision
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"backend {self.name!r}: threads must be a positive int, got {threads!r}")
        if precision not in self.precisions:
            raise ValueError(f"backend {self.name!r} supports precisions {', '.join(self.precisions)}; "
                             f"got {precision!r}")
        self.threads = threads
        self.precision = precision

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threads={self.threads}, precision={self.precision!r})"

    def runtime_version(self) -> str:
        """Version string of the runtime library."""
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        """What a measurement was taken on: backend, runtime version, CPU model name and
        identity (:func:`annette_torch.machine.cpu_id`), threads, precision."""
        return {"backend": self.name, "runtime_version": self.runtime_version(), "cpu": cpu_model(),
                "cpu_id": cpu_id(), "threads": self.threads, "precision": self.precision}

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5,
                repeats: int = 20) -> Latency:
        """Time ``model`` on one random input of ``input_shape`` (or one per shape, for a
        tuple of shapes: :func:`random_inputs`; the local runtimes take them, the boards
        one input): ``warmup`` untimed runs, then ``repeats`` timed ones. Failures raise
        :class:`BackendError`."""
        raise NotImplementedError

    @contextlib.contextmanager
    def prepared(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[Callable[[int, int], Latency]]:
        """For the block, a function ``time(warmup, repeats)`` that times ``model`` as
        :meth:`measure` does; backends that run in-process compile it once for all calls
        (the measuring protocol's canary), the others measure it anew each call."""
        yield lambda warmup, repeats: self.measure(model, input_shape, warmup=warmup, repeats=repeats)

    def profile(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> Profiled:
        """Per-kernel times of ``model`` over ``repeats`` profiled inferences after
        ``warmup``, each kernel tied to the original layers (module paths, among
        ``layer_paths``) it computes, plus the end-to-end latency measured without the
        profiler. Failures raise :class:`BackendError`."""
        raise NotImplementedError

    def prepare_process(self) -> None:
        """Set this process up for measuring with this backend, for good (it cannot be
        undone): called once by a process that only measures (a campaign's worker, a
        benchmark script), before its first measurement, never by the library on its
        caller's process. Nothing for most backends; the training backend pins glibc's
        malloc (:func:`~annette_torch.backends.torch_train.steady_allocator`)."""

    def store_extras(self, folder: Path) -> None:
        """Measure into the store ``folder`` what a profile of this backend needs besides
        the benchmark networks (called in a campaign's worker before its benchmarks;
        nothing for most backends; the training backend times optimizer steps)."""

    def dry_run(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> list[str]:
        """The commands :meth:`profile` would run (on the host and on a board), one per
        line, without running them. Backends that run in-process have none to show."""
        raise BackendError(self.name, "dry-run", NotImplementedError(
            "this backend runs in-process through its Python API; there are no commands to print"))

    def check_one_input(self, input_shape: Sequence[int] | Sequence[Sequence[int]]) -> None:
        """:class:`BackendError` (step ``export``) when ``input_shape`` is a tuple of shapes:
        for the backends whose runners feed one input (the boards)."""
        if is_multi_input(input_shape):
            raise BackendError(self.name, "export", ValueError(
                f"this backend runs networks of one input; this one has {len(input_shape)} "
                f"({', '.join(str(tuple(s)) for s in input_shape)})"))

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        """Turn any error raised in the block into a :class:`BackendError` naming ``step``."""
        try:
            yield
        except BackendError:
            raise
        except Exception as error:
            raise BackendError(self.name, step, error) from error

    def time_runs(self, run: Callable[[], object], warmup: int, repeats: int) -> Latency:
        """Call ``run`` ``warmup`` times untimed, then ``repeats`` times timed with
        ``time.perf_counter``; errors are reported as the "run" step."""
        if warmup < 0 or repeats < 1:
            raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")
        runs_ms = []
        with self.step("run"):
            for _ in range(warmup):
                run()
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                runs_ms.append((time.perf_counter() - start) * 1e3)
        return Latency.from_runs(runs_ms, self.threads)


class OnnxBackend(Backend):
    """A backend that runs ONNX files; subclasses implement :meth:`compile_onnx` and :meth:`runner`."""

    def compile_onnx(self, path: str | os.PathLike) -> Any:
        """The runtime's executable form of the ONNX file at ``path``, built with this
        backend's threads and precision."""
        raise NotImplementedError

    def runner(self, compiled: Any, x: np.ndarray | Sequence[np.ndarray]) -> Callable[[], object]:
        """A function that runs one synchronous inference of ``compiled`` on ``x`` (one
        array, or one per input: :func:`input_list`)."""
        raise NotImplementedError

    def profile_onnx(self, path: Path, x: np.ndarray | Sequence[np.ndarray], warmup: int,
                     repeats: int) -> list[KernelRecord]:
        """Per-kernel records of the ONNX file at ``path`` run on ``x`` (as :meth:`runner`), with ``layers``
        holding the names of the ONNX nodes (or of their output tensors) each kernel computes."""
        raise NotImplementedError

    def profile(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> Profiled:
        """Export once; profile with :meth:`profile_onnx`, translate ONNX names to module
        paths (:func:`onnx_scope`), then time end to end with :meth:`measure_onnx`."""
        import onnx

        with tempfile.TemporaryDirectory(prefix="annette_") as folder:
            path = Path(folder) / "model.onnx"
            with self.step("export"):
                export_onnx(model, input_shape, path)
                graph = onnx.load(str(path), load_external_data=False).graph
            scope = onnx_scopes(graph, {name for name, _ in model.named_modules()})
            places = onnx_node_places(graph, scope)
            with self.step("run"):
                kernels = self.profile_onnx(path, random_inputs(input_shape), warmup, repeats)
            kernels = place_kernels(kernels, places, layer_paths)
            latency = self.measure_onnx(path, input_shape, warmup, repeats)
        return Profiled(kernels, latency)

    @contextlib.contextmanager
    def prepared(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[Callable[[int, int], Latency]]:
        """Export and compile ``model`` once; each call of the function times the compiled model."""
        with tempfile.TemporaryDirectory(prefix="annette_") as folder:
            path = Path(folder) / "model.onnx"
            with self.step("export"):
                export_onnx(model, input_shape, path)
            with self.step("compile"):
                compiled = self.compile_onnx(path)
            with self.step("run"):
                run = self.runner(compiled, random_inputs(input_shape))
            yield lambda warmup, repeats: self.time_runs(run, warmup, repeats)

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5,
                repeats: int = 20) -> Latency:
        """Export ``model`` to ONNX in a temporary directory, then :meth:`measure_onnx` it."""
        with tempfile.TemporaryDirectory(prefix="annette_") as folder:
            path = Path(folder) / "model.onnx"
            with self.step("export"):
                export_onnx(model, input_shape, path)
            return self.measure_onnx(path, input_shape, warmup, repeats)

    def measure_onnx(self, path: str | os.PathLike, input_shape: Sequence[int], warmup: int = 5,
                     repeats: int = 20) -> Latency:
        """Compile the ONNX file at ``path`` and time it on one random input of
        ``input_shape`` fed to its first input, or one per input for a tuple of shapes
        (see :meth:`Backend.measure`)."""
        x = random_inputs(input_shape)
        with self.step("compile"):
            compiled = self.compile_onnx(path)
        with self.step("run"):
            run = self.runner(compiled, x)
        return self.time_runs(run, warmup, repeats)
