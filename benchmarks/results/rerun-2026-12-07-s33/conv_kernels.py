"""Session 33: one network's dense convs profiled in context on openvino-cpu (1 thread, 5 warm-up and
20 profiled inferences, median per kernel) against a profile's estimates, one row per conv with its
weight bytes. Measures; prints a table, asserts nothing.

    python benchmarks/results/rerun-2026-12-07-s33/conv_kernels.py torchvision:regnet_x_400mf [--profile P]
"""
from __future__ import annotations

import argparse
import warnings

from annette_torch import Estimator
from annette_torch.backends import get_backend
from annette_torch.calibration.in_context import tie_kernels
from annette_torch.calibration.matcher import match_kernels
from annette_torch.models_source import resolve_model, trace_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--profile", default="openvino-cpu")
    args = parser.parse_args()
    backend = get_backend("openvino-cpu", threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolved, graph = resolve_model(args.spec), trace_model(args.spec, None)
        profiled = backend.profile(resolved.module.eval(), resolved.input_shapes[0],
                                   [layer.module_path for layer in graph.layers], warmup=5, repeats=20)
    layers = {layer.name: layer for layer in graph.layers}
    times = Estimator(args.profile).kernel_times(graph)
    tied, _, _ = tie_kernels(times.table, match_kernels(graph, profiled.kernels), times.time_ms, backend.output_reorders)
    print(f"{args.spec}: end to end {profiled.latency.median_ms:.3f} ms, estimate {times.time_ms.sum():.3f} ms")
    for name, kind, estimate, measured in zip(times.table.names, times.table.kinds, times.time_ms, tied):
        layer = layers.get(name)
        if kind != "conv" or layer is None or layer.attrs.get("groups") != 1:
            continue
        k, stride = layer.attrs["kernel_size"][0], layer.attrs["stride"][0]
        c, (_, f, h, _) = layer.input_shapes[0][1], layer.output_shapes[0]
        print(f"{name:40s} k{k} s{stride} {c:5d}->{f:5d} @{h:3d}  weights {c * f * k * k * 4 / 1024:7.0f} KB  "
              f"estimate {estimate:7.3f}  measured {measured:7.3f} ms  ratio {measured / estimate:5.2f}")


if __name__ == "__main__":
    main()
