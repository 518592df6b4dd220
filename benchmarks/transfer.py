"""Prediction for unseen devices, leave one device out (a benchmark: prints tables,
asserts nothing, measures nothing).

    python benchmarks/transfer.py [--seeds 20] [--ks 0,5,10,20] [--out benchmarks/results/transfer]
    python benchmarks/transfer.py --score PROFILE.json --target openvino-cpu-bf16

Devices: the device configurations measured by ``benchmarks/accuracy.py`` on this
machine (OpenVINO CPU 1 and 2 threads f32, OpenVINO CPU 1 thread bf16, ONNX Runtime CPU,
PyTorch CPU; each 22 torchvision + 49 NAS-Bench-201 networks, read from
``benchmarks/results/<fingerprint folder>/measured.csv``). For each target device, each
built-in profile of another device is a source:

* k = 0: the source profile unchanged, and ``descriptor``: the zero-shot profile
  :func:`annette_torch.transfer.profile_from_descriptor` builds from the target's
  descriptor and the nearest source (descriptors: ``LOCAL_DESCRIPTORS``).
* k = 5, 10, 20: k of the target's measured networks drawn by seed (stratified as the
  reference pool of ``annette-torch adapt`` is: torchvision networks below 1.2 GFLOPs,
  the larger ones, NAS-Bench-201 networks), the source adapted to them (:func:`annette_torch.transfer.fit_adaptation`), scored on
  the target's other networks; mean over ``--seeds`` draws. ``auto`` adapts the source
  with the best leave-one-out score on the k samples (no peeking at the scored networks).

The target's own profile (a full calibration campaign), where it has one, is listed for
comparison. Writes ``<out>.txt`` (the tables) and ``<out>.json`` (every number).

``--score`` instead scores one profile (e.g. written by ``annette-torch adapt``) on the
measured networks of ``--target`` that are not among its reference networks.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter

import numpy as np
import torch
from tqdm import tqdm

from accuracy import RESULTS_ROOT, metrics, networks, read_measured
from annette_torch import Estimator, trace
from annette_torch.atomic import atomic_path
from annette_torch.backends import get_backend
from annette_torch.calibration.store import fingerprint_folder
from annette_torch.transfer import LOCAL_DESCRIPTORS, SourceKernels, draw, fit_adaptation, profile_from_descriptor
from annette_torch.transfer.fewshot import choose_terms

#: device configuration -> (backend, threads, precision); its built-in profile has the same name if any
DEVICES = {"openvino-cpu": ("openvino-cpu", 1, "f32"), "openvino-cpu-2t": ("openvino-cpu", 2, "f32"),
           "openvino-cpu-bf16": ("openvino-cpu", 1, "bf16"), "onnxruntime-cpu": ("onnxruntime-cpu", 1, "f32"),
           "torch-cpu": ("torch-cpu", 1, "f32")}
PROFILES = ("openvino-cpu", "openvino-cpu-2t", "onnxruntime-cpu", "torch-cpu")
SETS = ("all", "zoo", "nb201")
MOBILE_OPS = 1.2e9         # torchvision networks below this many ops form the "mobile" stratum of a draw


def measured_times(device: str) -> dict[tuple[str, str], float] | None:
    """(set, network) -> measured ms of ``device`` (None when it was not measured here)."""
    backend, threads, precision = DEVICES[device]
    folder = RESULTS_ROOT / fingerprint_folder(get_backend(backend, threads=threads, precision=precision).fingerprint())
    if not (folder / "measured.csv").exists():
        return None
    frame = read_measured(folder)
    return {(r.set, r.network): float(r.median_ms) for r in frame.itertuples()}


def scores(keys: list, estimates: dict, measured: dict) -> dict[str, dict[str, float]]:
    """Metrics (MAPE, Spearman, ...) of ``estimates`` on ``keys``, per set and all."""
    result = {}
    for name in SETS:
        chosen = [key for key in keys if name == "all" or key[0] == name]
        result[name] = metrics([measured[key] for key in chosen], [estimates[key] for key in chosen])
    return result


def mean_scores(runs: list[dict]) -> dict:
    """Mean and median over seeds of each set's MAPE and Spearman."""
    return {name: {f"{m}_{how}": float(fn([r[name][m] for r in runs])) for m in ("mape", "spearman")
                   for how, fn in (("mean", np.mean), ("median", np.median))} for name in SETS}


