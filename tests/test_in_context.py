"""``calibrate --for``: kernels measured in context, stored by signature, consulted by the estimator."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from annette_torch import Estimator, trace
from annette_torch.backends.torch_cpu import LayerTimer, _module_hooks
from annette_torch.calibration.in_context import calibrate_for, tie_kernels
from annette_torch.calibration.store import StoreError
from annette_torch.cli import main as cli_main
from annette_torch.measure import Protocol
from annette_torch.measure.kernel_table import KERNELS_FILE, KernelTableError, MeasuredKernels, kernel_signatures
from annette_torch.nas import SignatureCache

pytestmark = pytest.mark.filterwarnings("ignore::annette_torch.measure.BusyMachineWarning",
                                        "ignore::annette_torch.profiles.fingerprint.ProfileMismatchWarning")

MODELS = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x))) + x


def two_blocks():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Block(8), Block(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))


def one_block():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Block(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))
'''
SHAPE = (1, 3, 16, 16)
QUICK = ["--rounds", "2", "--warmup", "1", "--repeats", "2", "--input-shape", "1,3,16,16"]


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _model(models, name):
    """The network ``name`` of the models file, built, in eval mode."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("models", models)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)().eval()


def _graph(models, name):
    return trace(_model(models, name), input_shape=SHAPE, name=name)


def _rows(folder):
    import pandas as pd
    return pd.read_csv(Path(folder) / KERNELS_FILE)


def test_for_measures_each_distinct_kernel_once_and_the_estimate_uses_them(models, tmp_path, capsys):
    out = tmp_path / "measured"
    specs = [f"{models}:two_blocks", f"{models}:one_block"]
    assert cli_main(["calibrate", "--backend", "onnxruntime-cpu", "--for", *specs, "--out", str(out), *QUICK,
                     "--drift", "canary"]) == 0
    printed = capsys.readouterr().out
    assert "models:two_blocks: measured" in printed and "estimate" in printed
    assert "models:one_block: not measured, its kernels are in the table or in a network measured before it" in printed
    folder = next(out.iterdir())
    assert json.loads((folder / "fingerprint.json").read_text())["backend"] == "onnxruntime-cpu"
    record = json.loads((folder / "protocol.json").read_text())
    assert record["statistic"] == "p10" and record["drift"] == "canary" and record["canary_ms"] > 0

    estimator = Estimator("onnxruntime-cpu")
    graphs = [_graph(models, "two_blocks"), _graph(models, "one_block")]
    distinct = set()
    for graph in graphs:
        table = estimator.kernel_table(graph)
        distinct |= {s for s, free in zip(kernel_signatures(table), table.free) if not free}
    rows = _rows(folder)
    assert sorted(rows["signature"]) == sorted(distinct)           # every distinct kernel, each once
    assert (rows["time_ms"] >= 0).all() and set(rows["tie"]) <= {"exact", "shared"}
    assert set(rows["network"]) == {"models:two_blocks"}
    assert rows.set_index("kind").loc["conv", "occurrences"].max() == 2     # the two blocks' convs: one kernel

    before = (folder / KERNELS_FILE).read_bytes()
    again = calibrate_for(specs, "onnxruntime-cpu", out, input_shape=SHAPE, progress=False,
                          protocol=Protocol(rounds=1, warmup=1, repeats=2, drift="canary", across_rounds="median"))
    assert again.results == [] and again.skipped == ["models:two_blocks", "models:one_block"]
    assert (folder / KERNELS_FILE).read_bytes() == before            # nothing measured or written twice

    table = MeasuredKernels.load(folder)
    measured = Estimator("onnxruntime-cpu", measured=folder)
    for graph in graphs:
        report = measured.report(graph)
        executed = report[report["bound"] != "free"]
        assert (executed["layer_model"] == "measured").all() and (executed["profile_entry"] == "measured").all()
        kernels = estimator.kernel_table(graph)
        expected = sum(table.times_ms[s] for s, free in zip(kernel_signatures(kernels), kernels.free) if not free)
        assert measured(graph) == pytest.approx(expected + measured.profile.overhead_ms)
        assert report.attrs["total_ms"] == pytest.approx(measured(graph))
        assert SignatureCache(measured).graph_time_ms(graph) == pytest.approx(expected)
    assert (estimator.report(graphs[0])["layer_model"] != "measured").all()      # without the table: the models
    assert Estimator("onnxruntime-cpu", measured=out).measured.folder == folder   # the --out root finds its table

    assert cli_main(["estimate", f"{models}:one_block", "--input-shape", "1,3,16,16", "--profile", "onnxruntime-cpu",
                     "--measured", str(folder)]) == 0
    printed = capsys.readouterr().out
    assert "measured" in printed.split("\n", 1)[1]               # the layer_model column
    assert printed.splitlines()[-1].endswith("(100 %) measured on this machine")


