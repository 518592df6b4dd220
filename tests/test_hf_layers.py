"""Layers HuggingFace writes its own way: its RMSNorm modules and GPT-2's Conv1D."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from annette_torch import trace

transformers = pytest.importorskip("transformers")


def _tiny_llama():
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    return transformers.LlamaModel(config).eval()


def test_llama_rms_norm_is_one_rms_norm_layer():
    graph = trace(_tiny_llama(), example_inputs=(torch.zeros(1, 16, dtype=torch.long),))
    norms = [layer for layer in graph.layers if layer.kind == "rms_norm"]
    assert len(norms) == 3                     # two per decoder layer and the final one
    assert norms[0].attrs["normalized_shape"] == (64,)
    assert norms[0].counts.ops == 4 * 16 * 64
    assert not any(layer.op == "rsqrt" for layer in graph.layers)


def test_a_module_named_like_rms_norm_without_its_weight_is_traced_into():
    class FakeRMSNorm(nn.Module):
        def forward(self, x):
            return x * 2

    graph = trace(nn.Sequential(FakeRMSNorm()), input_shape=(1, 8))
    assert [layer.kind for layer in graph.layers] == ["mul"]


def test_gpt2_conv1d_is_a_linear_layer_with_its_weights():
    config = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100, n_positions=64)
    graph = trace(transformers.GPT2Model(config).eval(), example_inputs=(torch.zeros(1, 16, dtype=torch.long),))
    linears = [layer for layer in graph.layers if layer.op == "addmm"]
    assert linears and all(layer.kind == "linear" for layer in linears)
    qkv = linears[0]
    assert qkv.counts.weight_elems == 64 * 3 * 64 + 3 * 64
    assert qkv.counts.ops == 2 * 16 * 64 * 3 * 64
    # an activation-by-activation product stays a matmul
    x_at_y = trace(_Gram(), input_shape=(1, 8, 4))
    assert [layer.kind for layer in x_at_y.layers if layer.op in ("matmul", "bmm")] == ["matmul"]


class _Gram(nn.Module):
    def forward(self, x):
        return torch.matmul(x, x.transpose(1, 2))


def test_whisper_encoder_takes_log_mel_frames_and_the_whole_model_says_what_to_do():
    from annette_torch.models_source import ModelSpecError, resolve_model
    resolved = resolve_model("hf:WhisperForAudioClassification")
    config = resolved.module.config
    assert resolved.input_shapes == ((1, config.num_mel_bins, 2 * config.max_source_positions),)
    assert resolved.input_dtype == torch.float32
    with pytest.raises(ModelSpecError, match="hf:WhisperForAudioClassification"):
        resolve_model("hf:WhisperConfig")


def test_kinds_without_a_model_of_their_own_are_answered_by_their_stand_ins():
    from annette_torch.profiles import load_profile
    from annette_torch.profiles.profile import STAND_INS
    profile = load_profile("openvino-cpu")
    for kind, stand_ins in STAND_INS.items():
        _, entry, _ = profile.model_for(kind)
        assert entry == kind or entry in stand_ins, (kind, entry)
    assert profile.model_for("no_such_kind")[1] == "default"
