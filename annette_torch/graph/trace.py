"""``trace(model, input_shape=... | example_inputs=...) -> LayerGraph``.

Order of attempts, first success wins:

1. FX symbolic trace, shapes propagated on the meta device (fast, no arithmetic); where
   plain FX fails, FX again with the inputs' shapes known to the traced code;
2. the same FX graph run on real tensors (for ops without meta kernels);
3. eager capture of one real forward pass (data-dependent control flow, calls FX cannot
   trace), on meta and then on real tensors.

When the FX graph runs but a layer rejects its input, that is the user's input shape, not
a tracing problem: the error names the first failing layer and its shapes. When nothing
works, :class:`TraceError` names the module, the failing call and what to do.
"""
from __future__ import annotations

import inspect
import operator
import warnings
from typing import Sequence

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map_only

from .eager_capture import eager_capture
from .errors import LayerExecutionError, RealRunTooLarge, TraceError, check_real_run, first_line
from .fx_capture import run_graph, symbolic_trace
from .layer_graph import LayerGraph
from .recognize import mark_channel_shuffles

ShapeLike = Sequence[int]


def _as_inputs(input_shape, example_inputs, device: str) -> list[torch.Tensor]:
    if example_inputs is not None and input_shape is not None:
        raise ValueError("trace() takes input_shape= or example_inputs=, not both: the example inputs fix the "
                         "shapes (drop input_shape)")
    if example_inputs is not None:
        if isinstance(example_inputs, torch.Tensor):
            example_inputs = (example_inputs,)
        if device != "meta":           # a meta example input stands for zeros of its shape and dtype
            return [tree_map_only(torch.Tensor, lambda t: torch.zeros(t.shape, dtype=t.dtype, device=device)
                                  if t.is_meta else t, value) for value in example_inputs]
        return [tree_map_only(torch.Tensor, lambda t: t.to("meta"), value) for value in example_inputs]
    if input_shape is None:
        raise ValueError("trace() needs input_shape=(N, C, H, W) (or a list of shapes) or example_inputs=(...)")
    if isinstance(input_shape, (int, str)) or len(input_shape) == 0:
        raise ValueError(f"input_shape must be a shape like (1, 3, 224, 224) or a list of shapes, "
                         f"got {input_shape!r}")
    one_shape = not isinstance(input_shape[0], (tuple, list, torch.Size))
    return [torch.zeros(shape, device=device) for shape in map(_shape, [input_shape] if one_shape else input_shape)]


def _shape(shape) -> tuple[int, ...]:
    """A tuple of positive ints (numpy and torch integers are fine; bools are not), else ValueError."""
    try:
        dims = tuple(operator.index(d) for d in shape if not isinstance(d, bool))
    except TypeError:
        dims = ()
    if not dims or len(dims) != len(shape) or any(d <= 0 for d in dims):
        raise ValueError(f"input_shape must hold positive integers, got {tuple(shape) if isinstance(shape, (tuple, list)) else shape!r}")
    return dims


def _is_meta_limitation(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, NotImplementedError) or "meta" in text.lower() or "data-dependent" in text