def test_a_table_of_another_device_or_a_bad_row_is_refused(models, tmp_path):
    out = tmp_path / "measured"
    summary = calibrate_for([f"{models}:one_block"], "torch-cpu", out, protocol=Protocol(rounds=1, warmup=1, repeats=2,
                                                                                          drift="none"),
                            input_shape=SHAPE, progress=False)
    assert len(summary.results) == 1 and summary.results[0].new_kernels == summary.results[0].kernels
    first = summary.results[0]                     # stored scaled to add up to the end-to-end time
    overhead = Estimator("torch-cpu").profile.overhead_ms
    assert first.scale * first.kernels_ms + overhead == pytest.approx(first.measured_ms, rel=1e-9)
    assert f"stored x{first.scale:.3f}" in str(first)
    with pytest.raises(KernelTableError, match="profile 'onnxruntime-cpu' describes another device"):
        Estimator("onnxruntime-cpu", measured=summary.folder)
    with pytest.raises(StoreError, match="continue it with --statistic p10 --drift none"):
        calibrate_for([f"{models}:two_blocks"], "torch-cpu", out, protocol=Protocol(rounds=1, drift="canary"),
                      input_shape=SHAPE,
                      progress=False)
    path = summary.folder / KERNELS_FILE
    text = path.read_text().splitlines()
    fields = text[1].split(",")
    fields[-6] = "-1"                                               # time_ms
    path.write_text("\n".join([text[0], ",".join(fields), *text[2:]]) + "\n")
    with pytest.raises(KernelTableError, match=r"kernels.csv line 2: field 'time_ms' must be finite and >= 0"):
        MeasuredKernels.load(summary.folder)
    with pytest.raises(KernelTableError, match="not a table of measured kernels"):
        MeasuredKernels.load(tmp_path)


class _Table:
    """The parts of a KernelTable that tie_kernels reads."""

    def __init__(self, layers, free):
        self.layers = layers
        self.free = np.array(free)

    def __len__(self):
        return len(self.layers)


def test_kernels_are_tied_through_the_layers_they_compute():
    # estimator kernels: conv+bn | relu | add | flatten (free) | fc
    table = _Table([("conv", "bn"), ("relu",), ("add",), ("flatten",), ("fc",)], [False, False, False, True, False])
    rows = [{"layer": "conv", "status": "executed", "fused_into": "", "time_ms": 3.0},
            {"layer": "bn", "status": "fused", "fused_into": "conv", "time_ms": 0.0},
            {"layer": "relu", "status": "fused", "fused_into": "conv", "time_ms": 0.0},    # the runtime fused more
            {"layer": "add", "status": "executed", "fused_into": "", "time_ms": 0.5},
            {"layer": "flatten", "status": "executed", "fused_into": "", "time_ms": 0.25},  # a free kernel ran
            {"layer": "fc", "status": "executed", "fused_into": "", "time_ms": 1.0},
            {"layer": "", "status": "executed", "fused_into": "", "time_ms": 0.125}]        # a layout reorder
    times, ties, untied = tie_kernels(table, rows, np.array([2.0, 1.0, 0.4, 0.0, 0.9]))
    assert times[:2] == pytest.approx([2.0, 1.0])                   # conv+bn+relu's 3 ms split 2:1 as predicted
    assert ties == ["shared", "shared", "exact", "", "exact"]
    assert times[2] == 0.5 and np.isnan(times[3]) and times[4] == 1.0
    assert untied == pytest.approx(0.375)


