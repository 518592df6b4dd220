"""Memory estimation from a traced graph (Augur): parameters, activations, workspace."""
from .model import OPTIMIZER_STATES, MemoryEstimate, estimate_memory

__all__ = ["OPTIMIZER_STATES", "MemoryEstimate", "estimate_memory"]
