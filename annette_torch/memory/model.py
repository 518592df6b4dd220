"""Memory of one inference or training step, from a :class:`LayerGraph` (Augur, §4.2/§5).

What is counted, in bytes (``bytes_per_elem``, 4 for float32):

- **parameters**: ``counts.stored_weight_elems`` of every layer, i.e. the parameters *and
  buffers* of leaf modules (batch-norm running statistics included, an embedding's whole
  table) plus parameters read by functional calls. A module called twice is counted twice.
- **inference activation peak**: layers run in graph order; a layer's output is
  allocated when it runs and freed after its last consumer has run. Free layers
  (reshape, flatten, identity, dropout, ...) alias their first parent and allocate
  nothing; an alias keeps its storage alive. The network input is live until its last
  consumer (layers without parents); outputs of the graph (layers without children)
  stay live to the end. The peak is the largest sum over steps of the live outputs,
  the running layer's inputs and output included.
- **workspace**: the im2col buffer of each convolution, ``C_in/groups * prod(kernel) *
  prod(spatial output)`` elements for one image (Caffe and PyTorch's slow path loop
  over the batch); the step workspace is the largest one. Runtimes such as oneDNN
  (PyTorch CPU's default path) do not materialise it, so it is reported as an
  upper-bound column and not added to ``total_bytes``: adding it made the inference
  agreement worse on 12 torchvision models (mean |error| 5.4 % -> 8.7 %,
  ``benchmarks/memory.py``).
- **training**: activations saved for backward are the tensors autograd keeps, by what
  each layer's backward reads (:data:`SAVES`): its inputs (conv, linear, norms, SiLU,
  GELU, Hardswish, mul ...), its output (ReLU, sigmoid, tanh, softmax), or nothing (add,
  concat, average pools, views); max pools also keep int64 indices. A tensor saved by
  several layers (a ReLU output read by the next conv) is counted once, as the storage of
  the layer that wrote it; views alias their parent's storage. Counting every layer's
  output instead overestimated training peaks by 29 % on average (ResNet-50 +57 %:
  a BasicBlock's BN and add outputs are never saved). Gradients equal
  the parameter bytes (buffers included, a slight overcount); the optimizer state is
  0x (``"sgd"``), 1x (``"momentum"``) or 2x (``"adam"``) the parameter bytes and lives
  throughout (steady state). Backward runs the layers in reverse, freeing their saved
  activations and allocating their parameter gradients: when it reaches layer i, the
  activations of layers <= i, the gradients of layers >= i and layer i's input-plus-output
  gradient pair are live. The peak is parameters + optimizer state + the largest such
  sum, or the optimizer step's (all gradients, plus for Adam two temporaries the size of
  the largest parameter tensor, :data:`ADAM_TEMPORARIES`) if larger. Multi-head attention
  also keeps its q/k/v projections and attention output (:data:`KEEPS_OUTPUT_SIZED`).
  Counting all activations and all gradients at once overestimated the measured
  torchvision models more (``benchmarks/memory.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..graph import LayerGraph

if TYPE_CHECKING:
    import pandas as pd

OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}   # state tensors per parameter
# what a layer kind's backward reads (autograd's saved tensors); kinds not listed save their inputs
SAVES = {**dict.fromkeys(("relu", "sigmoid", "tanh", "softmax"), "output"),
         **dict.fromkeys(("add", "sub", "concat", "avg_pool", "adaptive_avg_pool", "global_avg_pool", "pad",
                          "upsample", "split", "slice", "permute", "reshape", "identity", "dropout",
                          "constant", "compare"), "nothing")}
INDEX_POOLS = ("max_pool", "adaptive_max_pool", "global_max_pool")   # keep int64 indices per output element
# nn.MultiheadAttention keeps, besides its input, the query, key and value projections and
# the attention output for scaled_dot_product_attention's backward: 4 tensors of its output's size
KEEPS_OUTPUT_SIZED = {"multihead_attention": 4}
# Adam's step (PyTorch's per-tensor loop) holds two temporaries of a parameter's size at once:
# exp_avg_sq.sqrt() and its division by the bias correction
ADAM_TEMPORARIES = 2


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-layer table and totals (bytes) of one inference or training step.

    ``activation_peak_bytes`` is the liveness peak for inference and all saved
    activations for training; ``total_bytes`` is the estimated peak of the step.
    """

    layers: pd.DataFrame
    params_bytes: int
    activation_peak_bytes: int
    workspace_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    total_bytes: int
    training: bool
    optimizer: str

    @property
    def total_mb(self) -> float:
        return self.total_bytes / 2**20


def _conv_workspace_elems(graph: LayerGraph) -> np.ndarray:
    """im2col elements of each convolution for one image, 0 for other layers."""
    elems = np.zeros(len(graph), dtype=np.int64)
    for i, layer in enumerate(graph):
        if layer.kind == "conv":
            kernel = np.prod(layer.attrs["kernel_size"])
            spatial = np.prod(layer.output_shapes[0][2:])
            elems[i] = layer.input_shapes[0][1] // layer.attrs["groups"] * kernel * spatial
    return elems


def _owners(graph: LayerGraph) -> np.ndarray:
    """The storage each layer's output lives in: storage 0 is the network input, storage
    i+1 layer i's output; a free layer aliases its first parent's storage."""
    owner = np.zeros(len(graph), dtype=np.int64)
    for i, layer in enumerate(graph):
        if layer.free:
            owner[i] = owner[graph.index[layer.parents[0]]] if layer.parents else 0
        else:
            owner[i] = i + 1
    return owner


