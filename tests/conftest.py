"""Shared helpers of the tracing tests (fixtures, so test files need no imports from here)."""
from __future__ import annotations

import contextlib
import copy
from unittest import mock

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from annette_torch.kinds import PRODUCT_KINDS as COUNTED_KINDS  # what the flop counter counts too


def reference_flops(model: nn.Module, *shapes_or_tensors) -> float:
    """Total of ``FlopCounterMode`` over one forward pass of ``model``, run on the meta
    device (no arithmetic). ``model`` is copied to meta unless it already is there."""
    if any(p.device.type != "meta" for p in model.parameters()):
        model = copy.deepcopy(model).to("meta")
    inputs = [t.to("meta") if isinstance(t, torch.Tensor) else torch.zeros(t, device="meta")
              for t in shapes_or_tensors]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*inputs)
    return float(counter.get_total_flops())


@contextlib.contextmanager
def no_weight_init():
    """Skip ``torch.nn.init`` while building a model on the CPU: the weights stay
    uninitialised (``torch.empty``), which is all tracing needs, and a large model builds in
    milliseconds instead of seconds."""
    names = [n for n in dir(nn.init) if n.endswith("_") and not n.startswith("_")]
    with contextlib.ExitStack() as stack:
        for n in names:
            stack.enter_context(mock.patch.object(nn.init, n, lambda tensor, *a, **k: tensor))
        yield


def only_layer(graph, kind: str):
    """The single layer of ``kind`` in ``graph`` (fails if there are none or several)."""
    found = [layer for layer in graph if layer.kind == kind]
    assert len(found) == 1, f"expected one {kind} layer, got {[(l.name, l.kind) for l in graph]}"
    return found[0]


@pytest.fixture(scope="session")
def counted_kinds():
    return COUNTED_KINDS


@pytest.fixture(scope="session")
def flops_of():
    return reference_flops


@pytest.fixture(scope="session")
def one_layer():
    return only_layer


@pytest.fixture(scope="session")
def fast_init():
    return no_weight_init
