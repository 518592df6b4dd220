"""What this machine is: the CPU identity recorded in stores, profiles and results."""
from .cpu import CPU_ID_FIELDS, KERNEL_ISA, cpu_id, cpu_id_differences

__all__ = ["CPU_ID_FIELDS", "KERNEL_ISA", "cpu_id", "cpu_id_differences"]
