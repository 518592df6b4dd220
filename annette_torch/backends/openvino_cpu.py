"""``openvino-cpu``: OpenVINO's CPU plugin, latency hint, one synchronous infer request."""
from __future__ import annotations

import os
from typing import Callable

import numpy as np
import openvino as ov

from .base import OnnxBackend, register_backend


@register_backend
class OpenVinoCpu(OnnxBackend):
    """OpenVINO on the CPU plugin with ``INFERENCE_NUM_THREADS`` = ``threads``,
    ``INFERENCE_PRECISION_HINT`` = ``precision`` and ``PERFORMANCE_HINT`` = LATENCY."""

    name = "openvino-cpu"
    precisions = ("f32", "bf16", "f16")

    def runtime_version(self) -> str:
        return ov.get_version()

    def compile_onnx(self, path: str | os.PathLike) -> ov.CompiledModel:
        config = {"INFERENCE_NUM_THREADS": self.threads, "INFERENCE_PRECISION_HINT": self.precision,
                  "PERFORMANCE_HINT": "LATENCY"}
        return ov.Core().compile_model(str(path), "CPU", config)

    def runner(self, compiled: ov.CompiledModel, x: np.ndarray) -> Callable[[], object]:
        request = compiled.create_infer_request()
        request.set_input_tensor(ov.Tensor(x))
        return lambda: request.infer(share_outputs=True)
