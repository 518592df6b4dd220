"""``torch-cpu`` (and ``torch-cuda``): PyTorch eager under ``torch.inference_mode()``.

Per-layer profiles: forward pre- and post-hooks on each original layer's module time it
with ``time.perf_counter_ns`` in every timed inference (about a microsecond of overhead
per layer; ``torch.profiler`` adds tens of microseconds per aten op, more than many small
layers take, so it is only used once, in an extra inference, to record which aten ops
each layer ran, its ``exec_type``, inside a ``record_function`` range named after the
module path). Eager PyTorch fuses nothing: each layer is one kernel. ``torch-cuda`` is
the same on the first GPU, with each layer timed by CUDA events recorded in the hooks
(a layer's CPU time is only its launch) and a synchronize after every inference. Both
time a layer's call with one :class:`LayerTimer`, between two events made by the
backend's ``layer_event``: :class:`HostEvent` (the host clock) or ``torch.cuda.Event``.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import time
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from .base import (Backend, BackendError, KernelRecord, Latency, Profiled, eval_mode, random_inputs, register_backend,
                   torch_threads)

Inputs = tuple[torch.Tensor, ...]    # a network's positional inputs


@contextlib.contextmanager
def _module_hooks(model: nn.Module, layer_paths: Sequence[str], enter, leave) -> Iterator[None]:
    """Call ``enter(path)`` before and ``leave(path, module, inputs, output)`` after each
    call of a module named in ``layer_paths``."""
    wanted = set(layer_paths)
    handles = []
    for path, module in model.named_modules():
        if path in wanted:
            handles.append(module.register_forward_pre_hook(lambda m, a, p=path: enter(p)))
            handles.append(module.register_forward_hook(lambda m, a, o, p=path: leave(p, m, a, o)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class HostEvent:
    """The host clock behind ``torch.cuda.Event``'s interface: ``record()`` reads
    ``time.perf_counter_ns``, ``elapsed_time(end)`` is the milliseconds to ``end``'s record."""

    def record(self) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        """Nothing to wait for: the time was read in ``record``."""

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.ns - self.ns) / 1e6


class LayerTimer:
    """Per module path, the milliseconds of each call, as forward hook callbacks
    (:meth:`enter`, :meth:`leave`) for :func:`_module_hooks`: a call is timed between two
    events made by ``event()`` (objects with ``record()``, ``synchronize()`` and
    ``elapsed_time(end)`` in ms, as ``torch.cuda.Event``), both made before the first is
    recorded so that making them is not timed. A timed module called inside another
    (the layers of a block whose own path names the block's functional ops, such as its
    residual add) is left out of the outer call's time: each call's time is its own."""

    def __init__(self, event: Callable[[], Any] = HostEvent) -> None:
        self.event = event
        self._events: dict[str, list[tuple[Any, Any]]] = {}
        self._open: list[tuple[str, int]] = []                  # calls entered and not yet left
        self._inner: dict[tuple[str, int], list[tuple[Any, Any]]] = {}

    def enter(self, path: str) -> None:
        start, end = self.event(), self.event()
        calls = self._events.setdefault(path, [])
        calls.append((start, end))
        self._open.append((path, len(calls) - 1))
        start.record()

    def leave(self, path: str, module: nn.Module, inputs: object, output: object) -> None:
        pair = self._events[path][-1]
        pair[1].record()
        self._open.pop()
        if self._open:
            self._inner.setdefault(self._open[-1], []).append(pair)

    def times(self) -> dict[str, list[float]]:
        """Each timed path's call times in ms, in call order, without the timed calls made
        inside them (waits for the events)."""
        for pairs in self._events.values():
            for _, end in pairs:
                end.synchronize()
        return {path: [start.elapsed_time(end) - sum(a.elapsed_time(b) for a, b in self._inner.get((path, i), ()))
                       for i, (start, end) in enumerate(pairs)] for path, pairs in self._events.items()}


