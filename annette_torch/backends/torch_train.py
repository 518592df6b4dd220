"""``torch-cpu-train``: PyTorch eager training passes on the CPU (PerfNetV2's target).

A run is one forward pass in train mode (batch norm uses batch statistics, dropout is
on), a loss (the mean of the output) and the backward pass; the optimizer step is not
part of it, because its time depends on the parameters only: the store gets it from
:meth:`TorchCpuTrain.store_extras` (``optimizer_steps.csv``, see
:mod:`annette_torch.training.optimizers`). :meth:`TorchCpuTrain.measure_step` times whole
steps, optimizer included: the ground truth of ``Estimator.training_step``.

Per-layer profiles: each original layer is timed forward (forward pre- and post-hooks)
and backward (full backward pre- and post-hooks, from the moment its output's gradient
is ready to the moment its inputs' gradients are, parameter gradients included) with
``time.perf_counter_ns``; the kernel's time is the sum, the layer's share of a training
pass. The input requires grad, so every layer computes its input's gradient, as every
layer but a network's first does. The caller's model is never changed (a copy trains).
"""
from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from ..training.optimizers import make_optimizer, measure_optimizer_steps
from .base import KernelRecord, Latency, Profiled, random_input, register_backend
from .torch_cpu import TorchCpu, _module_hooks

OPTIMIZER_STEPS_FILE = "optimizer_steps.csv"


def training_loss(output: object) -> torch.Tensor:
    """A scalar to backpropagate from: the mean of the (first) output tensor."""
    if isinstance(output, (tuple, list)):
        output = next(o for o in output if isinstance(o, torch.Tensor))
    return output.float().mean()


@contextlib.contextmanager
def _backward_hooks(model: nn.Module, layer_paths: Sequence[str], enter, leave) -> Iterator[None]:
    """Call ``enter(path)`` when a module's output gradient is ready and ``leave(path)``
    when its input gradients are, for each module named in ``layer_paths``."""
    wanted = set(layer_paths)
    handles = []
    for path, module in model.named_modules():
        if path in wanted:
            handles.append(module.register_full_backward_pre_hook(lambda m, g, p=path: enter(p)))
            handles.append(module.register_full_backward_hook(lambda m, gi, go, p=path: leave(p)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@register_backend
class TorchCpuTrain(TorchCpu):
    """Training passes of PyTorch eager with ``torch.set_num_threads(threads)``."""

    name = "torch-cpu-train"

    @contextlib.contextmanager
    def _session(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[tuple[nn.Module, torch.Tensor]]:
        """(a copy of the model in train mode on this backend's device, an input that
        requires grad), with gradients on and the backend's thread count."""
        x = torch.from_numpy(random_input(input_shape)).to(self.device).requires_grad_(True)
        training = copy.deepcopy(model).to(self.device).train()
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with torch.enable_grad():
                yield training, x
        finally:
            torch.set_num_threads(previous_threads)

    def _infer(self, model: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer | None = None) -> None:
        """One training pass (and optimizer step when one is given)."""
        model.zero_grad(set_to_none=True)
        x.grad = None
        training_loss(model(x)).backward()
        if optimizer is not None:
            optimizer.step()
        self.synchronize()

    def measure_step(self, model: nn.Module, input_shape: Sequence[int], optimizer: str = "sgd",
                     warmup: int = 3, repeats: int = 10) -> Latency:
        """Time whole training steps of ``model`` (forward, loss, backward, ``optimizer``
        step from :data:`~annette_torch.training.optimizers.OPTIMIZERS`) on an input of
        ``input_shape`` that does not require grad, as a data batch does not."""
        with self.step("run"), self._session(model, input_shape) as (training, x):
            x.requires_grad_(False)
            step = make_optimizer(optimizer, [p for p in training.parameters() if p.requires_grad])
            return self.time_runs(lambda: self._infer(training, x, step), warmup, repeats)

    def _profile_layers(self, model: nn.Module, x: torch.Tensor, layer_paths: Sequence[str],
                        repeats: int) -> list[KernelRecord]:
        enter, leave, forward_times = self._layer_timer()
        back_enter, back_leave, backward_times = self._layer_timer()
        with _module_hooks(model, layer_paths, enter, leave), \
                _backward_hooks(model, layer_paths, back_enter, back_leave):
            for _ in range(repeats):
                self._infer(model, x)
        forward, backward = forward_times(), backward_times()
        ops = self._aten_ops(model, x, layer_paths)
        types = {path: type(module).__name__ for path, module in model.named_modules()}
        records = []
        for path, runs in forward.items():
            back = backward.get(path, [0.0] * len(runs))
            if len(back) != len(runs):
                raise RuntimeError(f"layer {path!r} ran {len(runs)} times forward but {len(back)} backward")
            records.append(KernelRecord(name=path, kernel_type=types.get(path, ""),
                                        exec_type="+".join(ops.get(path, ())) or "aten", status="EXECUTED",
                                        runs_ms=tuple(f + b for f, b in zip(runs, back)), layers=(path,)))
        return records

    def store_extras(self, folder: Path) -> None:
        """Write the optimizer step timings (``optimizer_steps.csv``) into the store
        ``folder`` unless it has them (so a resumed campaign keeps the first ones)."""
        path = Path(folder) / OPTIMIZER_STEPS_FILE
        if not path.exists():
            with self.step("run"):
                measure_optimizer_steps(self.threads, device=self.device).to_csv(path, index=False)
