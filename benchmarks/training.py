"""How accurate is the training-step estimate? ``Estimator(profile).training_step`` against
the median time of real PyTorch CPU training steps of torchvision models (a benchmark:
prints tables, asserts nothing).

    python benchmarks/training.py [--profile torch-cpu-train] [--batches 8,32] [--models a,b]
        [--optimizer sgd] [--threads 1] [--remeasure] [--json FILE]

A step is forward (train mode) + loss + backward + optimizer step on a random batch at
224x224, timed by ``TorchCpuTrain.measure_step`` (warm-up steps, then the median of the
timed ones, threads pinned, malloc pinned as in calibration). Measurements are kept in
``benchmarks/results/<fingerprint folder>/training-measured.csv`` (one row per model,
batch and optimizer; a rerun only measures what is missing unless ``--remeasure``; the
newest row wins), so rerunning re-scores the recorded steps.

Baselines: ``flops`` (step = scale * forward FLOPs, the scale fitted in-sample as the
geometric mean of measured / FLOPs: optimistic) and ``3x inference`` (the rule of thumb
that a training step costs three forward passes: 3 x the ``torch-cpu`` inference
estimate at the same batch).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torchvision

sys.path.insert(0, str(Path(__file__).parent))
from accuracy import RESULTS_ROOT, measuring_lock, metrics, results_folder  # noqa: E402

from annette_torch import Estimator, trace  # noqa: E402
from annette_torch.backends import get_backend  # noqa: E402
from annette_torch.kinds import FEATURES  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
          "shufflenet_v2_x1_0", "squeezenet1_0", "mnasnet1_0", "efficientnet_b0", "regnet_x_400mf",
          "regnet_y_400mf", "googlenet", "densenet121", "alexnet")
COLUMNS = ("network", "batch", "optimizer", "median_ms", "spread", "repeats", "measured_at")
MEASURED_FILE = "training-measured.csv"


def build(name: str):
    """The torchvision model ``name`` (random weights) in train mode; GoogLeNet without its
    auxiliary classifiers, which torchvision only adds for training from scratch."""
    options = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return torchvision.models.get_model(name, weights=None, **options).train()


def read_measured(folder: Path) -> pd.DataFrame:
    path = folder / MEASURED_FILE
    if not path.exists():
        return pd.DataFrame(columns=COLUMNS)
    return pd.read_csv(path).drop_duplicates(["network", "batch", "optimizer"], keep="last")


def measure(models: list[str], batches: list[int], optimizer: str, threads: int, remeasure: bool) -> pd.DataFrame:
    """Measure the missing (model, batch) steps into the results folder; all recorded rows.
    This process measures as a campaign's worker does: malloc pinned by the backend's
    ``prepare_process``, as for the calibration that the estimate comes from."""
    backend = get_backend("torch-cpu-train", threads=threads)
    backend.prepare_process()
    folder = results_folder(RESULTS_ROOT, backend.fingerprint())
    done = read_measured(folder)
    have = set(zip(done["network"], done["batch"], done["optimizer"]))
    with measuring_lock(RESULTS_ROOT):
        for batch in batches:
            for name in models:
                if (name, batch, optimizer) in have and not remeasure:
                    continue
                warmup, repeats = (2, 7) if batch <= 8 else (1, 5)
                latency = backend.measure_step(build(name), (batch, 3, 224, 224), optimizer, warmup, repeats)
                row = {"network": name, "batch": batch, "optimizer": optimizer,
                       "median_ms": round(latency.median_ms, 3), "spread": round(latency.spread, 4),
                       "repeats": repeats, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                path = folder / MEASURED_FILE
                pd.DataFrame([row], columns=COLUMNS).to_csv(path, mode="a", header=not path.exists(), index=False)
                print(f"  measured {name} batch {batch}: {latency.median_ms:.0f} ms (spread {latency.spread:.3f})",
                      flush=True)
    return read_measured(folder)


def evaluate(profile: str, measured: pd.DataFrame, optimizer: str) -> pd.DataFrame:
    """One row per measured step: measured, estimated and the two baselines (ms)."""
    estimator = Estimator(profile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inference = Estimator("torch-cpu")
    rows = []
    for net in measured[measured["optimizer"] == optimizer].itertuples():
        graph = trace(build(net.network), input_shape=(int(net.batch), 3, 224, 224), name=net.network)
        flops = float(graph.features[:, FEATURES.index("ops")].sum())
        rows.append({"network": net.network, "batch": int(net.batch), "measured_ms": net.median_ms,
                     "spread": net.spread, "estimated_ms": estimator.training_step(graph, optimizer),
                     "optimizer_ms": estimator.optimizer_step(graph, optimizer),
                     "3x_inference_ms": 3 * inference(graph), "flops": flops})
    frame = pd.DataFrame(rows)
    scale = np.exp(np.mean(np.log(frame["measured_ms"] / frame["flops"])))
    return frame.assign(flops_ms=frame["flops"] * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="torch-cpu-train")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="8,32")
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--remeasure", action="store_true")
    parser.add_argument("--json", default=str(RESULTS_ROOT / "training.json"))
    args = parser.parse_args()
    models, batches = args.models.split(","), [int(b) for b in args.batches.split(",")]
    measured = measure(models, batches, args.optimizer, args.threads, args.remeasure)
    measured = measured[measured["network"].isin(models) & measured["batch"].isin(batches)]
    frame = evaluate(args.profile, measured, args.optimizer)
    pd.set_option("display.width", 200)
    print(frame.assign(error_pct=100 * (frame["estimated_ms"] / frame["measured_ms"] - 1))
          .drop(columns="flops").round(1).to_string(index=False))
    summary = {}
    for label, rows in [*((f"batch {b}", frame[frame["batch"] == b]) for b in batches), ("all", frame)]:
        summary[label] = {variant: metrics(rows["measured_ms"], rows[column])
                          for variant, column in (("training_step", "estimated_ms"), ("3x_inference", "3x_inference_ms"),
                                                  ("flops", "flops_ms"))}
    print(f"\nprofile {args.profile}, optimizer {args.optimizer}: MAPE % / within +-10 % / Spearman")
    for label, variants in summary.items():
        print(f"  {label:9s} " + "   ".join(f"{v}: {m['mape']:.1f} / {m['within10']:.0f} / {m['spearman']:.3f}"
                                        for v, m in variants.items()))
    Path(args.json).write_text(json.dumps({"profile": args.profile, "optimizer": args.optimizer,
                                           "summary": summary, "rows": frame.to_dict("records")}, indent=1) + "\n")


if __name__ == "__main__":
    main()
