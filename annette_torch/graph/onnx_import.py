"""``import_onnx(path_or_model, input_shape=None) -> LayerGraph``: an ONNX model as layers.

The result follows the conventions of :func:`annette_torch.trace`, so an ONNX export of a
torch model gives (nearly) the same kernels as tracing the model itself:

* every ONNX node that reads an activation is one layer; its kind comes from the
  ``onnx_ops`` of the layer kinds (:func:`kind_for_onnx`), its attributes use the keys the
  torch side uses (``in_channels``, ``kernel_size``, ``stride``, ...), and
  ``kind.resolve`` picks the final name (``Conv`` with ``group == in_channels`` is a
  ``depthwise_conv``, ``Clip(0, 6)`` is ``relu6``, ``GlobalAveragePool`` is
  ``global_avg_pool``); op types no kind claims are the ``unknown`` kind;
* activations are the graph inputs and everything computed from them. Initializers,
  ``Constant`` outputs and whatever is computed from those alone (``Identity`` of a
  shared weight, a ``DequantizeLinear`` of a quantised weight) are constants: float
  constants of rank >= 1 are the layer's weights, integer and scalar constants (shapes,
  axes, pads, ``Clip`` bounds) are settings like the Python numbers of a torch call;
* a ``Gather`` along axis 0 of a float weight table of rank 2 by activation indices is
  what ``nn.Embedding`` exports: an ``embedding`` layer that reads its indices and the
  rows they pick (as traced from torch), not a ``slice`` reading the whole table; a
  ``Gather`` of an activation stays a ``slice``;
* ``Shape`` and ``Size`` nodes are bookkeeping (``x.size()`` in torch), never layers, so
  the ``Shape -> Gather -> Concat -> Reshape`` chains of exported ``view`` calls leave
  only the ``Reshape`` layer;
* parents are the layers producing a layer's activation operands; layer names are the
  node names (``op_type_index`` for unnamed nodes), made unique.

Shapes come from ``onnx.shape_inference`` (strict, with data propagation); ``input_shape``
replaces the shapes of the graph inputs, e.g. to fix a dynamic batch dimension. When a
layer's shape stays unknown because it depends on a computed constant that inference does
not evaluate (the pads of an exported ``F.pad`` go through ``Transpose`` and ``Reshape``),
the small constant computations are evaluated with ``onnx.reference`` and inference runs
again (repeatedly, as new shapes make more shape queries constant). Weights are read for
their shapes only: their data is dropped after loading, and external data files are read
only for small constants.

Not handled: the bodies of control-flow nodes (``If``, ``Loop``, ``Scan`` become one
``unknown`` layer each), operators of non-standard domains (``com.microsoft`` fused ops are
``unknown``), sequence/optional-typed activations and shapes that stay symbolic after
inference (both raise :class:`TraceError`), and torch-level fusions the exporter undoes
(``nn.Linear`` on 3-D input exports as ``MatMul`` + ``Add``: a ``matmul`` and an ``add``
layer, not one ``linear``). In eval mode the exporter also folds BatchNorm into the
preceding Conv; export with ``training=torch.onnx.TrainingMode.PRESERVE`` to keep it.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from ..kinds import KINDS, kind_for_onnx, layer_counts
from ..kinds.activation import reduces_contiguous
from ..validation import regular_file
from ..kinds.registry import Shape, numel
from .errors import TraceError, first_line
from .layer_graph import Layer, LayerGraph
from .recognize import mark_channel_shuffles

#: Node domains whose op types the layer kinds describe.
_STANDARD_DOMAINS = ("", "ai.onnx")
#: the standard operator set a model that declares none uses (ONNX's rule: the latest; the
#: importer's semantics follow opset 13 and later)
_DEFAULT_OPSET = 13
#: Nodes that only read the shape of an activation: their outputs are constants.
_SHAPE_QUERIES = ("Shape", "Size")
#: Float inputs that are settings, not data (Resize's roi and scales).
_SETTING_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,)}
#: Constants up to this many elements keep their values (shapes, axes, pads, bounds);
#: larger ones (weights) are read for their shapes only.
_VALUE_LIMIT = 4096
_FLOAT_TYPES = frozenset(value for key, value in TensorProto.DataType.items()
                         if key.startswith(("FLOAT", "BFLOAT")) or key == "DOUBLE")


def import_onnx(path_or_model: str | os.PathLike | onnx.ModelProto,
                input_shape: Sequence[int] | Sequence[Sequence[int]] | None = None) -> LayerGraph:
    """Read an ONNX file (or a loaded ``ModelProto``) as a :class:`LayerGraph`.

    ``input_shape`` is one shape or one shape per graph input; it replaces the shapes
    the model declares (needed when they are dynamic). Raises ``ValueError`` for a
    missing or unreadable file or a bad ``input_shape``, and :class:`TraceError` when
    shapes cannot be inferred (the message names the file and the node).
    """
    model, label, base_dir = _load(path_or_model)
    graph = model.graph
    inputs = [value for value in graph.input if value.name not in _initializer_names(graph)]
    if input_shape is not None:
        _replace_input_shapes(graph, inputs, input_shape, label)
    for value in inputs:
        if _static_shape(value.type) is None:
            raise TraceError(f"{label}: input '{value.name}' has the dynamic shape "
                             f"{_shape_text(value.type)}; pass input_shape=(...) to fix it")
    model = _infer_shapes(model, label, overridden=input_shape is not None)
    tensors = _Tensors(model, base_dir, label)
    while not _layer_shapes_known(model.graph, tensors, label):
        folded = _fold_constants(model, tensors, label)
        if len(folded.graph.node) == len(model.graph.node):
            break  # nothing left to fold: _build_layers names the unknown shape
        model = _infer_shapes(folded, label, overridden=input_shape is not None)
        tensors = _Tensors(model, base_dir, label)
    layers, outputs = _build_layers(model.graph, tensors, label)
    input_shapes = tuple(tensors.shape(value.name, "the graph inputs") for value in inputs)
    return LayerGraph(mark_channel_shuffles(layers), input_shapes, method="onnx", model_name=label, outputs=outputs)


def _load(path_or_model) -> tuple[onnx.ModelProto, str, str]:
    """A copy of the model without weight data, its label and its folder."""
    if isinstance(path_or_model, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(path_or_model)
        _drop_weight_data(model.graph)
        return model, model.graph.name or "onnx model", ""
    path = os.fspath(regular_file(path_or_model, "ONNX file"))
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as error:  # noqa: BLE001 - protobuf raises several error types
        raise ValueError(f"{path} is not a readable ONNX model: {first_line(error)}") from error
    if not model.graph.node:
        raise ValueError(f"{path} is not a readable ONNX model: it holds no graph nodes")
    _drop_weight_data(model.graph)
    return model, os.path.splitext(os.path.basename(path))[0], os.path.dirname(os.path.abspath(path))


def _drop_weight_data(graph: onnx.GraphProto) -> None:
    """Clear the data of initializers over :data:`_VALUE_LIMIT` elements (their dims
    stay): shape inference then handles a small model, however large the weights."""
    for tensor in graph.initializer:
        if numel(tensor.dims) > _VALUE_LIMIT:
            for data in ("raw_data", "float_data", "double_data", "int32_data", "int64_data",
                         "uint64_data", "string_data"):
                tensor.ClearField(data)


def _initializer_names(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}


def _replace_input_shapes(graph: onnx.GraphProto, inputs: list, input_shape, label: str) -> None:
    """Give the inputs the shapes of ``input_shape`` and drop the exporter's shape
    annotations of the other tensors, which describe the old input shapes."""
    shapes = [input_shape] if input_shape and isinstance(input_shape[0], int) else list(input_shape)
    if len(shapes) != len(inputs):
        raise ValueError(f"{label} has {len(inputs)} input(s) ({', '.join(v.name for v in inputs)}) "
                         f"but input_shape gives {len(shapes)} shape(s)")
    for value, shape in zip(inputs, shapes):
        if not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"input_shape must hold positive integers, got {tuple(shape)}")
        declared = value.type.tensor_type.shape
        if len(declared.dim) and len(declared.dim) != len(shape):
            raise ValueError(f"{label}: input '{value.name}' has rank {len(declared.dim)}, "
                             f"but input_shape gives {tuple(shape)}")
        declared.ClearField("dim")
        for size in shape:
            declared.dim.add().dim_value = size
    del graph.value_info[:]
    for value in graph.output:
        value.type.tensor_type.ClearField("shape")


def _infer_shapes(model: onnx.ModelProto, label: str, overridden: bool) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as error:  # noqa: BLE001 - onnx raises InferenceError and checker errors
        hint = (" (the model may have been exported for a fixed input shape that input_shape "
                "changes)" if overridden else "")
        raise TraceError(f"{label}: ONNX shape inference failed{hint}: {first_line(error)}") from error


class _Tensors:
    """Element types, static shapes and constant values of a shape-inferred model's graph,
    and the version of the standard operator set it uses."""

    def __init__(self, model: onnx.ModelProto, base_dir: str, label: str) -> None:
        graph = model.graph
        self.label = label
        self.base_dir = base_dir
        self.opset = max((entry.version for entry in model.opset_import if entry.domain in _STANDARD_DOMAINS),
                         default=_DEFAULT_OPSET)
        self.types: dict[str, tuple[int, Shape | None]] = {}
        for value in [*graph.input, *graph.value_info, *graph.output]:
            self.types[value.name] = (value.type.tensor_type.elem_type, _static_shape(value.type))
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        for tensor in graph.initializer:
            self.types[tensor.name] = (tensor.data_type, tuple(int(d) for d in tensor.dims))
        for sparse in graph.sparse_initializer:
            self.types[sparse.values.name] = (sparse.values.data_type, tuple(int(d) for d in sparse.dims))
        self.constant_nodes = {node.output[0]: node for node in graph.node
                               if node.op_type == "Constant" and node.domain in _STANDARD_DOMAINS}

    def known_shape(self, name: str) -> Shape | None:
        return self.types.get(name, (0, None))[1]

    def shape(self, name: str, where: str) -> Shape:
        """The static shape of a tensor; ``where`` names the node for the error."""
        shape = self.known_shape(name)
        if shape is None:
            raise TraceError(f"{self.label}: tensor '{name}' of {where} has no static shape after "
                             f"ONNX shape inference (a dynamic or non-tensor value); pass "
                             f"input_shape=(...) for dynamic inputs")
        return shape

    def is_float(self, name: str) -> bool:
        return self.types.get(name, (0, None))[0] in _FLOAT_TYPES

    def value(self, name: str) -> np.ndarray | None:
        """The value of a small initializer or ``Constant`` output, else None."""
        shape = self.known_shape(name)
        if shape is None or numel(shape) > _VALUE_LIMIT:
            return None
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name], self.base_dir)
        node = self.constant_nodes.get(name)
        if node is None or not node.attribute:
            return None
        value = helper.get_attribute_value(node.attribute[0])
        if isinstance(value, TensorProto):
            return numpy_helper.to_array(value, self.base_dir)
        return np.asarray(value) if isinstance(value, (int, float, list)) else None


def _layer_nodes(graph: onnx.GraphProto, label: str) -> Iterator[tuple[int, onnx.NodeProto]]:
    """(index, node) of the nodes that are layers: those reading an activation, less the
    shape queries. Raises :class:`TraceError` for a node reading an undefined tensor."""
    initializers = _initializer_names(graph)
    activations = {value.name for value in graph.input if value.name not in initializers}
    defined = {"", *activations, *initializers}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name not in defined:
                raise TraceError(f"{label}: node '{node.name or index}' ({node.op_type}) reads '{name}', "
                                 f"which no earlier node produces (the graph is not topologically sorted)")
        defined.update(node.output)
        if node.op_type not in _SHAPE_QUERIES and any(name in activations for name in node.input):
            activations.update(output for output in node.output if output)
            yield index, node


def _layer_shapes_known(graph: onnx.GraphProto, tensors: _Tensors, label: str) -> bool:
    """Whether every tensor a layer reads or writes has a static shape."""
    return all(tensors.known_shape(name) is not None
               for _, node in _layer_nodes(graph, label) for name in [*node.input, *node.output] if name)


def _fold_constants(model: onnx.ModelProto, tensors: _Tensors, label: str) -> onnx.ModelProto:
    """A copy of ``model`` whose constant computations are replaced by initializers.

    Constant computations are the nodes that are not layers; shape queries of statically
    shaped activations count as constants. Nodes reading or writing large tensors
    (weights) or that ``onnx.reference`` cannot run are kept as they are.
    """
    layer_nodes = {index for index, _ in _layer_nodes(model.graph, label)}
    opsets = {entry.domain: entry.version for entry in model.opset_import}
    values: dict[str, np.ndarray] = {}
    kept: list[onnx.NodeProto] = []
    for index, node in enumerate(model.graph.node):
        outputs = None if index in layer_nodes else _evaluate(node, values, tensors, opsets)
        if outputs is None:
            kept.append(node)
        else:
            values.update(outputs)
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    del folded.graph.node[:]
    folded.graph.node.extend(kept)
    folded.graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in values.items())
    return folded


def _evaluate(node: onnx.NodeProto, values: dict[str, np.ndarray], tensors: _Tensors,
              opsets: dict[str, int]) -> dict[str, np.ndarray] | None:
    """The output values of a constant node, or None when they cannot be computed."""
    if node.op_type in _SHAPE_QUERIES:
        shape = tensors.known_shape(node.input[0])
        if shape is None:
            return None
        if node.op_type == "Size":
            return {node.output[0]: np.array(numel(shape), dtype=np.int64)}
        attributes = {a.name: a.i for a in node.attribute}
        dims = shape[attributes.get("start", 0):attributes.get("end", len(shape))]
        return {node.output[0]: np.array(dims, dtype=np.int64)}
    try:
        inputs = {name: values[name] if name in values else tensors.value(name) for name in node.input if name}
        if any(value is None for value in inputs.values()):
            return None
        results = [np.asarray(r) for r in ReferenceEvaluator(node, opsets=opsets).run(None, inputs)]
    except Exception:  # noqa: BLE001 - unreadable data or an op the reference runtime lacks
        return None
    if any(result.size > _VALUE_LIMIT for result in results):
        return None
    return {name: result for name, result in zip(node.output, results) if name}


def _build_layers(graph: onnx.GraphProto, tensors: _Tensors, label: str) -> tuple[list[Layer], tuple[str, ...]]:
    """One layer per node that reads an activation, in graph (topological) order, and the
    layers producing the graph's outputs."""
    # activation name -> the layer producing it ("" for a graph input)
    producers = {value.name: "" for value in graph.input if value.name not in _initializer_names(graph)}
    names: set[str] = set()
    layers: list[Layer] = []
    for index, node in _layer_nodes(graph, label):
        name = _unique(node.name or f"{node.op_type}_{index}", names)
        layers.append(_build_layer(node, name, tensors, producers))
        producers.update((output, name) for output in node.output if output)
    return layers, tuple(dict.fromkeys(producers[v.name] for v in graph.output if producers.get(v.name)))


