"""``openvino-cpu``: OpenVINO's CPU plugin, latency hint, one synchronous infer request.

Per-layer profiles come from the plugin's performance counters (``PERF_COUNT``): one
``ProfilingInfo`` per runtime node and inference, with its status (EXECUTED, NOT_RUN,
OPTIMIZED_OUT) and time; the compiled runtime model's ``originalLayersNames`` says which
original (ONNX) nodes each runtime node computes, i.e. what the plugin fused into it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import openvino as ov

from .base import KernelRecord, OnnxBackend, input_list, register_backend


@register_backend
class OpenVinoCpu(OnnxBackend):
    """OpenVINO on the CPU plugin with ``INFERENCE_NUM_THREADS`` = ``threads``,
    ``INFERENCE_PRECISION_HINT`` = ``precision`` and ``PERFORMANCE_HINT`` = LATENCY."""

    name = "openvino-cpu"
    precisions = ("f32", "bf16", "f16")
    # OpenVINO 2026.4's runtime model has no StridedSlice for a Slice that selects its whole
    # input (GhostNet's cat(...)[:, :out_chs]); one selecting part of it runs as a copy (ref)
    removes_identity_slices = True
    # a transpose to channels-first feeding only convs, and the token transpose of such a
    # conv's flattened output, are absent from its runtime model (the conv reads and writes
    # channels-last: "_abc_acdb_fake" reorders, NOT_RUN); ConvNeXt's permute(0, 2, 3, 1) of a
    # conv's output runs (2026-12-05, docs/graph-compilers.md, LayerGraph.layout_transposes)
    folds_layout_transposes = True
    # ShuffleChannels writes plain layout, and the next unit's channel split of it runs in
    # place: no Split kernel after any of shufflenet_v2_x1_0's 13 shuffles (2026-12-07,
    # docs/graph-compilers.md, LayerGraph.shuffle_splits)
    splits_shuffles_in_place = True
    # its Snippets compile connected elementwise ops into one "Subgraph" kernel, whatever
    # their consumers (NAS-Bench-201's x * 0 edges and the sums between cells)
    merges_elementwise = True
    # ConvolutionToGroupConvolutionFusion: a split into equal channel parts, a bias-free conv of
    # one shape on each and the concat of their outputs run as one GroupConvolution, no Split
    # or Concat (MixNet's grouped pointwise convs; probed 2026-12-06, docs/graph-compilers.md)
    groups_split_convs = True
    # a returned feature map computed channels-last (acdb) or blocked is converted to NCHW
    # by a Reorder writing the result (".../sink_port_0"); a segmentation head's map of 21
    # channels at 320x320 took 8.2 ms of lraspp_mobilenet_v3_large's 30.5 ms (2026-12-01)
    output_reorders = r"/sink_port_\d+$"

    def runtime_version(self) -> str:
        import openvino as ov  # imported on use: importing annette_torch loads no runtime

        return ov.get_version()

    def compile_onnx(self, path: str | os.PathLike, perf_count: bool = False) -> ov.CompiledModel:
        import openvino as ov

        config = {"INFERENCE_NUM_THREADS": self.threads, "INFERENCE_PRECISION_HINT": self.precision,
                  "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": perf_count}
        return ov.Core().compile_model(str(path), "CPU", config)

    def runner(self, compiled: ov.CompiledModel, x: np.ndarray | Sequence[np.ndarray]) -> Callable[[], object]:
        request = self._request(compiled, x)
        return lambda: request.infer(share_outputs=True)

    @staticmethod
    def _request(compiled: ov.CompiledModel, x: np.ndarray | Sequence[np.ndarray]) -> ov.InferRequest:
        """An infer request of ``compiled`` with ``x`` (one array per input) set as its inputs."""
        import openvino as ov

        request = compiled.create_infer_request()
        for index, array in enumerate(input_list(x)):
            request.set_input_tensor(index, ov.Tensor(array))
        return request

    def profile_onnx(self, path: Path, x: np.ndarray | Sequence[np.ndarray], warmup: int,
                     repeats: int) -> list[KernelRecord]:
        compiled = self.compile_onnx(path, perf_count=True)
        originals = {}
        for op in compiled.get_runtime_model().get_ordered_ops():
            names = op.get_rt_info()["originalLayersNames"].astype(str)
            originals[op.get_friendly_name()] = tuple(n for n in names.split(",") if n)
        request = self._request(compiled, x)
        for _ in range(warmup):
            request.infer(share_outputs=True)
        times: dict[str, list[float]] = {}
        info = {}
        for _ in range(repeats):
            request.infer(share_outputs=True)
            for entry in request.get_profiling_info():
                times.setdefault(entry.node_name, []).append(entry.real_time.total_seconds() * 1e3)
                info[entry.node_name] = entry
        return [KernelRecord(name=name, kernel_type=entry.node_type, exec_type=entry.exec_type,
                             status=entry.status.name, runs_ms=tuple(times[name]),
                             layers=originals.get(name, ()))
                for name, entry in info.items()]