def test_output_reorders_are_tied_to_the_output_reorder_kernel():
    table = _Table([("conv",), ()], [False, False])      # conv | the reorder of its returned map
    table.groups = {"conv": np.array([0]), "output_reorder": np.array([1])}
    rows = [{"layer": "conv", "status": "executed", "fused_into": "", "time_ms": 3.0, "kernel": "/conv/Conv"},
            {"layer": "", "status": "executed", "fused_into": "", "time_ms": 0.5, "kernel": "9_acdb_abcd_9/sink_port_0"},
            {"layer": "", "status": "executed", "fused_into": "", "time_ms": 0.25, "kernel": "input_abcd_acdb_/conv/Conv"}]
    times, ties, untied = tie_kernels(table, rows, np.array([2.0, 0.4]), r"/sink_port_\d+$")
    assert list(times) == [3.0, 0.5] and ties == ["exact", "exact"] and untied == pytest.approx(0.25)
    times, _, untied = tie_kernels(table, rows, np.array([2.0, 0.4]))          # a backend without them
    assert times[0] == 3.0 and np.isnan(times[1]) and untied == pytest.approx(0.75)


def test_a_layer_timed_inside_another_is_left_out_of_its_time():
    class Slow(nn.Module):
        def forward(self, x):
            for _ in range(200):
                x = x + 1
            return x

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Slow()

        def forward(self, x):
            return self.inner(x) * 2

    model = Outer()
    timer = LayerTimer()
    with _module_hooks(model, ["", "inner"], timer.enter, timer.leave), torch.no_grad():
        model(torch.zeros(4))
    times = timer.times()
    assert times["inner"][0] > 5 * times[""][0]      # the outer call's own work is one multiply


def test_the_profile_method_can_take_a_networks_time_as_the_median_over_rounds(models, tmp_path, monkeypatch):
    """With ``across_rounds="median"`` a network's kernels are scaled to the median over
    rounds of each round's statistic, as the accuracy benchmark's ground truth takes it:
    one round that ran 5x fast (a drift the canary did not see) moves the pooled p10 and
    not the median. The end-to-end runs are set (1 ms, 0.2 in the fast round), not timed:
    on a busy machine a real round's own spread hid the difference (2026-12-06)."""
    from dataclasses import replace

    from annette_torch.backends import get_backend
    from annette_torch.backends.base import Latency

    backend_class = type(get_backend("torch-cpu"))
    real = backend_class.profile
    calls: list[int] = []

    def profile(self, *args, **kwargs):
        profiled = real(self, *args, **kwargs)
        factor = 0.2 if len(calls) % 3 == 0 else 1.0           # the first of each network's 3 rounds
        calls.append(1)
        return replace(profiled, latency=Latency.from_runs([factor] * len(profiled.latency.runs_ms),
                                                           profiled.latency.threads))

    monkeypatch.setattr(backend_class, "profile", profile)
    found = {}
    for across in ("pool", "median"):
        summary = calibrate_for([f"{models}:one_block"], "torch-cpu", tmp_path / across, input_shape=SHAPE,
                                protocol=Protocol(rounds=3, warmup=1, repeats=4, across_rounds=across), progress=False)
        (result,) = summary.results
        assert result.table_ms == pytest.approx(result.measured_ms, rel=1e-6)    # the kernels add up to it
        assert json.loads((next((tmp_path / across).iterdir()) / "protocol.json").read_text())["across_rounds"] == across
        found[across] = result.measured_ms
    assert found["median"] > 2.5 * found["pool"]


