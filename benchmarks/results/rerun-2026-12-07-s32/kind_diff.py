"""Session 32: how two profiles' estimates differ, per kernel kind summed over networks and
per network (the 12 that move most). Estimates only; measures nothing.

    python benchmarks/results/rerun-2026-12-07-s32/kind_diff.py OLD_PROFILE NEW_PROFILE SPEC [SPEC ...]

OLD_PROFILE and NEW_PROFILE are profile names or .json paths; SPEC as ``annette-torch
estimate`` takes them (torchvision:resnet50, timm:ghostnet_050). Networks that fail to trace
are left out.
"""
from __future__ import annotations

import collections
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from annette_torch import Estimator  # noqa: E402
from annette_torch.models_source import trace_model  # noqa: E402


def main() -> None:
    warnings.simplefilter("ignore")
    old, new = Estimator(sys.argv[1]), Estimator(sys.argv[2])
    per_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    per_network = {}
    for spec in sys.argv[3:]:
        try:
            graph = trace_model(spec, None)
        except Exception:  # noqa: BLE001 - a network that does not trace is left out
            continue
        before, after = old.kernel_times(graph), new.kernel_times(graph)
        per_network[spec] = (before.total_ms, after.total_ms)
        for column, times in ((0, before), (1, after)):
            for kind, ms in zip(times.table.kinds, times.time_ms):
                per_kind[kind][column] += ms
    for kind, (x, y) in sorted(per_kind.items(), key=lambda item: -abs(item[1][1] - item[1][0])):
        if abs(y - x) > 1e-3:
            print(f"{kind:20s} {x:9.3f} {y:9.3f} {100 * (y / x - 1) if x else 0:+6.1f}%")
    for spec, (x, y) in sorted(per_network.items(), key=lambda item: -abs(item[1][1] / item[1][0] - 1))[:12]:
        print(f"{spec:40s} {x:8.3f} {y:8.3f} {100 * (y / x - 1):+6.2f}%")


if __name__ == "__main__":
    main()
