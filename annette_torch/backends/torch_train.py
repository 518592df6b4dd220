"""``torch-cpu-train``: PyTorch eager training passes on the CPU (PerfNetV2's target).

A run is one forward pass in train mode (batch norm uses batch statistics, dropout is
on), a loss (:func:`backward_from`) and the backward pass; the optimizer step is not
part of it, because its time depends on the parameters only: the store gets it from
:meth:`TorchCpuTrain.store_extras` (``optimizer_steps.csv``, see
:mod:`annette_torch.training.optimizers`). :meth:`TorchCpuTrain.measure_step` times whole
steps, optimizer included: the ground truth of ``Estimator.training_step``.

Per-layer profiles: each original layer is timed forward (forward pre- and post-hooks)
and backward (pre- and post-hooks on the autograd nodes its forward call added, its
parameters' gradient accumulation included) with ``time.perf_counter_ns``; the kernel's
time is the sum, the layer's share of a training pass. Node hooks work with in-place ops
(``nn.Module`` full backward hooks refuse ResNet's ``out += identity``) and time exactly
the nodes a call added; like any per-layer timing they slow a step down (a MobileNetV2
step by about 10 %, ``benchmarks/training_effects.py``), which the fit's scale between
summed layer times and end-to-end times absorbs. The input requires grad, so
every layer computes its input's gradient, as every layer but a network's first does
(the ``stem`` benchmark family cuts it off with ``detach``). The caller's model is
never changed (a copy trains).

Allocator: a training step allocates and frees its activations every step. With glibc's
default malloc, whether those pages are kept or returned to the system (and faulted in
afresh next step) depends on what the process allocated before: the same MobileNetV2
step at batch 8 took 681 ms in a fresh process and 543 ms right after a ResNet-50 step
(``benchmarks/training_effects.py``; 512 ms with the steady allocator).
A measuring process therefore pins its malloc to one regime
(:meth:`TorchCpuTrain.prepare_process`, :func:`steady_allocator`: no mmap-backed chunks,
no trimming), so calibration and ground truth both measure steady-state steps, as a long
training loop (or one run with jemalloc/tcmalloc, which keep freed memory too) sees them.
Only processes that do nothing but measure do so: a campaign's worker and
``benchmarks/training.py``; the backend never changes the malloc of the process that
constructs or calls it, nor its RNG state (the CPU RNG state that dropout draws from in
the training passes is restored afterwards).
"""
from __future__ import annotations

import contextlib
import copy
import ctypes
import ctypes.util
import time
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from ..atomic import atomic_path
from ..training.optimizers import make_optimizer, measure_optimizer_steps
from .base import KernelRecord, Latency, random_inputs, register_backend, torch_threads
from .torch_cpu import Inputs, TorchCpu, _module_hooks

OPTIMIZER_STEPS_FILE = "optimizer_steps.csv"
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4       # mallopt parameters (malloc.h)


def steady_allocator() -> bool:
    """Make glibc's malloc in this process keep freed memory: serve every allocation
    from the heap (``M_MMAP_MAX`` 0) and never trim it (``M_TRIM_THRESHOLD`` 2 GiB - 1),
    so repeated steps reuse the same pages. True when applied; False where the C
    library is not glibc (nothing is changed there)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def backward_from(output: object, gradients: dict) -> None:
    """Backpropagate from the (first) output tensor: with cross-entropy against fixed
    labels when it is a batch of class scores (N, classes), as a classifier trains;
    otherwise with a fixed dense random gradient of its shape (kept in ``gradients``).
    A scalar loss such as ``output.mean()`` would hand the last layer an expanded,
    stride-0 gradient instead of the dense one it gets inside a network."""
    if isinstance(output, (tuple, list)):
        output = next(o for o in output if isinstance(o, torch.Tensor))
    key = (tuple(output.shape), output.dtype, output.device)
    if key not in gradients:
        generator = torch.Generator().manual_seed(0)
        if output.dim() == 2 and output.shape[1] > 1:
            gradients[key] = torch.randint(output.shape[1], (output.shape[0],), generator=generator).to(output.device)
        else:
            gradients[key] = torch.randn(output.shape, generator=generator, dtype=output.dtype).to(output.device)
    target = gradients[key]
    if target.dtype == torch.int64:
        torch.nn.functional.cross_entropy(output, target).backward()
    else:
        output.backward(target)


def _tensors(value: object) -> list[torch.Tensor]:
    """The tensors in a module's inputs or output (a tensor, or a tuple/list of values)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def backward_nodes(inputs: object, output: object, parameters: set[int]) -> list:
    """The autograd nodes one module call added: those reachable from its output's
    ``grad_fn`` back to (not including) its inputs' nodes, plus the gradient accumulators
    of its own ``parameters`` (ids); what its backward pass runs."""
    stop = {t.grad_fn for t in _tensors(inputs) if t.grad_fn is not None}
    todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
    found, seen = [], set()
    while todo:
        node = todo.pop()
        if node is None or node in stop or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)       # AccumulateGrad: a leaf's gradient
        if variable is not None:
            if id(variable) in parameters:
                found.append(node)
            continue
        found.append(node)
        todo.extend(child for child, _ in node.next_functions)
    return found


