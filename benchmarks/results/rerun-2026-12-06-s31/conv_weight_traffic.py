"""Session 31: do convs inside networks run slower than the openvino-cpu profile says in
proportion to the weight bytes they read? One per-layer profile per network (openvino-cpu,
1 thread, 5 warm-up and 20 profiled inferences, median per kernel; kernels tied to the
estimator's as ``calibrate --for`` ties them, only convs tied one to one), against the
profile's estimate without its weights-from-memory floor, grouped by f/s: the conv's weight
bytes over the profile's weight bandwidth (f), over that estimate (s).

    python benchmarks/results/rerun-2026-12-06-s31/conv_weight_traffic.py torchvision:resnet18 ...

Per group: est/meas, and extra/f = (0.94 x measured - estimate) / f, the time the estimate
lacks per microsecond of weight traffic (0.94: about what OpenVINO's end-to-end run keeps
of a 0.1 ms profiled kernel, the profile's gap factor). Measures, prints a table, asserts
nothing.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from annette_torch import Estimator  # noqa: E402
from annette_torch.backends import get_backend  # noqa: E402
from annette_torch.calibration.in_context import tie_kernels  # noqa: E402
from annette_torch.calibration.matcher import match_kernels  # noqa: E402
from annette_torch.layer_models.base import COLUMN  # noqa: E402
from annette_torch.models_source import resolve_model, trace_model  # noqa: E402

EDGES = (0, 0.03, 0.1, 0.3, 10)


def main() -> None:
    backend = get_backend("openvino-cpu", threads=1)
    plain, full = Estimator("openvino-cpu", weights_from_memory=False), Estimator("openvino-cpu")
    bandwidth = plain.profile.weight_bandwidth_bytes_s
    for spec in sys.argv[1:]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolved, graph = resolve_model(spec), trace_model(spec, None)
            profiled = backend.profile(resolved.module.eval(), resolved.input_shapes[0],
                                       [layer.module_path for layer in graph.layers], warmup=5, repeats=20)
        times = plain.kernel_times(graph)
        tied, ties, _ = tie_kernels(times.table, match_kernels(graph, profiled.kernels), times.time_ms,
                                    backend.output_reorders)
        weight_ms = times.table.features[:, COLUMN["weight_elems"]] * 4 / bandwidth * 1e3
        use = (np.array(times.table.kinds) == "conv") & (np.array(ties) == "exact") & ~np.isnan(tied)
        estimate, measured, traffic = times.time_ms[use], tied[use], weight_ms[use]
        regime = "memory" if full.table_reads_weights_from_memory(times.table) else "cached"
        line = (f"{spec:34s} {regime} convs {use.sum():3d} measured {measured.sum():6.2f} ms, estimate "
                f"{estimate.sum():6.2f} ({estimate.sum() / measured.sum():.2f}) |")
        for low, high in zip(EDGES[:-1], EDGES[1:]):
            group = (traffic / estimate >= low) & (traffic / estimate < high)
            if group.any():
                extra = (0.94 * measured[group].sum() - estimate[group].sum()) / traffic[group].sum()
                line += (f" f/s {low}-{high}: {group.sum():2d}, est/meas "
                         f"{estimate[group].sum() / measured[group].sum():.2f}, extra/f {extra:+.2f} |")
        print(line, flush=True)


if __name__ == "__main__":
    main()
