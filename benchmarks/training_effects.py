"""Why the training backend measures the way it does: four effects on a PyTorch CPU
training step, each timed both ways (a benchmark: prints a table, asserts nothing).

    python benchmarks/training_effects.py [--threads 1] [--repeats 5]

1. allocator: a MobileNetV2 step (batch 8) in a fresh process with glibc's default
   malloc, the same right after a ResNet-50 step, and with ``steady_allocator()``
   (each case in its own process, so earlier allocations cannot leak between them);
2. hooks: a MobileNetV2 step (batch 8) without hooks, with ``nn.Module`` full backward
   hooks on every leaf module, and with the backend's autograd-node hooks;
3. loss: forward + backward of one 3x3 conv (64 -> 64 channels, 8x56x56) from
   ``out.mean()`` (a stride-0 gradient) and from a dense gradient;
4. first layer: a ResNet-18 forward + backward (batch 32) with and without the input's
   gradient (a data batch needs none).
Times: median of ``--repeats`` steps after 2 warm-ups, torch threads pinned.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np
import torch
import torchvision
from torch import nn

from annette_torch.backends.torch_train import _TrainingTimer, steady_allocator


def median_ms(step, repeats: int) -> float:
    """Median wall time of ``step()`` over ``repeats`` calls after 2 warm-ups, in ms."""
    runs = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        step()
        if i >= 2:
            runs.append((time.perf_counter() - start) * 1e3)
    return float(np.median(runs))


def training_pass(model: nn.Module, x: torch.Tensor):
    """One forward + backward of ``model`` on ``x`` with a dense gradient of its output."""
    gradient = torch.randn_like(model(x))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        x.grad = None
        model(x).backward(gradient)
    return step


def mobilenet_step(repeats: int) -> float:
    model = torchvision.models.mobilenet_v2().train()
    return median_ms(training_pass(model, torch.randn(8, 3, 224, 224)), repeats)


def allocator_case(case: str, repeats: int) -> float:
    """Run in a fresh process: the MobileNetV2 step under one allocator case."""
    if case == "steady":
        steady_allocator()
    if case == "after-resnet50":
        model = torchvision.models.resnet50().train()
        median_ms(training_pass(model, torch.randn(8, 3, 224, 224)), 1)
    return mobilenet_step(repeats)


def in_subprocess(case: str, threads: int, repeats: int) -> float:
    output = subprocess.run([sys.executable, __file__, "--case", case, "--threads", str(threads),
                             "--repeats", str(repeats)], capture_output=True, text=True, check=True).stdout
    return float(output.strip().splitlines()[-1])


def hooks_cases(repeats: int) -> dict[str, float]:
    model = torchvision.models.mobilenet_v2().train()
    for module in model.modules():
        if hasattr(module, "inplace"):
            module.inplace = False        # full backward hooks refuse in-place outputs
    x = torch.randn(8, 3, 224, 224)
    leaves = [name for name, module in model.named_modules() if not list(module.children())]
    step = training_pass(model, x)
    times = {"no hooks": median_ms(step, repeats)}
    handles = [module.register_full_backward_hook(lambda *args: None)
               for name, module in model.named_modules() if name in leaves]
    times["nn.Module full backward hooks"] = median_ms(step, repeats)
    for handle in handles:
        handle.remove()
    timer = _TrainingTimer(model, leaves, repeats + 2)
    with timer.hooks():
        times["autograd-node hooks (the backend's)"] = median_ms(step, repeats)
    return times


def loss_cases(repeats: int) -> dict[str, float]:
    conv = nn.Conv2d(64, 64, 3, padding=1)
    x = torch.randn(8, 64, 56, 56, requires_grad=True)
    gradient = torch.randn(8, 64, 56, 56)
    return {"out.mean().backward()": median_ms(lambda: conv(x).mean().backward(), repeats),
            "out.backward(dense gradient)": median_ms(lambda: conv(x).backward(gradient), repeats)}


def input_grad_cases(repeats: int) -> dict[str, float]:
    model = torchvision.models.resnet18().train()
    times = {}
    for requires in (True, False):
        x = torch.randn(32, 3, 224, 224, requires_grad=requires)
        times[f"input requires grad: {requires}"] = median_ms(training_pass(model, x), repeats)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--case", help=argparse.SUPPRESS)     # internal: one allocator case
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.case:
        print(allocator_case(args.case, args.repeats))
        return
    print(f"torch {torch.__version__}, {args.threads} thread(s); median of {args.repeats} after 2 warm-ups, ms")
    sections = {
        "1. allocator: MobileNetV2 step, batch 8": {
            "glibc default, fresh process": in_subprocess("fresh", args.threads, args.repeats),
            "glibc default, after a ResNet-50 step": in_subprocess("after-resnet50", args.threads, args.repeats),
            "steady_allocator()": in_subprocess("steady", args.threads, args.repeats)},
        "2. hooks: MobileNetV2 step, batch 8": hooks_cases(args.repeats),
        "3. loss: 3x3 conv 64->64, 8x56x56, forward + backward": loss_cases(args.repeats),
        "4. first layer: ResNet-18 forward + backward, batch 32": input_grad_cases(args.repeats),
    }
    for title, cases in sections.items():
        print(f"\n{title}")
        for case, ms in cases.items():
            print(f"  {case:40s} {ms:10.1f}")


if __name__ == "__main__":
    main()