class _TrainingTimer:
    """Per module path and timed run, the milliseconds of its forward call(s) (forward
    pre/post hooks) plus those of the autograd nodes its calls added (node pre/post
    hooks, registered on each call's nodes; engine time between nodes is left out)."""

    def __init__(self, model: nn.Module, layer_paths: Sequence[str], repeats: int) -> None:
        self.model, self.wanted, self.repeats = model, set(layer_paths), repeats
        self.totals: dict[str, list[float]] = {}
        self.run = 0
        self._started: dict[str, int] = {}

    def _enter(self, path: str) -> None:
        self._started[path] = time.perf_counter_ns()

    def _leave(self, path: str, module: nn.Module, inputs: object, output: object) -> None:
        now = time.perf_counter_ns()
        run_totals = self.totals.setdefault(path, [0.0] * self.repeats)
        run_totals[self.run] += (now - self._started[path]) / 1e6
        for node in backward_nodes(inputs, output, {id(p) for p in module.parameters()}):
            started = [0]
            node.register_prehook(lambda grads, s=started: s.__setitem__(0, time.perf_counter_ns()))
            node.register_hook(lambda grads_in, grads_out, s=started, r=self.run, t=run_totals:
                               t.__setitem__(r, t[r] + (time.perf_counter_ns() - s[0]) / 1e6))

    def hooks(self) -> contextlib.AbstractContextManager:
        """The forward hooks that time the wanted modules, for a ``with`` block."""
        return _module_hooks(self.model, self.wanted, self._enter, self._leave)


@register_backend
class TorchCpuTrain(TorchCpu):
    """Training passes of PyTorch eager with ``torch.set_num_threads(threads)``."""

    name = "torch-cpu-train"
    trains = True
    counting = {}       # the backward passes of dilated convs were not checked: counted as annette_torch does

    def __init__(self, threads: int = 1, precision: str | None = None) -> None:
        super().__init__(threads, precision)
        self._gradients: dict = {}       # output (shape, dtype, device) -> labels or gradient to backpropagate

    def prepare_process(self) -> None:
        """Pin this process's malloc to keep freed memory (:func:`steady_allocator`)."""
        steady_allocator()

    @contextlib.contextmanager
    def _session(self, model: nn.Module, input_shape: Sequence[int]) -> Iterator[tuple[nn.Module, Inputs]]:
        """(a copy of the model in train mode on this backend's device, its inputs (one per
        shape of a tuple of shapes), which require grad), with gradients on, the backend's
        thread count and the CPU RNG state restored afterwards (dropout draws from it)."""
        x = tuple(torch.from_numpy(array).to(self.device).requires_grad_(True) for array in random_inputs(input_shape))
        training = copy.deepcopy(model).to(self.device).train()
        with torch_threads(self.threads), torch.enable_grad(), torch.random.fork_rng(devices=[]):
            yield training, x

    def _infer(self, model: nn.Module, x: Inputs, optimizer: torch.optim.Optimizer | None = None) -> None:
        """One training pass (and optimizer step when one is given)."""
        model.zero_grad(set_to_none=True)
        for tensor in x:
            tensor.grad = None
        backward_from(model(*x), self._gradients)
        if optimizer is not None:
            optimizer.step()
        self.synchronize()

    def measure_step(self, model: nn.Module, input_shape: Sequence[int], optimizer: str = "sgd",
                     warmup: int = 3, repeats: int = 10) -> Latency:
        """Time whole training steps of ``model`` (forward, loss, backward, ``optimizer``
        step from :data:`~annette_torch.training.optimizers.OPTIMIZERS`) on an input of
        ``input_shape`` that does not require grad, as a data batch does not. It runs in
        the calling process as that is: for steady-state steps, as calibration times them,
        call it in a process that only measures after :meth:`prepare_process`
        (``benchmarks/training.py`` does)."""
        with self.step("run"), self._session(model, input_shape) as (training, x):
            for tensor in x:
                tensor.requires_grad_(False)
            step = make_optimizer(optimizer, [p for p in training.parameters() if p.requires_grad])
            return self.time_runs(lambda: self._infer(training, x, step), warmup, repeats)

    def _profile_layers(self, model: nn.Module, x: Inputs, layer_paths: Sequence[str],
                        repeats: int) -> list[KernelRecord]:
        timer = _TrainingTimer(model, layer_paths, repeats)
        with timer.hooks():
            for run in range(repeats):
                timer.run = run
                self._infer(model, x)
        return self._records(model, x, layer_paths, timer.totals)

    def store_extras(self, folder: Path) -> None:
        """Write the optimizer step timings (``optimizer_steps.csv``) into the store
        ``folder`` unless it has them (so a resumed campaign keeps the first ones); the file
        appears whole or not at all, so an interrupted campaign measures them again."""
        path = Path(folder) / OPTIMIZER_STEPS_FILE
        if not path.exists():
            with self.step("run"), atomic_path(path) as tmp:
                measure_optimizer_steps(self.threads, device=self.device).to_csv(tmp, index=False)
