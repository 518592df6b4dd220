"""How this package measures: one protocol for calibration, adaptation and ground truth.

:mod:`.protocol` (interleaved rounds, drift correction against :mod:`.canary`, the
statistic), :mod:`.machine_load` (steal, load and noise checked before long work),
:mod:`.networks` (a list of networks measured with the protocol on a backend),
:mod:`.record` (the protocol and canary reference recorded beside results),
:mod:`.noise` (``annette-torch noise``) and :mod:`.kernel_table` (kernels measured in
context, ``calibrate --for``).
"""
from .machine_load import BusyMachineWarning, MachineState, machine_state
from .protocol import DEFAULT_STATISTIC, DRIFTS, STATISTICS, ItemFailed, Measured, Protocol, Session, interleave

__all__ = ["BusyMachineWarning", "DEFAULT_STATISTIC", "DRIFTS", "ItemFailed", "MachineState", "Measured", "Protocol",
           "STATISTICS", "Session", "interleave", "machine_state"]
