"""Session 30: what the matcher ties to the estimator's kernels with and without the ONNX
nodes' op types and places (``KernelRecord.nodes``), on one per-layer profile per network
(openvino-cpu, 1 thread, 5 warm-up and 30 profiled inferences, median per kernel).

    python benchmarks/results/rerun-2026-12-06-s30/matcher_nodes.py timm:mobilenetv3_small_050 ...

Per network: the milliseconds tied to no kernel of the estimator (layers the runtime's
kernels were given to that the estimator counts as free, and kernels of no layer), and per
kernel kind the time tied to it against the profile's estimate, both ways. Measures (one
profile per network), prints a table, asserts nothing.
"""
from __future__ import annotations

import sys
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from annette_torch import Estimator  # noqa: E402
from annette_torch.backends import KernelRecord, get_backend  # noqa: E402
from annette_torch.calibration.in_context import tie_kernels  # noqa: E402
from annette_torch.calibration.matcher import match_kernels  # noqa: E402
from annette_torch.measure.protocol import statistic_ms  # noqa: E402
from annette_torch.models_source import resolve_model, trace_model  # noqa: E402


def main() -> None:
    backend = get_backend("openvino-cpu", threads=1)
    estimator = Estimator("openvino-cpu")
    for spec in sys.argv[1:]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolved = resolve_model(spec)
            graph = trace_model(spec, None)
            profiled = backend.profile(resolved.module.eval(), resolved.input_shapes[0],
                                       [layer.module_path for layer in graph.layers], warmup=5, repeats=30)
        times = estimator.kernel_times(graph)
        plain = [KernelRecord(k.name, k.kernel_type, k.exec_type, k.status, k.runs_ms, k.layers)
                 for k in profiled.kernels]
        print(f"\n{spec}: profiled kernels {sum(statistic_ms(k.runs_ms, 'median') for k in profiled.kernels if k.status == 'EXECUTED'):.3f} ms, estimate {times.time_ms.sum():.3f} ms")
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        untied = []
        for column, kernels in ((0, plain), (1, profiled.kernels)):
            tied, _, rest = tie_kernels(times.table, match_kernels(graph, kernels), times.time_ms,
                                        backend.output_reorders)
            untied.append(rest)
            for k, kind in enumerate(times.table.kinds):
                if not times.table.free[k]:
                    sums[kind][column] += 0.0 if tied[k] != tied[k] else float(tied[k])
                    if column == 0:
                        sums[kind][2] += float(times.time_ms[k])
        print(f"  tied to no kernel: {untied[0]:.3f} ms by module path alone, {untied[1]:.3f} ms with the nodes")
        print(f"  {'kind':<22}{'path alone':>12}{'with nodes':>12}{'estimate':>10}")
        for kind, (old, new, est) in sorted(sums.items(), key=lambda item: -item[1][2]):
            if abs(old - new) > 1e-4 or est > 0.05 * times.time_ms.sum():
                print(f"  {kind:<22}{old:>12.3f}{new:>12.3f}{est:>10.3f}")


if __name__ == "__main__":
    main()
