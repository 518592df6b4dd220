"""Backends: each one times a tiny conv net, reports a fingerprint, applies its thread
count and names the failing step. No timing thresholds: the machine is shared."""
from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from annette_torch.backends import (BackendError, Latency, TorchCuda, available_backends, export_onnx,
                                    get_backend)

SHAPE = (1, 3, 16, 16)


def tiny_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    return export_onnx(tiny_net(), SHAPE, tmp_path_factory.mktemp("onnx") / "tiny.onnx")


def test_the_three_cpu_backends_are_registered():
    assert {"openvino-cpu", "onnxruntime-cpu", "torch-cpu"} <= set(available_backends())


@pytest.mark.parametrize("name", ["openvino-cpu", "onnxruntime-cpu", "torch-cpu"])
def test_measure_returns_positive_median_and_every_run(name):
    model = tiny_net().train()
    latency = get_backend(name).measure(model, SHAPE, warmup=1, repeats=4)
    assert isinstance(latency, Latency)
    assert latency.median_ms > 0 and latency.spread >= 0 and latency.threads == 1
    assert len(latency.runs_ms) == 4 and all(t > 0 for t in latency.runs_ms)
    assert all(m.training for m in model.modules()), "the model's training flags are restored"


@pytest.mark.parametrize("name", ["openvino-cpu", "onnxruntime-cpu"])
def test_measure_onnx(name, onnx_path):
    latency = get_backend(name).measure_onnx(onnx_path, SHAPE, warmup=0, repeats=2)
    assert latency.median_ms > 0 and len(latency.runs_ms) == 2


@pytest.mark.parametrize("name", ["openvino-cpu", "onnxruntime-cpu", "torch-cpu"])
def test_fingerprint_fields(name):
    fingerprint = get_backend(name, threads=2).fingerprint()
    assert set(fingerprint) == {"backend", "runtime_version", "cpu", "cpu_id", "threads", "precision"}
    assert fingerprint["backend"] == name and fingerprint["threads"] == 2
    assert fingerprint["precision"] == "f32" and fingerprint["runtime_version"] and fingerprint["cpu"]


def test_latency_summary():
    latency = Latency.from_runs([1.0, 2.0, 3.0, 4.0, 5.0], threads=1)
    assert latency.median_ms == 3.0
    assert latency.spread == pytest.approx((4.6 - 1.4) / 3.0)


def test_unknown_backend_lists_the_available_ones():
    with pytest.raises(ValueError, match="unknown backend 'tensorrt'.*openvino-cpu"):
        get_backend("tensorrt")


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="threads"):
        get_backend("torch-cpu", threads=0)
    with pytest.raises(ValueError, match="precisions"):
        get_backend("onnxruntime-cpu", precision="int8")


def test_openvino_applies_threads(onnx_path):
    compiled = get_backend("openvino-cpu", threads=2).compile_onnx(onnx_path)
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 2
    assert compiled.get_property("PERFORMANCE_HINT") == "LATENCY"


def test_onnxruntime_applies_threads(onnx_path):
    options = get_backend("onnxruntime-cpu", threads=2).compile_onnx(onnx_path).get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)


def test_torch_sets_and_restores_threads():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.get_num_threads())
            return x

    before = torch.get_num_threads()
    target = 2 if before != 2 else 1
    get_backend("torch-cpu", threads=target).measure(Probe(), SHAPE, warmup=0, repeats=2)
    assert seen == [target, target]
    assert torch.get_num_threads() == before


def test_errors_name_backend_and_step(onnx_path, tmp_path):
    with pytest.raises(BackendError, match="'onnxruntime-cpu' failed to export"):
        get_backend("onnxruntime-cpu").measure(tiny_net(), (1, 4, 16, 16))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(BackendError, match="'openvino-cpu' failed to compile"):
        get_backend("openvino-cpu").measure_onnx(broken, SHAPE)
    with pytest.raises(BackendError, match="'onnxruntime-cpu' failed to run"):
        get_backend("onnxruntime-cpu").measure_onnx(onnx_path, (1, 3, 8, 8))
    with pytest.raises(BackendError, match="'torch-cpu' failed to run") as caught:
        get_backend("torch-cpu").measure(tiny_net(), (1, 4, 16, 16))
    assert isinstance(caught.value, RuntimeError) and caught.value.step == "run"


class FakeCudaEvent:
    """``torch.cuda.Event``'s timing interface on the host clock, counting its use."""

    made: list[FakeCudaEvent] = []

    def __init__(self) -> None:
        self.recorded = self.synchronized = False
        FakeCudaEvent.made.append(self)

    def record(self) -> None:
        assert not self.recorded, "an event is recorded once"
        self.recorded, self.ns = True, time.perf_counter_ns()

    def synchronize(self) -> None:
        self.synchronized = True

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        assert self.recorded and end.recorded and end.synchronized, "read only after the end event completed"
        return (end.ns - self.ns) / 1e6


@pytest.fixture
def fake_cuda(monkeypatch):
    """A ``torch-cuda`` backend without a GPU: CUDA reported available, its synchronize
    counted, its layer events fake, its tensors on the CPU; the rest is its own code."""
    synchronized = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *device: synchronized.append(True))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "Fake GPU")
    backend = get_backend("torch-cuda")
    backend.device, backend.layer_event = "cpu", FakeCudaEvent
    FakeCudaEvent.made.clear()
    return backend, synchronized


def test_torch_cuda_times_each_layer_with_cuda_events(fake_cuda):
    assert TorchCuda.layer_event.func is torch.cuda.Event and TorchCuda.layer_event.keywords == {"enable_timing": True}
    backend, synchronized = fake_cuda
    paths = ["0", "1", "2", "3"]
    profiled = backend.profile(tiny_net(), SHAPE, paths, warmup=1, repeats=3)
    assert [k.name for k in profiled.kernels] == paths
    assert all(len(k.runs_ms) == 3 and min(k.runs_ms) > 0 for k in profiled.kernels)
    made = FakeCudaEvent.made
    assert len(made) == 2 * len(paths) * 3                      # a start and an end event per layer call
    assert all(e.recorded for e in made) and all(end.synchronized for end in made[1::2])
    assert len(synchronized) == (1 + 3) + (1 + 3)               # after each inference: profiled, then end to end


def test_torch_cuda_benchmark_rows_have_the_format_of_torch_cpu(fake_cuda):
    from annette_torch.calibration import BenchmarkSpec
    from annette_torch.calibration.campaign import measure_benchmark

    backend, _ = fake_cuda
    spec = BenchmarkSpec("conv_chain", {"h": 8, "c": 3, "f": 8, "k": 3, "op": "bn-relu-maxpool"})
    cuda_network, cuda_rows = measure_benchmark(spec, backend, warmup=1, repeats=3)
    cpu_network, cpu_rows = measure_benchmark(spec, get_backend("torch-cpu"), warmup=1, repeats=3)
    assert backend.fingerprint()["gpu"] == "Fake GPU"
    assert set(cuda_network) == set(cpu_network) and cuda_network["status"] == "ok"
    assert cuda_network["kernels"] == cpu_network["kernels"] == 4
    assert [sorted(row) for row in cuda_rows] == [sorted(row) for row in cpu_rows]
    for cuda_row, cpu_row in zip(cuda_rows, cpu_rows):
        assert {k: type(v) for k, v in cuda_row.items()} == {k: type(v) for k, v in cpu_row.items()}
        assert cuda_row["layer"] == cpu_row["layer"] and cuda_row["time_ms"] > 0
