"""What a channel concat and a max pool cost on OpenVINO's CPU plugin, by context: inside
a network (a 1x1 conv reads the result) or at its output, and with the joined channel
counts multiples of 16 or not.

    python benchmarks/concat_context.py [--h 54] [--runs 200]

Each probe is two parallel convs (c=32 -> f channels each, ReLU) joined by a concat, or one
conv (-> 2f channels) followed by a 3x3/2 ceil-mode max pool (SqueezeNet's); with
``consumer`` a 1x1 conv to 32 channels reads the concat or pool. Compiled as the
openvino-cpu backend compiles (1 thread, f32, LATENCY, performance counters on), run
``--runs`` times through the backend's per-layer profile; the table gives the median of
the concat's (pool's) own counter, its exec type, and nanoseconds per output element (per
input element for pools). The calibration store's concats (``branch_concat``) sit at a
benchmark's output with channel counts drawn at random; real networks join multiples of 8
or 16 inside the network. On the profiles' Zen 4 (2026-12-06) neither changed the cost
(docs/accuracy.md, session 24).
A benchmark: prints a table, asserts nothing.
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

WIDTHS = (32, 48, 64, 128, 33, 40, 50, 100)


class Probe(nn.Module):
    """``concat``: two convs joined; ``pool``: a conv then a max pool; ``consumer``: a
    1x1 conv reads the joined or pooled map."""

    def __init__(self, kind: str, f: int, consumer: bool) -> None:
        super().__init__()
        self.kind, self.consumer = kind, consumer
        self.a = nn.Conv2d(32, f if kind == "concat" else 2 * f, 1)
        self.b = nn.Conv2d(32, f, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.out = nn.Conv2d(2 * f, 32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "concat":
            y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], 1)
        else:
            y = self.pool(torch.relu(self.a(x)))
        return self.out(y) if self.consumer else y


def probe_time(kind: str, f: int, h: int, consumer: bool, runs: int) -> tuple[float, str]:
    """Median over ``runs`` of the probe's concat (or pool) counter in ms, and its exec type."""
    from annette_torch.backends import get_backend
    from annette_torch.backends.base import export_onnx

    node_types = {"Concat"} if kind == "concat" else {"MaxPool", "Pooling"}
    x = np.random.default_rng(0).random((1, 32, h, h), dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(folder) / "probe.onnx"
        export_onnx(Probe(kind, f, consumer).eval(), (1, 32, h, h), path)
        kernels = get_backend("openvino-cpu", threads=1).profile_onnx(path, x, warmup=0, repeats=runs)
    times, exec_type = [], "absent"
    for kernel in kernels:
        if kernel.kernel_type in node_types:
            times += kernel.runs_ms
            exec_type = f"{kernel.exec_type}:{kernel.status}"
    return (float(np.median(times)) if times else 0.0), exec_type


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--h", type=int, default=54)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"{'probe':<8}{'f':>5}{'c%16':>7}{'context':>10}{'ms':>9}{'ns/elem':>9}  exec type")
    for kind in ("concat", "pool"):
        for f in WIDTHS:
            for consumer in (True, False):
                ms, exec_type = probe_time(kind, f, args.h, consumer, args.runs)
                elems = 2 * f * args.h * args.h
                channels = f if kind == "concat" else 2 * f      # each joined input's; the pooled map's
                print(f"{kind:<8}{f:>5}{channels % 16:>7}{'network' if consumer else 'output':>10}{ms:>9.4f}"
                      f"{ms / elems * 1e6:>9.3f}  {exec_type}")


if __name__ == "__main__":
    main()
