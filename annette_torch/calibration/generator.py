"""The benchmark generator: ``nn.Module`` benchmark networks from :class:`BenchmarkSpec`.

Each *family* is one function registered with :func:`family`, taking the spec's
parameters and returning the network and its input shape. Every layer is its own named
submodule (``conv``, ``bn``, ``act``, ``pool``, ``add`` ...), so the exported ONNX node
names (``/conv/Conv``) and the profiles of every backend lead back to one layer.

Micro-kernel families (one layer of interest, the paper's single-layer sweeps):
``conv2d`` (incl. grouped and depthwise), ``linear``, ``pool2d``, ``global_pool``,
``activation``, ``eltwise``, ``norm``, ``matmul``.
Multi-layer families (the paper's Fig. 4 chains, to learn what the target fuses):
``conv_chain`` (conv → [bn] → [act] → [pool]), ``residual``, ``dw_separable``,
``branch_concat``, ``mlp``.
Context families (layers as real networks hold them, read from a conv's output):
``conv_in_context`` (``conv_chain`` after a 1x1 conv), ``residual_in_context``
(``residual``'s block between 1x1 convs), ``conv_pool`` (overlapping
pools), ``squeeze_excite``, ``pooled_head`` (a classifier head's 1x1 conv on the pooled
map), ``dense_layer`` (concat and pre-activation BN-ReLU),
``attention`` (ViT), ``window_attention`` (Swin),
``branch_sum`` (a NAS cell's node summing pool and skip branches), ``inverted_residual``
(MobileNetV2's block after a conv: its depthwise conv reads a blocked conv output, as in
a network, not the network's input), and the shape kinds after a 1x1 conv: ``upsample``,
``pad``, ``adaptive_pool``, ``split`` (channel groups through their own op, concatenated
back) and ``conv_transpose``; ``channel_shuffle`` (ShuffleNetV2's, between two units).
Selection and sampling (detection post-processing, RAFT), on fixed seeded data:
``topk``, ``sort``, ``unique``, ``nms`` (anchor boxes scored by a conv), ``roi_align``,
``grid_sample`` and ``unfold``.
Transformer blocks as timm and HuggingFace write them: ``sdpa`` (timm's attention around
``F.scaled_dot_product_attention``; plain, causal, masked, rotary), ``decoder_attention``
(prefill of ``h`` tokens, or decode of one over a cache of ``h`` given as inputs: the
one family with several inputs, its input shape a tuple of shapes), ``mlp`` with
``op=swiglu`` and ``norm`` with ``op=rmsnorm``.
Training families (:data:`TRAINING_FAMILIES`, in the training sweeps only): ``stem`` (a
first conv, whose input needs no gradient).

Parameters (see :data:`.sweep.PARAMETERS`): ``n`` batch, ``h``/``w`` input size (``w``
defaults to ``h``), ``c``
input channels (or neurons), ``f`` output channels (or neurons), ``k`` kernel,
``stride``, ``groups`` (an int; ``dw``: depthwise, f = c; or ``gw16``: groups of 16
channels, as RegNet and ResNeXt have, c and f rounded down to multiples of 16, f = c
where not given), ``op`` (activation, pooling
or eltwise kind, or a chain such as ``bn-relu-maxpool``), ``pool`` (pooling window).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from .sweep import BenchmarkSpec

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "leaky_relu": lambda: nn.LeakyReLU(0.1), "elu": nn.ELU,
    "gelu": nn.GELU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
    "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid, "prelu": nn.PReLU,
    "softmax": lambda: nn.Softmax(dim=1),          # along the channels of a map: softmax_strided
    "softmax_last": lambda: nn.Softmax(dim=-1),    # along the last axis, as attention's: softmax
}
TRAINING_FAMILIES = ("stem",)   # meaningful for training passes only
NORMS = ("batchnorm", "layernorm", "groupnorm", "instancenorm", "rmsnorm")
ELTWISE = ("add", "mul", "sub", "div")


class Eltwise(nn.Module):
    """``a <op> b`` for op in :data:`ELTWISE`, as its own layer."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.op == "add":
            return a + b
        if self.op == "mul":
            return a * b
        if self.op == "sub":
            return a - b
        return a / (b.abs() + 1.0)   # keeps the divisor away from zero; the abs/add are their own ops


class Concat(nn.Module):
    """Concatenation along ``dim`` (default: channels), as its own layer."""

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return torch.cat(tensors, dim=self.dim)


@dataclass(frozen=True)
class Family:
    """A benchmark family: the parameters it needs, their defaults, how to build it and
    how big it is (operations, largest activation) without building it."""

    name: str
    required: tuple[str, ...]
    defaults: dict[str, Any]
    build: Callable[[dict[str, Any]], tuple[nn.Module, tuple[int, ...]]]
    size: Callable[[dict[str, Any]], tuple[float, float]]


FAMILIES: dict[str, Family] = {}


def family(name: str, required: tuple[str, ...], defaults: dict[str, Any],
           size: Callable[[dict[str, Any]], tuple[float, float]]):
    """Decorator: register a builder ``(params) -> (module, input_shape)`` as family ``name``."""
    def register(build):
        FAMILIES[name] = Family(name, required, {"n": 1, **defaults}, build, size)
        return build
    return register


