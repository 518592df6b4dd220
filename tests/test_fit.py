"""The model generator (annette_torch.fit): unrolling search, mapping learner, fitted
profiles that save, load and fail cleanly, and a fit on committed calibration data."""
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from annette_torch import trace
from annette_torch.calibration.generator import build_benchmark
from annette_torch.calibration.sweep import BenchmarkSpec
from annette_torch.cli import main
from annette_torch.estimator import Estimator
from annette_torch.fit import MODEL_TYPES, fit_profile, format_report, learn_rules
from annette_torch.fit.generate import STATISTICAL_NOTE
from annette_torch.fit.mapping import decide_pair
from annette_torch.fit.table import StoreData, kernel_table, load_store
from annette_torch.fit.unroll import fit_refined_roofline
from annette_torch.kinds import FEATURES
from annette_torch.layer_models import RefinedRoofline
from annette_torch.mapping import Clause, FusionRule
from annette_torch.profiles import ProfileError, load_profile

DATA = Path(__file__).resolve().parents[1] / "calibration" / "data"
TORCH_STORE = next(iter(sorted(DATA.glob("torch-cpu-1t-*"))), None)
QUICK = 254   # benchmarks of the quick sweep, the first ones in the store


def conv_row(c: int, f: int, h: int = 28, k: int = 3) -> list[float]:
    """A conv kernel's feature row (stride 1, 'same' padding)."""
    dims = {"n": 1, "h": h, "w": h, "c": c, "f": f, "kh": k, "kw": k, "stride": 1, "groups": 1}
    return [2.0 * h * h * c * f * k * k, c * h * h, f * h * h, c * f * k * k] + [dims[d] for d in FEATURES[4:]]


def test_refined_roofline_fit_recovers_known_unrolling_from_step_wise_sweeps():
    rng = np.random.default_rng(0)
    rows = [conv_row(c, 64) for c in range(4, 161, 4)] + [conv_row(64, f) for f in range(4, 161, 4)]
    rows += [conv_row(int(c), int(f), int(h)) for c, f, h in rng.integers((8, 8, 7), (256, 256, 56), (60, 3))]
    features = np.array(rows, dtype=float)
    truth = RefinedRoofline(1e11, 2e10, unroll={"c": {"par": 16, "alpha": 0.9}, "f": {"par": 8, "alpha": 1.0}})
    seconds = truth.predict(features)[0] * np.exp(rng.normal(0, 0.02, len(features)))

    model, records = fit_refined_roofline(features, seconds, np.ones(len(seconds)))

    assert model.unroll["c"]["par"] == 16 and model.unroll["f"]["par"] == 8
    assert model.unroll["c"]["alpha"] == pytest.approx(0.9, abs=0.1)
    assert model.unroll["f"]["alpha"] == pytest.approx(1.0, abs=0.1)
    assert "h" not in model.unroll and "w" not in model.unroll      # no sweep over them: not searched
    assert {r.dim for r in records if r.kept} == {"c", "f"}
    assert model.peak_ops_s == pytest.approx(1e11, rel=0.05)


def _elementwise_sweep(channels, h: int = 196, w: int = 1) -> np.ndarray:
    """Feature rows of an elementwise kind on an h x w map, one per channel count."""
    rows = []
    for c in channels:       # f = c, as for every elementwise layer
        dims = {"n": 1, "h": h, "w": w, "c": c, "f": c, "kh": 1, "kw": 1, "stride": 1, "groups": 1}
        rows.append([h * w * c, h * w * c, h * w * c, 0.0] + [dims[d] for d in FEATURES[4:]])
    return np.array(rows, dtype=float)


def test_unrolling_of_an_elementwise_kind_is_searched_once_for_its_channels():
    features = _elementwise_sweep(range(8, 257, 8), h=28, w=28)
    truth = RefinedRoofline(1e9, 1e12, unroll={"c": {"par": 32, "alpha": 1.0}})
    model, records = fit_refined_roofline(features, truth.predict(features)[0], np.ones(len(features)))
    assert [r.dim for r in records] == ["c"] and model.unroll == {"c": {"par": 32.0, "alpha": 1.0}}


def test_a_launch_time_per_call_is_not_taken_for_unrolling():
    """Small elementwise kernels cost their call's overhead plus a rate: flat at first,
    then linear. With only a free scale per sweep, the flat start looked like a
    staircase of par 64 (torch-cpu's GELU, session 39); a launch time explains it."""
    rng = np.random.default_rng(0)
    features = np.vstack([_elementwise_sweep(range(8, 257, 8), h=tokens) for tokens in (49, 196)])
    seconds = 15e-6 + features[:, 0] / 2e9 * np.exp(rng.normal(0, 0.01, len(features)))
    model, records = fit_refined_roofline(features, seconds, np.ones(len(seconds)))
    assert [r.dim for r in records] == ["c"] and not records[0].kept and model.unroll == {}


def test_unrolling_under_a_launch_time_is_still_found():
    features = _elementwise_sweep(range(8, 257, 8))
    truth = RefinedRoofline(1e9, 1e12, unroll={"c": {"par": 32, "alpha": 1.0}})
    seconds = 10e-6 + truth.predict(features)[0]
    model, _ = fit_refined_roofline(features, seconds, np.ones(len(seconds)))
    assert model.unroll == {"c": {"par": 32.0, "alpha": 1.0}}


def test_roofline_of_an_elementwise_kind_is_one_rate_at_the_ridge_whatever_the_last_digits():
    """An add does 1 op per 12 bytes in every kernel, so its times fix one rate: the fit
    puts peak and bandwidth at the ridge (both bounds predict alike), near the truth, and
    noise in the 12th digit moves them by about as much (the fit that started on the
    ridge with a finite-difference Jacobian moved 8 % for most such data sets)."""
    from annette_torch.fit.roofline import fit_roofline

    rng = np.random.default_rng(0)
    elems = rng.integers(1_000, 2_000_000, 40).astype(float)
    features = np.zeros((len(elems), len(FEATURES)))
    features[:, 0], features[:, 1], features[:, 2] = elems, 2 * elems, elems     # ops, inputs, outputs
    seconds = 12 * elems / 2e10 * np.exp(rng.normal(0, 0.3, len(elems)))
    model = fit_roofline(features, seconds)
    compute, memory = model.compute_time(features), model.bytes_moved(features) / model.bandwidth_bytes_s
    assert compute == pytest.approx(memory, rel=1e-12)
    assert model.bandwidth_bytes_s == pytest.approx(2e10, rel=0.15)
    for seed in range(8):
        noisy = seconds * (1 + 1e-12 * np.random.default_rng(seed).standard_normal(len(seconds)))
        again = fit_roofline(features, noisy)
        assert (again.peak_ops_s, again.bandwidth_bytes_s) == pytest.approx(
            (model.peak_ops_s, model.bandwidth_bytes_s), rel=1e-10)


