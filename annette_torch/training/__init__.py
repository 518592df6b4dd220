"""Training-step estimation (PerfNetV2): optimizer-step terms; the per-kernel forward and
backward times come from a training profile (``torch-cpu-train``) fitted like any other."""
from .optimizers import OPTIMIZERS, fit_optimizer_steps, make_optimizer, measure_optimizer_steps, optimizer_step_ms

__all__ = ["OPTIMIZERS", "fit_optimizer_steps", "make_optimizer", "measure_optimizer_steps", "optimizer_step_ms"]
