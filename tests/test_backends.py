"""Backends: each one times a tiny conv net, reports a fingerprint, applies its thread
count and names the failing step. No timing thresholds: the machine is shared."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from annette_torch.backends import (BackendError, Latency, available_backends, export_onnx,
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
