"""Resolve a model spec from the command line into a module (or graph) and its inputs.

Specs (every model is built with random weights in eval mode; nothing is downloaded):

- ``torchvision:NAME``: any of ``torchvision.models.list_models()``: classification,
  detection, segmentation, video, optical flow and quantization (built with
  ``quantize=False``: the float model with its quantization stubs), with
  ``weights=None`` and ``weights_backbone=None``.
- ``timm:NAME`` with ``pretrained=False``. ``timm:hf-hub:...`` names a model on the
  Hugging Face hub, which timm would download, and is refused.
- ``hf:NAME``: a HuggingFace transformers model (``pip install 'annette_torch[hf]'``)
  from a configuration class (``hf:BertConfig``: its base model, as ``AutoModel`` builds
  it), a model class with its default configuration (``hf:GPT2LMHeadModel``), or a local
  ``config.json`` or folder holding one (``hf:path/to/config.json``: the class its
  ``architectures`` names, else the base model).
- ``nb201:ARCH``: the NAS-Bench-201 CIFAR network of a cell arch string
  (``'nb201:|nor_conv_3x3~0|+|none~0|skip_connect~1|+|nor_conv_1x1~0|none~1|avg_pool_3x3~2|'``;
  quote it in a shell), input 1 x 3 x 32 x 32 (:mod:`annette_torch.nas.nasbench201`).
- ``path/to/file.py:function``: ``function()`` returns an ``nn.Module``.
- ``model.onnx``.

Default inputs: images of the size the model is built for or its weights were trained at
(224 x 224 unless torchvision, timm or the configuration say otherwise; segmentation
520 x 520; video 16 frames; optical flow two 368 x 496 images; detection one image of the
size the model resizes to), token ids ``(1, 128)`` of int64 for text models (and as
``decoder_input_ids`` too for encoder-decoders). :func:`model_inputs` makes them, or other shapes
and dtypes, into the forward's arguments.
"""
from __future__ import annotations

import importlib.util
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .graph import LayerGraph, TraceError, trace
from .graph.errors import first_line
from .validation import DataError, read_json, regular_file

Shape = tuple[int, ...]

#: sequence length of a text model's default input
DEFAULT_SEQ_LEN = 128
#: frames of a video model's default input
VIDEO_FRAMES = 16
#: image size of an optical-flow model's default inputs (FlyingChairs crops)
FLOW_SIZE = (368, 496)


class ModelSpecError(ValueError):
    """A model spec or its inputs cannot be resolved; the message says what to give instead."""


@dataclass
class ResolvedModel:
    """A module (or an already imported graph) and what its default inputs are.

    ``input_shapes``: one shape per input (empty: the model has no default, the user
    must say); ``input_names``: the forward parameters the inputs are passed as (empty:
    positionally, in order); ``token_inputs``: the inputs are token ids whose last
    dimension is the sequence length; ``image_list``: the forward takes a list of
    ``(C, H, W)`` images (torchvision detection), given as one ``(N, C, H, W)`` shape.
    """

    name: str
    module: nn.Module | None
    graph: LayerGraph | None = None
    input_shapes: tuple[Shape, ...] = ()
    input_dtype: torch.dtype = torch.float32
    input_names: tuple[str, ...] = ()
    token_inputs: bool = False
    image_list: bool = False


def _build(make: Callable[[], nn.Module], device: str) -> nn.Module:
    """``make()`` on ``device`` ("meta": no weights, no memory), or on the CPU when its
    constructor needs real tensors (``.tolist()`` of a computed width); in eval mode. Real
    weights come from a fixed seed (the process's random state is left as it was), so a
    forward whose path depends on data (detection post-processing) takes the same path
    every time and one spec gets one estimate."""
    if device == "meta":
        try:
            with torch.device("meta"):
                return make().eval()
        except (NotImplementedError, RuntimeError):
            pass
    with torch.random.fork_rng(devices=()):
        torch.manual_seed(0)
        return make().eval()


