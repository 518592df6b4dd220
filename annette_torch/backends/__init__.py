"""Runtimes we can measure on this machine, one file per backend.

    from annette_torch.backends import get_backend, available_backends

    available_backends()                  # ['ncs2', 'onnxruntime-cpu', 'openvino-cpu', 'torch-cpu', 'torch-cpu-train', 'torch-cuda', 'zcu102']
    backend = get_backend("openvino-cpu", threads=1, precision="f32")
    latency = backend.measure(model, (1, 3, 224, 224), warmup=5, repeats=20)
    latency.median_ms, latency.spread     # spread = (p90 - p10) / median of latency.runs_ms
    backend.measure_onnx("model.onnx", (1, 3, 224, 224))   # ONNX backends only
    backend.fingerprint()                 # backend, runtime_version, cpu, threads, precision
    backend.profile(model, (1, 3, 224, 224), layer_paths)   # per-kernel rows + end-to-end latency

``measure`` times end-to-end synchronous inference of one random normal float32 input
(eval mode; the ONNX backends export with ``torch.onnx.export(..., dynamo=False)`` into
a temporary directory first). A failing export, compile or run raises
:class:`BackendError` (a ``RuntimeError``) naming the backend and the step.
Adding a backend is one new file with a class decorated by :func:`register_backend`,
imported below. The board backends (``zcu102``, ``ncs2``) drive toolchains, other
interpreters and boards through commands (:mod:`.remote`); they need a configuration
file (``config=``, examples shipped in ``annette_torch/backends/boards/``) and import nothing of those
toolchains here.
"""
from .base import (BACKENDS, Backend, BackendError, KernelRecord, Latency, OnnxBackend, Profiled,
                   available_backends, cpu_model, export_onnx, get_backend, onnx_scope, random_input,
                   register_backend)
from .ncs2 import Ncs2
from .onnxruntime_cpu import OnnxRuntimeCpu
from .openvino_cpu import OpenVinoCpu
from .torch_cpu import TorchCpu, TorchCuda
from .torch_train import TorchCpuTrain
from .zcu102 import Zcu102

__all__ = ["BACKENDS", "Backend", "BackendError", "KernelRecord", "Latency", "Profiled", "onnx_scope", "OnnxBackend", "OnnxRuntimeCpu",
           "Ncs2", "OpenVinoCpu", "TorchCpu", "TorchCpuTrain", "TorchCuda", "Zcu102", "available_backends", "cpu_model", "export_onnx", "get_backend",
           "random_input", "register_backend"]
