"""The transformer benchmark families (timm's SDPA attention block and its causal, mask and
rotary variants, a decoder's prefill and decode attention, SwiGLU MLPs, RMSNorm): they build,
trace to the kinds real models produce, export to ONNX, are matched on the local runtimes,
and a fit of their measurements gives the attention kind its own models."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import annette_torch as at
from annette_torch.backends.base import export_onnx, onnx_scopes, random_inputs
from annette_torch.backends.onnx_symbolics import SYMBOLICS, _registered
from annette_torch.calibration import BenchmarkSpec, build_benchmark, load_measurements, load_sweep, run_campaign
from annette_torch.calibration.generator import estimate_size
from annette_torch.fit.fused import is_plain
from annette_torch.fit.generate import fit_profile
from annette_torch.kinds import PRODUCT_KINDS

ATTENTION = ["linear", "permute", "split", "attention", "permute", "linear"]
ROTARY = ["slice", "unary", "slice", "concat", "mul", "mul", "add"]     # x2, -x2, x1, cat, *cos, *sin, +
DECODER = ["linear", "permute"] * 3

FAMILY_KINDS = [
    (BenchmarkSpec("sdpa", {"h": 16, "c": 32, "groups": 4, "op": "plain"}), ATTENTION),
    (BenchmarkSpec("sdpa", {"h": 16, "c": 32, "groups": 4, "op": "causal"}), ATTENTION),
    (BenchmarkSpec("sdpa", {"h": 16, "c": 32, "groups": 4, "op": "mask"}), ATTENTION),
    (BenchmarkSpec("sdpa", {"h": 16, "c": 32, "groups": 4, "op": "rope"}), ATTENTION[:3] + ROTARY * 2 + ATTENTION[3:]),
    (BenchmarkSpec("decoder_attention", {"h": 16, "c": 32, "groups": 4, "op": "prefill"}),
     DECODER + ["attention", "permute", "linear"]),
    (BenchmarkSpec("decoder_attention", {"h": 16, "c": 32, "groups": 4, "op": "decode"}),
     DECODER + ["concat", "concat", "attention", "permute", "linear"]),
    (BenchmarkSpec("decoder_attention", {"h": 16, "c": 32, "groups": 4, "k": 2, "op": "prefill"}),   # GQA: repeat_kv
     DECODER + ["attention", "permute", "linear"]),                       # x[:, :, None]: a view
    (BenchmarkSpec("mlp", {"h": 16, "c": 32, "f": 64, "op": "swiglu"}), ["linear", "silu", "linear", "mul", "linear"]),
    (BenchmarkSpec("norm", {"h": 128, "w": 1, "c": 128, "op": "rmsnorm"}), ["rms_norm"]),   # OpenVINO calls sub-µs kernels NOT_RUN
]
SPECS = [spec for spec, _ in FAMILY_KINDS]


def traced(spec: BenchmarkSpec):
    model, shape = build_benchmark(spec)
    return model, shape, at.trace(model, input_shape=shape)


@pytest.mark.parametrize("spec, kinds", FAMILY_KINDS, ids=lambda v: getattr(v, "id", ""))
def test_families_build_the_kernels_real_models_have(spec, kinds):
    model, _, graph = traced(spec)
    assert [layer.kind for layer in graph.layers if not layer.free] == kinds
    assert all(layer.module_path for layer in graph.layers)     # every layer leads back to its own module
    ops, elems = estimate_size(spec)
    if spec.family == "norm":          # sized by its elements, as the elementwise families are
        assert elems == graph.layers[0].counts.output_elems
    else:                              # sized by the products' operations
        assert graph.total("ops", PRODUCT_KINDS) == pytest.approx(ops, rel=1e-9), spec


def test_attention_variants_count_what_they_attend_over():
    (attention,) = [l for l in traced(SPECS[0])[2].layers if l.kind == "attention"]
    dims = attention.counts.dims
    assert (dims["n"], dims["h"], dims["w"], dims["c"]) == (4, 16, 16, 8)    # 4 heads of 16 tokens, width 8
    decode = traced(BenchmarkSpec("decoder_attention", {"h": 16, "c": 32, "groups": 4, "op": "decode"}))
    assert decode[1] == ((1, 1, 32), (1, 4, 16, 8), (1, 4, 16, 8))           # the token, then the k and v caches
    (step,) = [l for l in decode[2].layers if l.kind == "attention"]
    assert (step.counts.dims["h"], step.counts.dims["w"]) == (1, 17)         # 1 query over 16 cached keys and its own
    assert len(decode[2].input_shapes) == 3
    gqa = traced(BenchmarkSpec("decoder_attention", {"h": 16, "c": 32, "groups": 4, "k": 2, "op": "decode"}))
    assert gqa[1] == ((1, 1, 32), (1, 2, 16, 8), (1, 2, 16, 8))              # caches of the 2 key/value heads
    (step,) = [l for l in gqa[2].layers if l.kind == "attention"]
    assert step.counts.dims["n"] == 4                                         # all 4 query heads attend
    with pytest.raises(ValueError, match="groups=4 heads to be a multiple of k=3 key/value heads"):
        build_benchmark(BenchmarkSpec("decoder_attention", {"h": 16, "c": 48, "groups": 4, "k": 3, "op": "decode"}))


def test_rms_norm_is_its_own_kind():
    graph = at.trace(nn.Sequential(nn.RMSNorm(32)), input_shape=(1, 16, 32))
    (layer,) = graph.layers
    assert layer.kind == "rms_norm" and layer.counts.ops == 4 * 16 * 32
    assert at.trace(nn.Sequential(nn.LayerNorm(32)), input_shape=(1, 16, 32)).layers[0].kind == "layer_norm"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_families_export_to_onnx_with_every_node_named_after_a_layer(spec, tmp_path):
    model, shape, graph = traced(spec)
    path = export_onnx(model, shape, tmp_path / "model.onnx")
    exported = onnx.load(str(path)).graph
    assert [i.name for i in exported.input][:len(graph.input_shapes)] == ["input", "input_1", "input_2"][:len(graph.input_shapes)]
    paths = {layer.module_path for layer in graph.layers}
    scopes = {scope for scope in onnx_scopes(exported, {n for n, _ in model.named_modules()}).values() if scope}
    computing = {n.name for n in exported.node if n.op_type not in ("Constant", "Shape", "Reshape")}
    assert scopes and scopes <= paths | {""}, scopes - paths
    assert computing
    assert not any(_registered(name) for name in SYMBOLICS)     # the rms_norm symbolic was only registered for the export


def test_random_inputs_give_each_input_its_own_draw():
    one = random_inputs((2, 3))
    several = random_inputs(((2, 3), (1, 4)))
    assert len(one) == 1 and [x.shape for x in several] == [(2, 3), (1, 4)]
    assert np.array_equal(one[0], several[0]) and several[1].dtype == np.float32


@pytest.fixture(scope="module")
def tiny_stores(tmp_path_factory):
    """The families measured once each on the local runtimes (1 round, 1 warm-up, 3 runs:
    a functional check, no timing is asserted)."""
    root = tmp_path_factory.mktemp("transformer")
    return {name: run_campaign(name, SPECS, root, rounds=1, warmup=1, repeats=3, progress=False)
            for name in ("openvino-cpu", "onnxruntime-cpu", "torch-cpu")}


@pytest.mark.parametrize("backend", ["openvino-cpu", "onnxruntime-cpu", "torch-cpu"])
def test_the_matcher_accounts_for_every_layer_on_each_runtime(tiny_stores, backend):
    summary = tiny_stores[backend]
    assert (summary.measured, summary.failed) == (len(SPECS), 0)
    _, networks, layers = load_measurements(summary.store)
    assert (networks["status"] == "ok").all()
    named = layers[layers["layer"] != ""]
    assert set(named["benchmark"]) == {s.id for s in SPECS}
    assert set(named["status"]) <= {"executed", "fused", "optimized_out"}
    ran = {(b, layer) for b, layer, status in zip(named["benchmark"], named["layer"], named["status"])
           if status == "executed"}
    for kind in ("attention", "linear", "rms_norm"):                 # the compute is run, never lost
        rows = named[named["kind"] == kind]
        executed = rows["status"] == "executed"
        assert len(rows) and rows["status"].isin(["executed", "fused"]).all()
        assert (rows.loc[executed, "time_ms"] > 0).all(), (backend, kind)
        # a fused one ran inside an executed kernel of its benchmark (OpenVINO compiles a tiny decoder
        # block's attention with its transposes into one Snippets subgraph, for one or more blocks)
        fused = rows[~executed]
        assert all((b, into) in ran for b, into in zip(fused["benchmark"], fused["fused_into"])), (backend, kind)


def test_fused_layout_layers_leave_a_kernel_plain():
    import pandas as pd

    kernels = pd.DataFrame({"fused_kinds": ["", "permute", "split+slice", "batch_norm+relu", "permute+gelu"]})
    assert is_plain(kernels).tolist() == [True, True, True, False, False]


def sized(spec: BenchmarkSpec, **params) -> BenchmarkSpec:
    return BenchmarkSpec(spec.family, {**spec.params, **params})


def test_fit_gives_the_attention_kind_its_own_models(tmp_path):
    """Measured on OpenVINO (whose attention kernel absorbs the transpose after it), the
    attention kind is fitted, so a timm ViT's attention is no longer a fallback."""
    specs = [BenchmarkSpec("sdpa", {"h": h, "c": c, "groups": g, "op": op})
             for h, c, g, op in ((64, 64, 2, "plain"), (96, 128, 4, "plain"), (128, 64, 1, "causal"),
                                 (64, 128, 4, "mask"), (128, 128, 2, "rope"), (80, 96, 3, "plain"))]
    summary = run_campaign("openvino-cpu", specs, tmp_path, rounds=1, warmup=1, repeats=3, progress=False)
    assert summary.failed == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # few benchmarks: the fit says so
        profile = fit_profile(summary.store, min_rows=3)
    assert "attention" in profile.layer_models["refined_roofline"]
    _, entry, _ = profile.model_for("attention")
    assert entry == "attention"
    block = build_benchmark(specs[0])[0]
    estimate = at.Estimator(profile).report(block, input_shape=(1, 64, 64))
    attention_rows = estimate[estimate["kind"] == "attention"]
    assert len(attention_rows) == 1 and (attention_rows["profile_entry"] == "attention").all()


