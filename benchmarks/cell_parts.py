"""Which parts of NAS-Bench-201 cell networks does a profile get wrong? The measured times
of an accuracy results file's ``nb201`` networks, fitted (non-negative least squares) as a
sum of the profile's estimates of each part times a factor (a benchmark: prints a table,
measures nothing).

    python benchmarks/cell_parts.py --profile P --results benchmarks/results/accuracy-P.json

Parts: the normal cells' kernels by kind (convs by kernel size), and ``fixed`` (the stem,
the two reduction blocks, the head and the per-inference overhead, the same in every
network). A factor below 1 means the profile estimates that part slower than it runs; the
factors are fitted in sample, on the networks they then describe.
"""
from __future__ import annotations

import argparse
import json
import warnings
from collections import defaultdict

import numpy as np
from scipy.optimize import nnls

from annette_torch import Estimator, trace
from annette_torch.nas.nasbench201 import NB201Network, ResNetReduction


def parts_ms(est: Estimator, arch: str) -> dict[str, float]:
    """``est``'s estimate (ms) of the NAS-Bench-201 network of ``arch``, split into parts."""
    model = NB201Network(arch).eval()
    reductions = {str(i) for i, block in enumerate(model.cells) if isinstance(block, ResNetReduction)}
    graph = trace(model, input_shape=(1, 3, 32, 32))
    report = est.report(graph)
    parts: dict[str, float] = defaultdict(float)
    parts["fixed"] = report.attrs["total_ms"] - float(report["time_ms"].sum())
    for kernel, kind, path, ms in zip(report["kernel"], report["kind"], report["module_path"], report["time_ms"]):
        scope = path.split(".")
        if scope[0] != "cells" or len(scope) < 2 or scope[1] in reductions:
            parts["fixed"] += ms
        elif kind == "conv":
            k = graph[kernel].counts.dims.get("kh")
            parts[f"conv {k}x{k}"] += ms
        else:
            parts[kind] += ms
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="profile name or .json path")
    parser.add_argument("--results", required=True, help="an accuracy.py --json file with nb201 rows")
    args = parser.parse_args()
    rows = [r for r in json.load(open(args.results))["rows"] if r["set"] == "nb201"]
    if not rows:
        raise SystemExit(f"{args.results} has no nb201 networks")
    est = Estimator(args.profile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        split = [parts_ms(est, r["network"]) for r in rows]
    names = sorted({name for parts in split for name in parts if parts[name] > 0})
    a = np.array([[parts.get(name, 0.0) for name in names] for parts in split])
    measured = np.array([r["measured_ms"] for r in rows])
    factors, _ = nnls(a / measured[:, None], np.ones(len(rows)))     # least squares on relative errors
    print(f"{args.profile} on {len(rows)} NAS-Bench-201 networks of {args.results}")
    print(f"{'part':<18}{'share of estimate':>18}{'factor':>8}")
    for name, share, factor in zip(names, a.sum(0) / a.sum(), factors):
        print(f"{name:<18}{100 * share:17.1f}%{factor:8.2f}")
    print(f"MAPE {100 * np.mean(np.abs(a.sum(1) / measured - 1)):.1f} % as estimated, "
          f"{100 * np.mean(np.abs(a @ factors / measured - 1)):.1f} % with the factors (in sample)")


if __name__ == "__main__":
    main()