def _torchvision(name: str, device: str) -> ResolvedModel:
    """A torchvision model of any task without weights, and its task's default input."""
    try:
        import torchvision
    except ImportError as error:
        raise ModelSpecError("torchvision is not installed: pip install 'annette_torch[vision]'") from error
    models = torchvision.models
    available = models.list_models()
    if name not in available:
        raise ModelSpecError(f"torchvision has no model {name!r}; e.g. {', '.join(sorted(available)[:8])}, ...")
    builder = models.get_model_builder(name)
    options: dict[str, Any] = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        options["weights_backbone"] = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # googlenet/inception: a FutureWarning about init_weights
        model = _build(lambda: builder(**options), device)
    task = builder.__module__.split(".")[2]      # torchvision.models.<task>.<file>, or .<file> for classifiers
    try:
        transforms = models.get_model_weights(name).DEFAULT.transforms()
    except (ValueError, AttributeError):
        transforms = None
    crop = getattr(transforms, "crop_size", None) or [224]
    if task == "detection":
        size = int(model.transform.min_size[-1])   # the size it resizes to in eval mode
        return ResolvedModel(name, model, input_shapes=((1, 3, size, size),), image_list=True)
    if task == "segmentation":
        size = int((getattr(transforms, "resize_size", None) or [520])[0])
        return ResolvedModel(name, model, input_shapes=((1, 3, size, size),))
    if task == "video":
        return ResolvedModel(name, model, input_shapes=((1, 3, VIDEO_FRAMES, int(crop[0]), int(crop[-1])),))
    if task == "optical_flow":
        return ResolvedModel(name, model, input_shapes=((1, 3, *FLOW_SIZE),) * 2)
    size = getattr(model, "image_size", None)      # a ViT is built for one size, not its best weights' (vit_h_14)
    shape = (size, size) if isinstance(size, int) else (int(crop[0]), int(crop[-1]))
    return ResolvedModel(name, model, input_shapes=((1, 3, *shape),))


def _timm(name: str, device: str) -> ResolvedModel:
    """A timm model without pretrained weights, at its pretrained config's input size."""
    if name.split(":", 1)[0] in ("hf-hub", "hf_hub"):
        raise ModelSpecError(f"timm:{name} names a model on the Hugging Face hub, which timm would download; "
                             f"annette_torch builds models offline with random weights: give the architecture's "
                             f"timm name instead (e.g. timm:resnet50; timm.list_models() lists them)")
    try:
        import timm
    except ImportError as error:
        raise ModelSpecError("timm is not installed: pip install timm") from error
    try:
        model = _build(lambda: timm.create_model(name, pretrained=False), device)
    except RuntimeError as error:
        raise ModelSpecError(f"timm cannot build {name!r}: {error}") from error
    return ResolvedModel(name, model, input_shapes=(timm_input_shape(model),))


def timm_input_shape(model: nn.Module, batch: int = 1) -> tuple[int, ...]:
    """A timm model's default input shape, from its pretrained config (224x224 if none)."""
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    return (batch, *cfg.get("input_size", (3, 224, 224)))


def _huggingface(name: str, device: str) -> ResolvedModel:
    """A transformers model from a class name or a local config.json, with random weights,
    and token ids (text) or images (vision) as its default input."""
    try:
        import transformers
    except ImportError as error:
        raise ModelSpecError("hf: models need transformers: pip install 'annette_torch[hf]'") from error
    if name.endswith(".json") or Path(name).is_dir():
        config, model_class = _hf_config_file(Path(name), transformers)
    else:
        found = getattr(transformers, name, None) if name.isidentifier() else None
        if isinstance(found, type) and issubclass(found, transformers.PretrainedConfig):
            config, model_class = found(), None
        elif isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
            config, model_class = found.config_class(), found
        else:
            raise ModelSpecError(f"transformers has no configuration or model class {name!r}: give one such as "
                                 f"hf:BertConfig or hf:GPT2LMHeadModel, or a local config.json "
                                 f"(hf:path/to/config.json)")
    if getattr(config, "use_pretrained_backbone", False):
        config.use_pretrained_backbone = False   # a timm/torchvision backbone would be downloaded
    try:
        model = _build(lambda: model_class(config) if model_class else transformers.AutoModel.from_config(config),
                       device)
    except (ValueError, KeyError, ImportError) as error:
        raise ModelSpecError(f"transformers cannot build hf:{name}: {error}") from error
    label = type(model).__name__
    main = getattr(model, "main_input_name", "input_ids")
    if main == "input_ids":
        names = ("input_ids", "decoder_input_ids") if getattr(config, "is_encoder_decoder", False) else ("input_ids",)
        return ResolvedModel(label, model, input_shapes=((1, DEFAULT_SEQ_LEN),) * len(names), input_dtype=torch.int64,
                             input_names=names, token_inputs=True)
    if main == "input_features" and hasattr(config, "num_mel_bins"):    # Whisper: 30 s of log-mel frames
        if getattr(config, "is_encoder_decoder", False) and model_class is None:
            raise ModelSpecError(f"hf:{name} builds {label}, which takes decoder token ids beside its audio "
                                 f"features: estimate its encoder with hf:WhisperForAudioClassification, or give "
                                 f"--example-inputs file.py:function")
        frames = 2 * getattr(config, "max_source_positions", 1500)
        return ResolvedModel(label, model, input_shapes=((1, config.num_mel_bins, frames),), input_names=(main,))
    size, channels = getattr(config, "image_size", 224), getattr(config, "num_channels", 3)
    if main == "pixel_values" and isinstance(size, int):
        return ResolvedModel(label, model, input_shapes=((1, channels, size, size),), input_names=(main,))
    return ResolvedModel(label, model, input_names=(main,))