def evaluate_target(target: str, measured: dict, kernels: dict, strata: dict, ks: list[int], seeds: int) -> dict:
    """Every row of one target's table: (source, k) -> scores and the terms chosen;
    ``strata``: (set, network) -> the stratum its draws are stratified by."""
    keys = sorted(measured)
    sources = [p for p in PROFILES if p != target]
    rows = {}
    if target in PROFILES:
        own = {key: kernels[target][key].estimate_ms() for key in keys}
        rows["own profile", 0] = {"scores": mean_scores([scores(keys, own, measured)]), "terms": {}}
    if 0 in ks:
        zero_shot = profile_from_descriptor(LOCAL_DESCRIPTORS[target],
                                            [(p, LOCAL_DESCRIPTORS[p]) for p in sources]).adaptation
        estimates = {key: kernels[zero_shot.source][key].estimate_ms(zero_shot) for key in keys}
        rows[f"descriptor ({zero_shot.source})", 0] = {
            "scores": mean_scores([scores(keys, estimates, measured)]), "terms": {},
            "compute_scale": zero_shot.compute_scale, "memory_scale": zero_shot.memory_scale}
        for source in sources:
            estimates = {key: kernels[source][key].estimate_ms() for key in keys}
            rows[source, 0] = {"scores": mean_scores([scores(keys, estimates, measured)]), "terms": {}}
    items = [(strata[key], key) for key in keys]
    for k in [k for k in ks if k > 0]:
        runs = {source: [] for source in [*sources, "auto"]}
        terms_used = {source: Counter() for source in runs}
        for seed in range(seeds):
            drawn = [key for _, key in draw(items, k, seed, group=lambda item: item[0])]
            rest = [key for key in keys if key not in set(drawn)]
            y = np.array([measured[key] for key in drawn])
            fitted = {}
            for source in sources:
                sample = [kernels[source][key] for key in drawn]
                terms, candidates = choose_terms(sample, y)
                adaptation = fit_adaptation(sample, y, terms)
                estimates = {key: kernels[source][key].estimate_ms(adaptation) for key in rest}
                fitted[source] = (candidates.get("+".join(terms), np.inf), scores(rest, estimates, measured))
                runs[source].append(fitted[source][1])
                terms_used[source]["+".join(terms)] += 1
            best = min(sources, key=lambda s: fitted[s][0])
            runs["auto"].append(fitted[best][1])
            terms_used["auto"][best] += 1
        for source, results in runs.items():
            rows[source, k] = {"scores": mean_scores(results), "terms": dict(terms_used[source])}
    return rows


def format_table(target: str, rows: dict, seeds: int, count: int) -> str:
    """One target's rows as text."""
    lines = [f"\ntarget {target} ({count} networks measured; k > 0: mean over {seeds} draws, scored on the other "
             f"{count} - k networks)",
             f"{'source':<32}{'k':>3}{'MAPE all':>10}{'rho all':>9}{'MAPE zoo':>10}{'rho zoo':>9}{'MAPE nb201':>12}"
             f"{'rho nb201':>11}  chosen"]
    for (source, k), row in rows.items():
        s = row["scores"]
        chosen = ", ".join(f"{n} x{c}" for n, c in sorted(row["terms"].items(), key=lambda x: -x[1]))
        lines.append(f"{source:<32}{k:>3}{s['all']['mape_mean']:10.1f}{s['all']['spearman_mean']:9.3f}"
                     f"{s['zoo']['mape_mean']:10.1f}{s['zoo']['spearman_mean']:9.3f}{s['nb201']['mape_mean']:12.1f}"
                     f"{s['nb201']['spearman_mean']:11.3f}  {chosen}")
    return "\n".join(lines)


def format_summary(results: dict, ks: list[int]) -> str:
    """Per target and k: the automatic choice (k = 0: the descriptor's zero-shot profile;
    k > 0: the source with the best leave-one-out score) and, for comparison, the best
    fixed source in hindsight; MAPE and Spearman on all scored networks."""
    lines = ["\nsummary: automatic choice (k = 0: descriptor zero-shot; k > 0: source chosen per draw by "
             "leave-one-out on the k samples) vs the best fixed source in hindsight",
             f"{'target':<20}{'k':>3}{'MAPE all':>10}{'rho all':>9}   {'best fixed source (hindsight)':<34}"
             f"{'MAPE':>7}{'rho':>8}"]
    for target, rows in results.items():
        for k in ks:
            fixed = {s: r for (s, kk), r in rows.items() if kk == k and s not in ("auto", "own profile")}
            automatic = rows.get(("auto", k)) if k else next(
                (r for (s, kk), r in rows.items() if kk == 0 and s.startswith("descriptor")), None)
            if not fixed or automatic is None:
                continue
            best = min(fixed, key=lambda s: fixed[s]["scores"]["all"]["mape_mean"])
            a, b = automatic["scores"]["all"], fixed[best]["scores"]["all"]
            lines.append(f"{target:<20}{k:>3}{a['mape_mean']:10.1f}{a['spearman_mean']:9.3f}   {best:<34}"
                         f"{b['mape_mean']:7.1f}{b['spearman_mean']:8.3f}")
    return "\n".join(lines)


