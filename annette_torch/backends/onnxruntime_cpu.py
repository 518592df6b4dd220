"""``onnxruntime-cpu``: ONNX Runtime's CPU execution provider, sequential execution."""
from __future__ import annotations

import os
from typing import Callable

import numpy as np
import onnxruntime as ort

from .base import OnnxBackend, register_backend


@register_backend
class OnnxRuntimeCpu(OnnxBackend):
    """ONNX Runtime on ``CPUExecutionProvider`` with ``intra_op_num_threads`` = ``threads``,
    ``inter_op_num_threads`` = 1, sequential execution and all graph optimizations."""

    name = "onnxruntime-cpu"

    def runtime_version(self) -> str:
        return ort.__version__

    def compile_onnx(self, path: str | os.PathLike) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def runner(self, compiled: ort.InferenceSession, x: np.ndarray) -> Callable[[], object]:
        feed = {compiled.get_inputs()[0].name: x}
        return lambda: compiled.run(None, feed)
