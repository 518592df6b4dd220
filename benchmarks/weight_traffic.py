"""What a conv pays for weights that are not in cache: chains of distinct convs against the
same chain reusing one pair's weights.

    python benchmarks/weight_traffic.py [--rounds 3] [--shapes 224x7k1,320x4k1,...]

Per shape ``CxHkK`` a chain of ``N`` pairs ``conv(C -> 2C) + ReLU + conv(2C -> C) + ReLU``
at ``H x H`` with kernel ``K``, ``N`` chosen so the chain's distinct weights reach 64 MiB
(at most 100 pairs): every conv then reads its weights from memory at each inference, as
in a large network. The control runs the same number of convs of the same shapes on one
pair's weights, which stay in the core's caches, as in a calibration benchmark of one
layer. Both are profiled on ``openvino-cpu`` (1 thread, performance counters, 5 warm-up
and 20 profiled inferences per round), alternately in ``--rounds`` rounds; the table gives
the median per-conv time of each (the first pair left out), their difference, the conv's
weight bytes over the ``openvino-cpu`` profile's weight bandwidth, and the profile's
estimate of the distinct chain's convs (which applies its weights-from-memory floor,
``max(model, weight bytes / bandwidth)``, to networks above its ``weight_cache_bytes``).
A benchmark: measures, prints a table, asserts nothing.
"""
from __future__ import annotations

import argparse
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

DEFAULT_SHAPES = "48x28k1,96x14k1,224x7k1,320x4k1,384x7k1,640x4k1,64x7k3,128x7k3,256x14k3,512x7k3"
TARGET_BYTES = 64 * 2 ** 20
MAX_PAIRS = 100


class SharedChain(nn.Module):
    """``pairs`` times the same two convs (and ReLUs): one pair's weights, read again and again."""

    def __init__(self, channels: int, kernel: int, pairs: int) -> None:
        super().__init__()
        self.up = nn.Conv2d(channels, 2 * channels, kernel, padding=kernel // 2)
        self.down = nn.Conv2d(2 * channels, channels, kernel, padding=kernel // 2)
        self.pairs = pairs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.pairs):
            x = torch.relu(self.down(torch.relu(self.up(x))))
        return x


def distinct_chain(channels: int, kernel: int, pairs: int) -> nn.Sequential:
    """``pairs`` pairs of convs (and ReLUs), each with weights of its own."""
    return nn.Sequential(*[layer for _ in range(pairs) for layer in (
        nn.Conv2d(channels, 2 * channels, kernel, padding=kernel // 2), nn.ReLU(),
        nn.Conv2d(2 * channels, channels, kernel, padding=kernel // 2), nn.ReLU())])


def conv_runs(backend, path: Path, shape: tuple[int, ...]) -> list[float]:
    """Per conv of the profiled chain after its first pair, its median profiled ms."""
    from annette_torch.backends.base import random_input

    kernels = backend.profile_onnx(path, random_input(shape), 5, 20)
    convs = [float(np.median(k.runs_ms)) for k in kernels if k.kernel_type == "Convolution" and k.status == "EXECUTED"]
    return convs[2:]


def conv_shapes(text: str) -> list[tuple[str, int, int, int]]:
    """``--shapes``: comma-separated ``<channels>x<map size>k<kernel>`` (``224x7k1``) ->
    (spec, channels, size, kernel) each; ``ArgumentTypeError`` naming a malformed one."""
    shapes = []
    for spec in text.split(","):
        match = re.fullmatch(r"(\d+)x(\d+)k(\d+)", spec.strip())
        if not match or 0 in (values := tuple(int(v) for v in match.groups())):
            raise argparse.ArgumentTypeError(f"shape {spec!r} is not <channels>x<map size>k<kernel> of positive "
                                             f"integers, e.g. 224x7k1")
        shapes.append((spec.strip(), *values))
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", type=conv_shapes, default=DEFAULT_SHAPES,
                        help="comma-separated <channels>x<map size>k<kernel>, e.g. 224x7k1,64x28k3")
    args = parser.parse_args()

    from annette_torch import Estimator
    from annette_torch.backends import get_backend
    from annette_torch.backends.base import export_onnx
    from annette_torch.graph import trace

    backend = get_backend("openvino-cpu", threads=1)
    estimator = Estimator("openvino-cpu")
    bandwidth = estimator.profile.weight_bandwidth_bytes_s
    print(f"openvino-cpu, 1 thread; profile weight bandwidth {bandwidth / 1e9:.1f} GB/s, weight cache "
          f"{estimator.profile.weight_cache_bytes / 2 ** 20:.1f} MiB; per conv, median over {args.rounds} round(s)")
    print(f"{'shape':<11}{'KiB/conv':>9}{'pairs':>6}{'cached us':>11}{'memory us':>11}{'extra us':>10}"
          f"{'w/bw us':>9}{'extra/(w/bw)':>14}{'estimate us':>13}")
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for spec, channels, size, kernel in args.shapes:
            conv_bytes = 2 * channels * channels * kernel * kernel * 4
            pairs = max(2, min(MAX_PAIRS, round(TARGET_BYTES / (2 * conv_bytes))))
            shape = (1, channels, size, size)
            paths = {}
            for name, model in (("cached", SharedChain(channels, kernel, pairs)),
                                ("memory", distinct_chain(channels, kernel, pairs))):
                paths[name] = export_onnx(model.eval(), shape, Path(folder) / f"{spec}-{name}.onnx")
            times: dict[str, list[float]] = {"cached": [], "memory": []}
            for _ in range(args.rounds):
                for name in times:
                    times[name].append(float(np.median(conv_runs(backend, paths[name], shape))))
            cached, memory = (float(np.median(times[name])) * 1e3 for name in ("cached", "memory"))
            report = estimator.report(trace(distinct_chain(channels, kernel, pairs), input_shape=shape))
            estimate = float(report[report["kind"] == "conv"]["time_ms"].iloc[2:].median()) * 1e3
            floor = conv_bytes / bandwidth * 1e6
            print(f"{spec:<11}{conv_bytes / 2 ** 10:>9.0f}{pairs:>6}{cached:>11.1f}{memory:>11.1f}"
                  f"{memory - cached:>10.1f}{floor:>9.1f}{(memory - cached) / floor:>14.2f}{estimate:>13.1f}", flush=True)


if __name__ == "__main__":
    main()