def test_calibrate_for_defaults_to_the_ground_truths_protocol_and_a_campaign_keeps_its_own(models, tmp_path,
                                                                                             capsys):
    """``calibrate --for`` without protocol options measures as the accuracy benchmark's
    ground truth does (12 rounds, canary, median over rounds), its tables being scaled to
    such times; a campaign keeps 2 pooled rounds without drift correction."""
    out = tmp_path / "for"
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--for", f"{models}:one_block", "--out", str(out),
                     "--input-shape", "1,3,16,16", "--repeats", "2", "--warmup", "1"]) == 0
    assert "12 interleaved round(s)" in capsys.readouterr().out
    record = json.loads((next(out.iterdir()) / "protocol.json").read_text())
    assert (record["drift"], record["across_rounds"]) == ("canary", "median")
    campaign = tmp_path / "campaign"
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--out", str(campaign),
                     "--minutes", "0.01", "--repeats", "2", "--warmup", "1"]) == 0
    record = json.loads((next(campaign.iterdir()) / "protocol.json").read_text())
    assert (record["drift"], record.get("across_rounds", "pool")) == ("none", "pool")


def test_calibrate_weight_rereads_needs_a_store_and_runs_on_its_own(tmp_path, capsys):
    """``calibrate --weight-rereads`` writes into an existing store of the machine's
    backend, and names what it cannot be combined with."""
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--weight-rereads", "torchvision:resnet18",
                     "--out", str(tmp_path)]) == 2
    assert "not a store of this machine's torch-cpu: measure a sweep into it first" in capsys.readouterr().err
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--weight-rereads", "torchvision:resnet18",
                     "--sweep", "smoke", "--out", str(tmp_path)]) == 2
    assert "leave out --sweep" in capsys.readouterr().err


def test_weight_rereads_profile_an_onnx_file_and_name_what_they_cannot_measure(models, tmp_path, monkeypatch):
    """``measure_weight_rereads`` profiles an ONNX file on an ONNX backend and fits the
    kernels that hold weights; on torch it says the backend cannot run the file, as
    ``calibrate --for`` does before measuring anything, and a
    token-input model is refused as one the backends cannot feed."""
    from annette_torch.backends import get_backend
    from annette_torch.backends.base import export_onnx
    from annette_torch.calibration import weight_rereads

    path = str(export_onnx(_model(models, "two_blocks"), SHAPE, tmp_path / "two_blocks.onnx"))
    fitted = []
    monkeypatch.setattr(weight_rereads, "fit_rereads", lambda rows, up_to: fitted.append(rows) or ([1.0], 1e10))
    summary = weight_rereads.measure_weight_rereads(get_backend("onnxruntime-cpu"), "onnxruntime-cpu", [path],
                                                    passes=1, warmup=1, repeats=2)
    (estimated_ms, measured_ms, weight_bytes), = fitted[0]
    assert summary["networks"][0]["network"] == path and summary["kernels"] == len(weight_bytes) >= 4
    assert summary["profile"] == "onnxruntime-cpu" and len(summary["profile_sha256"]) == 64   # no file path
    assert (weight_bytes > 0).all() and (measured_ms > 0).all() and (estimated_ms > 0).all()
    with pytest.raises(ValueError, match="torch-cpu cannot run an ONNX file"):
        weight_rereads.measure_weight_rereads(get_backend("torch-cpu"), "torch-cpu", [path], passes=1, warmup=1,
                                              repeats=2)
    with pytest.raises(ValueError, match="calibrate --for: torch-cpu cannot run an ONNX file"):
        calibrate_for([path], "torch-cpu", tmp_path / "table")
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="calibrate --weight-rereads measures networks of one float input"):
        weight_rereads.measure_weight_rereads(get_backend("onnxruntime-cpu"), "onnxruntime-cpu", ["hf:GPT2Config"])