def _unique(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate


def _build_layer(node: onnx.NodeProto, name: str, tensors: _Tensors, producers: dict[str, str]) -> Layer:
    """Kind, attributes, counts and parents of one node; ``producers`` maps activations
    to the layers writing them."""
    where = f"node '{node.name or name}' ({node.op_type})"
    in_shapes: list[Shape] = []
    is_weight: list[bool] = []
    parents: list[str] = []
    reads_input = False
    for position, tensor in enumerate(node.input):
        if tensor in producers:
            reads_input = reads_input or producers[tensor] == ""
            in_shapes.append(tensors.shape(tensor, where))
            is_weight.append(False)
            if producers[tensor] and producers[tensor] not in parents:
                parents.append(producers[tensor])
        elif (tensor and tensors.is_float(tensor)
              and position not in _SETTING_INPUTS.get(node.op_type, ())
              and len(tensors.shape(tensor, where)) > 0):
            in_shapes.append(tensors.shape(tensor, where))
            is_weight.append(True)
    out_shapes = [tensors.shape(output, where) for output in node.output if output]
    if node.op_type in ("Conv", "ConvTranspose") and node.domain in _STANDARD_DOMAINS:
        _check_channels(node, tensors, where)

    table = _embedding_table(node, tensors, producers)
    if table is not None:              # the torch order of F.embedding's operands: indices, then the table
        in_shapes, is_weight = in_shapes[::-1], is_weight[::-1]
        kind, read_attrs = KINDS["embedding"], lambda view: {"num_embeddings": table[0], "embedding_dim": table[1]}
    else:
        kind = kind_for_onnx(node.op_type) if node.domain in _STANDARD_DOMAINS else None
        read_attrs = _ATTRS.get(node.op_type, lambda view: {})
    attrs: dict[str, Any] = {"op": node.op_type}
    counts = None
    if kind is not None:
        try:
            attrs = read_attrs(_NodeView(node, tensors, where))
            counts = layer_counts(kind, attrs, in_shapes, out_shapes, is_weight)
        except Exception as error:  # noqa: BLE001 - an unusual node becomes an unknown layer
            attrs = {"op": node.op_type, "note": f"{kind.name} attributes unreadable: {first_line(error)}"}
    if counts is None:
        kind = KINDS["unknown"]
        counts = layer_counts(kind, attrs, in_shapes, out_shapes, is_weight)
    return Layer(name=name, kind=kind.resolve(attrs), op=node.op_type, module_path=node.name,
                 input_shapes=tuple(in_shapes), output_shapes=tuple(out_shapes), attrs=attrs,
                 parents=tuple(parents), counts=counts, reads_input=reads_input)


def _embedding_table(node: onnx.NodeProto, tensors: _Tensors, producers: dict[str, str]) -> Shape | None:
    """The (rows, width) of the table an exported ``nn.Embedding`` gathers from: a
    standard ``Gather`` along axis 0 whose data is a float constant of rank 2 and whose
    indices are an activation; None for any other node."""
    if node.op_type != "Gather" or node.domain not in _STANDARD_DOMAINS or len(node.input) != 2:
        return None
    data, indices = node.input
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
    shape = tensors.known_shape(data)
    if axis != 0 or data in producers or indices not in producers or not tensors.is_float(data) \
            or shape is None or len(shape) != 2:
        return None
    return shape


def _check_channels(node: onnx.NodeProto, tensors: _Tensors, where: str) -> None:
    """:class:`TraceError` when a convolution's input has other channels than its weights
    take (an ``input_shape`` that contradicts the model; ONNX shape inference lets it pass)."""
    if len(node.input) < 2:
        return
    data, weight = tensors.known_shape(node.input[0]), tensors.known_shape(node.input[1])
    if not data or not weight or len(data) < 2 or len(weight) < 2:
        return
    groups = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1)
    expected = weight[0] if node.op_type == "ConvTranspose" else weight[1] * groups
    if data[1] != expected:
        raise TraceError(f"{tensors.label}: {where}: its input has {data[1]} channels (shape {data}), but its "
                         f"weights {weight} take {expected}; give an input shape with {expected} channels")


