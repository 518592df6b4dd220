"""The mapping model: fusion rules and the kernel table they produce."""
from .kernels import KernelTable, map_kernels
from .rules import Clause, FusionRule

__all__ = ["Clause", "FusionRule", "KernelTable", "map_kernels"]
