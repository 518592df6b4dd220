"""The prior-corrected fit (annette_torch.fit.prior): stores built with the store API from
the prior's own predictions, no runtime."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from annette_torch import Estimator, trace
from annette_torch.calibration import BenchmarkSpec, MeasurementStore, build_benchmark, load_sweep
from annette_torch.cli import main
from annette_torch.fit.overhead import Gap
from annette_torch.fit.prior import fit_prior_corrected
from annette_torch.mapping import FusionRule
from annette_torch.nas.nasbench201 import NB201Network
from annette_torch.profiles import load_profile
from annette_torch.profiles.fingerprint import ProfileMismatchWarning
from annette_torch.profiles.profile import profile_digest

PRIOR = "openvino-cpu"
#: a store of no local runtime: no machine check, the fit takes it as this machine's
FINGERPRINT = {"backend": "openvino-cpu", "threads": 1, "precision": "f32", "runtime_version": "0", "cpu": "test cpu"}


def _estimator(profile, **options) -> Estimator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileMismatchWarning)
        return Estimator(profile, **options)


def synthetic_store(root, prior, specs, factor: float, kinds=None, unfused=()):
    """A store whose benchmarks took ``factor`` times what ``prior`` estimates, every kernel
    grouped as the prior groups it: each primary layer executed with the kernel's time in
    profiler terms ((factor * estimate - per-kernel overhead) unscaled by the prior's gap, so
    that in end-to-end terms it is ``factor`` times the prior's), the layers fused into it
    fused. ``kinds``: only kernels of these kinds are measured (others: not executed);
    layers of the kinds in ``unfused`` ran as kernels of their own (1 us each)."""
    estimator = _estimator(prior, weights_from_memory=False)
    gap = Gap.from_dict(prior.fit_metrics["gap"])
    grid = np.logspace(-7, 5, 4000)

    def profiled(end_to_end_ms: float) -> float:     # the inverse of gap.scaled (increasing)
        return float(np.interp(end_to_end_ms, gap.scaled(grid), grid))
    with MeasurementStore.open(root, FINGERPRINT) as store:
        for spec in specs:
            module, shape = build_benchmark(spec)
            graph = trace(module, input_shape=shape, name=spec.id)
            times = estimator.kernel_times(graph)
            table, rows = times.table, []
            for k in np.flatnonzero(~table.free):
                if not table.layers[k]:          # an output reorder: a runtime row, named as OpenVINO names it
                    rows.append({"benchmark": spec.id, "layer": "", "kernel": f"{table.names[k]}/sink_port_0",
                                 "status": "executed", "spread": 0.01,
                                 "time_ms": profiled(factor * times.time_ms[k] - prior.kernel_overhead_ms)})
                    continue
                primary, *fused = table.layers[k]
                measured = kinds is None or table.kinds[k] in kinds
                ms = profiled(factor * times.time_ms[k] - prior.kernel_overhead_ms)
                rows.append({"benchmark": spec.id, "layer": primary, "kind": graph[primary].kind,
                             "status": "executed" if measured else "optimized", "time_ms": ms if measured else 0.0,
                             "spread": 0.01})
                rows += [{"benchmark": spec.id, "layer": name, "kind": graph[name].kind, "status": "fused",
                          "fused_into": primary, "time_ms": 0.0, "spread": 0.01}
                         if graph[name].kind not in unfused else
                         {"benchmark": spec.id, "layer": name, "kind": graph[name].kind, "status": "executed",
                          "time_ms": 0.001, "spread": 0.01} for name in fused]
            total = factor * times.total_ms
            store.append({"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "ok",
                          "time_ms": total, "spread": 0.01, "repeats": 10, "layers_sum_ms": total,
                          "kernels": len(rows), "wall_s": 0.5}, rows)
        return store.folder


def _networks():
    import torchvision
    return [trace(torchvision.models.resnet18().eval(), input_shape=(1, 3, 224, 224), name="resnet18"),
            trace(torchvision.models.mobilenet_v2().eval(), input_shape=(1, 3, 224, 224), name="mobilenet_v2"),
            trace(NB201Network("|nor_conv_3x3~0|+|skip_connect~0|nor_conv_1x1~1|+|avg_pool_3x3~0|none~1|nor_conv_3x3~2|",
                               C=8, N=1).eval(), input_shape=(1, 3, 32, 32), name="nb201")]


@pytest.fixture(scope="module")
def prior():
    return load_profile(PRIOR)


@pytest.fixture(scope="module")
def quick_specs():
    """A few benchmarks of every family of the quick sweep (in the sweep's order)."""
    picked: dict[str, list] = {}
    for spec in load_sweep("quick"):
        if len(picked.setdefault(spec.family, [])) < 4:
            picked[spec.family].append(spec)
    return [spec for specs in picked.values() for spec in specs]


def test_zero_samples_reproduce_the_prior_exactly(tmp_path, prior):
    spec = load_sweep("smoke")[0]
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:       # one benchmark, failed: no samples
        store.append({"benchmark": spec.id, "family": spec.family, "spec": spec.to_json(), "status": "failed",
                      "error": "RuntimeError: it broke"}, [])
        folder = store.folder
    corrected = fit_prior_corrected(folder, PRIOR)
    assert corrected.correction.layer_models == {}
    assert corrected.fit_metrics["samples_per_kind"] == {}
    assert corrected.fit_metrics["prior"] == {"name": PRIOR, "sha256": profile_digest(prior), "source": prior.source}
    assert corrected.correction.prior_sha256 == profile_digest(prior)
    before, after = _estimator(prior), _estimator(corrected)
    for graph in _networks():
        assert after(graph) == before(graph)
        assert list(after.report(graph)["time_ms"]) == list(before.report(graph)["time_ms"])


def test_a_uniform_slowdown_is_recovered_within_a_percent(tmp_path, prior, quick_specs):
    folder = synthetic_store(tmp_path, prior, quick_specs, 1.3)
    corrected = fit_prior_corrected(folder, PRIOR)
    factors = {kind: np.exp(c.log_scale) for kind, c in corrected.correction.layer_models["mixed"].items()}
    assert {"conv", "depthwise_conv", "linear", "max_pool"} <= set(factors)
    before, after = _estimator(prior), _estimator(corrected)
    for graph in _networks():
        assert after(graph) == pytest.approx(1.3 * before(graph), rel=0.01), graph.model_name
    held = corrected.fit_metrics["held_out"]
    assert held["corrected_mape"] < 2.0 < held["prior_mape"]


def test_kinds_without_samples_keep_the_prior(tmp_path, prior):
    linears = [s for s in load_sweep("quick") if s.family == "linear"][:8]
    folder = synthetic_store(tmp_path, prior, linears, 2.0)
    corrected = fit_prior_corrected(folder, PRIOR)
    assert set(corrected.fit_metrics["samples_per_kind"]) == {"linear"}
    assert "conv" in corrected.fit_metrics["uncorrected_kinds"]
    net = trace(nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 10)).eval(), input_shape=(1, 3, 32, 32))
    old, new = _estimator(prior).report(net), _estimator(corrected).report(net)
    linear = (old["kind"] == "linear").to_numpy()
    assert (new["time_ms"][~linear] == old["time_ms"][~linear]).all()
    ratio = new["time_ms"][linear] / old["time_ms"][linear]
    assert np.allclose(ratio, 2.0, rtol=0.02)