class _NodeView:
    """What the attribute readers need of one node: attributes, input shapes, constants."""

    def __init__(self, node: onnx.NodeProto, tensors: _Tensors, where: str) -> None:
        self.node = node
        self.tensors = tensors
        self.where = where
        self.attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def attr(self, key: str, default: Any = None) -> Any:
        value = self.attributes.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    def has_input(self, position: int) -> bool:
        return len(self.node.input) > position and bool(self.node.input[position])

    def input_shape(self, position: int) -> Shape:
        return self.tensors.shape(self.node.input[position], self.where)

    def input_value(self, position: int) -> np.ndarray | None:
        return self.tensors.value(self.node.input[position]) if self.has_input(position) else None


def _padding(view: _NodeView, nd: int) -> str | tuple[int, ...]:
    """Torch-style padding: "same"/"valid", the per-axis pad, or all 2*nd pads if uneven."""
    auto_pad = view.attr("auto_pad", "NOTSET")
    if auto_pad.startswith("SAME"):
        return "same"
    if auto_pad == "VALID":
        return "valid"
    pads = tuple(view.attr("pads", (0,) * (2 * nd)))
    return pads[:nd] if pads[:nd] == pads[nd:] else pads


def _conv(view: _NodeView, transposed: bool = False) -> dict:
    weight = view.input_shape(1)
    nd = len(weight) - 2
    groups = int(view.attr("group", 1))
    in_ch, out_ch = (weight[0], weight[1] * groups) if transposed else (weight[1] * groups, weight[0])
    attrs = {"in_channels": in_ch, "out_channels": out_ch,
             "kernel_size": tuple(view.attr("kernel_shape", weight[2:])),
             "stride": tuple(view.attr("strides", (1,) * nd)), "padding": _padding(view, nd),
             "dilation": tuple(view.attr("dilations", (1,) * nd)), "groups": groups,
             "spatial_dims": nd, "bias": view.has_input(2)}
    if transposed:
        attrs["output_padding"] = tuple(view.attr("output_padding", (0,) * nd))
    return attrs


