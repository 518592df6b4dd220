"""Model specs build every model a user brings with nothing downloaded: each test runs
with the network blocked (a connection attempt fails the test).

Every torchvision builder (all tasks) is built here; a representative subset per task is
traced (the classifiers are all traced by test_trace_torchvision.py, the complete list by
``benchmarks/zoo_coverage.py``). ``hf:`` specs are skipped when transformers is missing.
"""
from __future__ import annotations

import json
import socket
import urllib.request
import warnings

import pytest
import torch
import torchvision

from annette_torch.graph import TraceError
from annette_torch.models_source import (ModelSpecError, bind_inputs, load_example_inputs, model_inputs,
                                         resolve_model, trace_model)

#: per task: models whose tracing covers its input convention and capture path
TRACED = {
    "classification": ["resnet18", "regnet_x_400mf"],                  # FX on meta; RegNet is built on the CPU
    "quantization": ["quantized_mobilenet_v3_large"],                  # the float model with its quant stubs
    "segmentation": ["lraspp_mobilenet_v3_large"],                     # weights_backbone=None
    "video": ["r3d_18", "swin3d_t"],                                   # swin3d: a torch.fx.wrap-ed function
    "optical_flow": ["raft_small"],                                    # two image inputs, eager capture
    "detection": ["ssdlite320_mobilenet_v3_large"],                    # a list of images, eager on real weights
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any attempt to reach the network raises (and so fails the test)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model spec tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_every_torchvision_builder_builds_offline(fast_init):
    names = torchvision.models.list_models()
    assert len(names) >= 120      # classification, detection, segmentation, video, optical flow, quantization
    with fast_init():
        for name in names:
            resolved = resolve_model(f"torchvision:{name}", device="meta")
            assert isinstance(resolved.module, torch.nn.Module) and not resolved.module.training, name
            assert resolved.input_shapes, name


@pytest.mark.parametrize("name", [name for names in TRACED.values() for name in names])
def test_a_model_of_every_torchvision_task_traces_offline(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # eager-capture notices of detection and optical flow
        graph = trace_model(f"torchvision:{name}")
    assert len(graph) > 20 and graph.total("ops") > 0
    assert graph.input_shapes == resolve_model(f"torchvision:{name}", device="meta").input_shapes or \
        name in TRACED["detection"]          # a detection model's input is a list of (3, H, W) images
    assert not graph.unknown_layers(), [(layer.name, layer.op) for layer in graph.unknown_layers()]


def test_a_resnet50_detector_traces_within_the_memory_limit_the_same_way_every_time():
    """Its real-tensor run (RPN and NMS have no meta kernels) holds each activation only until
    its last reader: holding all of them passed the 1 GiB limit. Its weights come from a fixed
    seed, so the data-dependent post-processing takes one path and one spec one graph."""
    state = torch.random.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs = [trace_model("torchvision:fcos_resnet50_fpn") for _ in range(2)]
    assert graphs[0].method == "eager-real" and not graphs[0].unknown_layers()
    assert [layer.name for layer in graphs[0]] == [layer.name for layer in graphs[1]]
    assert torch.equal(torch.random.get_rng_state(), state)     # the caller's random state is untouched


def test_default_inputs_follow_the_task():
    shapes = {name: resolve_model(f"torchvision:{name}", device="meta").input_shapes
              for name in ("inception_v3", "vit_h_14", "fcn_resnet50", "mvit_v2_s", "raft_large",
                           "fasterrcnn_resnet50_fpn")}
    assert shapes == {"inception_v3": ((1, 3, 299, 299),), "vit_h_14": ((1, 3, 224, 224),),   # not its weights' 518
                      "fcn_resnet50": ((1, 3, 520, 520),),
                      "mvit_v2_s": ((1, 3, 16, 224, 224),), "raft_large": ((1, 3, 368, 496),) * 2,
                      "fasterrcnn_resnet50_fpn": ((1, 3, 800, 800),)}
    detector = resolve_model("torchvision:ssdlite320_mobilenet_v3_large", device="meta")
    (images,) = model_inputs(detector, shapes=[(2, 3, 64, 64)])
    assert [tuple(image.shape) for image in images] == [(3, 64, 64)] * 2


def test_timm_builds_offline_and_refuses_hub_names():
    pytest.importorskip("timm")
    resolved = resolve_model("timm:resnet18", device="meta")
    assert resolved.input_shapes == ((1, 3, 224, 224),)
    with pytest.raises(ModelSpecError, match="Hugging Face hub.*timm:resnet50"):
        resolve_model("timm:hf-hub:timm/resnet18.a1_in1k")


def test_a_nasbench201_cell_is_a_spec():
    arch = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|nor_conv_1x1~0|none~1|avg_pool_3x3~2|"
    resolved = resolve_model(f"nb201:{arch}")
    assert resolved.name == f"nb201:{arch}" and resolved.input_shapes == ((1, 3, 32, 32),)
    assert resolved.module(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    with pytest.raises(ModelSpecError, match="nb201:.*unknown op 'conv_5x5'"):
        resolve_model("nb201:|conv_5x5~0|+|none~0|none~1|+|none~0|none~1|none~2|")


def test_bad_specs_name_the_problem():
    with pytest.raises(ModelSpecError, match="torchvision has no model 'resnet19'"):
        resolve_model("torchvision:resnet19")
    with pytest.raises(ModelSpecError, match="unknown model source 'keras'"):
        resolve_model("keras:resnet50")
    with pytest.raises(ModelSpecError, match="must be torchvision:NAME"):
        resolve_model("resnet50")


def test_hf_config_class_estimates_with_no_download():
    pytest.importorskip("transformers")
    resolved = resolve_model("hf:BertConfig", device="meta")
    assert type(resolved.module).__name__ == "BertModel"
    assert (resolved.input_shapes, resolved.input_dtype, resolved.token_inputs) == (((1, 128),), torch.int64, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # transformers' models are captured eagerly (FX cannot trace them)
        graph = trace_model("hf:BertConfig", seq_len=32)
    assert graph.input_shapes == ((1, 32),)
    assert graph.method.startswith(("fx", "eager"))
    embeddings = [layer for layer in graph if layer.kind == "embedding"]
    word = next(layer for layer in embeddings if layer.attrs["num_embeddings"] == 30522)
    assert word.counts.weight_elems == 32 * 768            # the rows gathered, not the 30522-row table
    assert not graph.unknown_layers()


def test_hf_model_class_and_local_config_file(tmp_path):
    transformers = pytest.importorskip("transformers")
    assert type(resolve_model("hf:GPT2LMHeadModel", device="meta").module).__name__ == "GPT2LMHeadModel"
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2).to_dict()
    config["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    for spec in (f"hf:{tmp_path / 'config.json'}", f"hf:{tmp_path}"):
        model = resolve_model(spec, device="meta").module
        assert type(model).__name__ == "GPT2LMHeadModel" and len(model.transformer.h) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"model_type": "no-such-model"}))
    with pytest.raises(ModelSpecError, match="'model_type' is 'no-such-model'"):
        resolve_model(f"hf:{tmp_path / 'bad.json'}")
    with pytest.raises(ModelSpecError, match="no configuration or model class 'Nope'"):
        resolve_model("hf:Nope")


def test_encoder_decoder_gets_decoder_ids_by_name():
    pytest.importorskip("transformers")
    resolved = resolve_model("hf:T5Config", device="meta")
    args = model_inputs(resolved, seq_len=8)
    assert resolved.input_names == ("input_ids", "decoder_input_ids")
    assert tuple(args[0].shape) == (1, 8) and args[0].dtype == torch.int64
    decoder = [a for a in args[1:] if isinstance(a, torch.Tensor)]
    assert len(decoder) == 1 and tuple(decoder[0].shape) == (1, 8)


def test_inputs_by_shape_dtype_and_name():
    class Two(torch.nn.Module):
        def forward(self, x, mask=None, y=None):
            return x

    resolved = resolve_model("torchvision:resnet18", device="meta")
    (x,) = model_inputs(resolved, shapes=[(2, 3, 32, 32)], dtypes=[torch.float16])
    assert (tuple(x.shape), x.dtype) == ((2, 3, 32, 32), torch.float16)
    with pytest.raises(ModelSpecError, match="--seq-len applies to models whose inputs are token ids"):
        model_inputs(resolved, seq_len=16)
    with pytest.raises(ModelSpecError, match="2 input dtypes for 1 input shapes"):
        model_inputs(resolved, dtypes=[torch.float32, torch.int64])
    x, mask, y = bind_inputs(Two(), {"x": 1, "y": 2})
    assert (x, mask, y) == (1, None, 2)
    with pytest.raises(ModelSpecError, match="has no parameter 'z'"):
        bind_inputs(Two(), {"z": 1})


def test_example_inputs_from_a_file(tmp_path):
    source = tmp_path / "inputs.py"
    source.write_text("import torch\n"
                      "def one():\n    return torch.zeros(1, 4)\n"
                      "def named():\n    return {'y': torch.ones(2)}\n"
                      "def bad():\n    return 3\n")

    class Two(torch.nn.Module):
        def forward(self, x=None, y=None):
            return y

    assert tuple(load_example_inputs(f"{source}:one", Two())[0].shape) == (1, 4)
    assert load_example_inputs(f"{source}:named", Two())[0] is None
    with pytest.raises(ModelSpecError, match="returned int"):
        load_example_inputs(f"{source}:bad", Two())
    with pytest.raises(ModelSpecError, match="has no function 'missing'"):
        load_example_inputs(f"{source}:missing", Two())


def test_a_bad_input_is_reported_not_retried_on_the_cpu():
    with pytest.raises(TraceError, match=r"conv1.*\(1, 4, 64, 64\)"):
        trace_model("torchvision:resnet18", shapes=[(1, 4, 64, 64)])
