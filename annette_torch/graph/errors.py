"""Errors raised while capturing a model, each naming the module/layer and what to do."""
from __future__ import annotations

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

    @classmethod
    def at(cls, name: str, module_path: str, target: Any, args: tuple, kwargs: dict,
           error: BaseException) -> LayerExecutionError:
        shapes = [tuple(t.shape) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        what = type(target).__name__ if isinstance(target, nn.Module) else getattr(target, "__name__", str(target))
        where = f"layer '{name}'" + (f" (module '{module_path}')" if module_path else "")
        return cls(f"{where}, a {what} call, failed on input shapes {shapes}: {first_line(error)}",
                   layer=name, original=error)
