"""Recurrent layers: nn.RNN, nn.LSTM, nn.GRU and their single-step cells.

Each time step of each layer and direction multiplies the input and the recurrent state
by the gate weights: ``gates * H * (I + R)`` multiply-accumulates, with ``gates`` = 4
(LSTM), 3 (GRU) or 1 (RNN), ``H`` the hidden size, ``I`` the layer's input width
(``input_size`` for the first layer, ``R * directions`` above it) and ``R`` the recurrent
width (``proj_size`` for a projected LSTM, which adds ``H * R`` for the projection, else
``H``). ops = 2 * steps * batch * directions * the sum over layers. Gate nonlinearities
and the elementwise state updates are not counted, like biases elsewhere.

Dimensions: ``n`` = batch, ``h`` = sequence length, ``c`` = input size, ``f`` = hidden size.
"""
from __future__ import annotations

from torch import nn

from .registry import LayerKind, register_kind

_GATES = {"LSTM": 4, "GRU": 3}


@register_kind
class Recurrent(LayerKind):
    name = "rnn"
    modules = (nn.RNN, nn.LSTM, nn.GRU, nn.RNNCell, nn.LSTMCell, nn.GRUCell)

    def attrs_from_module(self, module):
        cell = isinstance(module, nn.RNNCellBase)
        mode = type(module).__name__.removesuffix("Cell") if cell else module.mode
        return {"mode": mode, "input_size": module.input_size, "hidden_size": module.hidden_size,
                "num_layers": 1 if cell else module.num_layers,
                "bidirectional": False if cell else module.bidirectional,
                "proj_size": 0 if cell else module.proj_size,
                "batch_first": False if cell else module.batch_first, "cell": cell}

    @staticmethod
    def _batch_steps(attrs, x) -> tuple[int, int]:
        """(batch, time steps) of the input ``x``, batched or not."""
        if attrs["cell"]:
            return (x[0] if len(x) == 2 else 1), 1
        if len(x) == 2:
            return 1, x[0]
        return (x[0], x[1]) if attrs["batch_first"] else (x[1], x[0])

    def count_ops(self, attrs, in_shapes, out_shapes):
        batch, steps = self._batch_steps(attrs, in_shapes[0])
        gates, hidden = _GATES.get(attrs["mode"], 1), attrs["hidden_size"]
        directions = 2 if attrs["bidirectional"] else 1
        recurrent = attrs["proj_size"] or hidden
        projection = hidden * recurrent if attrs["proj_size"] else 0
        macs, width = 0, attrs["input_size"]
        for _ in range(attrs["num_layers"]):
            macs += gates * hidden * (width + recurrent) + projection
            width = recurrent * directions
        return 2.0 * steps * batch * directions * macs

    def meta_output(self, attrs, tensors, kwargs):
        """The outputs' shapes without running the time steps (which meta runs op by op)."""
        if len(tensors) != 1:  # an initial state was given: let the real op check it
            return None
        x = tensors[0]
        batched = x.dim() == (2 if attrs["cell"] else 3)
        if x.dim() - batched != (1 if attrs["cell"] else 2) or x.shape[-1] != attrs["input_size"]:
            raise ValueError(f"{attrs['mode']} expects input of size {attrs['input_size']} "
                             f"in the last dim, got {tuple(x.shape)}")
        hidden = attrs["hidden_size"]
        out = attrs["proj_size"] or hidden
        if attrs["cell"]:
            state = (x.shape[0],) if batched else ()
            h = x.new_empty(state + (hidden,))
            return (h, x.new_empty(h.shape)) if attrs["mode"] == "LSTM" else h
        directions = 2 if attrs["bidirectional"] else 1
        batch, _ = self._batch_steps(attrs, tuple(x.shape))
        layers = (directions * attrs["num_layers"],) + ((batch,) if batched else ())
        output = x.new_empty(tuple(x.shape[:-1]) + (directions * out,))
        h_n = x.new_empty(layers + (out,))
        if attrs["mode"] == "LSTM":
            return output, (h_n, x.new_empty(layers + (hidden,)))
        return output, h_n

    def dims(self, attrs, in_shapes, out_shapes):
        batch, steps = self._batch_steps(attrs, in_shapes[0])
        return {"n": batch, "h": steps, "w": 1, "c": attrs["input_size"], "f": attrs["hidden_size"]}
