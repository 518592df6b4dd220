"""annette_torch: execution-time estimation of PyTorch networks with stacked mapping and
layer models (ANNETTE), for neural-architecture search."""
from .estimator import (DEFAULT_PROFILE, EstimateError, Estimator, FreeWorkWarning, ModelStateWarning,
                        UnknownKindWarning, estimate)
from .graph import Layer, LayerGraph, TraceError, trace
from .memory import MemoryEstimate, estimate_memory
from .profiles import Profile, ProfileError, list_profiles, load_profile

__version__ = "0.1.0"
__all__ = ["DEFAULT_PROFILE", "EstimateError", "Estimator", "FreeWorkWarning", "Layer", "LayerGraph", "MemoryEstimate",
           "ModelStateWarning", "Profile", "ProfileError", "TraceError", "UnknownKindWarning", "estimate", "estimate_memory",
           "list_profiles", "load_profile", "trace", "__version__"]
