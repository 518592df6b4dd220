"""Capturing an nn.Module (or an ONNX file) as a LayerGraph."""
from .errors import LayerExecutionError, TraceError
from .layer_graph import Layer, LayerGraph
from .onnx_import import import_onnx
from .trace import trace

__all__ = ["Layer", "LayerExecutionError", "LayerGraph", "TraceError", "import_onnx", "trace"]
