"""Primary capture: ``torch.fx`` symbolic tracing plus shape propagation.

When plain FX fails, FX traces again with shapes (:class:`_ShapeTracer`): every proxy
carries the meta tensor it stands for, so code that branches on ``x.shape``, ``x.dim()``
or ``x.dtype`` (HuggingFace transformers' forwards do, throughout) traces too; the graph
then holds the sizes of the given inputs, as an eager capture would.

Shapes are propagated on the ``meta`` device (no data, no arithmetic): leaf modules are
shallow-copied with meta parameters, attributes fetched from the model become meta
tensors of the same shape. The user's model is never modified. When an op has no meta
implementation the caller retries with real tensors (``device="cpu"``). FX traces a
:func:`detached_copy` too: a forward that fills a cache (timm's attention-bias caches in
LeViT, EfficientFormer, TinyViT) fills the copy's, so every trace of a model sees it as
the user left it.
"""
from __future__ import annotations

import copy
import inspect
import numbers
import operator
import warnings
from typing import Any, Callable

import torch
from torch import fx, nn
from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer, proxys_to_metas
from torch.utils.flop_counter import FlopCounterMode

from ..kinds import canonical_op
from .errors import REAL_RUN_MAX_BYTES, REAL_RUN_MAX_INPUT_BYTES, HeldTensors, LayerExecutionError
from .layer_graph import Layer
from .recognize import BOOKKEEPING_OPS, CallRecord, build_layer, classify, is_leaf_module, tensor_leaves


class _LayerTracer(fx.Tracer):
    def __init__(self, extra_leaves: tuple[type, ...] = ()) -> None:
        super().__init__()
        self.extra_leaves = extra_leaves
        self._inspecting = False

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        self._inspecting = True     # a kind that claims a module by its attributes sees them, not proxies
        try:
            return isinstance(m, self.extra_leaves) or is_leaf_module(m)
        finally:
            self._inspecting = False

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if self._inspecting:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)