def test_fit_prior_command_writes_a_profile_that_records_its_prior(tmp_path, capsys, prior, quick_specs):
    folder = synthetic_store(tmp_path / "store", prior, quick_specs[:20], 1.5)
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "out"), "--prior", PRIOR]) == 0
    printed = capsys.readouterr().out
    assert f"correcting {PRIOR} (sha256 {profile_digest(prior)[:16]})" in printed
    assert "kinds without samples keep the prior:" in printed and "held-out end-to-end MAPE" in printed
    path = tmp_path / "out" / f"{PRIOR}-corrected.json"
    assert "next: check it on whole networks of this machine" in printed       # the adapt step that anchors it
    assert f"annette-torch adapt --from {path} --backend {prior.fingerprint['backend']} --threads 1" in printed
    saved = load_profile(path)
    assert saved.correction.prior_name == PRIOR
    graph = _networks()[0]
    assert _estimator(saved)(graph) == pytest.approx(1.5 * _estimator(prior)(graph), rel=0.02)


def test_a_corrected_profile_differentiates_through_its_correction(tmp_path, prior):
    """The correction runs on torch tensors too (the NAS code's gradients)."""
    linears = [s for s in load_sweep("quick") if s.family == "linear"][:8]
    corrected = fit_prior_corrected(synthetic_store(tmp_path, prior, linears, 2.0), PRIOR)
    estimator = _estimator(corrected)
    table = estimator.kernel_table(trace(nn.Sequential(nn.Linear(64, 128)).eval(), input_shape=(1, 64)))
    (rows, model), = estimator.model_groups(table)
    features = torch.tensor(table.features[rows], dtype=torch.float64, requires_grad=True)
    seconds, _ = model.predict(features, torch)
    seconds.sum().backward()
    assert float(seconds.detach().sum()) == pytest.approx(float(model.predict(table.features[rows])[0].sum()), rel=1e-9)
    assert torch.isfinite(features.grad).all()


