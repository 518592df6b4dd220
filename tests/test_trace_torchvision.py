"""Every torchvision classification model traces, and its products agree with torch's
flop counter.

Models are built on the meta device (no weights, no memory); RegNets compute their widths
with ``.tolist()`` in the constructor and are built on the CPU without weight
initialisation instead. Each model is traced once (module-level cache) and shared by the
tests below; the file runs in well under a minute on two cores.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torchvision
from torchvision.models import get_model, list_models

import annette_torch
from annette_torch.graph.eager_capture import eager_capture

MODELS = sorted(list_models(module=torchvision.models))
RESOLUTION = {"inception_v3": 299}  # every other classifier is built for 224 x 224


def resolution(name: str) -> int:
    return RESOLUTION.get(name, 224)


def build(name: str, fast_init) -> torch.nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # googlenet/inception: init-weights FutureWarning
        try:
            with torch.device("meta"):
                model = get_model(name)
        except (NotImplementedError, RuntimeError):  # .tolist() etc. on meta tensors
            with fast_init():
                model = get_model(name)
    return model.eval()


@pytest.fixture(scope="module")
def traced(fast_init, flops_of):
    """name -> (LayerGraph at batch 1, flop counter total, parameters used in eval mode)."""
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            model = build(name, fast_init)
            shape = (1, 3, resolution(name), resolution(name))
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no fallback warnings for torchvision models
                graph = annette_torch.trace(model, input_shape=shape, name=name)
            # GoogLeNet's and Inception's auxiliary classifiers do not run in eval mode.
            n_params = sum(p.numel() for n, p in model.named_parameters() if not n.lower().startswith("aux"))
            cache[name] = (graph, flops_of(model.to("meta"), shape), n_params)
        return cache[name]

    return get


def test_the_model_list_is_complete():
    assert len(MODELS) >= 80
    for family in ("resnet18", "vit_b_16", "swin_v2_t", "maxvit_t", "regnet_y_128gf", "inception_v3"):
        assert family in MODELS


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_traces_with_fx_and_no_unknown_kinds(name, traced):
    graph, _, n_params = traced(name)
    assert graph.method == "fx"
    assert graph.input_shapes == ((1, 3, resolution(name), resolution(name)),)
    unknown = [(layer.name, layer.op) for layer in graph.unknown_layers()]
    assert not unknown, f"{name}: layers of unknown kind {unknown}"
    assert any((1, 1000) in layer.output_shapes for layer in graph), "no layer produces the logits"
    # Graph invariants: execution order, parents are earlier layers, sane counts.
    seen: set[str] = set()
    for layer in graph:
        assert set(layer.parents) <= seen, f"{layer.name} reads a layer not yet computed"
        seen.add(layer.name)
        assert math.isfinite(layer.counts.ops) and layer.counts.ops >= 0
        assert layer.counts.output_elems > 0
    assert graph.layers[0].parents == ()
    # Every parameter is read by some layer (as a leaf module's weight or an operand).
    assert graph.total("weight_elems") >= n_params


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_products_agree_with_the_flop_counter(name, traced, counted_kinds):
    graph, reference, _ = traced(name)
    ours = graph.total("ops", kinds=counted_kinds)
    assert reference > 0
    assert ours == pytest.approx(reference, rel=0.01), (
        f"{name}: {ours:.4g} counted vs {reference:.4g} from torch.utils.flop_counter")


def test_ops_scale_linearly_with_batch(fast_init):
    model = build("resnet18", fast_init)
    one = annette_torch.trace(model, input_shape=(1, 3, 224, 224))
    four = annette_torch.trace(model, input_shape=(4, 3, 224, 224))
    assert four.input_shapes == ((4, 3, 224, 224),)
    assert [layer.name for layer in one] == [layer.name for layer in four]
    for a, b in zip(one, four):
        assert b.counts.ops == 4 * a.counts.ops, a.name
        assert b.counts.output_elems == 4 * a.counts.output_elems, a.name
        assert b.counts.weight_elems == a.counts.weight_elems, a.name
        assert b.output_shapes[0][0] == 4
    assert four.total("ops") == pytest.approx(4 * one.total("ops"))
    assert one.total("ops", kinds=("conv", "linear")) == pytest.approx(2 * 1.814e9, rel=0.01)  # 1.81 GMACs


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "vit_b_16", "densenet121"])
def test_eager_capture_matches_fx(name, traced):
    """The fallback sees the same layers as FX on models both can capture."""
    graph, _, _ = traced(name)
    with torch.device("meta"):
        model = get_model(name).eval()
    layers, outputs, written = eager_capture(model, [torch.zeros(1, 3, 224, 224, device="meta")], "meta")
    eager = annette_torch.LayerGraph(layers, outputs=outputs, written=written)
    assert eager.kind_counts() == graph.kind_counts()
    assert eager.outputs == graph.outputs and eager.dead == graph.dead == frozenset()
    assert eager.total("ops") == pytest.approx(graph.total("ops"))
    assert sum(len(l.parents) for l in eager) == sum(len(l.parents) for l in graph)
    for kind in ("conv", "linear", "multihead_attention"):
        assert ([l.output_shapes for l in eager if l.kind == kind]
                == [l.output_shapes for l in graph if l.kind == kind])
