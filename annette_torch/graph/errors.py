"""Errors raised while capturing a model, each naming the module/layer and what to do."""
from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves


def first_line(error: BaseException, with_type: bool = False) -> str:
    """The first line of an error's message (its type name when the message is empty),
    optionally prefixed by the type: what a one-line report of a failure needs."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return f"{type(error).__name__}: {line}" if with_type and text else line


class TraceError(RuntimeError):
    """No capture method could turn the model into a layer graph."""


class LayerExecutionError(TraceError):
    """A layer failed while shapes were propagated (usually: the input does not fit)."""

    def __init__(self, message: str, layer: str = "", original: BaseException | None = None) -> None:
        super().__init__(message)
        self.layer = layer
        self.original = original
        self.held_bytes = 0     # what the failed run held (a meta run's count bounds a real retry)

    @classmethod
    def at(cls, name: str, module_path: str, target: Any, args: tuple, kwargs: dict,
           error: BaseException) -> LayerExecutionError:
        shapes = [tuple(t.shape) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        what = type(target).__name__ if isinstance(target, nn.Module) else getattr(target, "__name__", str(target))
        where = f"layer '{name}'" + (f" (module '{module_path}')" if module_path else "")
        return cls(f"{where}, a {what} call, failed on input shapes {shapes}: {first_line(error)}",
                   layer=name, original=error)


#: the most a real-tensor fallback of ``trace`` (no meta kernel, data-dependent control
#: flow) may hold in inputs and activations; the meta path holds no data at all
REAL_RUN_MAX_BYTES = 2 ** 30
#: the most its inputs may take: a first layer can widen its input 16-fold and more
#: (3 channels to 64) before the count of what the run holds sees it
REAL_RUN_MAX_INPUT_BYTES = REAL_RUN_MAX_BYTES // 16
_HINT = ("Estimate at a smaller input size, or pass the module class that needs real tensors in "
         "leaf_modules=(MyBlock,) so it is recorded whole (roofline fallback) and the rest traces on the meta device")


class RealRunTooLarge(TraceError):
    """A real-tensor fallback of ``trace`` would hold more than :data:`REAL_RUN_MAX_BYTES`."""


class HeldTensors:
    """Counts the bytes of the tensors a capture run holds alive: each tensor from when it
    is added until it is freed, views not at all. With ``limit``, raises
    :class:`RealRunTooLarge` once they pass it."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.bytes = 0
        self._alive: dict[int, weakref.ref] = {}

    def add(self, value: Any, where: str) -> None:
        """Count the tensors of ``value`` (produced at ``where``, e.g. "layer 'conv1'")."""
        for tensor in tree_leaves(value):
            if isinstance(tensor, torch.Tensor) and tensor._base is None and id(tensor) not in self._alive:
                size = tensor.numel() * tensor.element_size()
                self._alive[id(tensor)] = weakref.ref(tensor, functools.partial(self._freed, id(tensor), size))
                self.bytes += size
        if self.limit is not None and self.bytes > self.limit:
            raise RealRunTooLarge(f"the real-tensor fallback would hold more than {self.limit / 2 ** 20:.0f} MiB "
                                  f"({self.bytes / 2 ** 20:.0f} MiB at {where}); refused. {_HINT}")

    def _freed(self, key: int, size: int, _ref: weakref.ref) -> None:
        self._alive.pop(key, None)
        self.bytes -= size


def check_real_run(inputs: Any, meta_held_bytes: int) -> None:
    """:class:`RealRunTooLarge` before a real-tensor fallback whose inputs pass
    :data:`REAL_RUN_MAX_INPUT_BYTES` or whose failed meta run held more than
    :data:`REAL_RUN_MAX_BYTES` alive when it failed."""
    tensors = [t for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > REAL_RUN_MAX_INPUT_BYTES:
        raise RealRunTooLarge(
            f"the meta-device trace failed and the fallback runs real tensors, but the inputs "
            f"{[tuple(t.shape) for t in tensors]} take {size / 2 ** 20:.0f} MiB, more than the "
            f"{REAL_RUN_MAX_INPUT_BYTES / 2 ** 20:.0f} MiB allowed for it; refused. {_HINT}")
    if meta_held_bytes > REAL_RUN_MAX_BYTES:
        raise RealRunTooLarge(
            f"the meta-device trace failed and the fallback runs real tensors, but the activations alive at "
            f"the failing call already take {meta_held_bytes / 2 ** 20:.0f} MiB, more than the "
            f"{REAL_RUN_MAX_BYTES / 2 ** 20:.0f} MiB allowed; refused. {_HINT}")