def test_a_prior_corrected_profile_is_not_corrected_again(tmp_path, prior):
    linears = [s for s in load_sweep("quick") if s.family == "linear"][:4]
    folder = synthetic_store(tmp_path, prior, linears, 1.2)
    corrected = fit_prior_corrected(folder, PRIOR)
    with pytest.raises(ValueError, match="prior-corrected already"):
        fit_prior_corrected(folder, corrected)


def test_fusion_rules_stay_the_priors_unless_the_data_clearly_contradict_them(tmp_path, prior):
    relu = FusionRule("conv", "relu", "conv")
    assert relu in prior.mapping
    chains = [BenchmarkSpec("conv_chain", {"c": c, "f": 2 * c, "h": 14, "k": 3, "op": op})
              for c in range(8, 56, 4) for op in ("relu", "bn-relu6")]
    kept = fit_prior_corrected(synthetic_store(tmp_path / "a", prior, chains, 1.0), PRIOR)
    assert kept.mapping == prior.mapping and kept.fit_metrics["fusion"]["replaced"] == []
    contradicted = fit_prior_corrected(synthetic_store(tmp_path / "b", prior, chains, 1.0, unfused=("relu",)), PRIOR)
    assert contradicted.fit_metrics["fusion"]["replaced"] == ["conv + relu"]
    assert relu not in contradicted.mapping
    assert set(contradicted.mapping) == set(prior.mapping) - {relu}      # conv + relu6 and the rest stay


def test_a_damaged_correction_field_is_refused_naming_it(tmp_path, prior):
    import json

    from annette_torch.profiles import ProfileError

    linears = [s for s in load_sweep("quick") if s.family == "linear"][:4]
    path = fit_prior_corrected(synthetic_store(tmp_path, prior, linears, 1.2), PRIOR).save(tmp_path / "c.json")
    data = json.loads(path.read_text())
    data["correction"]["layer_models"]["mixed"]["linear"]["log_scale"] = "fast"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=r"correction\.layer_models\.mixed\.linear.*log_scale"):
        load_profile(path)


def _measured_references(root, prior, count: int, factor: float) -> list:
    """The graphs of the reference pool's first ``count`` cells, appended to the store at
    ``root`` as measured ``factor`` times what ``prior`` estimates."""
    from annette_torch.transfer.references import reference_pool
    cells = [net for net in reference_pool() if net.set == "nb201"][:count]
    graphs = [trace(net.build(), input_shape=net.input_shape, name=net.name) for net in cells]
    with MeasurementStore.open(root, FINGERPRINT) as store:
        store.append_references([{"benchmark": net.name, "set": net.set, "time_ms": factor * _estimator(prior)(g),
                                  "finished_utc": "2026-12-03T10:00:00+00:00"} for net, g in zip(cells, graphs)])
    return graphs