def test_shipped_transformer_sweep_covers_the_families_at_small_transformer_sizes():
    specs = load_sweep("transformer")
    assert 50 <= len(specs) <= 80
    variants = {(s.family, s.params.get("op")) for s in specs}
    assert {("sdpa", op) for op in ("plain", "causal", "mask", "rope")} <= variants
    assert {("decoder_attention", "prefill"), ("decoder_attention", "decode"), ("mlp", "swiglu"),
            ("norm", "rmsnorm")} <= variants
    for spec in specs:
        ops, elems = estimate_size(spec)
        assert ops <= 2e9 and elems <= 8e6                       # the sweep's own limits
        assert 16 <= spec.params["h"] <= 1024 and 64 <= spec.params["c"] <= 768
    for name in ("quick", "full"):
        assert {("sdpa", "rope"), ("decoder_attention", "decode")} <= {(s.family, s.params.get("op"))
                                                                      for s in load_sweep(name)}


def test_a_decode_step_needs_its_cache_inputs():
    model, shape = build_benchmark(SPECS[5])
    with torch.no_grad():
        out = model(*(torch.from_numpy(x) for x in random_inputs(shape)))
    assert out.shape == (1, 1, 32)


def test_the_prefill_and_decode_example_of_the_docs_runs(capsys):
    """docs/transformers.md's Python example, run as written: two estimates, the decode
    step far below the prefill of its cache's tokens."""
    pytest.importorskip("transformers")
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "transformers.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # the eager-capture fallback says so
        exec(compile(code, "docs/transformers.md", "exec"), namespace)
    assert 0 < namespace["decode_ms"] < namespace["prefill_ms"]
    assert "decode of 1 token with a cache of 256" in capsys.readouterr().out


def test_backends_that_feed_one_input_refuse_several_by_name():
    from annette_torch.backends import BackendError, get_backend

    backend = get_backend("torch-cpu")
    backend.check_one_input((1, 16, 32))
    with pytest.raises(BackendError, match=r"one input; this one has 3 \(\(1, 1, 32\), \(1, 4, 16, 8\)"):
        backend.check_one_input(((1, 1, 32), (1, 4, 16, 8), (1, 4, 16, 8)))


def test_a_symbolic_the_user_registered_is_kept(tmp_path):
    from annette_torch.backends.onnx_symbolics import _OPSET, _rms_norm

    calls = []

    def users_own(g, *args):
        calls.append("user")
        return _rms_norm(g, *args)

    torch.onnx.register_custom_op_symbolic("aten::rms_norm", users_own, _OPSET)
    try:
        export_onnx(nn.Sequential(nn.RMSNorm(8)), (1, 4, 8), tmp_path / "model.onnx")
        assert calls == ["user"] and _registered("aten::rms_norm")
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::rms_norm", _OPSET)
