"""No process-wide side effects: allocator settings, RNG state, torch flags, thread counts,
user classes and ``sys.modules`` are as found after each library call that could change
them (a campaign's measuring worker may change its own process)."""
from __future__ import annotations

import ctypes
import sys

import pandas as pd
import pytest
import torch
from torch import nn

from annette_torch.backends import Latency, export_onnx, get_backend, torch_train
from annette_torch.backends.zcu102 import PORTABLE_MODULE, export_portable
from annette_torch.calibration import BenchmarkSpec, build_benchmark, run_campaign
from annette_torch.calibration.generator import FAMILIES, resolve_params
from annette_torch.calibration.store import fingerprint_folder

SHAPE = (4, 3, 8, 8)


def process_state() -> dict:
    """What the library must leave as found: CPU RNG state, torch threads, MHA fast path."""
    return {"rng": torch.random.get_rng_state(), "threads": torch.get_num_threads(),
            "mha_fastpath": torch.backends.mha.get_fastpath_enabled()}


def assert_unchanged(before: dict) -> None:
    after = process_state()
    assert torch.equal(after.pop("rng"), before["rng"]), "the global RNG state changed"
    assert after == {k: v for k, v in before.items() if k != "rng"}


def dropout_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Dropout(0.5), nn.Flatten(), nn.Linear(256, 5))


@pytest.fixture
def libc_loads(monkeypatch):
    """The names every ``ctypes.CDLL`` call in the test loads (mallopt needs libc)."""
    loads, real = [], ctypes.CDLL
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *args, **kwargs: loads.append(name) or real(name, *args, **kwargs))
    return loads


def test_training_backend_leaves_the_callers_allocator_rng_and_threads_alone(libc_loads):
    model = dropout_net()                   # (its initialisation draws from the RNG)
    before = process_state()
    backend = get_backend("torch-cpu-train", threads=2 if before["threads"] != 2 else 1)
    profiled = backend.profile(model, SHAPE, ["0", "2", "4"], warmup=1, repeats=2)
    step = backend.measure_step(model, SHAPE, "adam", warmup=1, repeats=2)
    assert len(profiled.kernels) == 3 and step.median_ms > 0
    assert libc_loads == [], "the caller's malloc must not be touched (mallopt)"
    assert_unchanged(before)


def test_only_prepare_process_pins_the_allocator(monkeypatch):
    calls = []
    monkeypatch.setattr(torch_train, "steady_allocator", lambda: calls.append("mallopt") or True)
    backend = get_backend("torch-cpu-train")
    assert calls == []
    backend.prepare_process()
    assert calls == ["mallopt"]
    get_backend("torch-cpu").prepare_process()      # nothing to set up
    assert calls == ["mallopt"]


def test_a_training_campaign_measures_in_its_worker_only(tmp_path, monkeypatch):
    def refuse(*args):
        raise AssertionError("measured or set up in the campaign's own process")

    backend = get_backend("torch-cpu-train")
    folder = tmp_path / fingerprint_folder(backend.fingerprint())
    folder.mkdir()
    steps = pd.DataFrame({"optimizer": ["sgd"], "tensors": [1], "elements": [10], "time_ms": [0.01], "spread": [0.0]})
    steps.to_csv(folder / torch_train.OPTIMIZER_STEPS_FILE, index=False)     # extras already measured: kept
    for name in ("prepare_process", "store_extras", "profile"):
        monkeypatch.setattr(torch_train.TorchCpuTrain, name, refuse)
    monkeypatch.setattr(torch_train, "steady_allocator", refuse)
    before = process_state()
    summary = run_campaign("torch-cpu-train", [BenchmarkSpec("linear", {"c": 8, "f": 4})], tmp_path,
                           warmup=1, repeats=2, progress=False)
    assert summary.measured == 1 and summary.failed == 0
    assert pd.read_csv(folder / torch_train.OPTIMIZER_STEPS_FILE).equals(steps)
    assert_unchanged(before)


@pytest.mark.parametrize("enabled", [True, False])
def test_export_onnx_restores_the_mha_fast_path(tmp_path, enabled):
    found = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        attention, shape = build_benchmark(BenchmarkSpec("attention", {"h": 4, "c": 16, "groups": 2}))
        export_onnx(attention, shape, tmp_path / "attention.onnx")
        assert torch.backends.mha.get_fastpath_enabled() is enabled
        with pytest.raises(Exception):
            export_onnx(attention, (1, 4, 15), tmp_path / "wrong_shape.onnx")
        assert torch.backends.mha.get_fastpath_enabled() is enabled
    finally:
        torch.backends.mha.set_fastpath_enabled(found)


@pytest.mark.parametrize("family, params", [
    ("eltwise", {"h": 4, "c": 3, "op": "mul"}),
    ("conv_chain", {"h": 8, "c": 3, "f": 8, "k": 3, "op": "bn-relu-maxpool"}),
    ("attention", {"h": 4, "c": 16, "groups": 2}),
    ("squeeze_excite", {"h": 4, "c": 8, "f": 4, "op": "sigmoid"}),
    ("pooled_head", {"h": 4, "c": 8, "f": 16, "op": "hardswish"}),
])
def test_build_benchmark_leaves_the_global_rng_alone_and_builds_the_same_weights(family, params):
    spec = BenchmarkSpec(family, params)
    torch.manual_seed(1234)
    torch.rand(3)                       # some state of the caller's
    before = process_state()
    model, _ = build_benchmark(spec)
    assert_unchanged(before)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)            # how the benchmarks were built before (the committed stores)
        reference, _ = FAMILIES[family].build(resolve_params(spec))
    expected = reference.state_dict()
    assert expected and all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())


class Recorded(nn.Module):
    """A user's module class that notes, while it is pickled, its module's name and whether
    the portable module is in ``sys.modules``."""

    seen: list = []

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)

    def __getstate__(self):
        Recorded.seen.append((type(self).__module__, PORTABLE_MODULE in sys.modules))
        return super().__getstate__()


def test_zcu102_export_leaves_user_classes_and_sys_modules_alone(tmp_path):
    model, home = Recorded(), Recorded.__module__
    modules = dict(sys.modules)
    Recorded.seen.clear()
    assert export_portable(model, tmp_path) == ["Recorded"]
    assert Recorded.seen == [(home, False)], "the class was re-homed while it was pickled"
    assert Recorded.__module__ == home and PORTABLE_MODULE not in sys.modules
    assert all(sys.modules.get(name) is module for name, module in modules.items())   # none replaced
    assert "class Recorded(nn.Module):" in (tmp_path / f"{PORTABLE_MODULE}.py").read_text()


def test_adapt_restores_the_thread_count():
    from annette_torch.transfer.adapt import measure_references

    from annette_torch.measure import Protocol

    class Fake:
        name = "fake"
        threads = 1

        def measure(self, model, input_shape, warmup, repeats):
            return Latency.from_runs([1.0], threads=1)

    found = torch.get_num_threads()
    torch.set_num_threads(2 if found != 2 else 3)      # not the 1 it traces with
    try:
        before = torch.get_num_threads()
        assert len(measure_references(Fake(), 1, seed=0, protocol=Protocol(rounds=1, drift="none"))) == 1
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(found)