@register_backend
class TorchCpu(Backend):
    """PyTorch eager in eval mode with ``torch.set_num_threads(threads)`` during the
    measurement (the previous thread count is restored afterwards)."""

    name = "torch-cpu"
    optimizes_graph = False     # eager mode runs every op of every call
    fuses_layers = False        # ... each as its own kernel (batch norms and activations too)
    #: oneDNN (torch 2.14, avx512_core) runs a dilated conv whose padding its direct kernel's
    #: register block cannot cover as im2col + GEMM, computing every tap of the padding too:
    #: depthwise convs above a padding of 6, convs above 6 on maps wider than 20 and above 18
    #: on any (read from ONEDNN_VERBOSE over a grid of sizes; ``benchmarks/dilated_convs.py``
    #: prints the implementation per conv, docs/accuracy.md where the rule is approximate)
    counting = {"all_taps": [
        {"kind": "depthwise_conv", "condition": [{"layer": "primary", "attr": "padding", "op": ">", "value": 6}]},
        {"kind": "conv", "condition": [{"layer": "primary", "attr": "padding", "op": ">", "value": 6},
                                       {"layer": "primary", "attr": "w", "op": ">", "value": 20}]},
        {"kind": "conv", "condition": [{"layer": "primary", "attr": "padding", "op": ">", "value": 18}]},
    ]}
    device = "cpu"
    layer_event = HostEvent     # makes the events LayerTimer times a layer's call between

    def runtime_version(self) -> str:
        return torch.__version__

    def synchronize(self) -> None:
        """Wait for the device to finish (nothing to wait for on the CPU)."""

    @contextlib.contextmanager
    def _session(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[tuple[nn.Module, Inputs]]:
        """(the model on this backend's device, its inputs there: one per shape of a tuple
        of shapes), in eval and inference mode with the backend's thread count; the
        caller's model is never moved."""
        x = tuple(torch.from_numpy(array).to(self.device) for array in random_inputs(input_shape))
        on_device = model if self.device == "cpu" else copy.deepcopy(model).to(self.device)
        with torch_threads(self.threads), eval_mode(on_device), torch.inference_mode():
            yield on_device, x

    def _infer(self, model: nn.Module, x: Inputs) -> None:
        model(*x)
        self.synchronize()

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5,
                repeats: int = 20) -> Latency:
        with self.step("run"), self._session(model, input_shape) as (on_device, x):
            return self.time_runs(lambda: self._infer(on_device, x), warmup, repeats)

    @contextlib.contextmanager
    def prepared(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[Callable[[int, int], Latency]]:
        with self._session(model, input_shape) as (on_device, x):
            yield lambda warmup, repeats: self.time_runs(lambda: self._infer(on_device, x), warmup, repeats)

    def profile(self, model: nn.Module, input_shape: Sequence[int], layer_paths: Sequence[str],
                warmup: int = 3, repeats: int = 15) -> Profiled:
        with self.step("run"), self._session(model, input_shape) as (on_device, x):
            for _ in range(warmup):
                self._infer(on_device, x)
            kernels = self._profile_layers(on_device, x, layer_paths, repeats)
        return Profiled(kernels, self.measure(model, input_shape, warmup, repeats))

    def _profile_layers(self, model: nn.Module, x: Inputs, layer_paths: Sequence[str],
                        repeats: int) -> list[KernelRecord]:
        timer = LayerTimer(self.layer_event)
        with _module_hooks(model, layer_paths, timer.enter, timer.leave):
            for _ in range(repeats):
                self._infer(model, x)
        return self._records(model, x, layer_paths, timer.times())

    def _records(self, model: nn.Module, x: Inputs, layer_paths: Sequence[str],
                 times: dict[str, list[float]]) -> list[KernelRecord]:
        """One kernel per timed layer (eager PyTorch fuses nothing), with the aten ops it ran."""
        ops = self._aten_ops(model, x, layer_paths)
        types = {path: type(module).__name__ for path, module in model.named_modules()}
        return [KernelRecord(name=path, kernel_type=types.get(path, ""), exec_type="+".join(ops.get(path, ())) or "aten",
                             status="EXECUTED", runs_ms=tuple(runs), layers=(path,))
                for path, runs in times.items()]

    @staticmethod
    def _aten_ops(model: nn.Module, x: Inputs, layer_paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The aten ops each layer's module calls, from one inference under ``torch.profiler``."""
        ranges: dict[str, list] = {}
        enter = lambda path: ranges.setdefault(path, []).append(torch.ops.profiler._record_function_enter_new(path))  # noqa: E731
        leave = lambda path, *call: torch.ops.profiler._record_function_exit(ranges[path].pop())  # noqa: E731
        with _module_hooks(model, layer_paths, enter, leave), \
                torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(*x)
        wanted = set(layer_paths)
        return {event.name: tuple(dict.fromkeys(c.name for c in event.cpu_children))
                for event in prof.events() if event.name in wanted}


@register_backend
class TorchCuda(TorchCpu):
    """PyTorch eager on ``cuda:0`` (a copy of the model is moved there); ``threads`` only
    bounds the host side. Constructing it without a CUDA device raises ``BackendError``."""

    name = "torch-cuda"
    device = "cuda"
    counting = {}       # cuDNN's choice for dilated convs is not oneDNN's; not checked
    layer_event = functools.partial(torch.cuda.Event, enable_timing=True)

    def __init__(self, threads: int = 1, precision: str | None = None) -> None:
        super().__init__(threads, precision)
        if not torch.cuda.is_available():
            raise BackendError(self.name, "start", RuntimeError("no CUDA device is available to torch"))

    def runtime_version(self) -> str:
        return f"{torch.__version__} (CUDA {torch.version.cuda})"

    def fingerprint(self) -> dict:
        return {**super().fingerprint(), "gpu": torch.cuda.get_device_name(0)}

    def synchronize(self) -> None:
        torch.cuda.synchronize()