def synthetic_store(windows_fused=(2,)) -> StoreData:
    """conv_chain benchmarks (conv -> relu -> maxpool) whose target always fuses the relu
    and fuses the pool only for the window sizes in ``windows_fused``."""
    rng = np.random.default_rng(1)
    networks, layers, graphs = [], [], {}
    for i in range(40):
        c, f = (int(v) for v in rng.integers(8, 64, 2))
        spec = BenchmarkSpec("conv_chain", {"c": c, "f": f, "h": int(rng.integers(16, 56)), "k": 3,
                                            "op": "relu-maxpool", "pool": int(rng.choice([2, 3, 4]))})
        module, shape = build_benchmark(spec)
        benchmark = f"b{i}"
        graphs[benchmark] = trace(module, input_shape=shape, name=benchmark)
        networks.append({"benchmark": benchmark, "family": "conv_chain", "spec": spec.to_json(), "status": "ok",
                         "time_ms": 1.0, "layers_sum_ms": 1.0})
        pool_fused = spec.params["pool"] in windows_fused
        for name, status, into in (("conv", "executed", ""), ("act", "fused", "conv"),
                                   ("pool", "fused" if pool_fused else "executed", "conv" if pool_fused else "")):
            layers.append({"benchmark": benchmark, "layer": name, "kind": graphs[benchmark][name].kind,
                           "status": status, "fused_into": into, "time_ms": 0.1 if status == "executed" else 0.0,
                           "spread": 0.01})
    frame = pd.DataFrame(networks).set_index("benchmark", drop=False)
    return StoreData({"backend": "synthetic"}, frame, pd.DataFrame(layers), graphs)


def test_a_product_layer_whose_runtime_kernels_only_move_data_is_not_fitted_on():
    """OpenVINO ran a causal attention's products in a Subgraph named after the query's
    transpose, leaving the attention layer a 0.09 ms Transpose of 4 ms: a conv, matmul or
    attention whose kernels are all data movement has no time of its own to fit."""
    data = synthetic_store()
    types = ["Transpose" if (layer == "conv" and benchmark in ("b0", "b1")) else "Convolution"
             for benchmark, layer in zip(data.layers["benchmark"], data.layers["layer"])]
    data = StoreData(data.fingerprint, data.networks, data.layers.assign(kernel_type=types), data.graphs)
    table = kernel_table(data, ())
    convs = table[table["kind"] == "conv"].set_index("benchmark")
    assert not convs.loc[["b0", "b1"], "measured"].any() and convs.drop(["b0", "b1"])["measured"].all()


def test_mapping_learner_finds_a_rule_and_the_condition_under_which_it_holds():
    rules, decisions = learn_rules(synthetic_store(windows_fused=(2,)))
    assert FusionRule("conv", "relu", "conv") in rules
    pool_rules = [r for r in rules if r.secondary == "max_pool"]
    assert pool_rules == [FusionRule("conv", "max_pool", "conv", (Clause("secondary", "kh", "<=", 2),))]
    pool = next(d for d in decisions if d.secondary == "max_pool")
    assert pool.how == "condition" and pool.errors == 0


def test_mapping_learner_keeps_consistent_pairs_unconditional():
    rules, _ = learn_rules(synthetic_store(windows_fused=(2, 3, 4)))
    assert set(rules) == {FusionRule("conv", "relu", "conv"), FusionRule("conv", "max_pool", "conv")}
    rules, _ = learn_rules(synthetic_store(windows_fused=()))
    assert set(rules) == {FusionRule("conv", "relu", "conv")}


def test_a_split_whose_leaves_decide_alike_is_one_rule_not_two():
    # channels 8..96: fused above 10; the one exception at 40 makes the tree split again there,
    # into two leaves that both fuse (c > 10 and c <= 40, c > 10 and c > 40)
    c = np.array([8, 10, 12, 20, 30, 40, 50, 60, 70, 80, 90, 96])
    fused = np.array([0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1])
    x = pd.DataFrame({"primary.c": c.astype(float)})
    decision = decide_pair("conv", "add", x, fused)
    assert decision.rules == (FusionRule("conv", "add", "conv", (Clause("primary", "c", ">", 10),)),)
    assert decision.how == "condition" and decision.errors == 1


