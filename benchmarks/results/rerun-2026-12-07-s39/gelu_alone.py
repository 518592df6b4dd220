"""Session 39: torch-cpu GELUs alone (PyTorch eager, 1 thread, f32) against the shipped
torch-cpu estimate and the one of a profile given as the first argument (e.g. the profile of
an earlier commit). Interleaved rounds; per shape the median over rounds of each round's
mean of 50 calls. From the repository root:
    python benchmarks/results/rerun-2026-12-07-s39/gelu_alone.py [BEFORE_PROFILE] > gelu-alone.txt
"""
import platform
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

from annette_torch import Estimator

SHAPES = [(1, 208, 256), (1, 784, 256), (1, 1024, 256), (1, 3136, 256), (1, 56, 56, 384), (1, 28, 28, 768),
          (1, 14, 14, 1536), (1, 7, 7, 3072), (1, 384, 56, 56)]
ROUNDS, CALLS = 7, 50


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    profiles = {"shipped": Estimator("torch-cpu")}
    if len(sys.argv) > 1:
        profiles["before"] = Estimator(sys.argv[1])
    gelu, inputs = nn.GELU().eval(), {shape: torch.randn(shape) for shape in SHAPES}
    for x in inputs.values():
        for _ in range(20):
            gelu(x)
    times = {shape: [] for shape in SHAPES}
    for _ in range(ROUNDS):
        for shape, x in inputs.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                gelu(x)
            times[shape].append((time.perf_counter() - start) / CALLS * 1e3)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; {ROUNDS} interleaved rounds")
    print(f"{'shape':>18} {'measured us':>12} {'round to round':>15} " + " ".join(f"{n + ' us':>12}" for n in profiles))
    for shape in SHAPES:
        rounds = np.array(times[shape])
        r2r = np.mean(np.abs(np.diff(rounds)) / rounds[:-1]) * 100
        estimates = [float(e.report(gelu, input_shape=shape)["time_ms"].sum()) * 1e3 for e in profiles.values()]
        print(f"{'x'.join(map(str, shape)):>18} {np.median(rounds) * 1e3:12.1f} {r2r:14.1f}% "
              + " ".join(f"{v:12.1f}" for v in estimates))


if __name__ == "__main__":
    main()
