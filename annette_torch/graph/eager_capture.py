"""Fallback capture for modules FX cannot trace: record one real forward pass.

Data-dependent control flow and non-traceable calls are fine here, because the model
really runs: leaf modules are recorded through forward hooks and every torch function
or tensor method called outside them through a ``TorchFunctionMode``. Data flow is
followed by tensor identity: an in-place write (``add_``, ``x[i] = y``) makes the
written tensor's later readers depend on it. The graph is the path the given input took.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..kinds import canonical_op
from .errors import REAL_RUN_MAX_BYTES, HeldTensors, LayerExecutionError, RealRunTooLarge, first_line
from .fx_capture import detached_copy, writes_in_place
from .layer_graph import Layer
from .recognize import BOOKKEEPING_OPS, CallRecord, build_layer, is_leaf_module, tensor_leaves


class _Recorder(TorchFunctionMode):
    def __init__(self, weights: set[int], prefix: str = "", held: HeldTensors | None = None) -> None:
        super().__init__()
        self.weights = weights
        self.held = held or HeldTensors()  # counts what the run keeps alive
        self.prefix = prefix  # names layers "prefix" + op instead of "module.path.op"
        self.sources: dict[int, tuple[str, ...]] = {}  # by tensor id, while the tensor lives
        self._watched: dict[int, weakref.ref] = {}  # drop a source once its tensor is freed (ids are reused)
        self.layers: list[Layer] = []
        self.written: list[str] = []  # layers an in-place write reads or is
        self.depth = 0  # > 0 while inside a leaf module
        self.names: dict[str, int] = {}
        self.module_names: dict[int, str] = {}
        self.stack: list[str] = []

    def source_of(self, tensor: torch.Tensor) -> tuple[str, ...] | None:
        if id(tensor) in self.sources:
            return self.sources[id(tensor)]
        if id(tensor) in self.weights or isinstance(tensor, nn.Parameter):
            return None
        return ()

    def set_source(self, tensor: torch.Tensor, source: tuple[str, ...]) -> None:
        """Record that ``tensor`` holds data from the layers ``source``, for as long as it lives."""
        key = id(tensor)
        self.sources[key] = source
        if key not in self._watched:
            self._watched[key] = weakref.ref(tensor, lambda _ref: self._forget(key))

    def _forget(self, key: int) -> None:
        self.sources.pop(key, None)
        self._watched.pop(key, None)

    def unique(self, base: str) -> str:
        base = base.replace(".", "_") or "layer"
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def record(self, target: Any, args: tuple, kwargs: dict, output: Any, path: str) -> None:
        inputs = [(t, self.source_of(t)) for t in tensor_leaves((args, kwargs))]
        if isinstance(target, nn.Module):
            label = path
        else:
            label = f"{self.prefix or (path + '.' if path else '')}{canonical_op(target)}"
        record = CallRecord(self.unique(label), path, target, args, kwargs, output, inputs)
        layer = build_layer(record)
        self.layers.append(layer)
        for t in tensor_leaves(output):
            self.set_source(t, (layer.name,))
        self.held.add(output, f"layer '{layer.name}'")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        in_place = self.depth == 0 and writes_in_place(func) and bool(args) and isinstance(args[0], torch.Tensor)
        if in_place:
            self.written.extend(name for t in tensor_leaves((args, kwargs)) for name in self.source_of(t) or ())
        recorded = False
        if self.depth == 0 and canonical_op(func) not in BOOKKEEPING_OPS and tensor_leaves(result):
            if canonical_op(func) == "getitem" and not isinstance(args[0], torch.Tensor):
                return result
            self.record(func, args, kwargs, result, self.stack[-1] if self.stack else "")
            recorded = True
        if in_place:
            writer = ((self.layers[-1].name,) if recorded else
                      tuple(n for t in tensor_leaves((args[1:], kwargs)) for n in self.source_of(t) or ()))
            if recorded:
                self.written.append(self.layers[-1].name)
            self._write_into(args[0], writer)
        return result

    def _write_into(self, tensor: torch.Tensor, writer: tuple[str, ...]) -> None:
        """Readers of ``tensor`` and of the tensor it is a view of (``x[:, :3].copy_(y)``)
        also depend on ``writer`` from now on."""
        for t in (tensor, tensor._base):
            if t is not None and (writer or self.source_of(t) is not None):
                self.set_source(t, tuple(dict.fromkeys((self.source_of(t) or ()) + writer)))


def record_call(fn: Callable, args: tuple, kwargs: dict,
                inputs: list[tuple[torch.Tensor, tuple[str, ...] | None]], name: str,
                path: str) -> tuple[Any, list[Layer], list[tuple[str, ...] | None], list[str]]:
    """Run one opaque call (a ``torch.fx.wrap``-ed function FX keeps whole) and record
    the torch calls inside it as layers named ``name/op``.

    ``inputs`` are its tensor arguments with their sources (as in :class:`CallRecord`).
    Returns the result, the layers, the source of each tensor in the result and the
    layers in-place writes involve.
    """
    recorder = _Recorder({id(t) for t, src in inputs if src is None}, prefix=f"{name}/")
    for tensor, source in inputs:
        if source is not None:
            recorder.set_source(tensor, source)
    recorder.stack.append(path)
    with torch.no_grad(), recorder:
        result = fn(*args, **kwargs)
    return result, recorder.layers, [recorder.source_of(t) for t in tensor_leaves(result)], recorder.written


def eager_capture(model: nn.Module, inputs: list[torch.Tensor], device: str,
                  leaf_modules: tuple[type, ...] = ()) -> tuple[list[Layer], tuple[str, ...], tuple[str, ...]]:
    """Run ``model`` once on ``inputs`` and record its layers (see module docstring):
    the layers, those whose results it returns and those in-place writes involve.

    With ``device="meta"`` the run uses a meta copy of the model; otherwise a copy that
    shares its parameters (and has its own buffers) runs under ``torch.no_grad()``, and
    :class:`RealRunTooLarge` stops it once what it keeps alive passes the limit. A
    failure raises :class:`LayerExecutionError` with the bytes the run held by then.
    """
    runner = detached_copy(model, meta=device == "meta")  # the user's buffers stay as they are
    names = {id(m): name for name, m in runner.named_modules()}
    weights = {id(t) for t in list(runner.parameters()) + list(runner.buffers())}
    held = HeldTensors(None if device == "meta" else REAL_RUN_MAX_BYTES)
    held.add(inputs, "the inputs")
    recorder = _Recorder(weights, held=held)

    def is_leaf(module: nn.Module) -> bool:
        return isinstance(module, leaf_modules) or is_leaf_module(module)

    def pre_hook(module, args):
        if id(module) not in names:
            return
        if recorder.depth == 0:
            recorder.stack.append(names[id(module)])
        if is_leaf(module):
            recorder.depth += 1

    def post_hook(module, args, output):
        if id(module) not in names:
            return
        if is_leaf(module):
            recorder.depth -= 1
            if recorder.depth == 0:
                recorder.record(module, args, {}, output, names[id(module)])
        if recorder.depth == 0 and recorder.stack:
            recorder.stack.pop()

    handles = [nn.modules.module.register_module_forward_pre_hook(pre_hook),
               nn.modules.module.register_module_forward_hook(post_hook)]
    try:
        with torch.no_grad(), recorder:
            result = runner(*inputs)
    except RealRunTooLarge:
        raise
    except Exception as error:  # noqa: BLE001 - re-raised naming the last good layer
        last = recorder.layers[-1].name if recorder.layers else "the model's input"
        where = recorder.stack[-1] if recorder.stack else type(model).__name__
        failure = LayerExecutionError(f"running module '{where}' failed after layer '{last}': {first_line(error)}",
                                      layer=where, original=error)
        failure.held_bytes = held.bytes
        raise failure from error
    finally:
        for handle in handles:
            handle.remove()
    outputs = tuple(dict.fromkeys(name for t in tensor_leaves(result) for name in recorder.source_of(t) or ()))
    return recorder.layers, outputs, tuple(dict.fromkeys(recorder.written))