def _pool(pool_type: str) -> Callable[[_NodeView], dict]:
    def attrs(view: _NodeView) -> dict:
        kernel = tuple(view.attr("kernel_shape"))
        return {"pool_type": pool_type, "kernel_size": kernel,
                "stride": tuple(view.attr("strides", (1,) * len(kernel))),
                "padding": _padding(view, len(kernel))}
    return attrs


def _gemm(view: _NodeView) -> dict:
    weight = view.input_shape(1)
    in_f, out_f = (weight[1], weight[0]) if view.attr("transB", 0) else (weight[0], weight[1])
    return {"in_features": in_f, "out_features": out_f, "bias": view.has_input(2)}


def _clip(view: _NodeView) -> dict:
    """min/max from the inputs (opset >= 11) or the attributes (older opsets)."""
    def bound(position: int, key: str) -> float | None:
        value = view.input_value(position)
        if value is not None:
            return float(value)
        return None if view.attr(key) is None else float(view.attr(key))
    return {"min": bound(1, "min"), "max": bound(2, "max")}


def _resize(view: _NodeView) -> dict:
    mode, rank = view.attr("mode", "nearest"), len(view.input_shape(0))
    if mode == "linear":
        mode = {3: "linear", 4: "bilinear", 5: "trilinear"}.get(rank, "linear")
    elif mode == "cubic":
        mode = "bicubic"
    return {"mode": mode}


