"""Dilated, padded convolutions: which taps each runtime computes (a benchmark: prints a
table, asserts nothing).

    python benchmarks/dilated_convs.py [--no-time] [--rounds 3]

annette_torch counts a dilated conv's ops over the taps that read its input, not its
padding (``annette_torch/kinds/conv.py``). Per convolution (DeepLabV3's atrous pyramid at
320x320 and 520x520 inputs, dilated backbone convs) the table shows that share of the
taps (``inside``), the oneDNN implementation eager PyTorch picks on this machine (read from
``ONEDNN_VERBOSE`` in a child process: ``jit`` kernels skip the padding, ``gemm`` is
im2col + GEMM and computes every tap), the times measured on torch-cpu and openvino-cpu
(1 thread, the measuring protocol, interleaved rounds, p10) and the shipped profiles'
estimates. The findings are in docs/accuracy.md (session 14).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from annette_torch import Estimator, trace  # noqa: E402
from annette_torch.backends import get_backend  # noqa: E402
from annette_torch.kinds.conv import _taps_inside  # noqa: E402
from annette_torch.measure.networks import measure_networks  # noqa: E402
from annette_torch.measure.protocol import Protocol  # noqa: E402

#: (name, in channels, out channels, groups, kernel, map size, dilation)
CONVS = (
    ("aspp 320 d1 (reference)", 960, 256, 1, 3, 20, 1),
    ("aspp 320 d12", 960, 256, 1, 3, 20, 12),
    ("aspp 320 d24", 960, 256, 1, 3, 20, 24),
    ("aspp 320 d36", 960, 256, 1, 3, 20, 36),
    ("aspp 520 d12", 960, 256, 1, 3, 33, 12),
    ("aspp 520 d24", 960, 256, 1, 3, 33, 24),
    ("resnet d2 65x65", 256, 256, 1, 3, 65, 2),
    ("resnet d4 33x33", 512, 512, 1, 3, 33, 4),
    ("mbv3 dw5 d2 20x20", 672, 672, 672, 5, 20, 2),
    ("dw3 d12 40x40", 128, 128, 128, 3, 40, 12),
)


def conv_of(c: int, f: int, groups: int, k: int, dilation: int) -> nn.Module:
    return nn.Conv2d(c, f, k, padding=dilation * (k - 1) // 2, dilation=dilation, groups=groups, bias=False).eval()


_PROBE = """
import json, sys, torch
torch.set_num_threads(1)
for c, f, g, k, h, d in json.loads(sys.argv[1]):
    print("PROBE", flush=True)
    with torch.no_grad():
        torch.nn.Conv2d(c, f, k, padding=d * (k - 1) // 2, dilation=d, groups=g, bias=False).eval()(
            torch.randn(1, c, h, h))
    sys.stdout.flush()
"""


def onednn_implementations(convs) -> list[str]:
    """The oneDNN implementation eager PyTorch runs each conv with, one child process with
    ``ONEDNN_VERBOSE=1`` (this process's environment is left alone)."""
    args = json.dumps([[c, f, g, k, h, d] for _, c, f, g, k, h, d in convs])
    out = subprocess.run([sys.executable, "-c", _PROBE, args], capture_output=True, text=True, check=True,
                         env=dict(os.environ, ONEDNN_VERBOSE="1")).stdout
    found: list[str] = []
    for block in out.split("PROBE\n")[1:]:
        lines = [line for line in block.splitlines() if ",exec," in line and ",convolution," in line]
        found.append(lines[0].split(",")[6] if lines else "(not oneDNN)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-time", action="store_true", help="only the implementations and the estimates")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    implementations = onednn_implementations(CONVS)
    profiles = {name: Estimator(name) for name in ("torch-cpu", "openvino-cpu")}
    measured: dict[str, dict[str, float]] = {name: {} for name in profiles}
    if not args.no_time:
        items = [(name, (lambda c=c, f=f, g=g, k=k, d=d: conv_of(c, f, g, k, d)), (1, c, h, h))
                 for name, c, f, g, k, h, d in CONVS]
        for backend_name in profiles:
            session = measure_networks(get_backend(backend_name, threads=1), items, Protocol(rounds=args.rounds))
            measured[backend_name] = {key: m.time_ms for key, m in session.measured.items()}
            print(f"{backend_name}: {session.report()}", file=sys.stderr)
    print(f"{'conv':24s} {'inside':>6s} {'oneDNN (eager torch)':22s} {'torch ms':>9s} {'est':>7s} "
          f"{'openvino ms':>11s} {'est':>7s}")
    for (name, c, f, g, k, h, d), implementation in zip(CONVS, implementations):
        layer = nn.Sequential(conv_of(c, f, g, k, d))
        attrs = {"kernel_size": (k, k), "stride": (1, 1), "padding": (d * (k - 1) // 2,) * 2, "dilation": (d, d)}
        inside = _taps_inside((h, h), (h, h), attrs) / (h * h * k * k)
        graph = trace(layer, input_shape=(1, c, h, h))
        cells = []
        for profile_name, est in profiles.items():
            time = measured[profile_name].get(name)
            cells.append(f"{time:9.3f}" if time is not None else f"{'-':>9s}")
            cells.append(f"{est(graph):7.3f}")
        print(f"{name:24s} {inside:6.2f} {implementation:22s} {cells[0]} {cells[1]} {cells[2]:>11s} {cells[3]}")


if __name__ == "__main__":
    main()