def test_a_sum_is_labelled_by_the_parent_whose_kernel_ran_it():
    """OpenVINO adds a sum of two convs in the conv it runs last, which need not be the one
    traced last: the add fused into the first traced conv is a fused (conv, add) example,
    as the mapping fuses it (into the later conv, at the same cost)."""
    from annette_torch.fit.mapping import fusion_examples
    from torch import nn

    class TwoConvs(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.a, self.b = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.stem(x)
            return self.a(y) + self.b(y)

    graph = trace(TwoConvs().eval(), input_shape=(1, 8, 8, 8), name="b0")
    add = next(layer.name for layer in graph if layer.kind == "add")
    rows = [("stem", "executed", ""), ("a", "executed", ""), ("b", "executed", ""), (add, "fused", "a")]
    layers = pd.DataFrame([{"benchmark": "b0", "layer": name, "kind": graph[name].kind, "status": status,
                            "fused_into": into, "time_ms": 0.1, "spread": 0.01} for name, status, into in rows])
    networks = pd.DataFrame([{"benchmark": "b0", "family": "residual", "status": "ok", "time_ms": 0.3}]).set_index(
        "benchmark", drop=False)
    examples = fusion_examples(StoreData({"backend": "synthetic"}, networks, layers, {"b0": graph}))
    sums = examples[examples["secondary"] == add]
    assert len(sums) == 1 and sums.iloc[0]["primary"] == "a" and bool(sums.iloc[0]["fused"])


def test_the_learner_splits_on_channel_multiples_and_on_whether_the_network_returns_the_layer():
    """ONNX Runtime's NCHWc convs take a hard swish in when their input channels are a
    multiple of 4 and the network does not return the activation: a threshold on c cannot
    say that, the learner's clauses can."""
    c = np.array([8, 12, 16, 20, 24, 28, 32, 48, 64, 96, 9, 13, 18, 22, 45, 90, 16, 32, 48, 64])
    returned = np.array([0] * 16 + [1] * 4)
    fused = ((c % 4 == 0) & (returned == 0)).astype(int)
    x = pd.DataFrame({"primary.c": c.astype(float), "primary.c multiple of 4": (c % 4 == 0).astype(float),
                      "secondary.returned": returned.astype(float)})
    decision = decide_pair("conv", "hardswish", x, fused)
    assert decision.how == "condition" and decision.errors == 0 and len(decision.rules) == 1
    assert set(decision.rules[0].condition) == {Clause("primary", "c", "multiple of", 4),
                                                Clause("secondary", "returned", "==", False)}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The committed torch-cpu quick sweep (the store's first 254 benchmarks; campaigns
    may append more meanwhile), fitted: (profile in memory, the file it was saved to)."""
    if TORCH_STORE is None:
        pytest.skip("no committed torch-cpu store under calibration/data")
    profile = fit_profile(TORCH_STORE, first=QUICK)
    return profile, profile.save(tmp_path_factory.mktemp("profiles") / "torch-cpu.json")


def test_fit_on_committed_quick_data_reports_finite_held_out_errors(fitted):
    profile, _ = fitted
    held = profile.fit_metrics["held_out"]
    # every type is scored; statistical is not kept: mixed covers the same kinds ahead of it
    assert set(profile.layer_models) == set(MODEL_TYPES) - {"statistical"}
    assert profile.notes[-1] == STATISTICAL_NOTE
    for type_name in MODEL_TYPES:
        assert math.isfinite(held["all_kernels_mape"][type_name])
        assert math.isfinite(held["networks"]["mape"][type_name])
    assert math.isfinite(held["mapping_accuracy"])
    assert profile.fit_metrics["store_fingerprint"]["backend"] == "torch-cpu"
    assert profile.fit_metrics["split"]["train_benchmarks"] + profile.fit_metrics["split"]["test_benchmarks"] <= QUICK
    assert profile.fingerprint["backend"] == "torch-cpu" and profile.fingerprint["device"]
    assert profile.model_preference[0] == "mixed"
    assert profile.mapping == ()      # eager torch fuses nothing
    report = format_report(profile.fit_metrics)
    assert "held-out kernel MAPE" in report and "conv" in report


def test_saved_profile_estimates_exactly_as_the_fitted_one(fitted):
    fitted_profile, path = fitted
    loaded = load_profile(path)
    assert json.dumps(loaded.to_dict(), default=np.ndarray.tolist) == \
        json.dumps(fitted_profile.to_dict(), default=np.ndarray.tolist)
    graphs = [trace(build_benchmark(BenchmarkSpec(family, params))[0].eval(), input_shape=shape)
              for family, params, shape in (
                  ("residual", {"c": 32, "h": 28, "k": 3}, (1, 32, 28, 28)),
                  ("dw_separable", {"c": 24, "f": 48, "h": 56, "k": 3}, (1, 24, 56, 56)),
                  ("mlp", {"c": 64, "f": 256, "h": 16}, (1, 16, 64)))]
    for type_name in loaded.layer_models:
        for graph in graphs:
            assert Estimator(loaded, model_type=type_name)(graph) == Estimator(fitted_profile, model_type=type_name)(graph)


def test_the_fit_scores_benchmarks_that_compute_foldable_work_without_warning_about_it():
    from types import SimpleNamespace

    from annette_torch.fit.table import benchmark_estimates

    spec = BenchmarkSpec("eltwise", {"c": 36, "h": 28, "op": "div"})   # its divisor is a constant the compiler folds
    module, shape = build_benchmark(spec)
    data = SimpleNamespace(graphs={spec.id: trace(module, input_shape=shape, name=spec.id)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert benchmark_estimates(Estimator("openvino-cpu"), data, [spec.id])[0] > 0


def test_fit_command_writes_the_profile_and_prints_its_report(tmp_path, capsys):
    if TORCH_STORE is None:
        pytest.skip("no committed torch-cpu store under calibration/data")
    assert main(["fit", "--data", str(TORCH_STORE), "--out", str(tmp_path), "--first", "60", "--name", "mine",
                 "--with-statistical"]) == 0
    profile = load_profile(tmp_path / "mine.json")
    assert profile.name == "mine" and profile.fit_metrics["first_benchmarks"] == 60
    assert "statistical" in profile.layer_models and profile.model_preference[:2] == ("mixed", "statistical")
    assert len(list(tmp_path.glob("mine.*.npz"))) == 1
    assert "held-out kernel MAPE" in capsys.readouterr().out


def test_truncated_or_tampered_profile_fails_with_a_clear_error(fitted, tmp_path):
    """(Tampered arrays: tests/test_profile_storage.py.)"""
    _, path = fitted
    text = path.read_text()
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2])
    with pytest.raises(ProfileError, match="not readable as JSON"):
        load_profile(truncated)

    data = json.loads(text)
    kind = next(k for k, e in data["layer_models"]["mixed"].items() if e["regressor"]["type"] == "trees")
    cases = [
        (lambda r: r.__setitem__("inputs", r["inputs"][:-1]), "inputs"),
        (lambda r: r.__setitem__("depth", r["depth"] + 1), "depth"),
    ]
    for tamper, message in cases:
        broken = json.loads(text)
        tamper(broken["layer_models"]["mixed"][kind]["regressor"])
        target = path.parent / "tampered.json"          # beside the arrays file it names
        target.write_text(json.dumps(broken))
        with pytest.raises(ProfileError, match=rf"layer_models\.mixed\.{kind}.*{message}"):
            load_profile(target)


def test_weights_from_memory_floor_binds_only_kernels_bound_by_their_weights():
    """A fully connected layer at batch 1 takes at least its weight bytes over the
    profile's weight bandwidth; a compute-heavy conv keeps its layer-model time, and
    ``weights_from_memory=False`` gives the plain layer-model times."""
    import torch
    from torch import nn

    from annette_torch.profiles import Profile

    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    profile = Profile(name="synthetic", fingerprint={"backend": "none", "device": "none", "runtime_version": "0",
                                                     "threads": 1, "precision": "f32"},
                      layer_models={"roofline": {"default": roof}}, weight_bandwidth_bytes_s=1e10)
    fc = nn.Linear(4096, 4096)                    # 64 MiB of weights, 33.6 MFLOP
    conv = nn.Conv2d(64, 64, 3, padding=1)        # 147 kiB of weights, 3.7 GFLOP at 224x224
    floor, plain = Estimator(profile), Estimator(profile, weights_from_memory=False)
    fc_graph, conv_graph = trace(fc, input_shape=(1, 4096)), trace(conv, input_shape=(1, 64, 224, 224))
    weight_bytes = (4096 * 4096 + 4096) * 4
    assert floor(fc_graph) == pytest.approx(weight_bytes / 1e10 * 1e3)
    assert plain(fc_graph) == pytest.approx((weight_bytes + 2 * 4096 * 4) / 1e11 * 1e3)
    assert floor(conv_graph) == plain(conv_graph)
    report = floor.report(fc_graph)
    assert report["layer_model"].tolist() == ["roofline"]      # the wrapped model's type is reported
    assert report.attrs["weights_from_memory"] and report.attrs["weight_bytes"] == weight_bytes
    # the torch path (differentiable width search) sees the same floor
    table = floor.kernel_table(fc_graph)
    model = floor.group_model(table, "linear", np.arange(len(table)))
    features = torch.as_tensor(table.features)
    assert float(model.predict(features, xp=torch)[0].sum()) == pytest.approx(weight_bytes / 1e10)


def test_a_network_within_the_profiles_weight_cache_reads_its_weights_from_cache(tmp_path):
    """A network holding at most ``weight_cache_bytes`` of weights keeps them cached (no
    floor); a larger one reads them from memory; the field saves, loads and is checked."""
    from torch import nn

    from annette_torch.profiles import Profile

    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    profile = Profile(name="synthetic", fingerprint={"backend": "none", "device": "none", "runtime_version": "0",
                                                     "threads": 1, "precision": "f32"},
                      layer_models={"roofline": {"default": roof}}, weight_bandwidth_bytes_s=1e10,
                      weight_cache_bytes=32 * 2 ** 20)
    est, plain = Estimator(profile), Estimator(profile, weights_from_memory=False)
    small, large = trace(nn.Linear(1024, 1024), input_shape=(1, 1024)), trace(nn.Linear(4096, 4096), input_shape=(1, 4096))
    assert est(small) == plain(small)                                     # 4 MiB: cached
    assert est(large) == pytest.approx((4096 * 4096 + 4096) * 4 / 1e10 * 1e3)    # 64 MiB: from memory
    assert not est.report(small).attrs["weights_from_memory"] and est.report(large).attrs["weights_from_memory"]
    assert est.max_cached_weight_elems == 8 * 2 ** 20 and plain.max_cached_weight_elems == math.inf

    path = profile.save(tmp_path / "synthetic.json")
    assert load_profile(path).weight_cache_bytes == 32 * 2 ** 20
    data = json.loads(Path(path).read_text())
    data["weight_cache_bytes"] = -1
    (tmp_path / "broken.json").write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="weight_cache_bytes"):
        load_profile(tmp_path / "broken.json")


def test_every_kernel_of_a_network_reads_again_its_weights_up_to_the_l2_size(tmp_path):
    """With ``weight_rereads``, a kernel takes its weight bytes (at most ``up_to_bytes``)
    over the rate on top of its model's time; ``weights_from_memory=False`` (a benchmark in
    a loop) leaves it out; the field saves, loads and is checked."""
    from torch import nn

    from annette_torch.layer_models.weights_from_memory import WeightRereads
    from annette_torch.profiles import Profile

    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    profile = Profile(name="synthetic", fingerprint={"backend": "none", "device": "none", "runtime_version": "0",
                                                     "threads": 1, "precision": "f32"},
                      layer_models={"roofline": {"default": roof}},
                      weight_rereads=WeightRereads(bytes_s=1e10, up_to_bytes=2 ** 20))
    est, plain = Estimator(profile), Estimator(profile, weights_from_memory=False)
    conv = trace(nn.Conv2d(64, 64, 3, padding=1, bias=False), input_shape=(1, 64, 56, 56))   # 144 KiB of weights
    fc = trace(nn.Linear(4096, 4096), input_shape=(1, 4096))                                   # 64 MiB
    assert est(conv) == pytest.approx(plain(conv) + 64 * 64 * 9 * 4 / 1e10 * 1e3)
    assert est(fc) == pytest.approx(plain(fc) + 2 ** 20 / 1e10 * 1e3)
    path = profile.save(tmp_path / "synthetic.json")
    assert load_profile(path).weight_rereads == WeightRereads(1e10, 2 ** 20)
    data = json.loads(Path(path).read_text())
    data["weight_rereads"]["bytes_s"] = 0
    (tmp_path / "broken.json").write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="weight_rereads.bytes_s"):
        load_profile(tmp_path / "broken.json")


def test_rereads_fit_finds_the_shared_rate_beside_each_networks_level():
    """Kernels of three networks measured at 0.9, 1.0 and 1.25 of their estimates plus
    their weights (up to 1 MiB) at 20 GB/s, a few of them disturbed: the fit returns the
    rate and the levels; kernels that took no time for their weights are an error."""
    from annette_torch.calibration.weight_rereads import fit_rereads

    rng = np.random.default_rng(0)
    networks, levels = [], (0.9, 1.0, 1.25)
    for level in levels:
        estimate, weights = rng.uniform(0.01, 2.0, 60), rng.uniform(1e3, 3e6, 60)
        measured = level * estimate + np.minimum(weights, 2 ** 20) / 2e10 * 1e3
        measured[:3] *= 1.5                                  # disturbed kernels
        networks.append((estimate, measured, weights))
    fitted_levels, rate = fit_rereads(networks, 2 ** 20)
    assert rate == pytest.approx(2e10, rel=0.02)
    assert fitted_levels == pytest.approx(levels, abs=0.01)
    with pytest.raises(ValueError, match="no time for re-reading"):
        fit_rereads([(e, 1.1 * e, w) for e, _, w in networks], 2 ** 20)


def test_fit_gives_the_profile_the_rereads_measured_into_its_store(tmp_path, fitted):
    """A store folder's ``weight_rereads.json`` becomes the fitted profile's
    ``weight_rereads``, its record the fit metrics'; a store without one gives none."""
    import shutil

    from annette_torch.calibration.weight_rereads import save_rereads
    from annette_torch.layer_models.weights_from_memory import WeightRereads

    if TORCH_STORE is None:
        pytest.skip("no committed torch-cpu store under calibration/data")
    store = shutil.copytree(TORCH_STORE, tmp_path / TORCH_STORE.name)
    save_rereads(store, {"bytes_s": 1.7e10, "up_to_bytes": 2.0 ** 20, "kernels": 520, "passes": 3,
                         "profile": "torch-cpu", "measured_utc": "2026-12-07T05:44:50+00:00",
                         "networks": [{"network": "torchvision:resnet101", "kernels": 105, "level": 1.07}]})
    profile = fit_profile(store, first=QUICK)
    assert profile.weight_rereads == WeightRereads(1.7e10, 2.0 ** 20)
    assert profile.fit_metrics["weight_rereads"]["networks"][0]["network"] == "torchvision:resnet101"
    assert fitted[0].weight_rereads is None and "weight_rereads" not in fitted[0].fit_metrics


