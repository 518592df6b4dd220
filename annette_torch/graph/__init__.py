"""Capturing an nn.Module (or an ONNX file) as a LayerGraph."""
from .errors import LayerExecutionError, TraceError
from .layer_graph import Layer, LayerGraph
from .trace import trace

__all__ = ["Layer", "LayerExecutionError", "LayerGraph", "TraceError", "trace"]
