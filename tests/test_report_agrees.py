"""One model, one answer: ``Estimator.report`` works on every model ``Estimator.__call__``
works on, its total equals the call's, and estimating a model leaves it as it was (timm's
attention-bias caches in LeViT, EfficientFormer, EfficientViT-M and TinyViT were filled
by the first trace and changed every later one)."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from annette_torch import Estimator, trace

#: FX-traceable (levit, efficientformer) and eager-captured (efficientvit_m0, tiny_vit) models
#: whose forward fills a cache, and a plain FX one
TIMM_SAMPLE = ["levit_128s", "efficientformer_l1", "efficientvit_m0", "tiny_vit_5m_224", "resnet10t"]


def containers(model: nn.Module) -> dict:
    """Every submodule's dict, list and set attributes, copied: what a forward may fill."""
    return {(path, key): type(value)(value) for path, module in model.named_modules()
            for key, value in vars(module).items() if type(value) in (dict, list, set)}


@pytest.mark.parametrize("name", TIMM_SAMPLE)
def test_report_and_call_agree_on_timm_models_and_leave_them_as_found(name):
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False).eval()
    shape = (1, *model.pretrained_cfg["input_size"])
    before = containers(model)
    estimator = Estimator("ncs2-myriad")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the eager-capture notice
        first = estimator(model, input_shape=shape)
        report = estimator.report(model, input_shape=shape)
        again = estimator(model, input_shape=shape)
    assert report.attrs["total_ms"] == first == again
    assert containers(model) == before


def test_a_forward_that_caches_what_it_computed_is_traced_the_same_every_time():
    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(8))
            self.cache = {}

        def forward(self, x):
            key = str(x.device)
            if key not in self.cache:
                self.cache[key] = self.scale * 2
            return x * self.cache[key]

    model = Cached()
    graphs = [trace(model, input_shape=(2, 8)) for _ in range(2)]
    assert model.cache == {}
    assert [layer.kind for layer in graphs[0]] == [layer.kind for layer in graphs[1]] == ["mul", "mul"]
