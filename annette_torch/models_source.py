"""Resolve a model spec from the command line into something the estimator takes.

Specs: ``torchvision:NAME``, ``timm:NAME``, ``path/to/file.py:factory_function`` (the
function is called without arguments and returns an ``nn.Module``), or ``file.onnx``.
Models are built with random weights (no downloads) and put in eval mode.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from .graph import LayerGraph


@dataclass
class ResolvedModel:
    """A module or an already imported graph, and the input shape it expects by default."""

    name: str
    module: nn.Module | None
    graph: LayerGraph | None
    default_input_shape: tuple[int, ...] | None


def _torchvision(name: str) -> ResolvedModel:
    try:
        import torchvision
    except ImportError as error:
        raise SystemExit("torchvision is not installed: pip install 'annette_torch[vision]'") from error
    available = torchvision.models.list_models()
    if name not in available:
        raise SystemExit(f"torchvision has no model {name!r}; e.g. {', '.join(sorted(available)[:8])}, ...")
    model = torchvision.models.get_model(name, weights=None).eval()
    size = 224
    try:
        weights = torchvision.models.get_model_weights(name).DEFAULT
        size = int(weights.transforms().crop_size[0])
    except (ValueError, AttributeError, IndexError, TypeError):
        pass
    return ResolvedModel(name, model, None, (1, 3, size, size))


def _timm(name: str) -> ResolvedModel:
    try:
        import timm
    except ImportError as error:
        raise SystemExit("timm is not installed: pip install timm") from error
    try:
        model = timm.create_model(name, pretrained=False).eval()
    except RuntimeError as error:
        raise SystemExit(f"timm cannot build {name!r}: {error}") from error
    return ResolvedModel(name, model, None, timm_input_shape(model))


def timm_input_shape(model: nn.Module, batch: int = 1) -> tuple[int, ...]:
    """A timm model's default input shape, from its pretrained config (224x224 if none)."""
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    return (batch, *cfg.get("input_size", (3, 224, 224)))


def _python_file(path: str, function: str) -> ResolvedModel:
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"model file {file} does not exist")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    factory = getattr(module, function, None)
    if not callable(factory):
        raise SystemExit(f"{file} has no function {function!r}")
    model = factory()
    if not isinstance(model, nn.Module):
        raise SystemExit(f"{file}:{function}() returned {type(model).__name__}, not an nn.Module")
    return ResolvedModel(f"{file.stem}:{function}", model.eval(), None, None)


def resolve_model(spec: str, input_shape: tuple[int, ...] | None = None) -> ResolvedModel:
    """Build the model a spec names (see module docstring)."""
    if spec.endswith(".onnx"):
        from .graph.onnx_import import import_onnx
        graph = import_onnx(spec, input_shape=input_shape)
        return ResolvedModel(Path(spec).name, None, graph, graph.input_shapes[0] if graph.input_shapes else None)
    source, sep, name = spec.partition(":")
    if not sep or not name:
        raise SystemExit(f"model spec {spec!r} must be torchvision:NAME, timm:NAME, file.py:function or file.onnx")
    if source == "torchvision":
        return _torchvision(name)
    if source == "timm":
        return _timm(name)
    if source.endswith(".py"):
        return _python_file(source, name)
    raise SystemExit(f"unknown model source {source!r} in {spec!r} (torchvision, timm, a .py file, or a .onnx file)")
