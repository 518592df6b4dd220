"""Layer models: registry plus one file per model family."""
from .base import LAYER_MODELS, LayerModel, layer_model_from_dict, register_layer_model
from .roofline import RefinedRoofline, Roofline
from .statistical import Mixed, Statistical

__all__ = ["LAYER_MODELS", "LayerModel", "Mixed", "RefinedRoofline", "Roofline", "Statistical",
           "layer_model_from_dict", "register_layer_model"]
