"""Layer-model registry and the contract every layer model follows.

A layer model predicts the time of many kernels of one kind at once from the kernel
feature matrix (columns :data:`annette_torch.kinds.FEATURES`). It is built from plain
JSON data (``from_dict``/``to_dict``) and its ``predict`` is pure. The same formula runs
on numpy arrays and on torch tensors (``xp`` is the array namespace) so estimates can
be differentiated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..kinds import FEATURES

COLUMN = {name: i for i, name in enumerate(FEATURES)}
LAYER_MODELS: dict[str, type[LayerModel]] = {}


def register_layer_model(cls: type[LayerModel]) -> type[LayerModel]:
    """Class decorator: make a layer-model type loadable by its ``type`` name."""
    if cls.type_name in LAYER_MODELS:
        raise ValueError(f"layer model type {cls.type_name!r} registered twice")
    LAYER_MODELS[cls.type_name] = cls
    return cls


class LayerModel:
    """Predicts kernel times; subclasses define ``type_name`` and the formula."""

    type_name: ClassVar[str] = ""

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        """(time in seconds, compute-bound flag) per row of ``features``."""
        raise NotImplementedError

    def bytes_moved(self, features: Any) -> Any:
        """Bytes read and written per kernel under this model's bit widths."""
        return features[:, COLUMN["input_elems"]] * 0.0

    def to_dict(self) -> dict:
        """JSON parameters (the type is the key the profile stores them under)."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict) -> LayerModel:
        raise NotImplementedError


@dataclass
class WrappedLayerModel(LayerModel):
    """A layer model that corrects ``inner``'s times (an adaptation, a prior's correction):
    it answers as ``inner``'s type and moves the bytes ``inner`` moves."""

    inner: LayerModel

    @property
    def type_name(self) -> str:     # what answered: the wrapped model's type
        return self.inner.type_name

    def bytes_moved(self, features: Any) -> Any:
        return self.inner.bytes_moved(features)


@dataclass
class ScaledKernels(WrappedLayerModel):
    """``inner``'s kernel times times ``scale`` (a measured table's scale, for the kernels
    the table lacks: :mod:`annette_torch.measure.kernel_table`)."""

    scale: float

    def predict(self, features: Any, xp: Any = np) -> tuple[Any, Any]:
        seconds, compute = self.inner.predict(features, xp)
        return seconds * self.scale, compute


def layer_model_from_dict(type_name: str, data: dict, where: str = "layer model") -> LayerModel:
    """Build a layer model of a registered type from its JSON parameters; errors name
    ``where`` and what is wrong."""
    if type_name not in LAYER_MODELS:
        raise ValueError(f"{where}: unknown layer model type {type_name!r} (known: {sorted(LAYER_MODELS)})")
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object of {type_name} parameters")
    try:
        return LAYER_MODELS[type_name].from_dict(data)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: invalid {type_name} parameters ({error})") from error