def test_rereads_add_the_same_time_on_torch_tensors_and_differentiate():
    """The re-read term runs on torch tensors as on arrays (the NAS code's gradients):
    a 64-to-128 linear's 8,320 weights (its bias too) at 1e10 B/s add 3.3 us."""
    import torch

    from annette_torch.layer_models.weights_from_memory import RereadWeights, WeightRereads

    estimator = Estimator("openvino-cpu")
    table = estimator.kernel_table(trace(torch.nn.Linear(64, 128).eval(), input_shape=(1, 64)))
    (rows, model), = estimator.model_groups(table, from_memory=False)
    rereads = RereadWeights(model, WeightRereads(1e10, 2.0 ** 20))
    features = table.features[rows]
    seconds = rereads.predict(features)[0]
    assert seconds - model.predict(features)[0] == pytest.approx((64 * 128 + 128) * 4 / 1e10, rel=1e-9)
    tensor = torch.tensor(features, dtype=torch.float64, requires_grad=True)
    on_torch = rereads.predict(tensor, torch)[0]
    on_torch.sum().backward()
    assert float(on_torch.detach().sum()) == pytest.approx(float(seconds.sum()), rel=1e-9)
    assert torch.isfinite(tensor.grad).all()


def test_weight_cache_fit_splits_batch_one_linears_by_their_networks_weights():
    """Benchmarks up to 10 MiB of weights read them at 50 GB/s, from 20 MiB at 20 GB/s:
    the cache is the geometric middle, 14.1 MiB; equal rates fit no cache."""
    from annette_torch.fit.weights import fit_weight_cache

    network_mib = [2, 4, 6, 8, 10, 20, 30, 40, 60, 80]
    rows = pd.DataFrame({"benchmark": [f"b{m}" for m in network_mib], "kind": "linear", "n": 1, "h": 1, "w": 1,
                         "weight_elems": [m * 2 ** 20 / 4 for m in network_mib]})
    networks = pd.Series(rows["weight_elems"].to_numpy(), index=rows["benchmark"])
    rate = np.where(np.array(network_mib) <= 10, 50e9, 20e9)
    rows["time_ms"] = rows["weight_elems"] * 4 / rate * 1e3
    cache, summary = fit_weight_cache(rows, networks)
    assert cache == pytest.approx(math.sqrt(10 * 20) * 2 ** 20)
    assert summary["cached_bytes_s"] == pytest.approx(50e9) and summary["from_memory_bytes_s"] == pytest.approx(20e9)
    rows["time_ms"] = rows["weight_elems"] * 4 / 30e9 * 1e3
    assert fit_weight_cache(rows, networks)[0] is None


