"""Capturing an nn.Module (or an ONNX file) as a LayerGraph."""
from .errors import LayerExecutionError, TraceError
from .layer_graph import Layer, LayerGraph
from .trace import trace

__all__ = ["Layer", "LayerExecutionError", "LayerGraph", "TraceError", "import_onnx", "trace"]


def __getattr__(name: str):
    """``import_onnx`` on first use: onnx is imported when an ONNX file is, not with the package."""
    if name == "import_onnx":
        from .onnx_import import import_onnx
        return import_onnx
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