def traced(keys) -> dict:
    """(set, network) -> traced graph of the accuracy benchmark's networks in ``keys``."""
    graphs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for net in tqdm([n for n in networks(["zoo", "nb201"]) if (n.set, n.name) in keys], desc="trace", unit="net",
                        file=sys.stderr):
            graphs[net.set, net.name] = trace(net.build(), input_shape=net.input_shape, name=net.name)
    return graphs


def score_profile(path: str, target: str) -> str:
    """MAPE and Spearman of the profile at ``path`` on ``target``'s measured networks that
    are not its reference networks."""
    estimator = Estimator(path)
    measured = measured_times(target)
    if measured is None:
        raise SystemExit(f"{target} was not measured here; run benchmarks/accuracy.py for it first")
    references = set(estimator.profile.adaptation.reference_networks) if estimator.profile.adaptation else set()
    keys = sorted(key for key in measured if key[1] not in references)
    graphs = traced(keys)
    result = scores(keys, {key: estimator(graphs[key]) for key in keys}, measured)
    lines = [f"profile {estimator.profile.name} ({path}) on {target}: {len(keys)} measured networks "
             f"({len(measured) - len(keys)} left out as its reference networks)"]
    lines += [f"{name:<6} MAPE {m['mape']:5.1f} %  within 10 % {m['within10']:3.0f} %  Spearman {m['spearman']:.3f}"
              for name, m in result.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="draws of the k reference networks per k")
    parser.add_argument("--ks", default="0,5,10,20")
    parser.add_argument("--out", default=str(RESULTS_ROOT / "transfer"), help="writes OUT.txt and OUT.json")
    parser.add_argument("--score", help="score this profile .json instead (with --target)")
    parser.add_argument("--target", choices=list(DEVICES), help="the device --score's profile is for")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    torch.set_num_threads(1)
    if args.score:
        if not args.target:
            raise SystemExit("--score needs --target (the device the profile is for)")
        print(score_profile(args.score, args.target))
        return
    measured = {device: measured_times(device) for device in DEVICES}
    missing = [d for d, m in measured.items() if m is None]
    measured = {d: m for d, m in measured.items() if m is not None}
    keys = sorted(set.union(*(set(m) for m in measured.values())))
    graphs = traced(keys)
    estimators = {p: Estimator(p) for p in PROFILES}
    kernels = {p: {key: SourceKernels.of(estimators[p], graph) for key, graph in graphs.items()} for p in PROFILES}
    strata = {key: "nb201" if key[0] == "nb201" else "mobile" if graph.total("ops") < MOBILE_OPS else "large"
              for key, graph in graphs.items()}
    results, text = {}, []
    if missing:
        text.append(f"not measured here (no results folder): {', '.join(missing)}")
    text.append("caveat: every device is a configuration of the same physical CPU (AMD EPYC, 2 shared cores); "
                "the sources were calibrated on it too, so a source shares the target's caches and memory. "
                "Measurements are noisy (see the accuracy tables: repeated runs differ by 6-13 % on average).")
    for target, times in tqdm(measured.items(), desc="targets", unit="target", file=sys.stderr):
        rows = evaluate_target(target, times, kernels, strata, ks, args.seeds)
        results[target] = rows
        text.append(format_table(target, rows, args.seeds, len(times)))
    text.append(format_summary(results, ks))
    report = "\n".join(text)
    print(report)
    with atomic_path(f"{args.out}.txt") as tmp:
        tmp.write_text(report + "\n")
    with atomic_path(f"{args.out}.json") as tmp:
        tmp.write_text(json.dumps({"seeds": args.seeds, "ks": ks, "missing": missing,
                                   "targets": {t: [{"source": s, "k": k, **row} for (s, k), row in rows.items()]
                                               for t, rows in results.items()}}, indent=1) + "\n")
    print(f"\nwrote {args.out}.txt and {args.out}.json")


if __name__ == "__main__":
    main()
