"""nn-Meter's latency-predictor interface on annette_torch profiles.

Code written for nn-Meter (``import nn_meter``; NNI's hardware-aware NAS examples) switches
with one import::

    from annette_torch.integrations.nn_meter import load_latency_predictor   # was: from nn_meter import ...
    predictor = load_latency_predictor("openvino-cpu")                       # an annette_torch profile
    latency_ms = predictor.predict(model, model_type="torch", input_shape=(1, 3, 224, 224))

The functions keep nn-Meter's names, parameters and units:

* :func:`load_latency_predictor(predictor_name, predictor_version=None)
  <load_latency_predictor>`: ``predictor_name`` is a built-in profile name or a profile
  JSON path. nn-Meter's own predictors (``cortexA76cpu_tflite21``, ...) are devices
  annette_torch has no calibration for: asking for one is an error that lists the
  built-in profiles. A profile has one version, its runtime's; ``predictor_version``
  is None or that version (or its start, e.g. ``"2026.4"``).
* :meth:`LatencyPredictor.predict`: milliseconds, as nn-Meter returns, from
  ``Estimator(profile)``. ``model_type="torch"`` takes an ``nn.Module`` traced at
  ``input_shape``; ``"onnx"`` takes an ONNX file path or a loaded ``onnx.ModelProto``,
  estimated at the shapes the file declares (nn-Meter ignores ``input_shape`` for ONNX),
  ``input_shape`` filling in inputs the file leaves dynamic. nn-Meter's other types
  (``"pb"``, ``"nnmeter-ir"``, ``"nni-ir"``) are refused with an error saying what to
  pass instead. ``apply_nni`` picks nn-Meter's torch converter; annette_torch always
  traces with torch.fx, so it is accepted and changes nothing.
* :func:`list_latency_predictors`: the built-in profiles as nn-Meter lists its
  predictors, one dict per profile (``name``, ``version``, ``category``, plus
  ``description``).

nn-Meter is not needed or imported; ONNX is imported only when an ONNX model is predicted.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from torch import nn

from ..estimator import Estimator
from ..graph import LayerGraph
from ..profiles import ProfileError, builtin_names, load_profile

__all__ = ["LatencyPredictor", "list_latency_predictors", "load_latency_predictor"]

#: nn-Meter's built-in predictors (its predictors.yaml): name -> the device it describes.
NN_METER_PREDICTORS = {
    "cortexA76cpu_tflite21": "Pixel4 CortexA76 CPU, TFLite v2.1",
    "adreno640gpu_tflite21": "Mi9 Adreno 640 GPU, TFLite v2.1",
    "adreno630gpu_tflite21": "Pixel3XL Adreno 630 GPU, TFLite v2.1",
    "myriadvpu_openvino2019r2": "Intel Movidius NCS2 (Myriad VPU), OpenVINO 2019R2",
}
#: built-in profiles of the same device as an nn-Meter predictor (another runtime version)
_NEAREST_PROFILE = {"myriadvpu_openvino2019r2": "ncs2-myriad"}
#: the model types this adapter estimates
MODEL_TYPES = ("torch", "onnx")
#: nn-Meter's default input shape for torch models
DEFAULT_INPUT_SHAPE = (1, 3, 224, 224)


class LatencyPredictor:
    """nn-Meter's predictor object (``nnMeterPredictor``) answered by an annette_torch
    :class:`~annette_torch.Estimator`; ``estimator`` is that estimator."""

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator

    @property
    def name(self) -> str:
        return self.estimator.profile.name

    def __repr__(self) -> str:
        return f"LatencyPredictor(profile={self.name!r})"

    def predict(self, model: Any, model_type: str = "torch", input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
                apply_nni: bool = False) -> float:
        """Estimated latency of one inference of ``model`` in milliseconds (see the module
        docstring for ``model_type``, ``input_shape`` and ``apply_nni``)."""
        if not isinstance(apply_nni, bool):
            raise TypeError(f"apply_nni must be True or False, got {apply_nni!r}")
        if model_type == "torch":
            if not isinstance(model, nn.Module):
                hint = " (an ONNX file: model_type='onnx')" if isinstance(model, (str, os.PathLike)) else ""
                raise TypeError(f"model_type='torch' takes an nn.Module, got {type(model).__name__}{hint}")
            return self.estimator(model, input_shape=tuple(input_shape))
        if model_type == "onnx":
            return self.estimator(_onnx_graph(model, input_shape))
        raise ValueError(f"model_type {model_type!r} is not supported by annette_torch's nn-Meter adapter; "
                         f"supported: {', '.join(map(repr, MODEL_TYPES))}. Pass the nn.Module itself with "
                         f"model_type='torch' (NNI's model spaces are nn.Modules), or export it to ONNX "
                         f"(model_type='onnx'); TensorFlow .pb files and nn-Meter/NNI IR graphs are not read")


def _onnx_graph(model: Any, input_shape: Sequence[int]) -> LayerGraph:
    """The layers of an ONNX file or ``ModelProto`` at its declared input shapes, or at
    ``input_shape`` when a declared one is dynamic."""
    import onnx

    from ..graph.onnx_import import import_onnx
    from ..validation import regular_file

    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        proto = onnx.load(os.fspath(regular_file(model, "ONNX file")), load_external_data=False)
    else:
        raise TypeError(f"model_type='onnx' takes an ONNX file path or an onnx.ModelProto, got "
                        f"{type(model).__name__} (an nn.Module: model_type='torch')")
    weights = {tensor.name for tensor in proto.graph.initializer}
    dynamic = any(not _static(value) for value in proto.graph.input if value.name not in weights)
    return import_onnx(model, input_shape=tuple(input_shape) if dynamic else None)


def _static(value) -> bool:
    """Whether an ONNX graph input declares a fixed shape."""
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(dim.HasField("dim_value") and dim.dim_value > 0
                                            for dim in tensor.shape.dim)


def load_latency_predictor(predictor_name: str, predictor_version: str | float | None = None) -> LatencyPredictor:
    """The predictor of a built-in profile name or profile JSON path (nn-Meter's
    ``load_latency_predictor``); :class:`~annette_torch.ProfileError` for nn-Meter's own
    predictor names, unknown profiles and a version the profile does not have."""
    if not isinstance(predictor_name, (str, os.PathLike)):
        raise TypeError(f"predictor_name must be a profile name or path, got {type(predictor_name).__name__}")
    meter_name = next((n for n in NN_METER_PREDICTORS if n.lower() == str(predictor_name).lower()), None)
    if meter_name is not None:
        nearest = _NEAREST_PROFILE.get(meter_name)
        raise ProfileError(
            f"{meter_name!r} is an nn-Meter predictor ({NN_METER_PREDICTORS[meter_name]}); annette_torch has no "
            f"calibration of that device. Built-in profiles: {', '.join(builtin_names())}"
            + (f" ({nearest!r} is the same device with another runtime version)" if nearest else "")
            + "; or calibrate one: annette-torch calibrate --backend ... then annette-torch fit")
    profile = load_profile(predictor_name)
    if predictor_version is not None and not _version_matches(profile.fingerprint, predictor_version):
        raise ProfileError(f"profile {profile.name!r} has one version, {_version(profile.fingerprint)!r}; "
                           f"predictor_version={predictor_version!r} is not it (pass None)")
    return LatencyPredictor(Estimator(profile))


def list_latency_predictors() -> list[dict[str, str]]:
    """The built-in profiles in the form of nn-Meter's predictor list: ``name``,
    ``version`` (the runtime version), ``category`` (cpu, vpu, dpu) and ``description``."""
    return [{"name": profile.name, "version": _version(profile.fingerprint),
             "category": _category(profile.fingerprint.get("backend", "")), "description": profile.description}
            for profile in map(load_profile, builtin_names())]


def _version(fingerprint: dict) -> str:
    return str(fingerprint.get("runtime_version") or "unknown")


def _version_matches(fingerprint: dict, version: str | float) -> bool:
    """``version`` is the profile's runtime version or its start at a component boundary."""
    recorded, wanted = _version(fingerprint), str(version)
    return recorded == wanted or (recorded.startswith(wanted) and not recorded[len(wanted)].isalnum())


def _category(backend: str) -> str:
    """nn-Meter's device category (cpu, gpu, vpu) of a profile's backend; dpu for the FPGA DPU."""
    for marker, category in (("myriad", "vpu"), ("dpu", "dpu"), ("gpu", "gpu"), ("cpu", "cpu")):
        if marker in backend:
            return category
    return backend
