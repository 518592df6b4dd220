"""Training-step estimation: the optimizer-step model, the training profile field, the
estimate's documented sum, and the ``torch-cpu-train`` backend on a tiny network."""
import copy
import json
import time

import pandas as pd
import pytest
import torch
from torch import nn

from annette_torch import Estimator, trace
from annette_torch.backends import get_backend
from annette_torch.backends.torch_train import OPTIMIZER_STEPS_FILE
from annette_torch.fit.generate import _training
from annette_torch.profiles import Profile, ProfileError, load_profile
from annette_torch.training import fit_optimizer_steps, make_optimizer, optimizer_step_ms

TERMS = {"sgd": {"per_tensor_ms": 0.002, "per_element_ns": 0.25},
         "adam": {"per_tensor_ms": 0.02, "per_element_ns": 1.5}}


def training_profile(**changes) -> dict:
    data = {"format": "annette_torch.profile", "version": 1, "name": "toy-train",
            "fingerprint": {"backend": "torch-cpu-train", "device": "toy", "runtime_version": "0",
                            "threads": 1, "precision": "f32"},
            "overhead_ms": 0.3,
            "layer_models": {"roofline": {"default": {"peak_ops_s": 2e10, "bandwidth_bytes_s": 1e10}}},
            "training": {"optimizer_step": copy.deepcopy(TERMS)}}
    data.update(changes)
    return data


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.act(self.bn(self.conv(x)))), 1))


def test_training_step_is_forward_backward_kernels_plus_overhead_plus_optimizer_terms():
    est = Estimator(Profile.from_dict(training_profile()))
    model = Toy().train()
    graph = trace(model, input_shape=(8, 3, 16, 16))
    kernels_ms = est.report(graph)["time_ms"].sum()
    sizes = [p.numel() for p in model.parameters()]
    assert graph.parameter_sizes == tuple(sizes)
    for optimizer, terms in TERMS.items():
        by_hand = terms["per_tensor_ms"] * len(sizes) + terms["per_element_ns"] * 1e-6 * sum(sizes)
        assert est.optimizer_step(graph, optimizer) == pytest.approx(by_hand, rel=1e-12)
        assert est.training_step(graph, optimizer) == pytest.approx(kernels_ms + 0.3 + by_hand, rel=1e-12)


def test_frozen_parameters_take_no_optimizer_time():
    model = Toy()
    for p in model.conv.parameters():
        p.requires_grad_(False)
    graph = trace(model, input_shape=(1, 3, 8, 8))
    assert graph.parameter_sizes == tuple(p.numel() for p in model.parameters() if p.requires_grad)


def test_training_step_errors_name_the_problem():
    inference = Estimator("zcu102-dpu")
    with pytest.raises(ValueError, match="describes inference.*torch-cpu-train"):
        inference.training_step(Toy(), input_shape=(1, 3, 8, 8))
    est = Estimator(Profile.from_dict(training_profile()))
    with pytest.raises(ValueError, match="no terms for optimizer 'momentum'.*adam, sgd"):
        est.training_step(Toy(), "momentum", input_shape=(1, 3, 8, 8))
    graph = trace(Toy(), input_shape=(1, 3, 8, 8))
    graph.parameter_sizes = None     # as for a graph imported from ONNX
    with pytest.raises(ValueError, match="trainable parameters are unknown"):
        est.training_step(graph)


@pytest.mark.parametrize("mutate, field", [
    (lambda t: t.pop("optimizer_step"), "training"),
    (lambda t: t["optimizer_step"]["sgd"].update(per_tensor_ms=-1), "training.optimizer_step.sgd.per_tensor_ms"),
    (lambda t: t["optimizer_step"]["adam"].pop("per_element_ns"), "training.optimizer_step.adam.per_element_ns"),
])
def test_invalid_training_field_names_the_field(tmp_path, mutate, field):
    data = training_profile()
    mutate(data["training"])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=f"field '{field}'"):
        load_profile(path)