def _other_cpu_id(here: dict) -> dict:
    """A CPU identity of the same name as ``here`` but another model on the other side of
    AVX-512 (``avx512f`` added or removed), whichever side this machine is on: the shipped
    profiles' Zen 4 against an AVX2-only Zen 3, or the other way round."""
    return {**here, "model": (here["model"] or 0) + 1, "isa": sorted(set(here["isa"]) ^ {"avx512f"})}


def test_profile_of_another_machine_warns_once_naming_what_differs_and_how_to_adapt(tmp_path):
    import onnxruntime

    from annette_torch.backends.base import cpu_model
    from annette_torch.machine import cpu_id
    from annette_torch.profiles import Profile, ProfileMismatchWarning

    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    here = {"backend": "onnxruntime-cpu", "device": cpu_model(), "cpu": cpu_model(), "cpu_id": cpu_id(),
            "runtime_version": onnxruntime.__version__, "threads": 1, "precision": "f32"}
    other_cpu = {**here, "cpu_id": _other_cpu_id(cpu_id())}
    no_identity = {k: v for k, v in here.items() if k != "cpu_id"}
    elsewhere = {**here, "cpu": "Some Other CPU 9000", "device": "Some Other CPU 9000", "runtime_version": "0.1.0"}
    messages = {}
    for name, fingerprint in (("here", here), ("other", other_cpu), ("noid", no_identity), ("else", elsewhere)):
        path = Profile(name=name, fingerprint=fingerprint, layer_models={"roofline": {"default": roof}}).save(tmp_path / f"{name}.json")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Estimator(path)
            Estimator(path)                                   # once per profile and process
        mismatches = [str(w.message) for w in caught if issubclass(w.category, ProfileMismatchWarning)]
        assert len(mismatches) == (name != "here"), (name, mismatches)
        messages[name] = mismatches[0] if mismatches else ""
    assert f"CPU model {other_cpu['cpu_id']['model']} (this machine: {cpu_id()['model']})" in messages["other"]
    said, unsaid = ("adds", "lacks") if "avx512f" in cpu_id()["isa"] else ("lacks", "adds")
    assert f"CPU ISA: this CPU {said} avx512f" in messages["other"] and unsaid not in messages["other"]
    assert "no identity" in messages["noid"]
    assert "Some Other CPU 9000" in messages["else"] and "onnxruntime 0.1.0" in messages["else"]
    for message in messages.values():
        if message:
            assert "annette-torch adapt --from" in message and "--backend onnxruntime-cpu --threads 1" in message


def test_cpu_identity_names_the_kernel_isa_and_tells_cpus_of_one_name_apart():
    from annette_torch.calibration.store import fingerprint_folder
    from annette_torch.machine import CPU_ID_FIELDS, KERNEL_ISA, cpu_id, cpu_id_differences

    here = cpu_id()
    assert set(here) == set(CPU_ID_FIELDS) and set(here["isa"]) <= set(KERNEL_ISA)
    assert cpu_id_differences(here) == []
    other = _other_cpu_id(here)
    differences = cpu_id_differences(other)
    assert differences[0] == f"model {other['model']} (this machine: {here['model']})"
    assert any("avx512f" in d for d in differences[1:])
    base = {"backend": "openvino-cpu", "runtime_version": "1", "cpu": "AMD EPYC", "threads": 1, "precision": "f32"}
    assert fingerprint_folder({**base, "cpu_id": here}) != fingerprint_folder({**base, "cpu_id": other})


def _synthetic_profile(**fields):
    from annette_torch.profiles import Profile

    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    return Profile(name="synthetic", fingerprint={"backend": "none", "device": "none", "runtime_version": "0",
                                                  "threads": 1, "precision": "f32"},
                   layer_models={"roofline": {"default": roof}}, **fields)


def test_fused_layer_costs_add_per_output_element_of_their_kernel():
    """conv + silu fused by a rule costs the conv's model time plus the profile's SiLU
    cost per output element; conv + relu (no cost listed) costs the conv alone."""
    from torch import nn

    rules = (FusionRule("conv", "silu", "conv"), FusionRule("conv", "relu", "conv"))
    costs = _synthetic_profile(mapping=rules, fused_cost_s_per_elem={"silu": 1e-9})
    plain = _synthetic_profile(mapping=rules)
    for act, extra_s in ((nn.SiLU(), 16 * 32 * 32 * 1e-9), (nn.ReLU(), 0.0)):
        graph = trace(nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), act), input_shape=(1, 8, 32, 32))
        assert len(Estimator(costs).report(graph)) == 1               # one fused kernel
        assert Estimator(costs)(graph) == pytest.approx(Estimator(plain)(graph) + extra_s * 1e3)


