"""How long must a new machine be calibrated? Accuracy on the accuracy benchmark's
networks against the number of calibration benchmarks the profile was fitted on (a
benchmark: prints a table, asserts nothing).

    python benchmarks/learning_curve.py --backend openvino-cpu --threads 1 \
        [--samples 250,500,1000,2000,4000,all] [--seed 0] [--plot FILE.png] [--json FILE]

For each size N the backend's committed store (``calibration/data``) is subsampled to N
benchmarks drawn at random (a campaign run with ``--minutes`` measures a random part
of the shuffled sweep), a profile is fitted exactly as ``annette-torch fit --sample N``
does, and it estimates the networks whose end-to-end latency ``benchmarks/accuracy.py``
recorded on this machine (run that first). "measuring min" is the summed measuring time
of the N benchmarks: what the calibration campaign would have cost.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import warnings
from pathlib import Path

from annette_torch.backends import get_backend
from annette_torch.calibration.store import fingerprint_folder
from annette_torch.fit import fit_profile

ROOT = Path(__file__).resolve().parents[1]


def _accuracy_module():
    spec = importlib.util.spec_from_file_location("accuracy", Path(__file__).with_name("accuracy.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["accuracy"] = module          # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def learning_curve(backend: str, threads: int, sizes: list[int | None], seed: int, sets: list[str]) -> list[dict]:
    """One row per size: benchmarks used, measuring minutes, and the mixed+map metrics per set."""
    accuracy = _accuracy_module()
    fingerprint = get_backend(backend, threads=threads).fingerprint()
    store = ROOT / "calibration" / "data" / fingerprint_folder(fingerprint)
    source = accuracy.results_folder(accuracy.RESULTS_ROOT, fingerprint)
    measured, statistic = accuracy.ground_truth(source)
    if measured.empty:
        raise SystemExit(f"no measurements in {source}; run benchmarks/accuracy.py --backend {backend} first")
    nets = accuracy.networks(sets)
    graphs: dict = {}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                profile = fit_profile(store, sample=size, seed=seed)
            path = profile.save(Path(folder) / f"{size}.json")
            summary = accuracy.evaluate(str(path), nets, measured, graphs, statistic=statistic)
            metrics = profile.fit_metrics
            rows.append({"benchmarks": metrics["split"]["train_benchmarks"] + metrics["split"]["test_benchmarks"],
                         "measuring_min": metrics["measuring_s"] / 60,
                         "sets": {name: table["mixed+map"] for name, table in summary["sets"].items()
                                  if "mixed+map" in table}})
    print(f"measurements: {source}; store: {store}")
    return rows


def print_table(rows: list[dict]) -> None:
    sets = list(rows[0]["sets"])
    header = f"{'benchmarks':>10}{'measuring min':>15}" + "".join(f"{s + ' MAPE %':>16}{'±10 %':>7}{'rho':>7}" for s in sets)
    print("\nmixed + mapping, fitted on a random sample of the store\n" + header)
    for row in rows:
        cells = "".join(f"{row['sets'][s]['mape']:16.1f}{row['sets'][s]['within10']:7.0f}{row['sets'][s]['spearman']:7.3f}"
                        for s in sets)
        print(f"{row['benchmarks']:>10}{row['measuring_min']:15.1f}" + cells)


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    minutes = [row["measuring_min"] for row in rows]
    for name in rows[0]["sets"]:
        ax.plot(minutes, [row["sets"][name]["mape"] for row in rows], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xticks(minutes, [f"{m:.0f}" if m >= 10 else f"{m:.1f}" for m in minutes])
    ax.minorticks_off()
    ax.set_xlabel("calibration measuring time (min)")
    ax.set_ylabel("MAPE of mixed + mapping (%)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="openvino-cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samples", default="250,500,1000,2000,4000,all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", default="zoo,nb201")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [None if s == "all" else int(s) for s in args.samples.split(",")]
    rows = learning_curve(args.backend, args.threads, sizes, args.seed, args.sets.split(","))
    print_table(rows)
    if args.plot:
        plot(rows, args.plot, f"{args.backend}, {args.threads} thread(s)")
        print(f"wrote {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
