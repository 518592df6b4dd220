"""Profiles for unseen devices: few-shot adaptation, zero-shot from descriptors, the
adaptation field of a profile and ``annette-torch adapt`` (measurement mocked)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

from annette_torch import Estimator, ProfileError, load_profile, trace
from annette_torch.backends import Latency, TorchCpu
from annette_torch.backends.openvino_cpu import OpenVinoCpu
from annette_torch.cli import main as cli_main
from annette_torch.layer_models.adapted import Adaptation
from annette_torch.measure import Protocol
from annette_torch.profiles import Profile
from annette_torch.transfer import (LOCAL_DESCRIPTORS, DeviceDescriptor, Network, Sample, SourceKernels,
                                    adapt_profile, backend_mapping, choose_source, draw, fit_adaptation,
                                    mapping_choices,
                                    profile_from_descriptor, source_kernels)
from annette_torch.transfer import adapt as adapt_command
from annette_torch.transfer.fewshot import remapped

SOURCE = "openvino-cpu"


def same_data(a: Profile, b: Profile) -> bool:
    """Equal ``to_dict()`` forms, numpy arrays (a tree ensemble's) compared by value."""
    return json.dumps(a.to_dict(), default=np.ndarray.tolist) == json.dumps(b.to_dict(), default=np.ndarray.tolist)


def small_net(width: int, depth: int) -> nn.Module:
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10)).eval()