def test_layers_computed_from_constants_are_free_on_targets_that_fold_them():
    """A cell node written as ``zeros_like`` (a NAS cell that leaves its ``none`` edges
    out): the ReLU-conv-BN edges reading that node compute a constant. A profile that
    folds constants (compilers) does not charge them; one that does not (eager PyTorch)
    does."""
    import torch
    from torch import nn

    from annette_torch.nas.nasbench201 import ReLUConvBN

    class ZeroNode(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.on_zero, self.on_input = nn.Conv2d(3, 16, 3, padding=1), ReLUConvBN(16, 16, 3), \
                ReLUConvBN(16, 16, 3)

        def forward(self, x):
            x = self.stem(x)
            return self.on_input(x) + self.on_zero(torch.zeros_like(x))

    graph = trace(ZeroNode().eval(), input_shape=(1, 3, 32, 32))
    folded = [graph[name] for name in graph.folded]
    assert {layer.kind for layer in folded} >= {"constant", "relu", "conv", "batch_norm"}
    assert all(parent in graph.folded for layer in folded if layer.kind != "constant" for parent in layer.parents)
    folding, eager = Estimator(_synthetic_profile(optimizes_graph=True)), Estimator(_synthetic_profile())
    folded_convs = [layer for layer in folded if layer.kind == "conv"]
    conv_s = sum(RefinedRoofline(1e11, 1e11).predict(graph.features[[graph.index[c.name] for c in folded_convs]])[0])
    assert eager(graph) - folding(graph) >= conv_s * 1e3 * 0.999
    report = folding.report(graph).set_index("kernel")
    assert (report.loc[[layer.name for layer in folded], "bound"] == "free").all()


def test_repeated_parameter_free_layers_are_computed_once_by_graph_compilers():
    """Two 3x3 average pools of one tensor (a NAS cell's node feeding two pool edges):
    a compiler computes the pool once, and what reads the repeat still runs; eager
    PyTorch runs both pools."""
    from torch import nn

    class TwoPools(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 1)
            self.pool1, self.pool2 = nn.AvgPool2d(3, 1, 1), nn.AvgPool2d(3, 1, 1)
            self.pool3 = nn.AvgPool2d(3, 2, 1)        # other attributes: a different layer
            self.conv2 = nn.Conv2d(8, 8, 1)           # reads the repeat: computed, from the first pool

        def forward(self, x):
            y = self.conv(x)
            repeat = self.pool2(y)
            return self.pool1(y) + repeat, self.pool3(y), self.conv2(repeat)

    graph = trace(TwoPools(), input_shape=(1, 8, 16, 16))
    assert graph.folded == {"pool1"}        # pool2 ran first in forward; pool1 repeats it
    compiled, eager = Estimator(_synthetic_profile(optimizes_graph=True)), Estimator(_synthetic_profile())
    pool_s = RefinedRoofline(1e11, 1e11).predict(graph.features[[graph.index["pool1"]]])[0][0]
    assert eager(graph) - compiled(graph) == pytest.approx(pool_s * 1e3)



def test_a_nas_cell_nodes_relu_applied_by_every_edge_runs_once_fused_into_the_conv_computing_the_node():
    """NAS-Bench-201 applies ReLU on each edge out of a node, also through a skip_connect
    copy of it: a graph compiler computes that ReLU once (the copy reads as the node) and,
    the ReLU being the node's only consumer then, fuses it into the conv that computed the
    node, as OpenVINO and ONNX Runtime run such cells. Eager PyTorch runs every ReLU."""
    import torch
    from torch import nn

    from annette_torch.mapping.kernels import map_kernels
    from annette_torch.mapping.rules import FusionRule

    class Node(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 1)
            self.skip = nn.Identity()
            self.edge_a, self.edge_b, self.edge_c = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            node = self.conv(x)
            copy = self.skip(node)
            return self.edge_a(torch.relu(node)) + self.edge_b(torch.relu(node)) + self.edge_c(torch.relu(copy))

    graph = trace(Node(), input_shape=(1, 8, 16, 16))
    relus = [layer.name for layer in graph if layer.kind == "relu"]
    assert len(relus) == 3 and graph.repeats == {relus[1]: relus[0], relus[2]: relus[0]}
    rules = (FusionRule("conv", "relu", "conv"),)
    compiled = map_kernels(graph, rules, optimize_graph=True)
    assert ("conv", relus[0]) in compiled.layers              # the one ReLU runs in the node's conv
    assert all(compiled.free[compiled.layers.index((name,))] for name in relus[1:])
    eager = map_kernels(graph, rules)                         # eager torch: three ReLU kernels, none fused
    assert [names for names in eager.layers if any(n in relus for n in names)] == [(name,) for name in relus]


def test_fusion_is_learned_on_the_consumers_the_mapping_sees_through_identities_and_repeats():
    """The fusion learner counts a layer's consumers as the mapping does: timm's identity
    ``drop`` between a conv and its ReLU does not hide the edge, and a NAS cell node whose
    edges repeat one ReLU has that ReLU as its only consumer, so the target's fusing it
    into the conv is an example (before, neither edge was seen and no rule was learned)."""
    import torch
    from torch import nn

    from annette_torch.fit.mapping import fusion_examples

    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.drop, self.conv2 = nn.Conv2d(8, 8, 3, padding=1), nn.Identity(), nn.Conv2d(8, 8, 1)
            self.edge_a, self.edge_b = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            node = self.conv2(torch.relu(self.drop(self.conv1(x))))
            return self.edge_a(torch.relu(node)) + self.edge_b(torch.relu(node))

    graph = trace(Blocks(), input_shape=(1, 8, 16, 16))
    relus = [layer.name for layer in graph if layer.kind == "relu"]
    assert len(relus) == 3 and graph.repeats == {relus[2]: relus[1]}
    fused = {relus[0]: "conv1", relus[1]: "conv2"}
    layers = [{"benchmark": "b", "layer": layer.name, "kind": layer.kind,
               "status": "fused" if layer.name in fused else "executed", "fused_into": fused.get(layer.name, ""),
               "time_ms": 0.0 if layer.name in fused else 0.1, "spread": 0.01}
              for layer in graph if not layer.free and layer.name != relus[2]]
    data = StoreData({"backend": "synthetic"}, pd.DataFrame([{"benchmark": "b", "status": "ok"}]).set_index(
        "benchmark", drop=False), pd.DataFrame(layers), {"b": graph})
    examples = fusion_examples(data)
    relu_edges = examples[examples["secondary_kind"] == "relu"]
    assert sorted(zip(relu_edges["primary"], relu_edges["secondary"], relu_edges["fused"])) == \
        [("conv1", relus[0], True), ("conv2", relus[1], True)]
    rules, _ = learn_rules(data)
    assert any((rule.primary, rule.secondary) == ("conv", "relu") for rule in rules)

RECORDED = Path(__file__).parent / "fixtures" / "fit_torch_cpu_quick_held_out.json"


def held_out_summary(metrics: dict) -> dict:
    """The held-out errors a fit reports (what ``tests/fixtures`` records)."""
    held = metrics["held_out"]
    flat = {f"all kernels / {t}": v for t, v in held["all_kernels_mape"].items()}
    flat.update({f"networks / {t}": v for t, v in held["networks"]["mape"].items()})
    flat.update({f"{kind} / {t}": v for kind, info in held["kinds"].items() for t, v in info.get("mape", {}).items()})
    flat["mapping accuracy"] = held["mapping_accuracy"]
    return flat


def fit_platform() -> dict:
    """What decides a fit's last digits: the OpenBLAS kernels in use and the numerical libraries."""
    import scipy
    import sklearn
    import threadpoolctl

    blas = sorted({info.get("architecture") for info in threadpoolctl.threadpool_info()
                   if info.get("internal_api") == "openblas"})
    return {"openblas_core": blas, "numpy": np.__version__, "scipy": scipy.__version__, "scikit-learn": sklearn.__version__}


#: Tolerance (relative) on the recorded figures when only the OpenBLAS core type differs.
#: Measured on the recording machine (Zen 4, SkylakeX kernels) by refitting under
#: OPENBLAS_CORETYPE=Haswell (Zen runs the same kernels), Sandybridge and Prescott (runs
#: as Katmai), and under Zen with numpy's AVX-512 loops off as well
#: (NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL": a Zen 3 as far as this machine can be
#: one): the 62 figures differed by at most 2.2e-16 relative. Measured times perturbed
#: in memory moved them by at most 3e-11 relative (1e-12 relative noise on each time, 3
#: seeds) and 8.4e-10 (all times times 1 + 5e-11, the drift of the gap fit's scale
#: between code paths before it got its exact Jacobian). 1e-8 is ten times the largest.
OTHER_BLAS_REL = 1e-8


def test_fit_on_committed_quick_data_reproduces_its_recorded_held_out_errors(fitted):
    """The torch-cpu quick sweep, fitted again, scores what was recorded when the fitting
    method last changed on purpose (re-record with ``python tests/test_fit.py --record``
    after such a change, and say why in the commit): to 1e-12 on the recording platform,
    to :data:`OTHER_BLAS_REL` under another OpenBLAS core type; with other numpy, scipy or
    scikit-learn versions the figures may legitimately differ and the check is skipped."""
    profile, _ = fitted
    recorded = json.loads(RECORDED.read_text())
    here, there = fit_platform(), recorded["platform"]
    versions = [k for k in ("numpy", "scipy", "scikit-learn") if here[k] != there[k]]
    if versions:
        pytest.skip(f"fixture recorded with {', '.join(f'{k} {there[k]}' for k in versions)}, here "
                    f"{', '.join(here[k] for k in versions)}: install with -c .ci/constraints.txt")
    rel = 1e-12 if here == there else OTHER_BLAS_REL
    assert held_out_summary(profile.fit_metrics) == pytest.approx(recorded["held_out"], rel=rel, nan_ok=True)


@pytest.fixture(scope="module")
def quick_store():
    if TORCH_STORE is None:
        pytest.skip("no committed torch-cpu store under calibration/data")
    return load_store(TORCH_STORE, first=QUICK)


def _fit_held_out(monkeypatch, data: StoreData):
    """The quick sweep's held-out pass fitted on ``data`` (a store read once, changed in memory)."""
    from annette_torch.fit import generate

    monkeypatch.setattr(generate, "load_store", lambda *args, **kwargs: data)
    return fit_profile(TORCH_STORE, first=QUICK, refit_all=False)


def _roofline_params(profile) -> dict:
    """Every roofline's peak and bandwidth, keyed ``type/kind/parameter``."""
    return {f"{type_name}/{kind}/{name}": value for type_name in ("roofline", "refined_roofline")
            for kind, m in profile.layer_models[type_name].items()
            for name, value in (("peak", m.peak_ops_s), ("bandwidth", m.bandwidth_bytes_s))}


def test_fit_is_stable_under_last_digit_noise(fitted, quick_store, monkeypatch):
    """Measured times changed by relative noise of 1e-12 (last-digit noise, as other BLAS
    code paths leave in fitted numbers): every held-out figure moves by well under a
    point (by under 1e-9 points in fact), peaks and bandwidths by 1e-10 relative, and
    unrolling, learners and fusion rules stay."""
    held = held_out_summary(fitted[0].fit_metrics)
    fits = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        noisy = lambda frame, columns: frame.assign(**{c: frame[c] * (1 + 1e-12 * rng.standard_normal(len(frame)))
                                                       for c in columns})
        data = StoreData(quick_store.fingerprint, noisy(quick_store.networks, ["time_ms", "layers_sum_ms"]),
                         noisy(quick_store.layers, ["time_ms"]), quick_store.graphs)
        fits.append(_fit_held_out(monkeypatch, data))
        summary = held_out_summary(fits[-1].fit_metrics)
        moved = {k: abs(summary[k] - v) for k, v in held.items() if v == v}
        assert max(moved.values()) < 1e-6, max(moved.items(), key=lambda kv: kv[1])
    first = fits[0]
    for profile in fits[1:]:
        assert _roofline_params(profile) == pytest.approx(_roofline_params(first), rel=1e-10)
        assert profile.mapping == first.mapping
        assert _choices(profile) == _choices(first)


def _choices(profile) -> dict:
    """Per kind: its unrolling and the learners chosen for it."""
    return {kind: (model.unroll, {t: profile.layer_models[t][kind].learner for t in ("statistical", "mixed")
                                  if kind in profile.layer_models.get(t, {})})
            for kind, model in profile.layer_models["refined_roofline"].items()}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--record"]:
        profile = fit_profile(TORCH_STORE, first=QUICK)
        RECORDED.write_text(json.dumps({"platform": fit_platform(), "held_out": held_out_summary(profile.fit_metrics)},
                                       indent=1, sort_keys=True) + "\n")
        print(f"recorded {RECORDED}")


def test_exported_tree_learners_predict_as_scikit_learn_does():
    """The tree ensembles a profile stores predict what the fitted scikit-learn models
    predict (up to the 9 significant digits stored), given the targets the learners see
    (rounded to their step)."""
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    from annette_torch.fit.learners import fit_learner, round_targets
    from annette_torch.layer_models.regressors import REGRESSION_INPUTS

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(REGRESSION_INPUTS)))
    y, weights = round_targets(2 * x[:, 0] + np.sin(x[:, 1]) + 0.1 * rng.normal(size=400)), np.ones(400)
    references = {"gradient_boosting": (GradientBoostingRegressor(n_estimators=200, max_depth=4, learning_rate=0.06,
                                                                  subsample=0.8, init="zero", random_state=0), y.mean()),
                  "random_forest": (RandomForestRegressor(n_estimators=60, max_leaf_nodes=48, min_samples_leaf=2,
                                                          max_features=0.7, random_state=0, n_jobs=1), 0.0)}
    test = rng.normal(size=(200, len(REGRESSION_INPUTS)))
    for name, (reference, base) in references.items():
        reference.fit(x, y - base, sample_weight=weights)
        exported = fit_learner(name, x, y, weights, seed=0)
        assert np.abs(exported.predict(test) - (reference.predict(test) + base)).max() < 1e-6


