"""search_examples/dynamic_groups.py: the seed-002 grouped network scales as designed, its
pruned configurations are exact, estimates grow with the configuration, and the script
runs in --smoke mode."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annette_torch import Estimator, trace
from annette_torch.profiles import builtin_names

SCRIPT = Path(__file__).resolve().parents[1] / "search_examples" / "dynamic_groups.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("dynamic_groups", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def graphs(example):
    return {k: trace(example.GroupedAlexNet(k), input_shape=example.INPUT_SHAPE) for k in range(1, 5)}


def test_ops_scale_linearly_with_groups(example, graphs):
    """Every conv layer of the k-group configuration has k/4 of the full output channels
    and, being grouped (conv1: dense over the 3 shared input channels), the same input
    channels per group, at unchanged spatial size: its ops are exactly k/4 of the full
    layer's. The FC layer's input features are k/4 of the full ones, so its ops too;
    ReLU and pooling act on k/4 of the activations. Hence conv, linear and total ops are
    exactly k/4 of the full network's (not (k/4)^2, as for a dense width-scaled network)."""
    full = graphs[4]
    for k, graph in graphs.items():
        for kinds in ("conv", "linear", None):
            assert graph.total("ops", kinds) == pytest.approx(k / 4 * full.total("ops", kinds), rel=1e-12)
        convs = [layer for layer in graph.layers if layer.kind == "conv"]
        assert [layer.attrs["groups"] for layer in convs] == [1] + [k] * 4
        assert graph.kind_counts()["depthwise_conv"] == 0


def test_parameters_scale_linearly_with_groups(example):
    """All weights and biases are per group except the FC bias (one per class)."""
    def count(k):
        return sum(p.numel() for p in example.GroupedAlexNet(k).parameters())
    shared = example.NUM_CLASSES
    for k in range(1, 5):
        assert count(k) - shared == k * (count(4) - shared) // 4


@pytest.mark.parametrize("k", [1, 2, 3])
def test_pruned_configuration_equals_full_network_with_later_groups_zeroed(example, k):
    """No connections between groups: zeroing groups k+1..4 (as the seed's incremental
    training does for untrained groups) makes the full network compute what the
    k-group configuration pruned from it computes."""
    torch.manual_seed(0)
    full = example.GroupedAlexNet(4).eval()
    pruned = example.prune_groups(full, k)
    with torch.no_grad():
        for conv in (m for m in full.features if isinstance(m, torch.nn.Conv2d)):
            kept = conv.out_channels * k // 4
            conv.weight[kept:] = 0
            conv.bias[kept:] = 0
        x = torch.randn(example.INPUT_SHAPE)
        torch.testing.assert_close(pruned(x), full(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("profile", builtin_names())
def test_estimates_grow_with_configuration(graphs, profile):
    """More groups cost more: strictly from the first configuration to the last, and never
    below the previous one by more than half the profile's own held-out conv kernel error
    (at least 2 %): a fitted tree model is not monotone in its features, and 3 groups lie
    between the calibrated 2 and 4 (onnxruntime-cpu, refitted 2026-12-01: 3 groups 5.5 %
    above 4, its conv kernels' held-out MAPE 13 %)."""
    estimator = Estimator(profile)
    times = [estimator(graphs[k]) for k in range(1, 5)]
    assert times[-1] > times[0], times
    held_out = estimator.profile.fit_metrics.get("held_out", {}).get("kinds", {})
    mape = held_out.get("conv", {}).get("mape", {}).get("mixed", 0.0)
    slack = max(0.02, mape / 200)
    assert all(later >= (1 - slack) * earlier for earlier, later in zip(times, times[1:])), (times, slack)


def test_smoke_run(tmp_path):
    """--smoke exits 0 and prints the estimate table (every built-in profile and an extra
    --profile file as columns), the per-target choices, and per measured runtime either a
    comparison with a calibrated profile or the plain 'no calibrated profile' line; the
    extra profile claims openvino-cpu with 1 thread, so that comparison is printed."""
    data = json.loads((Path(__file__).resolve().parents[1] / "annette_torch" / "profiles" / "builtin"
                       / "ncs2-myriad.json").read_text())
    data["name"] = "test-openvino-1t"
    data["fingerprint"].update(backend="openvino-cpu", threads=1)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(data))
    run = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--profile", str(profile),
                          "--budget-ms", "0.4", "zcu102-dpu=0.05"],
                         check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    header = out.split("Estimated latency (ms)\n", 1)[1].splitlines()[0].split()
    assert header == ["config", *builtin_names(), "test-openvino-1t"]
    for target in [*builtin_names(), "test-openvino-1t"]:
        assert any(line.split()[:1] == [target] and "budget" in line for line in out.splitlines())
    assert re.search(r"zcu102-dpu +budget 0.05 ms -> ", out)
    choices = out.split("by measurement and by estimate\n", 1)[1]
    assert re.search(r"openvino-cpu/1 +measured: budget 0.4 ms -> ", choices)
    assert re.search(r"estimate-based \(test-openvino-1t\): budget 0.4 ms -> .*(agrees|differs)", choices)
    assert re.search(r"torch-cpu/1 +measured: budget 0.4 ms -> ", choices)
    assert ("no calibrated profile for torch-cpu/1 thread yet: estimate-based choice not available" in choices
            or "estimate-based (" in choices.split("torch-cpu/1", 1)[1])