def test_training_field_round_trips_and_inference_profiles_have_none(tmp_path):
    saved = Profile.from_dict(training_profile()).save(tmp_path / "t.json")
    assert load_profile(saved).training == {"optimizer_step": TERMS}
    assert load_profile("zcu102-dpu").training is None
    assert "training" not in load_profile("zcu102-dpu").to_dict()


def test_optimizer_fit_recovers_known_terms(tmp_path):
    rows = [{"optimizer": name, "tensors": t, "elements": n,
             "time_ms": optimizer_step_ms(terms, [n // t] * t) * (1 + 0.01 * ((t + n) % 3 - 1))}
            for name, terms in TERMS.items() for t in (1, 8, 64) for n in (10_000, 1_000_000, 10_000_000)]
    fitted = fit_optimizer_steps(pd.DataFrame(rows))
    for name, terms in TERMS.items():
        assert fitted[name]["per_tensor_ms"] == pytest.approx(terms["per_tensor_ms"], rel=0.05)
        assert fitted[name]["per_element_ns"] == pytest.approx(terms["per_element_ns"], rel=0.05)
    # a store with the file gives the training field; one without is an inference store
    pd.DataFrame(rows).to_csv(tmp_path / OPTIMIZER_STEPS_FILE, index=False)
    assert set(_training(tmp_path)["optimizer_step"]) == set(TERMS)
    assert _training(tmp_path / "missing") is None
    with pytest.raises(ValueError, match="lack the columns"):
        fit_optimizer_steps(pd.DataFrame({"optimizer": ["sgd"], "time_ms": [1.0]}))


def test_make_optimizer_knows_three_and_names_the_unknown():
    params = [nn.Parameter(torch.zeros(3))]
    assert isinstance(make_optimizer("adam", params), torch.optim.Adam)
    assert make_optimizer("momentum", params).defaults["momentum"] == 0.9
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        make_optimizer("lamb", params)


def test_training_backend_times_each_layer_forward_and_backward_and_leaves_the_model_alone():
    backend = get_backend("torch-cpu-train", threads=1)
    model = Toy().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    paths = ["conv", "bn", "act", "pool", "fc"]
    profiled = backend.profile(model, (4, 3, 16, 16), paths, warmup=1, repeats=3)
    assert {k.name for k in profiled.kernels} == set(paths)
    assert all(len(k.runs_ms) == 3 and min(k.runs_ms) > 0 and k.layers == (k.name,) for k in profiled.kernels)
    assert profiled.latency.median_ms > 0
    step = backend.measure_step(model, (4, 3, 16, 16), "adam", warmup=1, repeats=2)
    assert step.median_ms > 0 and len(step.runs_ms) == 2
    # a copy trained: the caller's weights, running statistics and mode are unchanged
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training


def test_training_backend_times_each_layers_backward_pass():
    """A layer's training time includes its own backward and no other layer's: a layer
    whose backward waits 30 ms is timed at 30 ms or more in every run (a lower bound: a
    busy host cannot fail it), the layer before it, whose backward runs after, is not."""

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):
            time.sleep(0.03)
            return grad

    class Slow(nn.Module):
        def forward(self, x):
            return SlowBackward.apply(x)

    model = nn.Sequential(nn.Linear(16, 16), Slow())
    profiled = get_backend("torch-cpu-train", threads=1).profile(model, (4, 16), ["0", "1"], warmup=1, repeats=3)
    runs = {k.name: k.runs_ms for k in profiled.kernels}
    assert min(runs["1"]) >= 30 and min(runs["0"]) < 30


def test_cli_prints_training_step_and_memory_sections(tmp_path, capsys):
    from annette_torch.cli import main as cli_main

    path = Profile.from_dict(training_profile()).save(tmp_path / "toy-train.json")
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", str(path), "--input-shape", "8,3,64,64",
                     "--optimizer", "adam", "--memory"]) == 0
    out = capsys.readouterr().out
    assert "training step with adam:" in out and "optimizer step =" in out
    assert "memory (training step with adam): peak" in out and "adam state 89.3 MiB" in out
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", "zcu102-dpu", "--memory"]) == 0
    out = capsys.readouterr().out
    assert "memory (inference): peak" in out and "training step" not in out