def _group_width(family: str, params: dict[str, Any]) -> dict[str, int]:
    """``c``, ``f`` and ``groups`` of ``groups="gw<width>"``: ``c`` rounded down to a
    multiple of the width (at least one group), ``f`` (``c`` where not given) to a
    multiple of the groups."""
    width = params["groups"][2:]
    if not width.isdigit() or int(width) < 1 or not isinstance(params.get("c"), int) \
            or not isinstance(params.get("f", 1), int):
        raise ValueError(f"family {family!r}: groups {params['groups']!r} needs a positive group width (gw16) "
                         f"and integer channels")
    width = int(width)
    c = max(width, params["c"] // width * width)
    groups = c // width
    f = max(groups, params.get("f", c) // groups * groups)
    return {"c": c, "f": f, "groups": groups}


def resolve_params(spec: BenchmarkSpec) -> dict[str, Any]:
    """The spec's parameters with the family's defaults filled in; ``ValueError`` names a
    missing, unused or invalid one."""
    fam = FAMILIES.get(spec.family)
    if fam is None:
        raise ValueError(f"unknown benchmark family {spec.family!r}; families: {', '.join(sorted(FAMILIES))}")
    allowed = set(fam.required) | set(fam.defaults)
    unused = sorted(set(spec.params) - allowed)
    if unused:
        raise ValueError(f"family {spec.family!r} does not use {', '.join(unused)} (it uses {', '.join(sorted(allowed))})")
    params = {**fam.defaults, **spec.params}
    if params.get("groups") == "dw":
        params["groups"] = params["f"] = params["c"]
    elif isinstance(params.get("groups"), str) and params["groups"].startswith("gw"):
        params = {**params, **_group_width(spec.family, params)}
    if "w" in fam.required and "w" not in params and "h" in params:
        params["w"] = params["h"]      # square inputs unless w is given
    missing = [p for p in fam.required if p not in params]
    if missing:
        raise ValueError(f"family {spec.family!r} needs {', '.join(missing)}")
    for p, v in params.items():
        if p in ("n", "h", "w", "c", "f", "k", "stride", "pool") and v is not None and not (isinstance(v, int) and v >= 1):
            raise ValueError(f"family {spec.family!r}: {p} must be a positive int, got {v!r}")
    return params


def estimate_size(spec: BenchmarkSpec) -> tuple[float, float]:
    """(operations, largest activation elements) of the spec's network; ``ValueError`` when
    the parameters do not make a network (checked by building it on the meta device)."""
    params = resolve_params(spec)
    with torch.device("meta"):
        FAMILIES[spec.family].build(params)
    return FAMILIES[spec.family].size(params)


def build_benchmark(spec: BenchmarkSpec) -> tuple[nn.Module, tuple[int, ...]]:
    """The spec's network in eval mode (randomly initialised from seed 0 of the CPU RNG,
    whose state is restored afterwards) and its input shape."""
    params = resolve_params(spec)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(0)
        module, input_shape = FAMILIES[spec.family].build(params)
    return module.eval(), input_shape


def _out(size: int, k: int, stride: int) -> int:
    return (size + 2 * (k // 2) - k) // stride + 1


def _conv_size(p: dict[str, Any]) -> tuple[float, float]:
    n, h, w, c, f, k, s = (p[x] for x in ("n", "h", "w", "c", "f", "k", "stride"))
    oh, ow = _out(h, k, s), _out(w, k, s)
    return 2.0 * n * oh * ow * f * k * k * c / p["groups"], float(n * max(c * h * w, f * oh * ow))


def _elementwise_size(p: dict[str, Any]) -> tuple[float, float]:
    elems = float(p["n"] * p["c"] * p["h"] * p["w"])
    return elems, elems


def _check_groups(c: int, f: int, groups: int) -> None:
    if c % groups or f % groups:
        raise ValueError(f"groups={groups} must divide c={c} and f={f}")


def _activation(op: str) -> nn.Module:
    if op not in ACTIVATIONS:
        raise ValueError(f"unknown activation {op!r}; known: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[op]()


def _pool(op: str, window: int) -> nn.Module:
    if op == "maxpool":
        return nn.MaxPool2d(window, window)
    if op == "avgpool":
        return nn.AvgPool2d(window, window)
    raise ValueError(f"unknown pooling {op!r}; use maxpool or avgpool")


def _pool_layer(family_name: str, p: dict[str, Any], padding: int = 0) -> nn.Module:
    """Max or average pooling (``p["op"]`` = max|avg) with window ``k`` and ``stride``;
    ``ValueError`` names ``family_name`` when the op is unknown or the window exceeds the input."""
    if p["k"] > min(p["h"], p["w"]):
        raise ValueError(f"pool window {p['k']} is larger than the input {p['h']}x{p['w']}")
    pool = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}.get(p["op"])
    if pool is None:
        raise ValueError(f"{family_name} op must be max or avg, got {p['op']!r}")
    return pool(p["k"], p["stride"], padding)


@family("conv2d", ("h", "w", "c", "f", "k"), {"stride": 1, "groups": 1}, _conv_size)
def conv2d(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A single (grouped, depthwise) convolution with 'same' padding."""
    _check_groups(p["c"], p["f"], p["groups"])
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(p["c"], p["f"], p["k"], p["stride"], p["k"] // 2, groups=p["groups"]))
    return net, (p["n"], p["c"], p["h"], p["w"])


class _Detached(nn.Module):
    """``layer`` applied to its input cut from autograd, as a network's first layer reads
    a data batch: in a training pass it computes only its weights' gradients."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.conv = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.detach())


@family("stem", ("h", "w", "c", "f", "k"), {"stride": 1, "groups": 1}, _conv_size)
def stem(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A network's first convolution (for training passes): a conv whose input needs no
    gradient (``detach``), with 'same' padding."""
    _check_groups(p["c"], p["f"], p["groups"])
    conv = nn.Conv2d(p["c"], p["f"], p["k"], p["stride"], p["k"] // 2, groups=p["groups"])
    return _Detached(conv), (p["n"], p["c"], p["h"], p["w"])


def _tokens(p: dict[str, Any]) -> int:
    """Rows a ``linear`` benchmark's layer multiplies: ``n``, times ``h`` tokens if given."""
    return p["n"] * (p["h"] or 1)


@family("linear", ("c", "f"), {"h": None},
        lambda p: (2.0 * _tokens(p) * p["c"] * p["f"], float(_tokens(p) * max(p["c"], p["f"]))))
def linear(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A fully connected layer with ``c`` inputs and ``f`` outputs, on ``n`` vectors, or
    with ``h`` on ``n`` sequences of ``h`` tokens (as a language model's head projects
    each token to its vocabulary)."""
    net = nn.Sequential()
    net.add_module("fc", nn.Linear(p["c"], p["f"]))
    return net, (p["n"], p["c"]) if p["h"] is None else (p["n"], p["h"], p["c"])


@family("pool2d", ("h", "w", "c", "k", "op"), {"stride": 1},
        lambda p: (float(p["n"] * p["c"] * p["h"] * p["w"] * p["k"] ** 2 / p["stride"] ** 2),
                   float(p["n"] * p["c"] * p["h"] * p["w"])))
def pool2d(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Max or average pooling (``op`` = max|avg) with window ``k`` and ``stride``."""
    net = nn.Sequential()
    net.add_module("pool", _pool_layer("pool2d", p))
    return net, (p["n"], p["c"], p["h"], p["w"])


@family("global_pool", ("h", "w", "c", "op"), {}, _elementwise_size)
def global_pool(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Global average or max pooling (``op`` = avg|max) to 1x1."""
    pool = {"max": nn.AdaptiveMaxPool2d, "avg": nn.AdaptiveAvgPool2d}.get(p["op"])
    if pool is None:
        raise ValueError(f"global_pool op must be max or avg, got {p['op']!r}")
    net = nn.Sequential()
    net.add_module("pool", pool(1))
    return net, (p["n"], p["c"], p["h"], p["w"])


@family("activation", ("h", "w", "c", "op"), {}, _elementwise_size)
def activation(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """One activation layer (``op`` from :data:`ACTIVATIONS`) on an NCHW tensor."""
    net = nn.Sequential()
    net.add_module("act", _activation(p["op"]))
    return net, (p["n"], p["c"], p["h"], p["w"])


class _EltwiseNet(nn.Module):
    def __init__(self, op: str, shape: tuple[int, ...]) -> None:
        super().__init__()
        if op not in ELTWISE:
            raise ValueError(f"eltwise op must be one of {', '.join(ELTWISE)}, got {op!r}")
        self.other = nn.Parameter(torch.randn(shape))
        self.eltwise = Eltwise(op)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.eltwise(x, self.other)


@family("eltwise", ("h", "w", "c", "op"), {}, _elementwise_size)
def eltwise(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """One two-input elementwise layer (``op`` from :data:`ELTWISE`): the input and a
    stored tensor of the same shape (``x + x`` would let a runtime rewrite it)."""
    shape = (p["n"], p["c"], p["h"], p["w"])
    return _EltwiseNet(p["op"], shape), shape


@family("norm", ("h", "w", "c", "op"), {}, _elementwise_size)
def norm(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """One normalization layer (``op`` from :data:`NORMS`): batch, group and instance norm
    on an NCHW tensor, layer norm and RMS norm (``nn.RMSNorm``, as Llama-style models
    have it) over the channels of ``h*w`` tokens (N, h*w, C)."""
    c = p["c"]
    layers = {"batchnorm": lambda: nn.BatchNorm2d(c), "layernorm": lambda: nn.LayerNorm(c),
              "rmsnorm": lambda: nn.RMSNorm(c),
              "groupnorm": lambda: nn.GroupNorm(next(g for g in (32, 16, 8, 4, 2, 1) if c % g == 0), c),
              "instancenorm": lambda: nn.InstanceNorm2d(c, affine=True)}
    if p["op"] not in layers:
        raise ValueError(f"norm op must be one of {', '.join(NORMS)}, got {p['op']!r}")
    net = nn.Sequential()
    net.add_module("norm", layers[p["op"]]())
    if p["op"] in ("layernorm", "rmsnorm"):
        return net, (p["n"], p["h"] * p["w"], c)
    return net, (p["n"], c, p["h"], p["w"])


class _SelfMatmul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, x.transpose(1, 2))


@family("matmul", ("h", "c"), {}, lambda p: (2.0 * p["n"] * p["h"] * p["h"] * p["c"], float(p["n"] * p["h"] * max(p["h"], p["c"]))))
def matmul(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Attention-score batched matmul: (n, h tokens, c) @ its transpose → (n, h, h)."""
    net = nn.Sequential()
    net.add_module("matmul", _SelfMatmul())
    return net, (p["n"], p["h"], p["c"])


def _chain_ops(op: str) -> list[str]:
    steps = [s for s in op.split("-") if s and s != "none"]
    for s in steps:
        if s not in ("bn", "maxpool", "avgpool") and s not in ACTIVATIONS:
            raise ValueError(f"conv_chain step {s!r} is not bn, maxpool, avgpool or an activation")
    return steps


@family("conv_chain", ("h", "w", "c", "f", "k", "op"), {"stride": 1, "groups": 1, "pool": 2}, _conv_size)
def conv_chain(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """conv followed by the steps of ``op`` joined by ``-`` (``bn``, an activation,
    ``maxpool``/``avgpool`` with window and stride ``pool``), e.g. ``bn-relu-maxpool``."""
    _check_groups(p["c"], p["f"], p["groups"])
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(p["c"], p["f"], p["k"], p["stride"], p["k"] // 2, groups=p["groups"]))
    for step in _chain_ops(p["op"]):
        if step == "bn":
            net.add_module("bn", nn.BatchNorm2d(p["f"]))
        elif step.endswith("pool"):
            size = _out(min(p["h"], p["w"]), p["k"], p["stride"])
            if p["pool"] > size:
                raise ValueError(f"pool window {p['pool']} is larger than the conv output {size}")
            net.add_module("pool", _pool(step, p["pool"]))
        else:
            net.add_module("act", _activation(step))
    return net, (p["n"], p["c"], p["h"], p["w"])


@family("conv_in_context", ("h", "w", "c", "f", "k", "op"), {"stride": 1, "groups": 1, "pool": 2},
        lambda p: (_stem_size(p, 0.0)[0] + _conv_size(p)[0], _conv_size(p)[1]))
def conv_in_context(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv (``stem``), then ``conv_chain``'s network reading its output: the conv of
    interest reads a tensor in the layout the runtime chose for a conv's output, as every
    conv of a network but the first does (``conv2d`` and ``conv_chain`` read the network
    input, whose plain layout some runtimes reorder first)."""
    chain, input_shape = conv_chain(p)
    net = nn.Sequential()
    net.add_module("stem", nn.Conv2d(p["c"], p["c"], 1, bias=False))
    for name, layer in chain.named_children():
        net.add_module(name, layer)
    return net, input_shape


class _Residual(nn.Module):
    def __init__(self, c: int, k: int, post: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, k, 1, k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(c, c, k, 1, k // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.add = Eltwise("add")
        self.act2 = _activation(post) if post != "none" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act2(self.add(self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x))))), x))


@family("residual", ("h", "w", "c", "k"), {"op": "relu"},
        lambda p: (2 * _conv_size({**p, "f": p["c"], "stride": 1, "groups": 1})[0], float(p["n"] * p["c"] * p["h"] * p["w"])))
def residual(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A ResNet basic block: conv-bn-relu-conv-bn, add the input, then ``op`` (or none)."""
    return _Residual(p["c"], p["k"], p["op"]), (p["n"], p["c"], p["h"], p["w"])


class _ResidualInContext(nn.Module):
    """``residual``'s block between two 1x1 convs: its first conv and its skip read a conv's
    output and its result feeds a conv, as in a network (the ``residual`` block's skip is
    the network input and its result the network output, where ONNX Runtime's NCHWc convs
    cannot take the add in)."""

    def __init__(self, c: int, k: int, post: str) -> None:
        super().__init__()
        self.stem = nn.Conv2d(c, c, 1, bias=False)
        self.block = _Residual(c, k, post)
        self.tail = nn.Conv2d(c, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.block(self.stem(x)))


@family("residual_in_context", ("h", "w", "c", "k"), {"op": "relu"},
        lambda p: (2 * _stem_size(p, 0.0)[0] + 2 * _conv_size({**p, "f": p["c"], "stride": 1, "groups": 1})[0],
                   float(p["n"] * p["c"] * p["h"] * p["w"])))
def residual_in_context(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """``residual``'s block after a 1x1 conv and before another (:class:`_ResidualInContext`)."""
    return _ResidualInContext(p["c"], p["k"], p["op"]), (p["n"], p["c"], p["h"], p["w"])


@family("dw_separable", ("h", "w", "c", "f", "k"), {"stride": 1, "op": "relu6"},
        lambda p: (_conv_size({**p, "f": p["c"], "groups": p["c"]})[0]
                   + _conv_size({**p, "h": _out(p["h"], p["k"], p["stride"]), "w": _out(p["w"], p["k"], p["stride"]),
                                 "k": 1, "stride": 1, "groups": 1})[0],
                   _conv_size({**p, "groups": 1})[1]))
def dw_separable(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """MobileNet's depthwise-separable block: dw conv-bn-``op``, then 1x1 conv-bn."""
    c = p["c"]
    net = nn.Sequential()
    net.add_module("dwconv", nn.Conv2d(c, c, p["k"], p["stride"], p["k"] // 2, groups=c, bias=False))
    net.add_module("bn1", nn.BatchNorm2d(c))
    net.add_module("act", _activation(p["op"]))
    net.add_module("pwconv", nn.Conv2d(c, p["f"], 1, bias=False))
    net.add_module("bn2", nn.BatchNorm2d(p["f"]))
    return net, (p["n"], c, p["h"], p["w"])


class _BranchConcat(nn.Module):
    def __init__(self, c: int, f: int, k: int, op: str) -> None:
        super().__init__()
        self.branch1 = nn.Conv2d(c, f, 1)
        self.act1 = _activation(op)
        self.branch2 = nn.Conv2d(c, f, k, 1, k // 2)
        self.act2 = _activation(op)
        self.concat = Concat()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.concat(self.act1(self.branch1(x)), self.act2(self.branch2(x)))


@family("branch_concat", ("h", "w", "c", "f", "k"), {"op": "relu"},
        lambda p: (_conv_size({**p, "stride": 1, "groups": 1})[0] + _conv_size({**p, "k": 1, "stride": 1, "groups": 1})[0],
                   float(p["n"] * max(p["c"], 2 * p["f"]) * p["h"] * p["w"])))
def branch_concat(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Two branches (1x1 conv-``op`` and kxk conv-``op``) joined by a channel concat."""
    return _BranchConcat(p["c"], p["f"], p["k"], p["op"]), (p["n"], p["c"], p["h"], p["w"])


class _SwiGLU(nn.Module):
    """Llama's MLP: ``fc2(silu(fc1(x)) * fc3(x))``, no biases (gate, up and down projections)."""

    def __init__(self, c: int, f: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(c, f, bias=False)
        self.act = nn.SiLU()
        self.fc3 = nn.Linear(c, f, bias=False)
        self.mul = Eltwise("mul")
        self.fc2 = nn.Linear(f, c, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mul(self.act(self.fc1(x)), self.fc3(x)))


@family("mlp", ("c", "f"), {"op": "gelu", "h": 1},
        lambda p: ((6.0 if p["op"] == "swiglu" else 4.0) * p["n"] * p["h"] * p["c"] * p["f"],
                   float(p["n"] * p["h"] * max(p["c"], p["f"]))))
def mlp(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Transformer MLP on ``h`` tokens: linear c→f, ``op`` (an activation), linear f→c;
    or with ``op`` = ``swiglu`` Llama's gated MLP (:class:`_SwiGLU`)."""
    shape = (p["n"], p["h"], p["c"]) if p["h"] > 1 else (p["n"], p["c"])
    if p["op"] == "swiglu":
        return _SwiGLU(p["c"], p["f"]), shape
    net = nn.Sequential()
    net.add_module("fc1", nn.Linear(p["c"], p["f"]))
    net.add_module("act", _activation(p["op"]))
    net.add_module("fc2", nn.Linear(p["f"], p["c"]))
    return net, shape


class _SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int, gate: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.act = nn.ReLU()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = _activation(gate)
        self.scale = Eltwise("mul")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.scale(y, self.gate(self.fc2(self.act(self.fc1(self.pool(y))))))


@family("squeeze_excite", ("h", "w", "c", "f"), {"op": "sigmoid"},
        lambda p: (2.0 * p["n"] * p["c"] * (p["c"] * p["h"] * p["w"] + 2 * p["f"]), float(p["n"] * p["c"] * p["h"] * p["w"])))
def squeeze_excite(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then squeeze-and-excitation as in MobileNetV3, EfficientNet and RegNetY:
    global average pool, 1x1 conv to ``f`` channels, ReLU, 1x1 conv back, gate ``op``
    (sigmoid or hardsigmoid), times the conv's output."""
    if p["op"] not in ("sigmoid", "hardsigmoid"):
        raise ValueError(f"squeeze_excite gate must be sigmoid or hardsigmoid, got {p['op']!r}")
    return _SqueezeExcite(p["c"], p["f"], p["op"]), (p["n"], p["c"], p["h"], p["w"])


class _PooledHead(nn.Module):
    def __init__(self, c: int, f: int, act: str, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Conv2d(c, f, 1)
        if act != "none" and act not in ACTIVATIONS:
            raise ValueError(f"pooled_head activation must be none or one of {', '.join(ACTIVATIONS)}, got {act!r}")
        self.act = nn.Identity() if act == "none" else _activation(act)
        self.flatten = nn.Flatten(1)
        self.classifier = nn.Linear(f, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.act(self.head(self.pool(self.conv(x))))))


#: the classes of a ``pooled_head`` benchmark's classifier (ImageNet's)
HEAD_CLASSES = 1000


@family("pooled_head", ("h", "w", "c", "f"), {"op": "hardswish"},
        lambda p: (2.0 * p["n"] * (p["c"] * p["c"] * p["h"] * p["w"] + p["c"] * p["f"] + p["f"] * HEAD_CLASSES),
                   float(p["n"] * p["c"] * p["h"] * p["w"])))
def pooled_head(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A classifier head as MobileNetV3, LCNet and GhostNet end: a 1x1 conv, global
    average pool, a 1x1 conv from ``c`` to ``f`` channels on the pooled 1x1 map (a
    matrix-vector product of ``c`` x ``f`` weights), activation ``op`` (``none``: the
    conv's output as it is, a plain kernel a fit learns the conv from), flatten and a
    fully connected layer to :data:`HEAD_CLASSES` classes."""
    return _PooledHead(p["c"], p["f"], p["op"], HEAD_CLASSES), (p["n"], p["c"], p["h"], p["w"])


class _DenseLayer(nn.Module):
    def __init__(self, c: int, growth: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, growth, k, 1, k // 2, bias=False)
        self.concat = Concat()
        self.bn = nn.BatchNorm2d(c + growth)
        self.act = nn.ReLU()
        self.conv2 = nn.Conv2d(c + growth, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.act(self.bn(self.concat(x, self.conv(x)))))


@family("dense_layer", ("h", "w", "c", "f", "k"), {},
        lambda p: (2.0 * p["n"] * p["h"] * p["w"] * (p["c"] * p["f"] * p["k"] ** 2 + (p["c"] + p["f"]) * p["c"]),
                   float(p["n"] * (p["c"] + p["f"]) * p["h"] * p["w"])))
def dense_layer(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """DenseNet's pattern: a kxk conv adds ``f`` channels, concatenated to its input,
    then pre-activation batch norm and ReLU (not after a conv) and a 1x1 conv."""
    return _DenseLayer(p["c"], p["f"], p["k"]), (p["n"], p["c"], p["h"], p["w"])


class _SelfAttention(nn.Module):
    def __init__(self, c: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def _attention_size(p: dict[str, Any]) -> tuple[float, float]:
    tokens = p["h"] * p["w"]
    return (2.0 * p["n"] * tokens * p["c"] * (4 * p["c"] + 2 * tokens),
            float(p["n"] * max(p["groups"] * tokens * tokens, 3 * tokens * p["c"])))


@family("attention", ("h", "c", "groups"), {"w": 1}, _attention_size)
def attention(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Self-attention of ``h`` tokens of width ``c`` with ``groups`` heads
    (``nn.MultiheadAttention``, as in ViT): q/k/v and output projections and the two products."""
    if p["c"] % p["groups"]:
        raise ValueError(f"attention width c={p['c']} is not divisible by groups={p['groups']} heads")
    return _SelfAttention(p["c"], p["groups"]), (p["n"], p["h"], p["c"])


@family("window_attention", ("h", "w", "c", "groups"), {"k": 7, "op": "shifted"},
        lambda p: (2.0 * p["n"] * p["h"] * p["w"] * p["c"] * (4 * p["c"] + 2 * p["k"] ** 2),
                   float(p["n"] * max(p["groups"] * p["h"] * p["w"] * p["k"] ** 2, 3 * p["h"] * p["w"] * p["c"]))))
def window_attention(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Swin's (shifted) window attention on an (n, h, w, c) map: windows of ``k`` x ``k``
    tokens, ``groups`` heads, shifted by ``k // 2`` when ``op`` is ``shifted`` (else ``plain``)."""
    from torchvision.models.swin_transformer import ShiftedWindowAttention

    if p["op"] not in ("shifted", "plain"):
        raise ValueError(f"window_attention op must be shifted or plain, got {p['op']!r}")
    if p["c"] % p["groups"]:
        raise ValueError(f"window_attention width c={p['c']} is not divisible by groups={p['groups']} heads")
    shift = p["k"] // 2 if p["op"] == "shifted" else 0
    net = nn.Sequential()
    net.add_module("attn", ShiftedWindowAttention(p["c"], [p["k"], p["k"]], [shift, shift], p["groups"]))
    return net, (p["n"], p["h"], p["w"], p["c"])


# --- transformer blocks as timm and HuggingFace write them -------------------------------
# Every tensor op is its own submodule (``_Call``, ``_SDPA`` ...), so the exported node
# names and every backend's profile lead back to one layer, as for the families above.

SDPA_OPS = ("plain", "causal", "mask", "rope")


class _Call(nn.Module):
    """``x.<method>(*args)`` (a permute, unbind, transpose or reshape) as its own layer."""

    def __init__(self, method: str, *args: Any) -> None:
        super().__init__()
        self.method, self.args = method, args

    def forward(self, x: torch.Tensor) -> Any:
        return getattr(x, self.method)(*self.args)


class _SDPA(nn.Module):
    """``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)``."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


class _Half(nn.Module):
    """The first or second ``half`` of the last dimension (``x[..., :half]``, ``x[..., half:]``)."""

    def __init__(self, first: bool, half: int) -> None:
        super().__init__()
        self.first, self.half = first, half

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., :self.half] if self.first else x[..., self.half:]


class _Neg(nn.Module):
    """``-x`` as its own layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -x


class _Rotary(nn.Module):
    """Llama's rotary embedding of q or k (``apply_rotary_pos_emb``): ``x * cos +
    rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)``; cos and sin are the
    caller's (tokens, head_dim) tables."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.x1, self.x2, self.neg = _Half(True, head_dim // 2), _Half(False, head_dim // 2), _Neg()
        self.cat = Concat(dim=-1)
        self.mul_cos, self.mul_sin, self.add = Eltwise("mul"), Eltwise("mul"), Eltwise("add")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rotated = self.cat(self.neg(self.x2(x)), self.x1(x))
        return self.add(self.mul_cos(x, cos), self.mul_sin(rotated, sin))


def rotary_tables(tokens: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of shape (tokens, head_dim) as Llama's rotary embedding computes them."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(tokens, dtype=torch.float32), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


class _SdpaAttention(nn.Module):
    """timm's ViT ``Attention``: qkv linear → reshape (n, T, 3, heads, d) → permute →
    unbind → scaled-dot-product attention → transpose → reshape → proj linear; ``op``
    (:data:`SDPA_OPS`) adds ``is_causal``, an additive float mask (a buffer, as a padding
    mask or position bias) or Llama's rotary embedding of q and k."""

    def __init__(self, tokens: int, c: int, heads: int, op: str) -> None:
        super().__init__()
        d = c // heads
        self.qkv = nn.Linear(c, 3 * c)
        self.split_heads = _Call("reshape", -1, tokens, 3, heads, d)
        self.permute = _Call("permute", 2, 0, 3, 1, 4)
        self.unbind = _Call("unbind", 0)
        self.register_buffer("mask", torch.randn(1, 1, tokens, tokens) if op == "mask" else None)
        if op == "rope":
            cos, sin = rotary_tables(tokens, d)
            self.register_buffer("cos", cos)
            self.register_buffer("sin", sin)
            self.rope_q, self.rope_k = _Rotary(d), _Rotary(d)
        self.rope = op == "rope"
        self.sdpa = _SDPA(causal=op == "causal")
        self.transpose = _Call("transpose", 1, 2)
        self.merge_heads = _Call("reshape", -1, tokens, c)
        self.proj = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.unbind(self.permute(self.split_heads(self.qkv(x))))
        if self.rope:
            q, k = self.rope_q(q, self.cos, self.sin), self.rope_k(k, self.cos, self.sin)
        return self.proj(self.merge_heads(self.transpose(self.sdpa(q, k, v, self.mask))))


def _check_heads(family_name: str, c: int, heads: int) -> None:
    if c % heads:
        raise ValueError(f"{family_name} width c={c} is not divisible by groups={heads} heads")


@family("sdpa", ("h", "c", "groups"), {"op": "plain"}, lambda p: _attention_size({**p, "w": 1}))
def sdpa(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Self-attention of ``h`` tokens of width ``c`` with ``groups`` heads as timm's ViT
    writes it (:class:`_SdpaAttention`: ``F.scaled_dot_product_attention`` between the qkv
    and output projections); ``op`` is ``plain``, ``causal``, ``mask`` or ``rope``."""
    if p["op"] not in SDPA_OPS:
        raise ValueError(f"sdpa op must be one of {', '.join(SDPA_OPS)}, got {p['op']!r}")
    _check_heads("sdpa", p["c"], p["groups"])
    if p["op"] == "rope" and (p["c"] // p["groups"]) % 2:
        raise ValueError(f"sdpa rope needs an even head width, got c={p['c']} / groups={p['groups']}")
    return _SdpaAttention(p["h"], p["c"], p["groups"], p["op"]), (p["n"], p["h"], p["c"])


class _RepeatKV(nn.Module):
    """HuggingFace's ``repeat_kv``: each of the (n, kv_heads, tokens, d) key or value heads
    repeated ``times`` over the query heads it serves (expand, then a reshape that copies)."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, kv_heads, tokens, d = x.shape
        return x[:, :, None, :, :].expand(n, kv_heads, self.times, tokens, d).reshape(n, kv_heads * self.times, tokens, d)


class _DecoderAttention(nn.Module):
    """A Llama-style decoder's attention without a KV-cache module: q/k/v projections
    (no biases), heads split by reshape + transpose, scaled-dot-product attention and the
    output projection. Prefill: causal attention of the ``tokens`` inputs among
    themselves. Decode: one token whose k/v are concatenated to the cache given as the
    second and third inputs (n, kv_heads, cache, d), then attention of 1 query over them.
    With fewer ``kv_heads`` than ``heads`` (grouped-query attention, Llama 3, Mistral) the
    k/v projections are narrower and their heads are repeated before the attention, as
    HuggingFace's SDPA attention does when it is given a mask."""

    def __init__(self, n: int, c: int, heads: int, decode: bool, kv_heads: int | None = None) -> None:
        super().__init__()
        d, kv_heads = c // heads, kv_heads or heads
        self.decode = decode
        self.q_proj = nn.Linear(c, c, bias=False)
        self.k_proj, self.v_proj = (nn.Linear(c, kv_heads * d, bias=False) for _ in range(2))
        self.q_heads = _Call("reshape", n, -1, heads, d)
        self.k_heads, self.v_heads = (_Call("reshape", n, -1, kv_heads, d) for _ in range(2))
        self.q_transpose, self.k_transpose, self.v_transpose = (_Call("transpose", 1, 2) for _ in range(3))
        if decode:
            self.k_cat, self.v_cat = Concat(dim=2), Concat(dim=2)
        if kv_heads != heads:
            self.k_repeat, self.v_repeat = _RepeatKV(heads // kv_heads), _RepeatKV(heads // kv_heads)
        self.sdpa = _SDPA(causal=not decode)
        self.transpose = _Call("transpose", 1, 2)
        self.merge_heads = _Call("flatten", 2)
        self.o_proj = nn.Linear(c, c, bias=False)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor | None = None,
                v_cache: torch.Tensor | None = None) -> torch.Tensor:
        q = self.q_transpose(self.q_heads(self.q_proj(x)))
        k = self.k_transpose(self.k_heads(self.k_proj(x)))
        v = self.v_transpose(self.v_heads(self.v_proj(x)))
        if self.decode:
            k, v = self.k_cat(k_cache, k), self.v_cat(v_cache, v)
        if hasattr(self, "k_repeat"):
            k, v = self.k_repeat(k), self.v_repeat(v)
        return self.o_proj(self.merge_heads(self.transpose(self.sdpa(q, k, v))))


def _decoder_size(p: dict[str, Any]) -> tuple[float, float]:
    n, h, c = p["n"], p["h"], p["c"]
    kv = c * (p["k"] or p["groups"]) // p["groups"]      # the k/v projections' width
    projections = 2 * c + 2 * kv
    if p["op"] == "decode":        # one token over the h cached and its own key
        return 2.0 * n * c * (projections + 2 * (h + 1)), float(n * (h + 1) * c)
    return 2.0 * n * h * c * (projections + 2 * h), float(n * max(p["groups"] * h * h, h * c))


@family("decoder_attention", ("h", "c", "groups", "op"), {"k": None}, _decoder_size)
def decoder_attention(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...] | tuple[tuple[int, ...], ...]]:
    """A decoder's attention block (:class:`_DecoderAttention`) with ``groups`` heads of
    width ``c`` / ``groups`` and ``k`` key/value heads (default ``groups``; fewer:
    grouped-query attention, ``groups`` a multiple of ``k``): ``op`` = ``prefill`` runs ``h``
    tokens (causal), ``decode`` one token with a cache of ``h`` tokens, whose inputs are the
    token (n, 1, c) and the k and v caches (n, k, h, c / groups)."""
    if p["op"] not in ("prefill", "decode"):
        raise ValueError(f"decoder_attention op must be prefill or decode, got {p['op']!r}")
    _check_heads("decoder_attention", p["c"], p["groups"])
    n, h, c, heads = p["n"], p["h"], p["c"], p["groups"]
    kv_heads = p["k"] or heads
    if heads % kv_heads:
        raise ValueError(f"decoder_attention needs groups={heads} heads to be a multiple of k={kv_heads} key/value heads")
    if p["op"] == "prefill":
        return _DecoderAttention(n, c, heads, decode=False, kv_heads=kv_heads), (n, h, c)
    cache = (n, kv_heads, h, c // heads)
    return _DecoderAttention(n, c, heads, decode=True, kv_heads=kv_heads), ((n, 1, c), cache, cache)


def _after_conv(c: int, layer_name: str, layer: nn.Module) -> nn.Sequential:
    """A 1x1 conv (so ``layer`` reads a conv's output, as inside a network), then ``layer``."""
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(c, c, 1, bias=False))
    net.add_module(layer_name, layer)
    return net


def _stem_size(p: dict[str, Any], out_elements: float) -> tuple[float, float]:
    """(ops, largest activation) of a 1x1 stem conv on the input and a layer writing ``out_elements``."""
    elems = float(p["n"] * p["c"] * p["h"] * p["w"])
    return 2.0 * elems * p["c"], max(elems, out_elements)


@family("conv_pool", ("h", "w", "c", "k", "op"), {"stride": 2},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"])))
def conv_pool(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then max or average pooling (``op`` = max|avg) with window ``k``,
    ``stride`` and padding ``(k - 1) // 2``: overlapping pools as ResNet's stem, GoogLeNet
    and SqueezeNet have them, reading a conv's output as inside a network."""
    return _after_conv(p["c"], "pool", _pool_layer("conv_pool", p, (p["k"] - 1) // 2)), (p["n"], p["c"], p["h"], p["w"])


class Scale(nn.Module):
    """``x * factor`` with a Python number, as its own layer (NAS-Bench-201's ``none`` edge is
    ``x.mul(0.)``; scaled residuals multiply by a constant)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(self.factor)


#: the branches a ``branch_sum`` node may sum, as NAS cells' edges are
BRANCHES = ("avgpool", "skip", "zero", "half", "conv1x1")


def _branch(term: str, c: int) -> nn.Module:
    if term == "avgpool":
        return nn.AvgPool2d(3, 1, 1, count_include_pad=False)
    if term == "zero":
        return Scale(0.0)
    if term == "half":
        return Scale(0.5)
    if term == "conv1x1":                      # NAS-Bench-201's nor_conv_1x1: ReLU, conv, BN
        return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))
    return nn.Identity()


class _BranchSum(nn.Module):
    def __init__(self, c: int, terms: list[str], act: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.branches = nn.ModuleList(_branch(t, c) for t in terms)
        self.adds = nn.ModuleList(Eltwise("add") for _ in terms[1:])
        self.act = nn.ReLU() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        total = self.branches[0](y)
        for branch, add in zip(self.branches[1:], self.adds):
            total = add(total, branch(y))
        return self.act(total)


@family("branch_sum", ("h", "w", "c", "op"), {}, lambda p: _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"])))
def branch_sum(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then the sum of branches of its output, as a NAS cell's node sums its
    edges: ``op`` lists the branches joined by ``+`` (:data:`BRANCHES`: ``avgpool``: 3x3
    average pooling, stride 1; ``skip``: identity; ``zero``: ``x.mul(0.)``, NAS-Bench-201's
    ``none``; ``half``: ``x.mul(0.5)``, a scaled residual; ``conv1x1``: ReLU, 1x1 conv, BN),
    optionally ending in ``-relu``, e.g. ``avgpool+skip-relu``, ``conv1x1+zero+skip``."""
    terms, _, act = p["op"].partition("-")
    branches = terms.split("+")
    if len(branches) < 2 or any(t not in BRANCHES for t in branches) or act not in ("", "relu"):
        raise ValueError(f"branch_sum op must be 2+ of {'/'.join(BRANCHES)} joined by '+', optionally '-relu'; "
                         f"got {p['op']!r}")
    return _BranchSum(p["c"], branches, act == "relu"), (p["n"], p["c"], p["h"], p["w"])


class _InvertedResidual(nn.Module):
    """A 1x1 stem conv (so the block reads a conv's output, as in a network), then
    MobileNetV2's inverted residual: expand 1x1-bn-act, depthwise kxk-bn-act, project
    1x1-bn, plus the block's input when the shapes allow it."""

    def __init__(self, c: int, f: int, k: int, stride: int, expansion: int, act: str) -> None:
        super().__init__()
        hidden = c * expansion
        self.stem = nn.Conv2d(c, c, 1, bias=False)
        self.expand = nn.Conv2d(c, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.act1 = _activation(act) if act != "none" else nn.Identity()
        self.dwconv = nn.Conv2d(hidden, hidden, k, stride, k // 2, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.act2 = _activation(act) if act != "none" else nn.Identity()
        self.project = nn.Conv2d(hidden, f, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(f)
        self.add = Eltwise("add") if stride == 1 and f == c else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.bn3(self.project(self.act2(self.bn2(self.dwconv(self.act1(self.bn1(self.expand(x))))))))
        return self.add(y, x) if self.add is not None else y


def _expansion_act(op: str) -> tuple[int, str]:
    """``e<expansion>-<activation>`` (``e6-relu6``; ``none``: no activation) -> (6, ``relu6``)."""
    expansion, _, act = op.partition("-")
    if not (expansion[:1] == "e" and expansion[1:].isdigit() and int(expansion[1:]) >= 1) or \
            (act not in ACTIVATIONS and act != "none"):
        raise ValueError(f"inverted_residual op must be e<expansion>-<activation or none>, e.g. e6-relu6; got {op!r}")
    return int(expansion[1:]), act


def _inverted_residual_size(p: dict[str, Any]) -> tuple[float, float]:
    expansion, _ = _expansion_act(p["op"])
    f = p.get("f") or p["c"]
    hidden, out = p["c"] * expansion, _out(p["h"], p["k"], p["stride"]) * _out(p["w"], p["k"], p["stride"])
    pixels = p["h"] * p["w"]
    ops = 2.0 * p["n"] * (p["c"] * p["c"] * pixels + p["c"] * hidden * pixels + hidden * p["k"] ** 2 * out
                          + hidden * f * out)
    return ops, float(p["n"] * hidden * pixels)


@family("inverted_residual", ("h", "w", "c", "k", "op"), {"stride": 1, "f": None}, _inverted_residual_size)
def inverted_residual(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """MobileNetV2's block in context (:class:`_InvertedResidual`): ``op`` is
    ``e<expansion>-<activation>`` (``e6-relu6``, ``e4-hardswish``; ``e6-none``: no
    activation, so the depthwise conv is a plain kernel the fit can use), ``f`` the output
    channels (default ``c``, with the residual add at stride 1), ``k`` the depthwise kernel."""
    expansion, act = _expansion_act(p["op"])
    return (_InvertedResidual(p["c"], p["f"] or p["c"], p["k"], p["stride"], expansion, act),
            (p["n"], p["c"], p["h"], p["w"]))


#: the resampling modes of ``upsample`` (segmentation heads and feature pyramids use these)
UPSAMPLE_MODES = ("nearest", "bilinear")
#: the paddings of ``pad``: constant zeros, reflection, replication
PAD_MODES = {"zeros": nn.ZeroPad2d, "reflect": nn.ReflectionPad2d, "replicate": nn.ReplicationPad2d}


@family("upsample", ("h", "w", "c", "op"), {"stride": 2},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"] * p["stride"] ** 2)))
def upsample(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then resampling by ``stride`` (2: a feature pyramid's top-down path;
    4, 8: a segmentation head back to the input size) with ``op`` from :data:`UPSAMPLE_MODES`."""
    if p["op"] not in UPSAMPLE_MODES:
        raise ValueError(f"upsample op must be one of {'/'.join(UPSAMPLE_MODES)}, got {p['op']!r}")
    options = {"align_corners": False} if p["op"] == "bilinear" else {}
    return (_after_conv(p["c"], "upsample", nn.Upsample(scale_factor=p["stride"], mode=p["op"], **options)),
            (p["n"], p["c"], p["h"], p["w"]))


@family("pad", ("h", "w", "c", "k"), {"op": "zeros"},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * (p["h"] + 2 * p["k"]) * (p["w"] + 2 * p["k"]))))
def pad(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then ``k`` pixels of padding on every side (``op`` from :data:`PAD_MODES`),
    as a standalone layer (the one a conv does not absorb)."""
    if p["op"] not in PAD_MODES:
        raise ValueError(f"pad op must be one of {'/'.join(PAD_MODES)}, got {p['op']!r}")
    if p["op"] != "zeros" and p["k"] >= min(p["h"], p["w"]):
        raise ValueError(f"{p['op']} padding {p['k']} needs an input larger than it, got {p['h']}x{p['w']}")
    return _after_conv(p["c"], "pad", PAD_MODES[p["op"]](p["k"])), (p["n"], p["c"], p["h"], p["w"])


@family("adaptive_pool", ("h", "w", "c", "k"), {"op": "avg"},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * p["k"] ** 2)))
def adaptive_pool(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then adaptive average or max pooling (``op`` = avg|max) to ``k`` x ``k``
    (PSPNet's bins, VGG's and AlexNet's pool before the classifier); ``k`` must divide the
    input size, as the ONNX export requires."""
    pool = {"avg": nn.AdaptiveAvgPool2d, "max": nn.AdaptiveMaxPool2d}.get(p["op"])
    if pool is None:
        raise ValueError(f"adaptive_pool op must be avg or max, got {p['op']!r}")
    if p["h"] % p["k"] or p["w"] % p["k"]:  # the ONNX exporter takes no other output size
        raise ValueError(f"adaptive_pool needs an input {p['h']}x{p['w']} that k={p['k']} divides")
    return _after_conv(p["c"], "pool", pool(p["k"])), (p["n"], p["c"], p["h"], p["w"])


def _split_sizes(c: int, parts: int) -> list[int]:
    """``c`` channels in ``parts`` near-equal parts, the larger first (as MixNet splits)."""
    if not 2 <= parts <= c:
        raise ValueError(f"split needs 2 to c={c} parts, got groups={parts}")
    return [c // parts + (i < c % parts) for i in range(parts)]


class ChannelSplit(nn.Module):
    """``torch.split`` along the channels into parts of ``sizes``, as its own layer."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        self.sizes = sizes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(x, self.sizes, dim=1)


class _SplitMerge(nn.Module):
    """A 1x1 conv, its output split into channel groups, each group through its own
    ``op`` (``dw``: a 3x3 depthwise conv, as MixNet's mixed convs; ``none``), and the groups
    concatenated back (in reverse order for ``none``, so the pair is not a no-op)."""

    def __init__(self, c: int, parts: int, op: str) -> None:
        super().__init__()
        sizes = _split_sizes(c, parts)
        if op not in ("dw", "none"):
            raise ValueError(f"split op must be dw or none, got {op!r}")
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.split = ChannelSplit(sizes)
        self.branches = nn.ModuleList(nn.Conv2d(s, s, 3, 1, 1, groups=s, bias=False) if op == "dw" else nn.Identity()
                                      for s in sizes)
        self.reverse = op == "none"
        self.concat = Concat()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.split(self.conv(x))
        order = range(len(self.branches) - 1, -1, -1) if self.reverse else range(len(self.branches))
        return self.concat(*[self.branches[i](parts[i]) for i in order])


@family("split", ("h", "w", "c", "groups", "op"), {}, lambda p: _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"])))
def split(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A channel split in context (:class:`_SplitMerge`): ``groups`` parts, ``op`` what each
    part goes through before the concat."""
    return _SplitMerge(p["c"], int(p["groups"]), p["op"]), (p["n"], p["c"], p["h"], p["w"])


class _ShuffleUnit(nn.Module):
    """A ShuffleNetV2 unit and the next one's split on (n, c, h, w): the input's halves,
    the second through a 1x1 conv, concatenated, their channels shuffled in ``groups``
    groups (``view(n, groups, c // groups, h, w)``, ``transpose(1, 2)``, ``contiguous()``,
    ``view(n, c, h, w)``, as torchvision writes it), and the result split in halves again,
    the second through a 1x1 conv, concatenated. Each call is its own module."""

    def __init__(self, shape: tuple[int, int, int, int], groups: int) -> None:
        super().__init__()
        n, c, h, w = shape
        self.split, self.conv, self.concat = _Call("chunk", 2, 1), _conv_relu(c // 2), Concat()
        self.group, self.transpose = _Call("view", n, groups, c // groups, h, w), _Call("transpose", 1, 2)
        self.contiguous, self.ungroup = _Call("contiguous"), _Call("view", n, c, h, w)
        self.split_after, self.after, self.concat_after = _Call("chunk", 2, 1), _conv_relu(c // 2), Concat()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(x)
        y = self.concat(a, self.conv(b))
        y = self.ungroup(self.contiguous(self.transpose(self.group(y))))
        a, b = self.split_after(y)
        return self.concat_after(a, self.after(b))


def _conv_relu(c: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.ReLU())


def _shuffle_channels(p: dict[str, Any]) -> int:
    """``c`` rounded down to a multiple of 2 x ``groups`` (halves, and groups of equal size)."""
    if int(p["groups"]) < 2:
        raise ValueError(f"channel_shuffle needs groups >= 2, got {p['groups']}")
    step = math.lcm(2, int(p["groups"]))
    return max(step, p["c"] // step * step)


@family("channel_shuffle", ("h", "w", "c", "groups"), {},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"])))
def channel_shuffle(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A channel shuffle in context (:class:`_ShuffleUnit`): ``c`` channels (rounded down
    to a multiple of 2 x ``groups``) shuffled in ``groups`` groups between two units."""
    shape = (p["n"], _shuffle_channels(p), p["h"], p["w"])
    return _ShuffleUnit(shape, int(p["groups"])), shape


#: the slices of :func:`slice_family`, each as a real network writes it
SLICE_OPS = ("channels", "ghost", "qkv", "cls", "tokens", "merge", "gather", "last")


class _Index(nn.Module):
    """``x[index]`` as its own layer (``index`` basic: ints and slices, or a tensor buffer)."""

    def __init__(self, index: Any) -> None:
        super().__init__()
        if isinstance(index, torch.Tensor):
            self.register_buffer("rows", index)
            index = None
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.rows] if self.index is None else x[self.index]


_ALL = slice(None)


class _PartialResidual(nn.Module):
    """ReXNet's residual: a 1x1 conv c -> f (f > c), its first c channels plus the input,
    concatenated with the other f - c: ``cat(y[:, :c] + x, y[:, c:])``."""

    def __init__(self, c: int, f: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, f, 1, bias=False)
        self.head, self.tail = _Index((_ALL, slice(0, c))), _Index((_ALL, slice(c, None)))
        self.add, self.concat = Eltwise("add"), Concat()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.concat(self.add(self.head(y), x), self.tail(y))


class _GhostSlice(nn.Module):
    """GhostNet's module with an odd output width f: a 1x1 conv c -> p (p = f // 2 + 1), a
    3x3 depthwise conv of it, both concatenated (2p channels) and the first f kept
    (``cat(...)[:, :f]``, a partial slice), then the next module's 1x1 conv f -> c."""

    def __init__(self, c: int, f: int) -> None:
        super().__init__()
        p = f // 2 + 1
        self.primary = nn.Conv2d(c, p, 1, bias=False)
        self.cheap = nn.Conv2d(p, p, 3, 1, 1, groups=p, bias=False)
        self.concat, self.keep = Concat(), _Index((_ALL, slice(None, f)))
        self.conv = nn.Conv2d(f, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.primary(x)
        return self.conv(self.keep(self.concat(y, self.cheap(y))))


class _QkvSelect(nn.Module):
    """timm's older ViT attention and Swin's: qkv linear -> reshape (n, T, 3, heads, d) ->
    permute -> ``q, k, v = qkv[0], qkv[1], qkv[2]`` (three selects, not an unbind) ->
    scaled-dot-product attention -> transpose -> reshape -> proj linear."""

    def __init__(self, tokens: int, c: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(c, 3 * c)
        self.split_heads = _Call("reshape", -1, tokens, 3, heads, c // heads)
        self.permute = _Call("permute", 2, 0, 3, 1, 4)
        self.q, self.k, self.v = _Index(0), _Index(1), _Index(2)
        self.sdpa = _SDPA()
        self.transpose = _Call("transpose", 1, 2)
        self.merge_heads = _Call("reshape", -1, tokens, c)
        self.proj = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.permute(self.split_heads(self.qkv(x)))
        return self.proj(self.merge_heads(self.transpose(self.sdpa(self.q(qkv), self.k(qkv), self.v(qkv)))))


class _Tokens(nn.Module):
    """Slices of (n, T, c) tokens after a layer norm. ``cls``: ViT's and BERT's pooling,
    ``head(x[:, 0])``. ``tokens``: XCiT's class attention, ``cat(fc(x[:, :1]), x[:, 1:])``.
    ``last``: EfficientViT's linear attention, ``y[..., :-1] / (y[..., -1:] + 1)`` of a
    linear c -> c + 1. ``gather``: ``x[:, rows]``, a fixed (seeded) half of the tokens kept, as
    token pruning and detection heads gather, then a linear."""

    def __init__(self, tokens: int, c: int, op: str) -> None:
        super().__init__()
        self.op = op
        self.pre = nn.LayerNorm(c) if op != "last" else nn.Linear(c, c + 1)   # what the slices read
        if op == "cls":
            self.first = _Index((_ALL, 0))
        elif op == "tokens":
            self.first, self.rest, self.concat = _Index((_ALL, slice(None, 1))), _Index((_ALL, slice(1, None))), Concat()
        elif op == "last":
            self.first, self.rest = _Index((Ellipsis, slice(None, -1))), _Index((Ellipsis, slice(-1, None)))
            self.eps, self.div = _Call("add", 1.0), _Divide()   # each its own layer, so each kernel names it
        else:
            rows = torch.randperm(tokens, generator=torch.Generator().manual_seed(0))[:max(1, tokens // 2)]
            self.first = _Index(rows.sort().values)
        self.fc = nn.Linear(c, c) if op != "last" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pre(x)
        if self.op == "tokens":
            return self.concat(self.fc(self.first(y)), self.rest(y))
        if self.op == "last":
            return self.div(self.first(y), self.eps(self.rest(y)))
        return self.fc(self.first(y))


class _Divide(nn.Module):
    """``a / b`` as its own layer."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a / b


class _PatchMerging(nn.Module):
    """Swin's patch merging on an (n, h, w, c) map after a linear: the four strided
    quarters ``x[:, i::2, j::2, :]``, concatenated (4c), layer norm, linear 4c -> 2c."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc = nn.Linear(c, c)
        self.quarters = nn.ModuleList(_Index((_ALL, slice(i, None, 2), slice(j, None, 2), _ALL))
                                      for j in (0, 1) for i in (0, 1))
        self.concat = Concat(dim=-1)
        self.norm, self.reduction = nn.LayerNorm(4 * c), nn.Linear(4 * c, 2 * c, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return self.reduction(self.norm(self.concat(*[quarter(y) for quarter in self.quarters])))


def _slice_size(p: dict[str, Any]) -> tuple[float, float]:
    n, h, c = p["n"], p["h"], p["c"]
    if p["op"] in ("channels", "ghost"):
        w, f = p["w"] or h, p["f"] or c
        return 4.0 * n * h * w * c * f, float(n * h * w * 2 * max(c, f))
    if p["op"] == "merge":
        w = p["w"] or h
        return 2.0 * n * h * w * c * 3 * c, float(n * h * w * c)
    if p["op"] == "qkv":
        return _attention_size({**p, "w": 1})
    return 2.0 * n * h * c * c, float(n * h * (c + 1))


@family("slice", ("h", "c", "op"), {"w": None, "f": None, "groups": 1}, _slice_size)
def slice_family(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Slices as networks hold them (``op`` from :data:`SLICE_OPS`): on a conv's output
    (n, c, h, w), ``channels`` (ReXNet's partial residual, ``f`` > ``c`` channels) and
    ``ghost`` (GhostNet's odd-width ``cat(...)[:, :f]``); on (n, h, c) tokens ``qkv``
    (``groups`` heads), ``cls``, ``tokens``, ``last`` and ``gather`` (:class:`_Tokens`); on
    an (n, h, w, c) map ``merge`` (Swin's patch merging, h and w even)."""
    op, n, h, c = p["op"], p["n"], p["h"], p["c"]
    w = p["w"] or h
    if op not in SLICE_OPS:
        raise ValueError(f"slice op must be one of {', '.join(SLICE_OPS)}, got {op!r}")
    if op == "channels":
        f = p["f"] or c + c // 2
        if f <= c:
            raise ValueError(f"slice channels needs f > c, got c={c}, f={f}")
        return _PartialResidual(c, f), (n, c, h, w)
    if op == "ghost":
        return _GhostSlice(c, p["f"] or c), (n, c, h, w)
    if op == "merge":
        if h % 2 or w % 2:
            raise ValueError(f"slice merge needs an even map, got {h}x{w}")
        return _PatchMerging(c), (n, h, w, c)
    if op == "qkv":
        _check_heads("slice qkv", c, p["groups"])
        return _QkvSelect(h, c, p["groups"]), (n, h, c)
    if h < 2:
        raise ValueError(f"slice {op} needs at least 2 tokens, got h={h}")
    return _Tokens(h, c, op), (n, h, c)


def _conv_transpose_size(p: dict[str, Any]) -> tuple[float, float]:
    stem_ops, largest = _stem_size(p, float(p["n"] * p["f"] * (p["h"] * p["stride"]) * (p["w"] * p["stride"])))
    return stem_ops + 2.0 * p["n"] * p["h"] * p["w"] * p["c"] * p["f"] * p["k"] ** 2, largest


@family("conv_transpose", ("h", "w", "c", "f", "k"), {"stride": 2}, _conv_transpose_size)
def conv_transpose(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then a transposed conv ``c`` -> ``f`` with kernel ``k`` and ``stride``
    (Mask R-CNN's mask head: k 2, stride 2; FCN-style upsampling: k 4, stride 2), padded
    so that the output is ``stride`` times the input where the kernel allows it."""
    padding = max(0, (p["k"] - p["stride"] + 1) // 2)
    return (_after_conv(p["c"], "deconv", nn.ConvTranspose2d(p["c"], p["f"], p["k"], p["stride"], padding, bias=False)),
            (p["n"], p["c"], p["h"], p["w"]))


# --- selection and sampling: detection heads' post-processing and RAFT's lookups, each after
# a 1x1 conv as in the network; their data (boxes, RoIs, sampling grids) are fixed buffers drawn
# from the benchmark's seed, so a benchmark runs on the same data every time.

class TopK(nn.Module):
    """The values of ``torch.topk(x, k, dim=1)``, as its own layer."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.topk(x, self.k, dim=1).values


class Sort(nn.Module):
    """The values of ``torch.sort(x, dim=1, descending=True)``, as its own layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1, descending=True).values


class Unique(nn.Module):
    """``torch.unique(x)`` (sorted), as its own layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.unique(x)


def _ranked(p: dict[str, Any], name: str, layer: nn.Module) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, its output flattened per image, then ``layer`` (named ``name``)."""
    net = _after_conv(p["c"], "flatten", nn.Flatten(1))
    net.add_module(name, layer)
    return net, (p["n"], p["c"], p["h"], p["w"])


def _ranked_size(p: dict[str, Any]) -> tuple[float, float]:
    return _stem_size(p, float(p["n"] * p["c"] * p["h"] * p["w"]))


@family("topk", ("h", "w", "c", "k"), {}, _ranked_size)
def topk(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then the ``k`` largest of its ``c*h*w`` outputs per image (a detection
    head's pre-NMS top-k over anchors and classes)."""
    if p["k"] > p["c"] * p["h"] * p["w"]:
        raise ValueError(f"topk k={p['k']} exceeds the {p['c'] * p['h'] * p['w']} scores it ranks")
    return _ranked(p, "topk", TopK(p["k"]))


@family("sort", ("h", "w", "c"), {}, _ranked_size)
def sort(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then its ``c*h*w`` outputs per image sorted in descending order."""
    return _ranked(p, "sort", Sort())


@family("unique", ("h", "w", "c"), {}, _ranked_size)
def unique(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then the distinct values of its output, sorted (``torch.unique``)."""
    return _ranked(p, "unique", Unique())


#: anchor sizes (in grid cells), cycled over the positions, as a detection head's three scales
_ANCHOR_CELLS = (1.0, 2.0, 4.0)


def _anchors(h: int, w: int) -> torch.Tensor:
    """(h*w, 4) boxes x1, y1, x2, y2: one square per cell of an ``h`` x ``w`` grid, of
    :data:`_ANCHOR_CELLS` cells in turn, centred on the cell moved by up to half a cell
    (seeded draw)."""
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                            torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
    centres = torch.stack([xs, ys], dim=-1).reshape(-1, 2)
    centres = centres + torch.rand_like(centres) - 0.5
    half = torch.tensor(_ANCHOR_CELLS).repeat(h * w // len(_ANCHOR_CELLS) + 1)[:h * w].unsqueeze(1) / 2
    return torch.cat([centres - half, centres + half], dim=1)


def _torchvision_ops() -> Any:
    """``torch.ops.torchvision``, registered by importing torchvision (imported on use)."""
    import torchvision  # noqa: F401
    return torch.ops.torchvision


class NMS(nn.Module):
    """``torchvision.ops.nms`` of fixed ``boxes`` ranked by ``scores``, as its own layer
    (the registered op, which torch.fx traces; the Python wrapper checks shapes in Python)."""

    def __init__(self, boxes: torch.Tensor, iou: float) -> None:
        super().__init__()
        self.register_buffer("boxes", boxes)
        self.iou = iou

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return _torchvision_ops().nms(self.boxes, scores, self.iou)


@family("nms", ("h", "w", "c"), {"op": "0.5"},
        lambda p: (2.0 * p["h"] * p["w"] * p["c"], float(p["c"] * p["h"] * p["w"])))
def nms(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv c -> 1 scores one anchor box per position (:func:`_anchors`), then
    non-maximum suppression of the ``h*w`` boxes at IoU threshold ``op`` (0.5: a box
    head's, 0.7: a region proposal network's); one image."""
    try:
        iou = float(p["op"])
    except ValueError:
        raise ValueError(f"nms op is the IoU threshold, a number in (0, 1), got {p['op']!r}") from None
    if not 0 < iou < 1 or p["n"] != 1:
        raise ValueError(f"nms needs an IoU threshold in (0, 1) and n=1, got op={p['op']!r}, n={p['n']}")
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(p["c"], 1, 1, bias=False))
    net.add_module("flatten", nn.Flatten(0))
    net.add_module("nms", NMS(_anchors(p["h"], p["w"]), iou))
    return net, (1, p["c"], p["h"], p["w"])


class RoIAlign(nn.Module):
    """``torchvision.ops.roi_align`` of fixed ``rois`` to ``k`` x ``k`` with 2 samples per
    bin side (as ``MultiScaleRoIAlign``), as its own layer (the registered op, as :class:`NMS`)."""

    def __init__(self, rois: torch.Tensor, k: int) -> None:
        super().__init__()
        self.register_buffer("rois", rois)
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _torchvision_ops().roi_align(x, self.rois, 1.0, self.k, self.k, 2, False)


def _rois(count: int, h: int, w: int) -> torch.Tensor:
    """(count, 5) RoIs (image 0, x1, y1, x2, y2) inside an ``h`` x ``w`` map, each side
    1/8 to 1/2 of the map's (seeded draw)."""
    size = torch.rand(count, 2) * 0.375 + 0.125
    corner = torch.rand(count, 2) * (1 - size)
    scale = torch.tensor([float(w), float(h)])
    return torch.cat([torch.zeros(count, 1), corner * scale, (corner + size) * scale], dim=1)


@family("roi_align", ("h", "w", "c", "k", "groups"), {},
        lambda p: _stem_size(p, float(p["groups"] * p["c"] * p["k"] ** 2)))
def roi_align(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then ``groups`` RoIs pooled from its output to ``k`` x ``k`` (a box
    head's 7x7, a mask head's 14x14); one image."""
    if p["n"] != 1:
        raise ValueError(f"roi_align benchmarks one image, got n={p['n']}")
    return _after_conv(p["c"], "roi_align", RoIAlign(_rois(int(p["groups"]), p["h"], p["w"]), p["k"])), \
        (1, p["c"], p["h"], p["w"])


class GridSample(nn.Module):
    """``F.grid_sample`` (bilinear, zeros padding) at a fixed ``grid``, as its own layer."""

    def __init__(self, grid: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("grid", grid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.grid_sample(x, self.grid, mode="bilinear", padding_mode="zeros", align_corners=True)


@family("grid_sample", ("h", "w", "c", "k"), {},
        lambda p: (0.0, float(p["n"] * p["c"] * max(p["h"] * p["w"], p["k"] ** 2))))
def grid_sample(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """Each of the ``n`` input maps sampled at a ``k`` x ``k`` window of points around a
    seeded centre (RAFT's correlation lookup: n is the number of pixels, c = 1, k = 7 or 9;
    a spatial transformer: n = 1, k about the map size). It reads the network input: RAFT's
    single-channel maps have no blocked layout, and a conv over thousands of 1-channel
    maps is no kernel a network has."""
    centre = torch.rand(p["n"], 1, 1, 2) * 1.6 - 0.8
    offsets = torch.linspace(-0.2, 0.2, p["k"])
    window = torch.stack(torch.meshgrid(offsets, offsets, indexing="xy"), dim=-1)
    net = nn.Sequential()
    net.add_module("grid_sample", GridSample(centre + window))
    return net, (p["n"], p["c"], p["h"], p["w"])


@family("unfold", ("h", "w", "c", "k"), {},
        lambda p: _stem_size(p, float(p["n"] * p["c"] * p["k"] ** 2 * p["h"] * p["w"])))
def unfold(p: dict[str, Any]) -> tuple[nn.Module, tuple[int, ...]]:
    """A 1x1 conv, then its ``k`` x ``k`` neighbourhoods as columns (``nn.Unfold`` with
    'same' padding: RAFT's convex upsampling of the flow)."""
    if p["k"] % 2 == 0:
        raise ValueError(f"unfold k must be odd for 'same' padding, got {p['k']}")
    return _after_conv(p["c"], "unfold", nn.Unfold(p["k"], padding=p["k"] // 2)), (p["n"], p["c"], p["h"], p["w"])
