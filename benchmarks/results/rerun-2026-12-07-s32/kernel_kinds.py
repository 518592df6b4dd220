"""Session 32: one network's per-layer profile on openvino-cpu against the shipped profile's
estimate, summed per kernel kind (kernels tied to the estimator's as ``calibrate --for`` ties
them; 5 warm-up and 20 profiled inferences, median per kernel). Measures; prints a table,
asserts nothing.

    python benchmarks/results/rerun-2026-12-07-s32/kernel_kinds.py torchvision:shufflenet_v2_x1_0 [--threads 2]

At 2 threads the estimate is the ``openvino-cpu-2t`` profile's.
"""
from __future__ import annotations

import argparse
import collections
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from annette_torch import Estimator  # noqa: E402
from annette_torch.backends import get_backend  # noqa: E402
from annette_torch.calibration.in_context import tie_kernels  # noqa: E402
from annette_torch.calibration.matcher import match_kernels  # noqa: E402
from annette_torch.models_source import resolve_model, trace_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--threads", type=int, choices=(1, 2), default=1)
    args = parser.parse_args()
    backend = get_backend("openvino-cpu", threads=args.threads)
    estimator = Estimator("openvino-cpu" if args.threads == 1 else "openvino-cpu-2t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolved, graph = resolve_model(args.spec), trace_model(args.spec, None)
        profiled = backend.profile(resolved.module.eval(), resolved.input_shapes[0],
                                   [layer.module_path for layer in graph.layers], warmup=5, repeats=20)
    times = estimator.kernel_times(graph)
    tied, _, _ = tie_kernels(times.table, match_kernels(graph, profiled.kernels), times.time_ms,
                             backend.output_reorders)
    print(f"{args.spec} on openvino-cpu, {args.threads} thread(s): estimate {times.time_ms.sum():.3f} ms, "
          f"tied kernels {np.nansum(tied):.3f} ms")
    per_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for kind, estimate, measured in zip(times.table.kinds, times.time_ms, tied):
        per_kind[kind][0] += 1
        per_kind[kind][1] += estimate
        per_kind[kind][2] += 0.0 if np.isnan(measured) else measured
    print(f"{'kind':20s}{'kernels':>8}{'estimate ms':>13}{'measured ms':>13}")
    for kind, (count, estimate, measured) in sorted(per_kind.items(), key=lambda item: -item[1][1]):
        print(f"{kind:20s}{count:8d}{estimate:13.3f}{measured:13.3f}")


if __name__ == "__main__":
    main()