def _nasbench201(arch: str) -> ResolvedModel:
    from .nas.nasbench201 import NB201Network

    try:
        module = NB201Network(arch).eval()
    except ValueError as error:
        raise ModelSpecError(f"nb201:{arch}: {error}") from None
    return ResolvedModel(f"nb201:{module.arch}", module, input_shapes=((1, 3, 32, 32),))


def _hf_config_file(path: Path, transformers: Any) -> tuple[Any, type | None]:
    """The configuration a local config.json (or a folder holding one) describes, and the
    model class its ``architectures`` names (None: the base model)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = read_json(file, "HuggingFace configuration")
    except DataError as error:
        raise ModelSpecError(str(error)) from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING
    if model_type not in mapping:
        raise ModelSpecError(f"{file}: 'model_type' is {model_type!r}, which transformers "
                             f"{transformers.__version__} does not know; e.g. bert, gpt2, t5, vit")
    config = mapping[model_type].from_dict(data)
    architecture = str((data.get("architectures") or [""])[0])
    found = getattr(transformers, architecture, None) if architecture.isidentifier() else None
    return config, found if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel) else None


def _load_function(path: str, function: str) -> Any:
    """``function`` of the Python file ``path`` (the file is run as a module)."""
    try:
        file = regular_file(path, "Python file")
    except DataError as error:
        raise ModelSpecError(str(error)) from None
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's file: say where it failed
        raise ModelSpecError(f"running {file} failed: {first_line(error, with_type=True)}") from error
    found = getattr(module, function, None)
    if not callable(found):
        raise ModelSpecError(f"{file} has no function {function!r}")
    return found


def _call(path: str, function: str) -> Any:
    """What ``function()`` of the file ``path`` returns; its exceptions become a
    :class:`ModelSpecError` naming ``path:function``."""
    found = _load_function(path, function)
    try:
        return found()
    except Exception as error:  # noqa: BLE001 - the user's factory: say where it failed
        raise ModelSpecError(f"{path}:{function}() raised {first_line(error, with_type=True)}") from error


def _python_file(path: str, function: str) -> ResolvedModel:
    """The module ``function()`` of the file ``path`` returns."""
    model = _call(path, function)
    if not isinstance(model, nn.Module):
        raise ModelSpecError(f"{path}:{function}() returned {type(model).__name__}, not an nn.Module")
    return ResolvedModel(f"{Path(path).stem}:{function}", model.eval())


def resolve_model(spec: str, input_shape: Shape | Sequence[Shape] | None = None, device: str = "cpu") -> ResolvedModel:
    """Build the model a spec names (see the module docstring); ``input_shape`` (one shape
    or one per input) fixes the shapes an ONNX file leaves dynamic. ``device="meta"``
    builds torchvision, timm and hf models without weights where their constructors allow
    (fast; tracing needs no weights unless an op has no meta kernel); a factory function
    always runs as it is."""
    if spec.endswith(".onnx"):
        from .graph.onnx_import import import_onnx
        graph = import_onnx(spec, input_shape=input_shape)
        return ResolvedModel(Path(spec).name, None, graph, input_shapes=graph.input_shapes)
    source, sep, name = spec.partition(":")
    if not sep or not name:
        raise ModelSpecError(f"model spec {spec!r} must be torchvision:NAME, timm:NAME, hf:NAME, nb201:ARCH, "
                             f"file.py:function or file.onnx")
    if source == "torchvision":
        return _torchvision(name, device)
    if source == "timm":
        return _timm(name, device)
    if source == "hf":
        return _huggingface(name, device)
    if source == "nb201":
        return _nasbench201(name)
    if source.endswith(".py"):
        return _python_file(source, name)
    raise ModelSpecError(f"unknown model source {source!r} in {spec!r} (torchvision, timm, hf, nb201, a .py file, "
                         f"or a .onnx file)")


def model_inputs(resolved: ResolvedModel, shapes: Sequence[Shape] | None = None,
                 dtypes: Sequence[torch.dtype] | None = None, seq_len: int | None = None,
                 device: str = "cpu") -> tuple:
    """The positional arguments of ``resolved.module``'s forward: zeros of ``shapes``
    (default: the model's own; ``seq_len`` replaces a text model's sequence length) and
    ``dtypes`` (one for all inputs or one each; default: the model's own) on ``device``
    (``"meta"``: no memory, for :func:`~annette_torch.graph.trace`)."""
    if seq_len is not None:
        if not resolved.token_inputs:
            raise ModelSpecError(f"{resolved.name}: --seq-len applies to models whose inputs are token ids "
                                 f"(hf: text models); give --input-shape instead")
        if shapes:
            raise ModelSpecError("give --seq-len or --input-shape, not both")
        shapes = [(*shape[:-1], seq_len) for shape in resolved.input_shapes]
    shapes = list(shapes or resolved.input_shapes)
    if not shapes:
        raise ModelSpecError(f"{resolved.name}: give --input-shape (e.g. 1,3,224,224; one per input, separated "
                             f"by ';') or --example-inputs file.py:function")
    dtypes = list(dtypes or [resolved.input_dtype])
    if len(dtypes) == 1:
        dtypes *= len(shapes)
    if len(dtypes) != len(shapes):
        raise ModelSpecError(f"{len(dtypes)} input dtypes for {len(shapes)} input shapes: give one dtype, "
                             f"or one per input")
    tensors: list[Any] = []
    for shape, dtype in zip(shapes, dtypes):
        if resolved.image_list:
            if len(shape) not in (3, 4):
                raise ModelSpecError(f"{resolved.name} takes a list of images: give their shape as N,C,H,W "
                                     f"(or C,H,W for one image), got {','.join(map(str, shape))}")
            images = shape[0] if len(shape) == 4 else 1
            tensors.append([torch.zeros(shape[-3:], dtype=dtype, device=device) for _ in range(images)])
        else:
            tensors.append(torch.zeros(shape, dtype=dtype, device=device))
    if resolved.input_names:
        return bind_inputs(resolved.module, dict(zip(resolved.input_names, tensors)))
    return tuple(tensors)


def bind_inputs(module: nn.Module, inputs: dict[str, Any]) -> tuple:
    """Positional arguments of ``module``'s forward that pass ``inputs`` as the parameters
    they are named after, with the parameters' defaults in between."""
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    position = {p.name: i for i, p in enumerate(params)}
    unknown = [name for name in inputs if name not in position]
    if unknown:
        raise ModelSpecError(f"{type(module).__name__}.forward has no parameter {unknown[0]!r}; "
                             f"it takes {', '.join(position) or 'no named parameters'}")
    args = []
    for p in params[: max(position[name] for name in inputs) + 1]:
        if p.name in inputs:
            args.append(inputs[p.name])
        elif p.default is p.empty:
            raise ModelSpecError(f"{type(module).__name__}.forward needs {p.name!r} too; give it")
        else:
            args.append(p.default)
    return tuple(args)


def load_example_inputs(spec: str, module: nn.Module | None) -> tuple:
    """The forward's positional arguments from ``file.py:function``: the function returns
    one tensor, a tuple or list of positional arguments, or a dict of arguments by name."""
    path, sep, function = spec.partition(":")
    if not sep or not path.endswith(".py") or not function:
        raise ModelSpecError(f"--example-inputs takes file.py:function, got {spec!r}")
    value = _call(path, function)
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)):
        return tuple(value)
    if isinstance(value, dict) and module is not None:
        return bind_inputs(module, value)
    raise ModelSpecError(f"{spec}() returned {type(value).__name__}; return a tensor, a tuple of positional "
                         f"arguments, or a dict of arguments by name")


