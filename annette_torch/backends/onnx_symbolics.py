"""ONNX export of ops the TorchScript exporter lacks, registered only while exporting.

``aten::rms_norm`` (``nn.RMSNorm``, ``F.rms_norm``) has no symbolic before ONNX's
``RMSNormalization`` (opset 23, beyond the TorchScript exporter's opset 20). Inside
:func:`exportable_ops` it is written as HuggingFace's Llama writes RMSNorm by hand:
``x / sqrt(mean(x * x) + eps) * weight`` (Mul, ReduceMean, Add, Sqrt, Div, Mul), which
OpenVINO fuses back into one RMS kernel. A symbolic the user registered is kept.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

_OPSET = 18   # ReduceMean takes its axes as an input from opset 18


def _rms_norm(g, x, normalized_shape, weight, eps):
    from torch.onnx import symbolic_helper as helper

    dims = helper._get_const(normalized_shape, "is", "normalized_shape")
    axes = g.op("Constant", value_t=torch.tensor(list(range(-len(dims), 0)), dtype=torch.long))
    epsilon = torch.finfo(torch.float32).eps if helper._is_none(eps) else helper._get_const(eps, "f", "eps")
    mean_square = g.op("ReduceMean", g.op("Mul", x, x), axes, keepdims_i=1)
    root = g.op("Sqrt", g.op("Add", mean_square, g.op("Constant", value_t=torch.tensor(epsilon, dtype=torch.float32))))
    normed = g.op("Div", x, root)
    return normed if helper._is_none(weight) else g.op("Mul", normed, weight)


SYMBOLICS = {"aten::rms_norm": _rms_norm}


def _registered(name: str) -> bool:
    try:
        from torch.onnx._internal.torchscript_exporter import registration
    except ImportError:          # another torch layout: assume nothing is registered
        return False
    return registration.registry.is_registered_op(name, _OPSET)


@contextlib.contextmanager
def exportable_ops() -> Iterator[None]:
    """For the block, the symbolics of :data:`SYMBOLICS` that torch has none of; they
    are unregistered afterwards, so the exporter's registry is left as found."""
    added = [name for name in SYMBOLICS if not _registered(name)]
    for name in added:
        torch.onnx.register_custom_op_symbolic(name, SYMBOLICS[name], _OPSET)
    try:
        yield
    finally:
        for name in added:
            torch.onnx.unregister_custom_op_symbolic(name, _OPSET)