class Fork(nn.Module):
    """Two branches that apply the same ReLU to one tensor: a graph optimizer computes it once."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width))
        self.a, self.b = nn.Conv2d(width, width, 3, padding=1), nn.Conv2d(width, width, 1)

    def forward(self, x):
        x = self.stem(x)
        return self.a(torch.relu(x)) + self.b(torch.relu(x))


@pytest.fixture(scope="module")
def graphs():
    shapes = [(8, 1), (16, 2), (32, 1), (24, 4), (48, 2), (64, 3), (12, 6), (96, 1)]
    return [trace(small_net(w, d), input_shape=(1, 3, 32, 32), name=f"net{w}x{d}") for w, d in shapes]


@pytest.fixture(scope="module")
def kernels(graphs):
    estimator = Estimator(SOURCE)
    return [SourceKernels.of(estimator, g) for g in graphs]


def synthetic(kernels, scale=1.0, per_kernel_ms=0.0):
    """Measured times of a device that is exactly the source corrected by (scale, per_kernel_ms)."""
    return [scale * k.time_ms.sum() + per_kernel_ms * len(k.time_ms) + k.overhead_ms for k in kernels]


def samples_of(graphs, times):
    return [Sample(g, t, set="a" if i % 2 else "b") for i, (g, t) in enumerate(zip(graphs, times))]


def test_zero_samples_reproduce_the_source_profile(graphs):
    source = load_profile(SOURCE)
    for adapted in (adapt_profile(source, []), adapt_profile(source, samples_of(graphs, [1.0] * 8), k=0)):
        assert adapted.adaptation is None
        assert same_data(adapted, source)
        assert [Estimator(adapted)(g) for g in graphs] == [Estimator(source)(g) for g in graphs]


def test_adaptation_is_deterministic_for_a_fixed_seed(graphs, kernels):
    samples = samples_of(graphs, synthetic(kernels, 1.3, 0.01))
    first = adapt_profile(SOURCE, samples, k=5, seed=3)
    again = adapt_profile(SOURCE, samples, k=5, seed=3)
    assert same_data(first, again)
    assert first.adaptation.seed == 3 and first.adaptation.samples == 5
    others = {adapt_profile(SOURCE, samples, k=5, seed=s).adaptation.reference_networks for s in range(6)}
    assert len(others) > 1                       # the seed picks the reference networks


def test_a_known_scale_is_recovered(graphs, kernels):
    adapted = adapt_profile(SOURCE, samples_of(graphs, synthetic(kernels, 1.7)))
    a = adapted.adaptation
    assert a.terms == ("scale",)
    assert a.compute_scale == pytest.approx(1.7) and a.memory_scale == pytest.approx(1.7)
    assert a.exponent == 1.0 and a.per_kernel_ms == 0.0
    assert a.fit["mape_after"] < 1e-6 < a.fit["mape_before"]


def test_a_per_kernel_cost_is_recovered_with_enough_samples(graphs, kernels):
    a = adapt_profile(SOURCE, samples_of(graphs, synthetic(kernels, 0.8, 0.02))).adaptation
    assert "per_kernel" in a.terms
    assert a.compute_scale == pytest.approx(0.8, rel=1e-6) and a.per_kernel_ms == pytest.approx(0.02, rel=1e-6)
    one = adapt_profile(SOURCE, samples_of(graphs[:1], synthetic(kernels[:1], 0.8, 0.02))).adaptation
    assert one.terms == ("scale",)               # one sample: the scale alone


def test_every_path_of_the_estimator_applies_the_adaptation(graphs, kernels, tmp_path):
    adaptation = Adaptation(compute_scale=0.5, memory_scale=2.0, exponent=1.1, per_kernel_ms=-0.001)
    adapted = dataclasses.replace(load_profile(SOURCE), adaptation=adaptation)
    estimator = Estimator(adapted)
    reloaded = Estimator(load_profile(adapted.save(tmp_path / "adapted.json")))
    for graph, k in zip(graphs, kernels):
        report = estimator.report(graph)
        assert estimator(graph) == pytest.approx(k.estimate_ms(adaptation))
        assert report.attrs["total_ms"] == pytest.approx(estimator(graph))
        assert report["time_ms"].sum() + report.attrs["overhead_ms"] == pytest.approx(estimator(graph))
        assert reloaded(graph) == pytest.approx(estimator(graph))
    times, compute = kernels[-1].time_ms, kernels[-1].compute
    on_torch = adaptation.kernel_ms(torch.as_tensor(times), torch.as_tensor(compute), xp=torch)
    assert np.allclose(on_torch.numpy(), adaptation.kernel_ms(times, compute))


@pytest.mark.parametrize("field, value, problem", [
    ("exponent", -1.0, "must be positive"),
    ("compute_scale", "2", "expected a finite number"),
    ("per_kernel_ms", float("nan"), "expected a finite number"),
    ("samples", -3, "non-negative integer"),
    ("reference_networks", "resnet18", "list of strings"),
    ("scale", 2.0, "unknown field"),
    ("fusion", "all", "expected one of source, none"),
    ("optimizes_graph", 1, "expected true, false or null"),
])
def test_an_invalid_adaptation_field_names_the_field(field, value, problem):
    data = load_profile(SOURCE).to_dict()
    data["adaptation"] = {**Adaptation().to_dict(), field: value}
    with pytest.raises(ProfileError, match=rf"'adaptation\.{field}': .*{problem}"):
        Profile.from_dict(data, source="bad.json")
    data["adaptation"] = [1, 2]
    with pytest.raises(ProfileError, match=r"'adaptation': expected an object"):
        Profile.from_dict(data, source="bad.json")


def test_the_mapping_choice_round_trips_and_the_estimator_honours_it(graphs, tmp_path):
    source = load_profile(SOURCE)
    assert source.optimizes_graph and source.mapping
    fork = trace(Fork(16).eval(), input_shape=(1, 3, 32, 32), name="fork")
    assert fork.folded                                   # the repeated ReLU
    correction = dict(compute_scale=1.3, memory_scale=0.9, exponent=1.05, per_kernel_ms=0.002)
    unfused = Adaptation(**correction, fusion="none", optimizes_graph=True)   # no fusion, graph optimized
    eager = Adaptation(**correction, fusion="none", optimizes_graph=False)
    for adaptation in (unfused, eager):
        adapted = dataclasses.replace(source, adaptation=adaptation)
        reloaded = load_profile(adapted.save(tmp_path / f"{adaptation.mapping_label}.json"))
        assert reloaded.adaptation == adaptation and same_data(reloaded, adapted)
        assert reloaded.mapping == source.mapping      # the source's rules stay in the profile
        assert same_data(dataclasses.replace(reloaded, adaptation=None), source)
    assert (unfused.mapping_label, eager.mapping_label) == ("unfused", "eager")
    no_rules = Estimator(source, use_mapping=False)
    not_folded = Estimator(dataclasses.replace(source, mapping=(), optimizes_graph=False, merges_elementwise=False))
    for graph in [*graphs, fork]:
        # no fusion (and, as the source, graph optimized): the source's estimate with
        # use_mapping=False, each kernel corrected
        expected = SourceKernels.of(no_rules, graph).estimate_ms(unfused)
        assert Estimator(dataclasses.replace(source, adaptation=unfused))(graph) == pytest.approx(expected)
        table = Estimator(dataclasses.replace(source, adaptation=unfused)).kernel_table(graph)
        layer_kernels = [layers for layers in table.layers if layers]           # not the output reorders
        assert len(layer_kernels) == len(graph.layers) and all(len(layers) == 1 for layers in layer_kernels)
        assert Estimator(dataclasses.replace(source, adaptation=eager))(graph) == pytest.approx(
            SourceKernels.of(not_folded, graph).estimate_ms(eager))
    eager_fork = Estimator(dataclasses.replace(source, adaptation=eager)).report(fork)
    unfused_fork = Estimator(dataclasses.replace(source, adaptation=unfused)).report(fork)
    assert (eager_fork["bound"] == "free").sum() < (unfused_fork["bound"] == "free").sum()
    layers_ms = [r.loc[r["kind"] != "output_reorder", "time_ms"].sum() for r in (eager_fork, unfused_fork)]
    assert layers_ms[0] > layers_ms[1]                                   # the ReLU runs twice
    assert "output_reorder" not in set(eager_fork["kind"])              # eager torch returns NCHW as computed
    with pytest.raises(ValueError, match="'adaptation.fusion'"):
        Adaptation(fusion="some")


def test_few_shot_finds_a_target_that_does_not_fuse(graphs):
    source = load_profile(SOURCE)
    assert mapping_choices(source) == [("source", None), ("none", True), ("none", False)]
    assert mapping_choices(load_profile("torch-cpu")) == [("source", None), ("none", True)]   # eager is the source
    fork = trace(Fork(24).eval(), input_shape=(1, 3, 32, 32), name="fork")
    nets = [*graphs, fork]
    eager = [SourceKernels.of(Estimator(remapped(source, ("none", False))), g) for g in nets]
    measured = synthetic(eager, 1.4)                     # an eager device 1.4x slower than the source
    adapted = adapt_profile(source, samples_of(nets, measured), mapping="choose")
    a = adapted.adaptation
    assert (a.fusion, a.optimizes_graph, a.terms) == ("none", False, ("scale",))
    assert a.compute_scale == pytest.approx(1.4) and a.fit["mape_after"] < 1e-6
    assert a.fit["candidates"]["eager/scale"] < a.fit["candidates"]["source/scale"]
    estimator = Estimator(adapted)
    assert [estimator(g) for g in nets] == pytest.approx(measured)
    kept = adapt_profile(source, samples_of(nets, measured)).adaptation          # default: the source's
    assert (kept.fusion, kept.optimizes_graph) == ("source", None) and kept.fit["mape_after"] > 0.1
    fixed = adapt_profile(source, samples_of(nets, measured), mapping="eager").adaptation
    assert fixed.to_dict()["fit"]["candidates"] == {k: v for k, v in a.fit["candidates"].items() if "eager" in k}
    assert fixed.fit["mape_after"] < 1e-6 < fixed.fit["mape_before"] == pytest.approx(a.fit["mape_before"])
    with pytest.raises(ValueError, match="mapping must be 'choose', one of source, unfused, eager"):
        adapt_profile(source, samples_of(nets, measured), mapping="fused")
    # fit_adaptation on precomputed kernels: a plain sequence is the source mapping's
    by_mapping = source_kernels(source, nets)
    assert list(by_mapping) == mapping_choices(source)
    again = fit_adaptation(by_mapping, measured)
    assert (again.fusion, again.optimizes_graph, again.terms, again.compute_scale) == (
        a.fusion, a.optimizes_graph, a.terms, a.compute_scale)
    plain = fit_adaptation(by_mapping[("source", None)], measured)
    assert (plain.fusion, plain.optimizes_graph) == ("source", None)
    with pytest.raises(ValueError, match="give the mapping too"):
        fit_adaptation(by_mapping, measured, terms=("scale",))
    assert fit_adaptation(by_mapping, measured, terms=("scale",), mapping=("none", False)).compute_scale == \
        pytest.approx(1.4)


def test_draw_is_stratified_and_checks_k():
    items = [Network("big" if i < 3 else "small", f"n{i}", (1,), nn.Identity) for i in range(12)]
    picked = draw(items, 4, seed=0)
    assert len(picked) == 4 and {n.set for n in picked} == {"big", "small"}
    assert draw(items, 4, seed=0) == picked
    assert draw(items, 12, seed=5) == items
    with pytest.raises(ValueError, match="between 0 and 12"):
        draw(items, 13, seed=0)


def test_draw_by_size_takes_one_from_each_run_of_sizes():
    items = [Network("cells", f"n{i}", (1,), nn.Identity) for i in range(12)]
    size = {f"n{i}": (i * 7) % 12 for i in range(12)}                # sizes 0..11, not in list order
    for seed in range(5):
        picked = draw(items, 3, seed=seed, size=lambda n: size[n.name])
        assert sorted(size[n.name] // 4 for n in picked) == [0, 1, 2]  # one of the 4 smallest, middle, largest
        assert draw(items, 3, seed=seed, size=lambda n: size[n.name]) == picked
    assert draw(items, 12, seed=1, size=lambda n: size[n.name]) == items


def test_choose_source_prefers_the_source_the_samples_follow(graphs, kernels):
    samples = samples_of(graphs, synthetic(kernels, 1.0, 0.05))
    index, scores = choose_source(["torch-cpu", SOURCE], samples)
    assert index == 1 and set(scores) == {"torch-cpu", SOURCE}


def test_zero_shot_scales_compute_and_memory_by_the_descriptor_ratios(graphs):
    target = DeviceDescriptor("openvino-cpu", "bf16", threads=1, peak_ops_s=4e11, memory_bandwidth_bytes_s=1e11)
    sources = [("torch-cpu", LOCAL_DESCRIPTORS["torch-cpu"]), (SOURCE, LOCAL_DESCRIPTORS[SOURCE])]
    profile = profile_from_descriptor(target, sources)
    a = profile.adaptation
    assert a.source == SOURCE and a.method == "descriptor"     # the same runtime wins
    assert a.compute_scale == pytest.approx(LOCAL_DESCRIPTORS[SOURCE].peak_ops_s / 4e11)
    assert a.memory_scale == pytest.approx(LOCAL_DESCRIPTORS[SOURCE].memory_bandwidth_bytes_s / 1e11 * 2 / 4)
    assert profile.fingerprint["precision"] == "bf16"
    unknown = profile_from_descriptor(DeviceDescriptor("tvm-cpu"), sources).adaptation
    assert (unknown.compute_scale, unknown.memory_scale) == (1.0, 1.0)
    assert unknown.fit["unknown_ratios_taken_as_1"] == ["peak_ops_s", "memory_bandwidth_bytes_s"]
    with pytest.raises(ValueError, match="'threads': expected a positive integer"):
        DeviceDescriptor("openvino-cpu", threads=0)
    with pytest.raises(ValueError, match="'peak_flops': unknown"):
        DeviceDescriptor.from_dict({"runtime": "openvino-cpu", "peak_flops": 1e12})


def test_cli_adapt_measures_references_and_writes_the_profile(tmp_path, monkeypatch, capsys):
    pool = [Network("mobile", "tiny", (1, 3, 32, 32), lambda: small_net(8, 1)),
            Network("large", "wide", (1, 3, 32, 32), lambda: small_net(64, 3)),
            Network("nb201", "deep", (1, 3, 32, 32), lambda: small_net(12, 6))]
    monkeypatch.setattr(adapt_command, "reference_pool", lambda: pool)
    from annette_torch.transfer.fewshot import MAPPING_NAMES, remapped
    # a device 1.5x slower than the source's kernels mapped as the adaptation maps them
    # (eager: every layer its own kernel; then the source's own fusion)
    source = {"estimator": Estimator(remapped(load_profile(SOURCE), MAPPING_NAMES["eager"]))}

    def fake_measure(self, model, input_shape, warmup=5, repeats=25):
        return Latency.from_runs([1.5 * source["estimator"](model, input_shape=input_shape)] * repeats, self.threads)

    monkeypatch.setattr(TorchCpu, "measure", fake_measure)
    out = tmp_path / "adapted.json"
    fake_protocol = ["--rounds", "3", "--drift", "none", "--compile", "each-round", "--across-rounds", "pool"]
    assert cli_main(["adapt", "--from", f"torch-cpu,{SOURCE}", "--backend", "torch-cpu", "--samples", "3",
                     "--seed", "1", *fake_protocol, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "adapting openvino-cpu" in printed and "correction (scale)" in printed and f"wrote {out}" in printed
    assert "mapping: eager (no fusion, graph not optimized)" in printed     # what torch-cpu declares
    profile = load_profile(out)
    assert profile.name == f"torch-cpu-1t-f32-from-{SOURCE}"
    assert profile.fingerprint["backend"] == "torch-cpu"
    assert profile.adaptation.samples == 3 and profile.adaptation.seed == 1
    assert sorted(profile.adaptation.reference_networks) == ["deep", "tiny", "wide"]
    assert (profile.adaptation.fusion, profile.adaptation.optimizes_graph) == ("none", False)
    assert profile.adaptation.compute_scale == pytest.approx(1.5, rel=0.05)
    source["estimator"] = Estimator(SOURCE)
    assert cli_main(["adapt", "--from", SOURCE, "--backend", "torch-cpu", "--samples", "3", "--mapping", "source",
                     *fake_protocol, "--out", str(out)]) == 0
    assert "mapping: source (openvino-cpu's fusion rules, graph optimized)" in capsys.readouterr().out
    assert load_profile(out).adaptation.compute_scale == pytest.approx(1.5, rel=0.05)
    assert backend_mapping(TorchCpu) == ("none", False) and backend_mapping(OpenVinoCpu) == ("source", None)


def test_cli_adapt_from_a_descriptor_and_its_errors(tmp_path, capsys):
    descriptor = tmp_path / "device.json"
    descriptor.write_text(json.dumps({"runtime": "openvino-cpu", "precision": "f32", "threads": 4,
                                      "peak_ops_s": 4 * 32 * 2.6e9, "memory_bandwidth_bytes_s": 4 * 32 * 2.6e9}))
    out = tmp_path / "zero.json"
    assert cli_main(["adapt", "--descriptor", str(descriptor), "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.adaptation.source == "openvino-cpu-2t"            # same runtime, nearest thread count
    assert profile.adaptation.compute_scale == pytest.approx(0.5)
    assert cli_main(["adapt", "--from", SOURCE, "--out", str(out)]) == 2
    assert "adapt needs --from, --backend and --samples" in capsys.readouterr().err
    descriptor.write_text(json.dumps({"runtime": "openvino-cpu", "precision": "int4"}))
    assert cli_main(["adapt", "--descriptor", str(descriptor), "--out", str(out)]) == 2
    assert "'precision': expected one of" in capsys.readouterr().err


def test_adapt_draws_its_references_across_the_sizes_of_each_set(monkeypatch):
    pool = [Network("nb201", f"w{w}", (1, 3, 32, 32), lambda w=w: small_net(w, 2)) for w in (64, 4, 48, 8)]
    monkeypatch.setattr(adapt_command, "reference_pool", lambda: pool)
    monkeypatch.setattr(TorchCpu, "measure", lambda self, model, input_shape, warmup=5, repeats=25:
                        Latency.from_runs([1.0] * repeats, self.threads))
    for seed in range(4):
        samples = adapt_command.measure_references(TorchCpu(), 2, seed, Protocol(rounds=1, warmup=0, repeats=2))
        small, large = sorted((s.name for s in samples), key=lambda name: int(name[1:]))
        assert small in ("w4", "w8") and large in ("w48", "w64")     # one of each half, never two of one
        assert all(s.graph.model_name == s.name for s in samples)


def test_check_measures_reference_networks_and_says_whether_the_profile_holds_here(monkeypatch, capsys):
    """``annette-torch check``: the profile's estimates of freshly measured reference networks,
    exit 0 within --tolerance, 1 beyond it with the adapt command; a profile of a runtime
    this machine does not run is refused, naming it."""
    pool = [Network("nb201", f"w{w}", (1, 3, 32, 32), lambda w=w: small_net(w, 2)) for w in (64, 4, 48, 8)]
    monkeypatch.setattr(adapt_command, "reference_pool", lambda: pool)
    monkeypatch.setattr(TorchCpu, "measure", lambda self, model, input_shape, warmup=5, repeats=25:
                        Latency.from_runs([1.0] * repeats, self.threads))
    result = adapt_command.check_profile(load_profile("torch-cpu"), TorchCpu(), 2, 0,
                                         Protocol(rounds=1, warmup=0, repeats=20, drift="none"))
    est = Estimator("torch-cpu")
    errors = [est(trace(next(n for n in pool if n.name == name).build(), input_shape=(1, 3, 32, 32))) / 1.0 - 1
              for _, name, _, _ in result.rows]
    assert len(result.rows) == 2 and all(m == pytest.approx(1.0) for _, _, m, _ in result.rows)
    assert result.mean_abs_error == pytest.approx(np.mean(np.abs(errors)))
    assert result.median_error == pytest.approx(np.median(errors))
    args = ["check", "--profile", "torch-cpu", "--samples", "2", "--rounds", "1", "--warmup", "0", "--repeats", "20",
            "--drift", "none", "--compile", "each-round"]
    assert cli_main(args + ["--tolerance", "1e9"]) == 0
    assert "profile 'torch-cpu' holds on this machine now" in capsys.readouterr().out
    assert cli_main(args + ["--tolerance", "0"]) == 1
    out = capsys.readouterr().out
    assert "is off on this machine now" in out and "annette-torch adapt --from torch-cpu --backend torch-cpu" in out
    assert cli_main(["check", "--profile", "ncs2-myriad"]) == 2
    assert "not a runtime of this machine's CPU" in capsys.readouterr().err


def test_an_adapted_profile_counts_dilated_convs_as_its_target_runs_them():
    """Which dilated convs compute their padding is the target backend's property:
    openvino-cpu adapted for torch-cpu counts DeepLab's dilation-24 conv in full, torch-cpu
    adapted for OpenVINO does not, and a board profile keeps its own conventions."""
    from torch import nn

    from annette_torch import Estimator
    from annette_torch.backends import BACKENDS
    from annette_torch.profiles import load_profile

    def ratio(profile):       # dilation 24 / dilation 1, 960 -> 256 on 20x20
        est = Estimator(profile)
        ms = [est(nn.Conv2d(960, 256, 3, padding=d, dilation=d).eval(), input_shape=(1, 960, 20, 20)) for d in (24, 1)]
        return ms[0] / ms[1]

    assert ratio(load_profile("openvino-cpu").counted_as(BACKENDS["torch-cpu"].counting)) == pytest.approx(1.0)
    assert ratio(load_profile("torch-cpu").counted_as(BACKENDS["openvino-cpu"].counting)) < 0.3
    board = load_profile("ncs2-myriad")
    assert board.counted_as(BACKENDS["openvino-cpu"].counting).counting == board.counting