def trace(model: nn.Module, input_shape: ShapeLike | Sequence[ShapeLike] | None = None,
          example_inputs: torch.Tensor | Sequence[torch.Tensor] | None = None,
          leaf_modules: Sequence[type] = (), name: str = "") -> LayerGraph:
    """Capture ``model`` as a :class:`LayerGraph` (see the module docstring).

    ``input_shape`` is one shape or a list of shapes (float32 zeros are used);
    ``example_inputs`` are the forward's positional arguments: real tensors (use them for
    integer inputs, e.g. token ids), lists of tensors, or other values passed as they are;
    a tensor on the meta device stands for zeros of its shape and dtype, made only if a
    real-tensor fallback runs (within its memory limit), so large inputs cost no memory.
    ``leaf_modules`` are module classes to record whole instead of tracing into them.
    The model is put in neither train nor eval mode: call ``model.eval()`` first for
    inference estimates (dropout and batch-norm behave as in the mode it is in).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"trace() takes an nn.Module, got {type(model).__name__}")
    leaves = (leaf_modules,) if isinstance(leaf_modules, type) else tuple(leaf_modules)
    if not all(isinstance(leaf, type) and issubclass(leaf, nn.Module) for leaf in leaves):
        raise TypeError(f"leaf_modules takes nn.Module classes, got {leaf_modules!r}")
    label = name or type(model).__name__
    meta_inputs = _as_inputs(input_shape, example_inputs, "meta")
    _check_input_count(model, meta_inputs, label)
    real_device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if real_device.type == "meta":
        real_device = torch.device("cpu")

    def graph(captured, method: str) -> LayerGraph:
        layers, outputs, written = captured
        shapes = tuple(tuple(t.shape) for t in tree_leaves(meta_inputs) if isinstance(t, torch.Tensor))
        trainable = tuple(p.numel() for p in model.parameters() if p.requires_grad)
        return LayerGraph(mark_channel_shuffles(layers), shapes, method, label, parameter_sizes=trainable, outputs=outputs,
                          written=written)

    try:
        fx_graph, fx_root = symbolic_trace(model, leaves, len(meta_inputs), meta_inputs)
    except Exception as fx_error:  # noqa: BLE001 - FX failures lead to the eager fallback
        fx_graph = None
        fx_failure = fx_error
    if fx_graph is not None:
        try:
            return graph(run_graph(fx_graph, fx_root, meta_inputs, "meta"), "fx")
        except LayerExecutionError as error:
            if not _is_meta_limitation(error.original or error):
                raise
            meta_held = error.held_bytes
        if _model_on_meta(model):
            raise TraceError(f"{label}: an op has no meta implementation and the model's weights are "
                             f"on the meta device; build the model on the CPU to trace it")
        try:
            check_real_run(meta_inputs, meta_held)
            real_inputs = _as_inputs(input_shape, example_inputs, str(real_device))
            return graph(run_graph(fx_graph, fx_root, real_inputs, str(real_device)), "fx-real")
        except RealRunTooLarge as error:
            raise RealRunTooLarge(f"{label}: {error}") from None

    failures = [f"torch.fx: {first_line(fx_failure, with_type=True)}"]
    meta_held = 0
    for device in ("meta", str(real_device)):
        if device != "meta" and _model_on_meta(model):
            break
        try:
            if device != "meta":
                check_real_run(meta_inputs, meta_held)
            inputs = meta_inputs if device == "meta" else _as_inputs(input_shape, example_inputs, device)
            captured = eager_capture(model, inputs, device, leaves)
        except RealRunTooLarge as error:
            raise RealRunTooLarge(f"{label}: torch.fx could not trace it ({first_line(fx_failure, with_type=True)}) "
                                  f"and {error}") from None
        except LayerExecutionError as error:
            meta_held = error.held_bytes
            failures.append(f"eager run on {device}: {error}")
            if device != "meta" and not _is_meta_limitation(error.original or error):
                break
            continue
        warnings.warn(f"{label}: torch.fx could not trace it ({first_line(fx_failure, with_type=True)}); captured one "
                      f"eager forward pass instead. The graph follows the path this input took.",
                      stacklevel=2)
        return graph(captured, f"eager-{'meta' if device == 'meta' else 'real'}")
    raise TraceError(
        f"could not capture {label}:\n  - " + "\n  - ".join(failures) +
        "\nWhat you can do: pass the module class that contains the failing call in "
        "leaf_modules=(MyBlock,) so it is recorded whole (it is then estimated with the roofline "
        "fallback), give example_inputs= of the right dtype and shape, or make the call traceable "
        "(torch.fx.wrap for free functions).")


def _check_input_count(model: nn.Module, inputs: list, label: str) -> None:
    """``ValueError`` when ``model``'s forward takes fewer positional inputs than given."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):       # a builtin or C forward: nothing to check against
        return
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(inputs) > len(positional):
        raise ValueError(f"{label}: its forward takes {len(positional)} input(s) ({', '.join(positional) or 'none'}), "
                         f"but {len(inputs)} were given; give one shape (or example input) per input")


def _model_on_meta(model: nn.Module) -> bool:
    return any(p.device.type == "meta" for p in model.parameters())