def trace_model(spec: str, shapes: Sequence[Shape] | None = None, dtypes: Sequence[torch.dtype] | None = None,
                seq_len: int | None = None, example_inputs: str | None = None, training: bool = False) -> LayerGraph:
    """Resolve ``spec`` and trace it on its inputs (:func:`model_inputs` on the meta
    device: an input shape costs no memory, or the ``file.py:function`` of
    ``example_inputs``), in train mode with ``training``: built on the meta device first,
    rebuilt on the CPU when an op needs real weights."""
    if spec.endswith(".onnx"):
        if dtypes or seq_len or example_inputs:
            raise ModelSpecError(f"{spec}: an ONNX file declares its inputs' dtypes; give --input-shape only")
        return resolve_model(spec, shapes).graph
    if example_inputs and (shapes or dtypes or seq_len):
        raise ModelSpecError("give --example-inputs or --input-shape/--input-dtype/--seq-len, not both")

    def traced(resolved: ResolvedModel) -> LayerGraph:
        resolved.module.train(training)
        args = (load_example_inputs(example_inputs, resolved.module) if example_inputs
                else model_inputs(resolved, shapes, dtypes, seq_len, device="meta"))
        return trace(resolved.module, example_inputs=args, name=resolved.name)

    resolved = resolve_model(spec, device="meta")
    try:
        return traced(resolved)
    except TraceError as error:   # a plain TraceError: an op needs real weights, not a bad input
        on_meta = any(p.is_meta for p in resolved.module.parameters())
        if type(error) is not TraceError or not on_meta or spec.partition(":")[0].endswith(".py"):
            raise
    return traced(resolve_model(spec, device="cpu"))
