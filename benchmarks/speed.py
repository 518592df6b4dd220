"""How fast is the estimator? Median time to trace a model, and to estimate an already
traced graph, per model and profile (a benchmark: prints a table, asserts nothing).

    python benchmarks/speed.py [--models resnet50,mobilenet_v2,vit_b_16] [--repeats 21] [--startup-repeats 5]

Targets (issue 2): estimate of a traced graph <= 1 ms; trace + estimate of resnet50 <= 100 ms.
Target (issue 15): ``annette-torch estimate torchvision:resnet18`` in a fresh process at most
1.5 s more than ``python -c "import torch, torchvision"``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torchvision

from annette_torch import Estimator, trace


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) wall time in ms over ``repeats`` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), min(samples), max(samples)


def startup_s(repeats: int) -> tuple[float, float]:
    """Median wall time (s) of ``annette-torch estimate torchvision:resnet18`` and of
    ``python -c "import torch, torchvision"``, each in a fresh process, run alternately."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))}
    commands = ([sys.executable, "-m", "annette_torch.cli", "estimate", "torchvision:resnet18"],
                [sys.executable, "-c", "import torch, torchvision"])
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for command, times in zip(commands, samples):
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,vit_b_16")
    parser.add_argument("--profiles", default="openvino-cpu,ncs2-myriad,zcu102-dpu")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--startup-repeats", type=int, default=5, help="fresh processes per startup command")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads pinned to 1, {args.repeats} repeats after warm-up; "
          f"times in ms as median [min, max]")
    header = f"{'model':<14}{'profile':<13}{'layers':>7}{'kernels':>8}  {'trace':>22}  {'estimate (traced)':>22}  {'trace+estimate':>22}"
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        model = torchvision.models.get_model(name, weights=None).eval()
        shape = (1, 3, 224, 224)
        graph = trace(model, input_shape=shape)
        trace_t = timed(lambda: trace(model, input_shape=shape), args.repeats)
        for profile in args.profiles.split(","):
            est = Estimator(profile)
            kernels = len(est.report(graph))
            est_t = timed(lambda: est(graph), args.repeats)
            both_t = timed(lambda: est(model, input_shape=shape), args.repeats)
            fmt = lambda t: f"{t[0]:8.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
            print(f"{name:<14}{profile:<13}{len(graph):>7}{kernels:>8}  {fmt(trace_t):>22}  "
                  f"{fmt(est_t):>22}  {fmt(both_t):>22}")

    cli_s, torch_s = startup_s(args.startup_repeats)
    print(f"\nstartup (median of {args.startup_repeats} fresh processes each, run alternately): "
          f"`annette-torch estimate torchvision:resnet18` {cli_s:.2f} s, `python -c \"import torch, torchvision\"` "
          f"{torch_s:.2f} s: {cli_s - torch_s:+.2f} s (target <= +1.5 s)")


if __name__ == "__main__":
    main()
