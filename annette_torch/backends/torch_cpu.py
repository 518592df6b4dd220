"""``torch-cpu``: PyTorch eager on the CPU under ``torch.inference_mode()``."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from .base import Backend, Latency, eval_mode, random_input, register_backend


@register_backend
class TorchCpu(Backend):
    """PyTorch eager in eval mode with ``torch.set_num_threads(threads)`` during the
    measurement (the previous thread count is restored afterwards)."""

    name = "torch-cpu"

    def runtime_version(self) -> str:
        return torch.__version__

    def measure(self, model: nn.Module, input_shape: Sequence[int], warmup: int = 5,
                repeats: int = 20) -> Latency:
        x = torch.from_numpy(random_input(input_shape))
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with eval_mode(model), torch.inference_mode():
                return self.time_runs(lambda: model(x), warmup, repeats)
        finally:
            torch.set_num_threads(previous_threads)
