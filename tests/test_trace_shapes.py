"""FX with shapes: code that branches on shapes (HuggingFace forwards) traces through FX,
and a subgraph of parameters and buffers only is a constant for a graph compiler."""
from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn

from annette_torch import Estimator
from annette_torch.graph import trace
from annette_torch.graph.eager_capture import eager_capture
from annette_torch.graph.layer_graph import LayerGraph


class ShapeBranch(nn.Module):
    """Takes a different path for wide and narrow inputs, as HF's mask code does on sizes."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Conv2d(3, 8, 3, padding=1)
        self.narrow = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        if x.shape[-1] > 16 and x.dim() == 4:
            return self.wide(x)
        return self.narrow(x)


def test_shape_dependent_control_flow_traces_through_fx_and_follows_the_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # no eager-fallback notice
        wide = trace(ShapeBranch(), input_shape=(1, 3, 32, 32))
        narrow = trace(ShapeBranch(), input_shape=(1, 3, 8, 8))
    assert wide.method == narrow.method == "fx"
    assert [layer.module_path for layer in wide] == ["wide"]
    assert [layer.module_path for layer in narrow] == ["narrow"]
    assert wide.layers[0].counts.ops == 2 * 32 * 32 * 8 * 3 * 9


def _generic(forward):
    """A decorator with a ``*args, **kwargs`` wrapper, as transformers' ``merge_with_config_defaults``."""
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        kwargs.setdefault("scale", 2.0)
        return forward(self, *args, **kwargs)
    return wrapper


class ShiftedConv(nn.Module):
    """Writes a shifted copy of its input into a zero buffer (BART's ``shift_tokens_right``)
    and sizes it from the input's shape."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    @_generic
    def forward(self, x, mask=None, scale=1.0):
        if mask is not None and mask.ndim == 2:
            x = x * mask
        shifted = x.new_zeros(x.shape)
        shifted[..., 1:] = x[..., :-1]
        return self.conv(shifted) * scale


def test_a_decorated_forward_with_slice_assignment_traces_and_keeps_its_data_flow():
    model = ShiftedConv().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = trace(model, input_shape=(1, 3, 16, 16))
    assert graph.method == "fx"
    conv = next(layer for layer in graph if layer.kind == "conv")
    assert conv.name not in graph.folded                    # the buffer holds the input's data
    # the wrapper ran (scale 2.0 applied): the graph multiplies the conv's output
    assert any(layer.kind == "mul" and layer.attrs.get("scalar") == 2.0 for layer in graph)


def test_the_fx_graph_of_a_huggingface_model_costs_what_its_eager_capture_costs():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100)
    with torch.device("meta"):
        model = transformers.BertModel(config).eval()
    ids = torch.zeros(1, 32, dtype=torch.long, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # FX, not the eager fallback
        graph = trace(model, example_inputs=(ids,))
    assert graph.method == "fx" and not graph.unknown_layers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layers, outputs, written = eager_capture(model, [torch.zeros(1, 32, dtype=torch.long)], "meta", ())
    eager = LayerGraph(layers, ((1, 32),), "eager-meta", "bert", outputs=outputs, written=written)
    kinds = sorted(layer.kind for layer in graph if layer.name not in graph.folded)
    assert "attention" in kinds or "sdpa" in kinds or "matmul" in kinds
    estimator = Estimator("openvino-cpu")
    assert float(estimator(graph)) == pytest.approx(float(estimator(eager)), rel=1e-3)


class BiasTable(nn.Module):
    """LeViT's attention biases: a gather of a parameter by a buffer of indices, added to scores."""

    def __init__(self):
        super().__init__()
        self.biases = nn.Parameter(torch.randn(4, 49))
        self.register_buffer("index", torch.randint(0, 49, (49, 49)), persistent=False)
        self.proj = nn.Linear(49, 49)

    def forward(self, x):
        return self.proj(x) + self.biases[:, self.index]