def test_fit_anchors_the_profile_on_the_stores_reference_networks(tmp_path, capsys, prior, quick_specs):
    """Benchmarks 1.5 times the prior, whole reference networks 2 times: the fitted
    profile is corrected onto the references, unless --no-anchor."""
    folder = synthetic_store(tmp_path / "store", prior, quick_specs, 1.5)
    graphs = _measured_references(tmp_path / "store", prior, 3, 2.0)
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "anchored"), "--prior", PRIOR]) == 0
    printed = capsys.readouterr().out
    assert f"anchoring on the 3 reference networks of {folder}/references.csv" in printed
    assert "next: check it on whole networks" not in printed
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "plain"), "--prior", PRIOR,
                 "--no-anchor"]) == 0
    assert "anchoring" not in capsys.readouterr().out
    anchored = _estimator(load_profile(tmp_path / "anchored" / f"{PRIOR}-corrected.json"))
    corrected = load_profile(tmp_path / "plain" / f"{PRIOR}-corrected.json")
    plain = _estimator(corrected)
    for graph in graphs:     # 3 %: the cells' sub-millisecond kernels invert the prior's gap less exactly
        assert anchored(graph) == pytest.approx(2.0 * _estimator(prior)(graph), rel=0.03)
        # kinds the store has no kernels of (the cells' merged elementwise subgraphs) keep the prior's time
        kernels = _estimator(prior).report(graph)
        kept = kernels["time_ms"][[corrected.correction.for_kind(t, k) is None
                                   for t, k in zip(kernels["layer_model"], kernels["kind"])]].sum()
        assert plain(graph) == pytest.approx(1.5 * _estimator(prior)(graph) - 0.5 * kept, rel=0.03)


def test_fit_anchors_with_the_correction_form_it_is_given(tmp_path, capsys, prior, quick_specs):
    """--anchor-terms fixes the form of the anchor's correction (leave-one-out picks the
    simplest of near ties otherwise, which flips between refits of one store); every form
    is still scored on the references, and an unknown form is refused naming the valid ones."""
    folder = synthetic_store(tmp_path / "store", prior, quick_specs, 1.5)
    _measured_references(tmp_path / "store", prior, 5, 2.0)
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "out"), "--prior", PRIOR,
                 "--anchor-terms", "scale+exponent+per_kernel"]) == 0
    assert "source/scale+exponent+per_kernel" in capsys.readouterr().out
    adaptation = load_profile(tmp_path / "out" / f"{PRIOR}-corrected.json").adaptation
    assert adaptation.terms == ("scale", "exponent", "per_kernel")
    assert {"source/scale", "source/scale+exponent+per_kernel"} <= set(adaptation.fit["candidates"])
    assert adaptation.fit["loo_log_error"] == adaptation.fit["candidates"]["source/scale+exponent+per_kernel"]
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "bad"), "--anchor-terms", "scale+offset"]) == 2
    assert "'scale+offset' is not a correction form; give one of scale, scale+per_kernel" in capsys.readouterr().err


def test_fit_keeps_the_prior_when_it_predicts_the_left_out_references_better(tmp_path, capsys, prior, quick_specs):
    """Conv benchmarks 4 times the prior, the rest as the prior, whole reference networks
    2 times the prior: the fit's per-kind factors mispredict the references (no one scale
    mends them), the prior anchored predicts them exactly, so fit keeps the prior."""
    convs = {"conv2d", "conv_chain", "conv_pool", "dw_separable", "inverted_residual", "residual"}
    synthetic_store(tmp_path / "store", prior, [s for s in quick_specs if s.family in convs], 4.0)
    folder = synthetic_store(tmp_path / "store", prior, [s for s in quick_specs if s.family not in convs], 1.0)
    graphs = _measured_references(tmp_path / "store", prior, 4, 2.0)
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "out"), "--prior", PRIOR]) == 0
    printed = capsys.readouterr().out
    assert f"keeping the prior ({PRIOR}), anchored" in printed
    kept = load_profile(tmp_path / "out" / f"{PRIOR}-corrected.json")
    assert kept.name == f"{PRIOR}-corrected" and kept.correction is None
    assert kept.fingerprint["cpu"] == "test cpu"        # the store's machine, not the prior's
    assert "kept over the fit of the store's benchmarks" in kept.description
    for graph in graphs:
        assert _estimator(kept)(graph) == pytest.approx(2.0 * _estimator(prior)(graph), rel=0.03)


def test_a_reference_network_this_version_does_not_know_is_refused_naming_it(tmp_path, capsys, prior, quick_specs):
    folder = synthetic_store(tmp_path, prior, quick_specs[:4], 1.0)
    with MeasurementStore.open(tmp_path, FINGERPRINT) as store:
        store.append_references([{"benchmark": "resnet9000", "set": "large", "time_ms": 5.0,
                                  "finished_utc": "2026-12-03T10:00:00+00:00"}])
    assert main(["fit", "--data", str(folder), "--out", str(tmp_path / "out"), "--prior", PRIOR]) == 2
    assert "resnet9000 is not a reference network of this version" in capsys.readouterr().err
