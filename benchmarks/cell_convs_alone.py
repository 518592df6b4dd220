"""Do a NAS-Bench-201 network's convs take the time they take alone? Each stride-1 conv
of a cell network profiled inside the network against the same conv (same channels, map,
kernel, batch norm folded) profiled alone, once reading a conv's output
(``conv_in_context``) and once reading the network input (``conv_chain``), all with the
runtime's per-kernel profiler in this process (a benchmark: prints a table, asserts
nothing; about 10 seconds).

    python benchmarks/cell_convs_alone.py [--backend openvino-cpu] [--repeats 30] [ARCH ...]

Per conv shape: the median over its occurrences in the network of the kernel's median
time, and how many of them had another layer fused into them (a node's add or ReLU),
which the conv alone does not have. Times are the profiler's (microsecond ticks: convs
under 10 µs are a few ticks).
"""
from __future__ import annotations

import argparse
import statistics
import warnings

import torch
from torch import nn

from annette_torch.backends import get_backend
from annette_torch.calibration import BenchmarkSpec, build_benchmark
from annette_torch.nas.nasbench201 import NB201Network

#: cells of 3x3 convs only, and of 1x1 convs only
ARCHS = ("|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|",
         "|nor_conv_1x1~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_1x1~1|nor_conv_1x1~2|")


def conv_kernels(backend, model: nn.Module, shape: tuple[int, ...], repeats: int) -> tuple[dict, float]:
    """({first layer: (median ms, layers computed)} of the executed conv kernels, end-to-end median ms)."""
    paths = [name for name, _ in model.named_modules() if name]
    profiled = backend.profile(model, shape, paths, warmup=5, repeats=repeats)
    kernels = {k.layers[0]: (statistics.median(k.runs_ms), len(k.layers)) for k in profiled.kernels
               if k.kernel_type == "Convolution" and k.status == "EXECUTED" and k.layers}
    return kernels, profiled.latency.median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archs", nargs="*", default=list(ARCHS))
    parser.add_argument("--backend", default="openvino-cpu")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    warnings.simplefilter("ignore")          # ONNX export warnings
    backend = get_backend(args.backend, threads=1)
    for arch in args.archs:
        network = NB201Network(arch).eval()
        modules = dict(network.named_modules())
        inputs: dict[str, tuple[int, ...]] = {}
        hooks = [m.register_forward_hook(lambda m, i, o, name=name: inputs.__setitem__(name, tuple(i[0].shape)))
                 for name, m in modules.items() if isinstance(m, nn.Conv2d)]
        with torch.no_grad():
            network(torch.randn(1, 3, 32, 32))
        for hook in hooks:
            hook.remove()
        kernels, latency = conv_kernels(backend, network, (1, 3, 32, 32), args.repeats)
        shapes: dict[tuple[int, int, int, int], list[tuple[float, int]]] = {}
        for name, (ms, layers) in kernels.items():
            conv = modules.get(name)
            if isinstance(conv, nn.Conv2d) and conv.groups == 1 and conv.stride == (1, 1) and conv.in_channels >= 8:
                key = (conv.in_channels, conv.out_channels, conv.kernel_size[0], inputs[name][2])
                shapes.setdefault(key, []).append((ms, layers))
        print(f"{arch}: {latency:.3f} ms end to end")
        print("  c    f   k   h  convs  fused  in network ms  alone in context  alone reading input  network / in context")
        for (c, f, k, h), found in sorted(shapes.items()):
            alone = {}
            for family in ("conv_in_context", "conv_chain"):
                model, shape = build_benchmark(BenchmarkSpec(family, {"h": h, "c": c, "f": f, "k": k, "op": "bn"}))
                alone[family] = conv_kernels(backend, model, shape, args.repeats)[0]["conv"][0]
            inside = statistics.median(ms for ms, _ in found)
            fused = sum(layers > 2 for _, layers in found)      # conv + its batch norm, and more
            print(f"{c:3d} {f:4d} {k:3d} {h:3d} {len(found):6d} {fused:6d} {inside:14.4f} "
                  f"{alone['conv_in_context']:17.4f} {alone['conv_chain']:20.4f} "
                  f"{inside / alone['conv_in_context']:21.2f}")


if __name__ == "__main__":
    main()