def _pad(view: _NodeView) -> dict:
    """Torch's ``padding`` order: (last_begin, last_end, second_last_begin, ...), trimmed."""
    value = view.input_value(1)
    pads = [int(p) for p in (value if value is not None else view.attr("pads", ()))]
    if not pads or view.has_input(3):  # unknown pads, or pads of selected axes only
        return {}
    nd = len(pads) // 2
    torch_order = [p for axis in reversed(range(nd)) for p in (pads[axis], pads[axis + nd])]
    while len(torch_order) > 2 and torch_order[-2:] == [0, 0]:
        torch_order = torch_order[:-2]
    return {"padding": tuple(torch_order)}


def _softmax(view: _NodeView) -> dict:
    """The softmax's axis and whether it reduces over a strided axis (the
    ``softmax_strided`` kind). From opset 13 it normalises along ``axis`` (default the
    last); before, over all axes from ``axis`` (default 1) to the last taken as one, which
    are adjacent elements."""
    if view.tensors.opset < 13:
        return {"dim": view.attr("axis", 1), "strided": False}
    axis = view.attr("axis", -1)
    return {"dim": axis, "strided": not reduces_contiguous(axis, view.input_shape(0))}


#: Attribute readers per ONNX op type, in the keys the torch side uses; other ops: {}.
_ATTRS: dict[str, Callable[[_NodeView], dict]] = {
    "Conv": _conv,
    "ConvTranspose": lambda view: _conv(view, transposed=True),
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": lambda view: {"pool_type": "avg", "output_size": 1},
    "GlobalMaxPool": lambda view: {"pool_type": "max", "output_size": 1},
    "Gemm": _gemm,
    "Einsum": lambda view: {"equation": view.attr("equation").replace(" ", "")},
    "Clip": _clip,
    "BatchNormalization": lambda view: {"num_features": view.input_shape(0)[1],
                                        "eps": view.attr("epsilon", 1e-5)},
    "LayerNormalization": lambda view: {
        "normalized_shape": tuple(view.input_shape(0)[view.attr("axis", -1):])},
    "GroupNormalization": lambda view: {"num_groups": view.attr("num_groups")},
    "LpNormalization": lambda view: {"dim": view.attr("axis", -1)},
    "Concat": lambda view: {"dim": view.attr("axis")},
    "Resize": _resize,
    "Upsample": _resize,
    "Pad": _pad,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
}


def _static_shape(type_proto: onnx.TypeProto) -> Shape | None:
    """The shape of a tensor type when every dimension is a known number, else None."""
    if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if any(d.WhichOneof("value") != "dim_value" for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _shape_text(type_proto: onnx.TypeProto) -> str:
    dims = type_proto.tensor_type.shape.dim
    return "(" + ", ".join(d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
                           for d in dims) + ")"