def test_layers_of_parameters_and_buffers_only_are_folded_on_a_graph_compiler_not_on_eager_torch():
    graph = trace(BiasTable(), input_shape=(1, 4, 49, 49))
    gather = next(layer for layer in graph if not layer.parents and not layer.reads_input
                  and layer.kind != "constant")
    assert gather.name in graph.folded
    compiled = Estimator("openvino-cpu").report(graph).set_index("kernel")
    eager = Estimator("torch-cpu").report(graph).set_index("kernel")
    assert compiled.loc[gather.name, "bound"] == "free"
    assert eager.loc[gather.name, "bound"] != "free" and eager.loc[gather.name, "time_ms"] > 0


def test_a_folded_layer_fuses_with_nothing_even_where_a_rule_would_fuse_its_consumer():
    from annette_torch.mapping.kernels import map_kernels
    from annette_torch.mapping.rules import FusionRule

    graph = trace(BiasTable(), input_shape=(1, 4, 49, 49))
    rules = (FusionRule("slice", "add", "slice"),)       # as a profile learns from a slice feeding an add
    folded = map_kernels(graph, rules, optimize_graph=True)
    gather = next(k for k, names in enumerate(folded.layers) if names[0] in graph.folded)
    assert len(folded.layers[gather]) == 1 and folded.free[gather]
    assert ("add",) in folded.layers                                      # the add is a kernel of its own
    eager = map_kernels(graph, rules)                                     # eager torch folds nothing
    assert any(len(names) == 2 for names in eager.layers)


class Cache:
    """Stands for a KV cache object a forward returns (HuggingFace's ``DynamicCache``)."""

    def __init__(self, keys):
        self.layers = [{"keys": keys}]


class ReturnsACache(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = nn.Linear(16, 16)
        self.out = nn.Linear(16, 16)

    def forward(self, x):
        if x.shape[-1] != 16:                               # plain FX cannot trace this
            raise ValueError("width 16 expected")
        return self.out(x), Cache(self.key(x))


def test_a_returned_object_keeps_the_tensors_it_holds_as_outputs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = trace(ReturnsACache(), input_shape=(1, 4, 16))
    assert graph.method == "fx"
    assert {layer.module_path for layer in graph} == {"key", "out"}
    assert not graph.dead                                   # the cache's keys are an output, not dead code


class FiltersTensors(nn.Module):
    """Returns only the tensors of its results, as an export wrapper does: proxies are not
    tensors, so an FX graph of it would return nothing and cost nothing."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        if x.shape[-1] != 16:
            raise ValueError("width 16 expected")
        return tuple(v for v in (self.fc(x), None) if isinstance(v, torch.Tensor))


def test_a_forward_whose_fx_graph_returns_nothing_takes_the_eager_pass():
    with pytest.warns(UserWarning, match="captured one eager forward pass"):
        graph = trace(FiltersTensors(), input_shape=(1, 16))
    assert graph.method.startswith("eager") and [layer.kind for layer in graph] == ["linear"]
    assert not graph.dead


def test_an_encoder_decoder_whose_mask_code_puts_a_number_into_torch_where_traces_through_fx():
    # T5's masks: torch.where(mask, 0.0, min_float), which MetaTracer's own meta rule cannot add up;
    # its cache asks keys.numel()
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(num_layers=1, num_decoder_layers=1, d_model=32, d_kv=8, num_heads=4,
                                   d_ff=64, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.T5Model(config).eval()
    ids = torch.zeros(1, 16, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # FX, not the eager fallback
        graph = trace(model, example_inputs=(ids, None, ids))
    assert graph.method == "fx" and not graph.unknown_layers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layers, outputs, written = eager_capture(model, [ids, None, ids], "cpu", ())
    eager = LayerGraph(layers, ((1, 16), (1, 16)), "eager", "t5", outputs=outputs, written=written)
    assert sorted(layer.kind for layer in graph) == sorted(layer.kind for layer in eager)
    estimator = Estimator("torch-cpu")
    assert float(estimator(graph)) == pytest.approx(float(estimator(eager)), rel=1e-3)
