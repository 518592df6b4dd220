"""How close is the memory estimate to PyTorch CPU's real peak? Per torchvision model:
inference at batch 1 (under ``torch.no_grad``) and one training step at batch 8
(forward + backward + optimizer step, plain SGD and Adam); prints a table, asserts nothing.

    python benchmarks/memory.py [--models resnet18,resnet50] [--batch-train 8]

Measured peak: parameters and buffers of the model (allocated before profiling, the
baseline, added explicitly as their ``numel * element_size``) plus the largest running sum
of the CPU allocator's events (``torch.profiler.profile(profile_memory=True)``, the
``[memory]`` events of the raw profile ordered by time) during the step. The input is
created inside the profiled region, so it is counted. Training is measured in steady
state, on the second step: the optimizer state made by the first step is baseline and
added explicitly like the parameters; gradients are set to ``None`` after each step
(``zero_grad``'s default), so they are allocated, and counted, during the measured step.
Allocator caching and fragmentation are not seen; temporaries of kernels that allocate
outside PyTorch's allocator (oneDNN scratchpads) are not seen either.

Target (issue 7): total peak within 10% on torchvision models.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

from annette_torch import estimate_memory, trace

MODELS = ("resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,densenet121,vgg11,"
          "squeezenet1_0,shufflenet_v2_x1_0,regnet_y_400mf,convnext_tiny,vit_b_16")


def peak_allocated_bytes(step) -> int:
    """Largest running sum of CPU allocations minus frees while ``step()`` runs."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    start = np.array([e.start_ns() for e in events])
    nbytes = np.array([e.nbytes() for e in events], dtype=np.int64)
    return int(np.cumsum(nbytes[np.argsort(start, kind="stable")]).max(initial=0))


def model_bytes(model: torch.nn.Module) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(name: str, batch: int, optimizer: str | None) -> int:
    """Measured peak bytes of one inference (``optimizer=None``) or training step."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    if optimizer is None:
        model.eval()

        def step():
            with torch.no_grad():
                model(torch.randn(batch, 3, 224, 224))
    else:
        model.train()
        opt = (torch.optim.SGD(model.parameters(), lr=1e-3) if optimizer == "sgd"
               else torch.optim.Adam(model.parameters(), lr=1e-3))

        def step():
            model(torch.randn(batch, 3, 224, 224)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        step()             # steady state: the optimizer state exists before the measured step
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)] if optimizer else []
    baseline = model_bytes(model) + sum(t.numel() * t.element_size() for t in state)
    return baseline + peak_allocated_bytes(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--batch-train", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mb = 2**20
    print(f"torch {torch.__version__}, 1 thread; MB = 2^20 bytes; est = params + activations "
          f"(+ im2col workspace in the est+ws column)")
    print(f"{'model':<20}{'mode':<12}{'est':>9}{'est+ws':>9}{'measured':>10}{'err %':>8}{'err+ws %':>9}")
    errors: dict[str, list[tuple[float, float]]] = {}
    for name in args.models.split(","):
        for mode, batch, optimizer in (("inference", 1, None), ("train-sgd", args.batch_train, "sgd"),
                                       ("train-adam", args.batch_train, "adam")):
            model = getattr(torchvision.models, name)()
            graph = trace(model.train(optimizer is not None), input_shape=(batch, 3, 224, 224))
            est = estimate_memory(graph, training=optimizer is not None, optimizer=optimizer or "sgd")
            measured = measure(name, batch, optimizer)
            with_ws = est.total_bytes + est.workspace_bytes
            err = 100 * (est.total_bytes - measured) / measured
            err_ws = 100 * (with_ws - measured) / measured
            errors.setdefault(mode, []).append((abs(err), abs(err_ws)))
            print(f"{name:<20}{mode:<12}{est.total_bytes / mb:9.1f}{with_ws / mb:9.1f}"
                  f"{measured / mb:10.1f}{err:8.1f}{err_ws:9.1f}", flush=True)
    for mode, values in errors.items():
        mean = np.mean(values, axis=0)
        print(f"mean |error| {mode:<12}: {mean[0]:.1f} % (with workspace {mean[1]:.1f} %)")


if __name__ == "__main__":
    main()