class _ShapeProxy(MetaProxy):
    """A :class:`MetaProxy` that also knows ``ndim`` and ``numel()`` and records slice
    assignment (``ids[:, 1:] = ...``) as an ``operator.setitem`` node, as :func:`run_graph`
    expects it."""

    @property
    def ndim(self) -> Any:
        meta = self.__dict__.get("_tensor_meta")
        return meta.ndim if meta is not None else self.dim()

    def numel(self) -> Any:
        meta = self.__dict__.get("_tensor_meta")
        return meta.numel() if meta is not None else self.tracer.create_proxy("call_method", "numel", (self,), {})

    def __setitem__(self, key: Any, value: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


def _graph_outputs(value: Any, depth: int = 0) -> Any:
    """A traced forward's result as a graph can return it: dicts (HuggingFace's
    ``ModelOutput``) as plain dicts, other objects (a KV cache) as the dict of their
    attributes, so the tensors they hold stay outputs; what holds no tensor is None."""
    if isinstance(value, (fx.Proxy, torch.Tensor, str, numbers.Number, torch.dtype, torch.device)) or value is None:
        return value
    if isinstance(value, dict):
        return {k: _graph_outputs(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        outputs = [_graph_outputs(v, depth + 1) for v in value]
        return outputs if isinstance(value, list) else tuple(outputs)
    if depth < 8 and hasattr(value, "__dict__") and not isinstance(value, nn.Module) and not callable(value):
        return {k: _graph_outputs(v, depth + 1) for k, v in vars(value).items()}
    return None


class _ShapeTracer(_LayerTracer, MetaTracer):
    """FX whose proxies know their meta tensors (torch's ``MetaTracer``), so shape-dependent
    Python control flow traces. ``inputs`` are the graph's inputs, by the names of the root
    forward's first positional parameters (:func:`_input_names`; an input given as None is
    passed as None, its placeholder unused) and its other parameters keep their defaults; with ``undecorated``
    the forward is traced without its ``functools.wraps`` decorators (for a decorator whose
    own code does not trace). What the forward returns goes through :func:`_graph_outputs`.
    Leaf modules compute their meta outputs on meta copies of themselves. While it traces,
    MetaTracer swaps ``torch.arange``, ``zeros``, ``ones``, ``full_like`` and ``eye`` for
    wrappers that record calls on proxies (called without proxies they behave as before)
    and puts them back afterwards."""

    allow_insert_stateless_mods = False

    def __init__(self, extra_leaves: tuple[type, ...], inputs: dict[str, torch.Tensor | None],
                 undecorated: bool = False) -> None:
        super().__init__(extra_leaves)
        self.inputs = inputs            # by placeholder name, in order
        self.undecorated = undecorated
        self.meta_copies: dict[int, nn.Module] = {}

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if self.is_leaf_module(m, ""):
            if id(m) not in self.meta_copies:
                self.meta_copies[id(m)] = detached_copy(m, meta=True)
            self.orig_forward = self.meta_copies[id(m)].forward    # what MetaTracer runs for the meta output
        return fx.Tracer.call_module(self, m, forward, args, kwargs)

    def create_args_for_root(self, root_fn: Callable[..., Any], is_module: bool,
                             concrete_args: Any = None) -> tuple[Callable[..., Any], list[Any]]:
        args = [self.root]
        for name, value in self.inputs.items():
            placeholder = self.create_proxy("placeholder", name, (), {})
            args.append(placeholder if value is not None else None)
        forward = inspect.unwrap(root_fn) if self.undecorated else root_fn
        return (lambda *values: _graph_outputs(forward(*values))), args

    def proxy(self, node: fx.Node) -> _ShapeProxy:
        return _ShapeProxy(node, self)

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict, *rest: Any, **options: Any) -> Any:
        """MetaTracer's proxy; for ``torch.where(condition, x, y)`` with a Python number
        among its operands (T5's attention mask), the meta output MetaTracer's own rule,
        which adds the operands as tensors, cannot compute."""
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
        if (kind == "call_function" and target is torch.where and len(args) == 3 and not kwargs
                and isinstance(proxy, MetaProxy) and "_tensor_meta" not in proxy.__dict__):
            try:
                proxy.install_tensor_meta(torch.where(*fx.node.map_aggregate(args, proxys_to_metas)))
            except Exception:  # noqa: BLE001 - as MetaTracer: later nodes then fail, or need no meta
                pass
        return proxy


def _input_names(forward: Callable[..., Any], count: int) -> list[str] | None:
    """Names for ``count`` positional inputs of the (undecorated) ``forward`` after ``self``:
    its parameters in order, ``args_0``, ``args_1``, ... for a ``*args``; None if it takes fewer."""
    names: list[str] = []
    for parameter in list(inspect.signature(inspect.unwrap(forward)).parameters.values())[1:]:
        if parameter.kind is parameter.VAR_POSITIONAL:
            names += [f"{parameter.name}_{i}" for i in range(count - len(names))]
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
        if len(names) >= count:
            return names[:count]
    return None


def _trace_with_shapes(model: nn.Module, leaf_modules: tuple[type, ...], inputs: list[torch.Tensor | None],
                       error: Exception) -> tuple[fx.Graph, nn.Module]:
    """:class:`_ShapeTracer`'s graph of ``model`` on ``inputs`` (meta tensors or None): the
    forward as written, then (when it is decorated) without its decorators; raises
    ``error`` when neither traces to a graph that returns what it computes."""
    forward = type(model).forward
    names = _input_names(forward, len(inputs))
    if names is None:
        raise error
    by_name = dict(zip(names, inputs))
    meta_args = {name: value for name, value in by_name.items() if value is not None}
    for undecorated in (False, True) if inspect.unwrap(forward) is not forward else (False,):
        root = detached_copy(model, share_leaf_buffers=True)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Could not compute metadata")  # later nodes then fail, or need none
                graph = _ShapeTracer(leaf_modules, by_name, undecorated).trace(root, meta_args)
        except Exception:  # noqa: BLE001 - the plain FX error is the one to report
            continue
        if _returns_a_tensor(graph):
            return graph, root
    raise error


def _returns_a_tensor(graph: fx.Graph) -> bool:
    """Whether the graph returns anything it computed: a forward that filters its results
    with ``isinstance(v, torch.Tensor)`` drops every proxy, and its graph returns nothing."""
    output = next(node for node in reversed(graph.nodes) if node.op == "output")
    return bool(_node_leaves(output.args))


def symbolic_trace(model: nn.Module, leaf_modules: tuple[type, ...] = (), num_inputs: int = 1,
                   meta_inputs: list[Any] | None = None) -> tuple[fx.Graph, nn.Module]:
    """The FX graph of ``model`` and the module its ``get_attr`` nodes name (a
    :func:`detached_copy` of ``model`` that also holds the tensor constants FX
    recorded); raises whatever plain FX raises when it cannot trace. ``model`` is unchanged.

    When plain FX fails and ``meta_inputs`` (meta tensors or None, one per input) are given, FX
    traces again with their shapes known (see the module docstring).

    A model that is itself a leaf (``nn.MultiheadAttention``, a class in ``leaf_modules``)
    is one ``call_module`` node on ``num_inputs`` inputs, as it would be inside a network.
    """
    if isinstance(model, leaf_modules) or is_leaf_module(model):
        graph = fx.Graph()
        inputs = tuple(graph.placeholder(f"input_{i}") for i in range(num_inputs))
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in type(model).__name__).lstrip("_")
        graph.output(graph.create_node("call_module", "", inputs, name=name or "layer"))
        return graph, model
    # FX runs the Python code of the modules it traces into (a forward's `self.seen.add_(1)`
    # runs on the copy's own buffer), never that of leaf modules: those share their buffers
    root = detached_copy(model, share_leaf_buffers=True)
    try:
        return _LayerTracer(leaf_modules).trace(root), root
    except Exception as error:  # noqa: BLE001 - retried with shapes, else re-raised
        if not meta_inputs or not all(x is None or isinstance(x, torch.Tensor) and x.is_meta for x in meta_inputs):
            raise
        return _trace_with_shapes(model, leaf_modules, meta_inputs, error)


def detached_copy(module: nn.Module, meta: bool = False, share_leaf_buffers: bool = False) -> nn.Module:
    """A shallow copy of ``module`` to run instead of it: with ``meta`` its parameters and
    buffers are meta tensors; otherwise it shares the parameters and holds copies of the
    buffers (with ``share_leaf_buffers``, leaf modules such as batch norms share theirs),
    so that running it (batch-norm statistics in train mode, buffers updated in place)
    leaves ``module`` unchanged. Its plain containers (dicts, lists, sets: a forward's
    caches) are copies too, so a run that fills them fills only the copy's."""
    clone = object.__new__(type(module))
    clone.__dict__ = {k: copy.copy(v) if isinstance(v, (dict, list, set)) else v
                      for k, v in module.__dict__.items()}
    clone._parameters = {k: nn.Parameter(v.to("meta"), v.requires_grad) if meta and v is not None else v
                         for k, v in module._parameters.items()}
    shared = share_leaf_buffers and is_leaf_module(module)
    clone._buffers = {k: None if v is None else v.to("meta") if meta else v if shared else v.clone()
                      for k, v in module._buffers.items()}
    clone._modules = {k: None if v is None else detached_copy(v, meta, share_leaf_buffers)
                      for k, v in module._modules.items()}
    return clone


def _fetch_attr(root: nn.Module, target: str) -> Any:
    value: Any = root
    for atom in target.split("."):
        value = getattr(value, atom)
    return value


def _module_path(node: fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    return next(reversed(stack)) if stack else ""


def _is_passthrough(node: fx.Node, args: tuple) -> bool:
    """``getitem`` on a tuple/list (picking one output of a split) is not a layer."""
    return node.target is operator.getitem and not isinstance(args[0], torch.Tensor)


def _is_wrapped_function(target: Any) -> bool:
    """A Python function from outside torch in the graph: FX keeps those whole only when
    they are ``torch.fx.wrap``-ed (timm's ``maybe_add_mask``, ...)."""
    return inspect.isfunction(target) and (target.__module__ or "").split(".")[0] != "torch"


def _plain(value: Any) -> Any:
    """``value`` with FX's immutable argument lists and dicts made the plain lists and dicts
    the traced code passed (torchvision's swin3d ``_get_window_and_shift_size`` writes into them)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    return value


#: ops whose result shares its first argument's storage: a write into it writes there
VIEW_OPS = frozenset({"getitem", "view", "view_as", "reshape", "narrow", "select", "slice", "permute",
                      "transpose", "t", "unsqueeze", "squeeze", "flatten", "unflatten", "expand",
                      "expand_as", "as_strided", "diagonal", "split", "chunk", "unbind", "contiguous"})


def writes_in_place(target: Any) -> bool:
    """Whether a call of torch's ``target`` (a function, or a method name) writes into one
    of its arguments: ``copy_``, ``add_``, ``masked_fill_``, ``x[i] = y``, ``x += y``."""
    if not isinstance(target, str) and "." in canonical_op(target):
        return False                                   # a user's own function
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return (name in ("setitem", "__setitem__") or (name.endswith("_") and not name.endswith("__"))
            or name in ("iadd", "isub", "imul", "itruediv", "ior", "iand", "__iadd__", "__isub__",
                        "__imul__", "__itruediv__", "__ior__", "__iand__"))


def run_graph(graph: fx.Graph, root: nn.Module, inputs: list[torch.Tensor],
              device: str) -> tuple[list[Layer], tuple[str, ...], tuple[str, ...]]:
    """Execute ``graph`` node by node on ``device`` ("meta" or a real device), recording
    one :class:`Layer` per tensor-producing call. Wrapped functions that no kind claims
    are run eagerly and recorded call by call (see :func:`record_call`). Returns the
    layers, the layers whose results the graph returns, and those an in-place write
    involves (see :attr:`LayerGraph.written`).

    Raises :class:`LayerExecutionError` naming the first node that fails (with the bytes
    the run held by then), and on a real device :class:`RealRunTooLarge` once the inputs
    and results it holds alive pass the limit (a result is freed after its last reader).
    """
    from .eager_capture import record_call  # eager_capture imports this module

    meta = device == "meta"
    held = HeldTensors(None if meta else REAL_RUN_MAX_BYTES)
    held.add(inputs, "the inputs")
    if not meta:  # run a copy: the user's buffers (batch-norm statistics) stay as they are
        root = detached_copy(root)
    env: dict[fx.Node, Any] = {}
    sources: dict[fx.Node, tuple[str, ...] | None] = {}
    modules: dict[str, nn.Module] = {}
    layers: list[Layer] = []
    outputs: tuple[str, ...] = ()
    written: list[str] = []
    constants: dict[int, list[fx.Node]] = {}            # get_attr nodes by the storage their tensor holds
    written_constants: dict[int, tuple[str, ...]] = {}  # storages an in-place write filled -> its writers
    placeholders = iter(inputs)
    done_after: dict[int, list[fx.Node]] = {}  # by position: the nodes no later node reads
    last_read = {used: index for index, node in enumerate(graph.nodes) for used in _node_leaves((node.args, node.kwargs))}
    for used, index in last_read.items():
        done_after.setdefault(index, []).append(used)

    def load(n: Any) -> Any:
        return env[n] if isinstance(n, fx.Node) else n

    for index, node in enumerate(graph.nodes):
        for done in done_after.pop(index - 1, ()):  # free results no one reads any more
            env.pop(done, None)
        if node.op == "placeholder":
            try:
                env[node] = next(placeholders)
            except StopIteration:
                if node.args:  # an argument with a default value
                    env[node] = node.args[0]
                    sources[node] = ()
                    continue
                raise LayerExecutionError(
                    f"the model's forward takes an input '{node.name}' that was not given; "
                    f"pass one shape per input (input_shape=[...]) or example_inputs=(...)") from None
            sources[node] = ()
            continue
        if node.op == "output":
            outputs = _merge_sources(sources.get(n) for n in _node_leaves(node.args)) or ()
            break
        if node.op == "get_attr":
            value = _fetch_attr(root, node.target)
            storage = _storage_of(value)
            if storage is not None:
                constants.setdefault(storage, []).append(node)
            if isinstance(value, torch.Tensor) and meta:
                value = value.to("meta")
            env[node] = value
            sources[node] = written_constants.get(storage)
            continue

        args = fx.node.map_arg(node.args, load)
        kwargs = fx.node.map_arg(node.kwargs, load)
        if node.op == "call_module":
            if node.target not in modules:
                module = root.get_submodule(node.target)
                modules[node.target] = detached_copy(module, meta=True) if meta else module
            target: Any = modules[node.target]
            fn: Callable = target
        elif node.op == "call_function":
            target = fn = node.target
        else:  # call_method
            target = node.target
            fn = getattr(args[0], node.target)
        kind, attrs = classified = classify(target, args, kwargs)
        input_nodes = _node_leaves((node.args, node.kwargs))
        inputs_with_source = [(t, sources[n]) for n in input_nodes for t in tensor_leaves(env[n])]
        inner: list[Layer] | None = None  # the layers inside a wrapped function
        try:
            result = None
            if kind.name == "unknown" and _is_wrapped_function(target):
                result, inner, inner_sources, inner_written = record_call(fn, _plain(args), _plain(kwargs),
                                                                          inputs_with_source, node.name,
                                                                          _module_path(node))
            elif meta:
                tensors = tensor_leaves((args, kwargs))
                if tensors and all(t.device.type == "meta" for t in tensors):
                    result = kind.meta_output(attrs, tensors, kwargs)
            if result is None and inner is None:
                with torch.no_grad():
                    result = fn(*args[1:], **kwargs) if node.op == "call_method" else fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - re-raised with the layer named
            if meta:
                error = _explain_meta_failure(node, root, args, kwargs, error)
            failure = LayerExecutionError.at(node.name, _module_path(node), target, args, kwargs, error)
            failure.held_bytes = held.bytes
            raise failure from error
        env[node] = result
        held.add(result, f"layer '{node.name}'")
        if inner is not None:
            layers.extend(inner)
            written.extend(inner_written)
            sources[node] = _merge_sources(inner_sources)
            continue

        parents = _merge_sources(sources.get(n) for n in input_nodes)
        in_place = node.op != "call_module" and writes_in_place(target)
        if in_place:
            written.extend(parents or ())
        is_layer = (not _is_passthrough(node, args)
                    and (isinstance(target, nn.Module) or canonical_op(target) not in BOOKKEEPING_OPS)
                    and bool(tensor_leaves(result)))
        if not is_layer:
            sources[node] = parents
        else:
            record = CallRecord(node.name, _module_path(node), target, args, kwargs, result, inputs_with_source)
            flops = _flops_of_unknown(record, fn, node.op) if kind.name == "unknown" else None
            layers.append(build_layer(record, classified, flops))
            sources[node] = (node.name,)
        if in_place and node.args and isinstance(node.args[0], fx.Node):
            if is_layer:
                written.append(node.name)
            base = _write_into(node.args[0], sources[node], sources)
            storage = _storage_of(_fetch_attr(root, base.target)) if base is not None else None
            if storage is not None and sources[node] is not None:  # FX keeps a view of a constant as a constant of its own
                written_constants[storage] = _merge_sources([written_constants.get(storage), sources[node]])
                for alias in constants.get(storage, ()):
                    sources[alias] = _merge_sources([sources.get(alias), sources[node]])
    return layers, outputs, tuple(dict.fromkeys(written))


def _storage_of(value: Any) -> int | None:
    """The address of the storage a real tensor's data lives in (views share it), else None."""
    if not isinstance(value, torch.Tensor) or value.is_meta:
        return None
    address = value.untyped_storage().data_ptr()
    return address or None


def _write_into(target: fx.Node, written_by: tuple[str, ...] | None, sources: dict) -> fx.Node | None:
    """After an in-place write into ``target``, its readers (and readers of every tensor it
    is a view of) also depend on ``written_by`` (the writer's sources: ``()`` for data of
    the graph's input, None for constant data): a buffer filled by ``copy_`` or
    ``x[i] = y`` then holds data from the writer's inputs, not just its old contents.
    Returns the ``get_attr`` node the views lead back to, if they do."""
    node: Any = target
    while isinstance(node, fx.Node):
        sources[node] = _merge_sources([sources.get(node), written_by])
        if node.op == "get_attr":
            return node
        is_view = node.op in ("call_function", "call_method") and canonical_op(node.target) in VIEW_OPS
        node = node.args[0] if is_view and node.args else None
    return None


class MetaLimitation(NotImplementedError):
    """An op failed on meta tensors but runs on real ones: retry the trace for real."""


def _explain_meta_failure(node: fx.Node, root: nn.Module, args: tuple, kwargs: dict,
                          error: Exception) -> Exception:
    """Re-run a failing op once on real zero tensors: its own error message is clearer than
    the meta kernel's; if it succeeds, the failure was a meta limitation. Inputs above
    :data:`~.errors.REAL_RUN_MAX_INPUT_BYTES` are not tried (a meta limitation then, for
    the real-tensor fallback and its memory limit to decide)."""
    module = root.get_submodule(node.target) if node.op == "call_module" else root
    device = next((t.device for t in list(module.parameters()) + list(module.buffers())), torch.device("cpu"))
    size = sum(t.numel() * t.element_size() for t in tensor_leaves((args, kwargs)))
    if size > REAL_RUN_MAX_INPUT_BYTES:  # too large to try for real: let the fallback's memory limit speak
        return MetaLimitation(f"{type(error).__name__} on meta tensors: {error}")

    def real(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return torch.zeros(value.shape, dtype=value.dtype, device=device)
        return value

    real_args = torch.utils._pytree.tree_map(real, args)
    real_kwargs = torch.utils._pytree.tree_map(real, kwargs)
    try:
        with torch.no_grad():
            if node.op == "call_module":
                detached_copy(module)(*real_args, **real_kwargs)
            elif node.op == "call_function":
                node.target(*real_args, **real_kwargs)
            else:
                getattr(real_args[0], node.target)(*real_args[1:], **real_kwargs)
    except Exception as real_error:  # noqa: BLE001 - this is the message we want
        return real_error
    return MetaLimitation(f"{type(error).__name__} on meta tensors: {error}")


def _node_leaves(value: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg(value, lambda n: found.append(n) or n)
    return found


def _merge_sources(items) -> tuple[str, ...] | None:
    merged: list[str] = []
    any_activation = False
    for src in items:
        if src is None:
            continue
        any_activation = True
        merged.extend(name for name in src if name not in merged)
    return tuple(merged) if any_activation else None


def _flops_of_unknown(record: CallRecord, fn: Callable, op: str) -> float | None:
    """Ask torch's flop counter what an unclaimed call costs (None if it cannot run)."""
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            if op == "call_method":
                fn(*record.args[1:], **record.kwargs)
            else:
                fn(*record.args, **record.kwargs)
        return float(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - the count falls back to output elements
        return None
