"""The mapping model: fusion rules and the kernel table they produce."""
from .counting import Counting
from .kernels import NO_INPUT_GRAD, KernelTable, map_kernels, removed_layers
from .rules import Clause, FusionRule

__all__ = ["Clause", "Counting", "FusionRule", "KernelTable", "NO_INPUT_GRAD", "map_kernels", "removed_layers"]