def _saved_bytes(graph: LayerGraph, owner: np.ndarray, output_bytes: np.ndarray, input_bytes: int,
                 bytes_per_elem: int) -> np.ndarray:
    """Bytes kept for backward per storage (see :data:`SAVES`): index 0 the network input,
    i+1 layer i's output, plus the indices a max pool keeps, charged to the pool."""
    size = np.concatenate([[input_bytes], output_bytes]).astype(np.int64)
    saved = np.zeros(len(graph) + 1, dtype=bool)
    extra = np.zeros(len(graph) + 1, dtype=np.int64)
    for i, layer in enumerate(graph):
        if layer.free:
            continue
        rule = SAVES.get(layer.kind, "input")
        if rule == "input":
            saved[[owner[graph.index[p]] for p in layer.parents] or [0]] = True
        elif rule == "output":
            saved[i + 1] = True
        if layer.kind in INDEX_POOLS:
            extra[i + 1] = output_bytes[i] // bytes_per_elem * 8
        extra[i + 1] += KEEPS_OUTPUT_SIZED.get(layer.kind, 0) * output_bytes[i]
    return np.where(saved, size, 0) + extra


def _liveness(graph: LayerGraph, owner: np.ndarray, output_bytes: np.ndarray, input_bytes: int) -> np.ndarray:
    """Live activation bytes at each step (the running layer's inputs and output included),
    for storages as :func:`_owners` assigns them; the network input is allocated before step 0."""
    n = len(graph)
    size = np.concatenate([[input_bytes], output_bytes]).astype(np.int64)
    size[1:][owner != np.arange(1, n + 1)] = 0          # free layers allocate nothing
    alloc = np.concatenate([[0], np.arange(n)])
    last_use = alloc.copy()
    for i, layer in enumerate(graph):
        reads = [owner[graph.index[p]] for p in layer.parents] or [0]
        last_use[reads] = np.maximum(last_use[reads], i)
    children = graph.children
    for i, layer in enumerate(graph):
        if not children[layer.name]:
            last_use[owner[i]] = n - 1
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, alloc, size)
    np.add.at(delta, last_use + 1, -size)
    return np.cumsum(delta)[:n]


def estimate_memory(graph: LayerGraph, training: bool = False, optimizer: str = "sgd",
                    bytes_per_elem: int = 4) -> MemoryEstimate:
    """Memory of one step of ``graph`` (see the module docstring for what is counted)."""
    import pandas as pd  # imported on use: importing annette_torch needs no pandas

    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZER_STATES)}")
    params = np.array([layer.counts.stored_weight_elems for layer in graph], dtype=np.int64) * bytes_per_elem
    outputs = np.array([sum(int(np.prod(s)) for s in layer.output_shapes) for layer in graph],
                       dtype=np.int64) * bytes_per_elem
    free = np.array([layer.free for layer in graph], dtype=bool)
    input_bytes = sum(int(np.prod(s)) for s in graph.input_shapes) * bytes_per_elem
    workspace = _conv_workspace_elems(graph) * bytes_per_elem
    owner = _owners(graph)
    live = _liveness(graph, owner, outputs, input_bytes) if len(graph) else np.zeros(0, dtype=np.int64)
    params_bytes = int(params.sum())
    workspace_bytes = int(workspace.max(initial=0))
    if training:
        layer_inputs = np.array([sum(int(np.prod(s)) for s in layer.input_shapes) for layer in graph],
                                dtype=np.int64) * bytes_per_elem
        kept = _saved_bytes(graph, owner, outputs, input_bytes, bytes_per_elem)
        saved = kept[1:]
        activation_bytes = int(kept.sum())
        grads_bytes = params_bytes
        optimizer_bytes = OPTIMIZER_STATES[optimizer] * params_bytes
        # backward reaches layer i with the activations of layers <= i still saved and the
        # gradients of layers >= i already allocated, plus layer i's gradient pair
        backward = (kept[0] + np.cumsum(saved) + np.cumsum(params[::-1])[::-1]
                    + layer_inputs + outputs)
        # then the optimizer step: all gradients, and Adam's temporaries of its largest tensor
        sizes = graph.parameter_sizes or ()
        largest = max(sizes) * bytes_per_elem if sizes else int(params.max(initial=0))
        step = grads_bytes + (ADAM_TEMPORARIES * largest if optimizer == "adam" else 0)
        total = params_bytes + optimizer_bytes + max(int(backward.max(initial=0)), step)
    else:
        saved = backward = np.zeros(len(graph), dtype=np.int64)
        activation_bytes = int(live.max(initial=input_bytes))
        grads_bytes = optimizer_bytes = 0
        total = params_bytes + activation_bytes
    frame = pd.DataFrame({
        "name": [layer.name for layer in graph], "kind": [layer.kind for layer in graph],
        "free": free, "params_bytes": params, "output_bytes": np.where(free, 0, outputs),
        "live_bytes": live, "workspace_bytes": workspace, "saved_bytes": saved,
        "backward_live_bytes": backward})
    return MemoryEstimate(frame, params_bytes, activation_bytes, workspace_bytes, grads_bytes,
                          optimizer_bytes, int(total), training, optimizer)
