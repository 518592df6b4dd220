"""The mapping model: fusion rules and the kernel table they produce."""
from .counting import Counting
from .kernels import (ELEMENTWISE_KINDS, ELEMENTWISE_SUBGRAPH, NO_INPUT_GRAD, OUTPUT_REORDER, KernelTable, map_kernels,
                      removed_layers)
from .rules import READS_INPUT, RETURNED, Clause, FusionRule

__all__ = ["Clause", "Counting", "ELEMENTWISE_KINDS", "ELEMENTWISE_SUBGRAPH", "FusionRule", "KernelTable", "NO_INPUT_GRAD",
           "OUTPUT_REORDER", "READS_INPUT", "RETURNED", "map_kernels", "removed_layers"]