def test_a_mixed_models_linear_correction_stays_at_its_fitted_range_edge_outside_it():
    """A ridge correction is a power law: a slice model fitted on at most 350 weight elements
    gave a 4,429-element gather 5 ms. The mixed model clamps its inputs into the fitted range
    (the roofline carries the extrapolation); the range fit_learner records survives a save
    and load."""
    from annette_torch.layer_models import Mixed
    from annette_torch.layer_models.regressors import LinearRegressor, regressor_from_dict
    rng = np.random.default_rng(0)
    weights = rng.integers(0, 351, 60).astype(float)
    ops = rng.uniform(1e4, 1e5, 60)                                       # independent of the weights
    rows = np.array([[o, 4e3, 4e3, w] + [1.0] * (len(FEATURES) - 4) for o, w in zip(ops, weights)])
    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e10)
    seconds = roof.predict(rows)[0] * (1 + weights) ** 0.8               # the correction grows with the weights
    ridge = LinearRegressor(*_ridge_of(rows, np.log(seconds / roof.predict(rows)[0])))
    model = Mixed(roof, ridge, "ridge")
    inside, beyond = rows[np.argmax(weights)].copy(), rows[np.argmax(weights)].copy()
    beyond[3] = 4429.0
    inside_correction, beyond_correction = model.log_correction(np.array([inside, beyond]))
    assert beyond_correction == pytest.approx(inside_correction, abs=1e-9)
    unclamped = ridge.predict(regression_inputs_of(np.array([beyond])))[0]
    assert unclamped > inside_correction + 1.0                            # the power law would have run away
    stored = regressor_from_dict(json.loads(json.dumps(ridge.to_dict())))
    assert stored.low is not None and np.allclose(stored.low, ridge.low) and np.allclose(stored.high, ridge.high)
    with pytest.raises(ValueError, match="'low' and 'high' go together"):
        regressor_from_dict({k: v for k, v in ridge.to_dict().items() if k != "high"})
    swapped = {**ridge.to_dict(), "low": ridge.to_dict()["high"], "high": ridge.to_dict()["low"]}
    with pytest.raises(ValueError, match="'low' exceeds 'high'"):
        regressor_from_dict(swapped)


def _token_rows(tokens: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Kernel features of an elementwise layer on (1, tokens, channels): h tokens, w 1."""
    elems = tokens * channels
    columns = {"ops": elems, "input_elems": elems, "output_elems": elems, "weight_elems": 0 * elems,
               "h": tokens, "c": channels, "f": channels}
    return np.array([[columns.get(name, np.ones_like(elems))[i] for name in FEATURES] for i in range(len(elems))],
                    dtype=float)


def test_a_linear_correction_beyond_its_range_reads_the_nearest_fitted_kernel_of_like_shape():
    """torch-cpu's gelu ridge (positive on the token count, about -1.3 on the element counts)
    fell with token count beyond its 208 calibrated tokens: clamping each input alone paired
    208 tokens with the kernel's element count. With the fitted rows recorded, an
    out-of-range kernel moves towards the nearest fitted row until it is inside the range,
    so its sizes keep agreeing; inside the range nothing moves; the rows survive storage."""
    from annette_torch.layer_models import Mixed
    from annette_torch.layer_models.regressors import (REGRESSION_INPUTS, SIZE_INPUTS, LinearRegressor,
                                                       regression_inputs, regressor_from_dict)
    tokens, channels = np.meshgrid([16.0, 49.0, 64.0, 196.0, 208.0], [64.0, 256.0, 1024.0, 4096.0])
    fitted = regression_inputs(_token_rows(tokens.ravel(), channels.ravel()))
    coef = np.zeros(len(REGRESSION_INPUTS))
    for name, value in {"log_ops": -0.32, "log_input_elems": -0.31, "log_output_elems": -0.31,
                        "log_elems_moved": -0.32, "log_h": 0.59, "log_c": 0.48, "log_f": 0.48}.items():
        coef[REGRESSION_INPUTS.index(name)] = value
    low, high = fitted.min(axis=0), fitted.max(axis=0)
    per_input = LinearRegressor(coef, 1.6, low, high)
    nearest = regressor_from_dict(LinearRegressor(coef, 1.6, low, high, fitted[:, :SIZE_INPUTS]).to_dict())
    assert nearest.rows.shape == (len(fitted), SIZE_INPUTS)
    roof = RefinedRoofline(peak_ops_s=1e10, bandwidth_bytes_s=1e10)
    queries = _token_rows(np.array([208.0, 784.0, 3136.0]), np.full(3, 256.0))
    clamped = Mixed(roof, per_input, "ridge").predict(queries)[0]
    moved = Mixed(roof, nearest, "ridge").predict(queries)[0]
    assert clamped[2] < clamped[0]                                 # the fault: more tokens, less time
    assert moved[0] == pytest.approx(clamped[0], rel=1e-12)        # inside the range: unchanged
    assert moved[0] < moved[1] < moved[2]
    import torch
    on_torch = torch.tensor(queries, requires_grad=True)
    seconds = Mixed(roof, nearest, "ridge").predict(on_torch, xp=torch)[0]
    seconds.sum().backward()                                         # differentiable, as numpy
    assert np.allclose(seconds.detach().numpy(), moved) and on_torch.grad.abs().sum() > 0
    query = regression_inputs(queries[2:])
    anchor = nearest.within_fitted(query)
    assert ((anchor >= low - 1e-12) & (anchor <= high + 1e-12)).all()

    def on_the_line_from(row: np.ndarray) -> bool:
        step, moved = query[0, :SIZE_INPUTS] - row, anchor[0, :SIZE_INPUTS] - row
        apart = np.abs(step) > 1e-5
        share = moved[apart] / step[apart]
        return bool(np.allclose(share, share[0]) and 0 <= share[0] < 1 and np.allclose(moved[~apart], 0, atol=1e-5))

    assert any(on_the_line_from(row) for row in nearest.rows.astype(float))   # between a fitted row and the kernel
    with pytest.raises(ValueError, match="'rows' must hold a non-zero multiple"):
        regressor_from_dict({**nearest.to_dict(), "rows": np.zeros(SIZE_INPUTS + 1, dtype=np.float32)})
    with pytest.raises(ValueError, match="'rows' .* needs 'low' and 'high'"):
        regressor_from_dict({k: v for k, v in nearest.to_dict().items() if k not in ("low", "high")})


def test_the_torch_cpu_gelu_grows_with_token_count_beyond_its_calibrated_range():
    """The shipped torch-cpu profile's GELU on 256 channels: 3,136 tokens cost more than 784,
    and 784 more than the 208 it was calibrated up to (it was 22.6 µs at 3,136 against
    43.6 at 208 when each input was clamped alone)."""
    from torch import nn
    est = Estimator("torch-cpu")
    times = [float(est.report(nn.GELU().eval(), input_shape=(1, tokens, 256))["time_ms"].sum())
             for tokens in (208, 784, 3136)]
    assert times[0] < times[1] < times[2]
    assert times[2] > 5 * times[0]


def _ridge_of(rows: np.ndarray, y: np.ndarray):
    from annette_torch.fit.learners import fit_learner
    fitted = fit_learner("ridge", regression_inputs_of(rows), y, np.ones(len(y)))
    return fitted.coef, fitted.intercept, fitted.low, fitted.high


def regression_inputs_of(rows: np.ndarray) -> np.ndarray:
    from annette_torch.layer_models.regressors import regression_inputs
    return regression_inputs(rows)


def test_no_fused_layer_costs_less_than_nothing():
    """Fused-layer costs per output element: a ReLU or an add whose kernels ran faster than
    the kernel model says gets 0 (it still computes; the kernel table no longer charges the
    kernel model for what the add reads, so nothing is left for a negative cost to cancel),
    a SiLU that costs time gets its cost."""
    from annette_torch.fit.fused import fit_fused_costs

    rng = np.random.default_rng(0)
    kinds = ["relu", "add", "silu"] * 20 + ["relu+add"] * 10
    elems = rng.integers(10_000, 200_000, len(kinds)).astype(float)
    modelled = elems * 2e-9
    per_elem = {"relu": -2e-10, "add": -3e-10, "silu": 4e-10}
    measured = np.array([m + e * sum(per_elem[k] for k in f.split("+")) for m, e, f in zip(modelled, elems, kinds)])
    kernels = pd.DataFrame({"fused_kinds": kinds, "output_elems": elems})
    costs, summary = fit_fused_costs(kernels, modelled, measured)
    assert costs["relu"] == 0.0 and costs["add"] == 0.0
    assert costs["silu"] == pytest.approx(4e-10, rel=0.05)
    assert summary["kernels"] == len(kinds)


def test_kinds_are_fitted_on_kernels_from_one_microsecond_the_default_roofline_from_five(quick_store, monkeypatch):
    """Kernels of 1-5 µs (squeeze-excite convs, small pools) are data for their kind's
    models; the ``default`` roofline, with no term for a kernel's fixed cost, sees only
    kernels of ``ROOFLINE_MIN_MS`` or more."""
    from annette_torch.fit import generate
    from annette_torch.fit.fused import is_plain
    from annette_torch.fit.table import held_out
    from annette_torch.kinds import PRODUCT_KINDS

    kind_rows, default_rows = [], []
    fit_kind, fit_roofline = generate.fit_kind, generate.fit_roofline

    def counting_fit_kind(x, y, *args):
        kind_rows.append(len(y))
        return fit_kind(x, y, *args)

    def counting_fit_roofline(x, y, *args):
        default_rows.append(len(y))
        return fit_roofline(x, y, *args)

    monkeypatch.setattr(generate, "fit_kind", counting_fit_kind)
    monkeypatch.setattr(generate, "fit_roofline", counting_fit_roofline)
    _fit_held_out(monkeypatch, quick_store)

    ids = list(quick_store.networks.index)
    train = {b for b, test in zip(ids, held_out(ids)) if not test}
    _, kernels = generate.store_kernels(quick_store)
    rows = kernels[kernels["benchmark"].isin(train) & is_plain(kernels)]
    assert (rows["time_ms"] < generate.ROOFLINE_MIN_MS).sum() > 0      # the store has kernels of 1-5 µs
    assert sorted(kind_rows) == sorted(n for n in rows.groupby("kind").size() if n >= 3)
    long_others = rows[(rows["time_ms"] >= generate.ROOFLINE_MIN_MS) & ~rows["kind"].isin(PRODUCT_KINDS)]
    assert default_rows == [len(long_others)]
