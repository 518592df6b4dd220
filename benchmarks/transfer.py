"""Prediction for unseen devices, leave one device out (a benchmark: prints tables,
asserts nothing, measures nothing).

    python benchmarks/transfer.py [--seeds 20] [--ks 0,5,10,20] [--draw random|sizes] [--out benchmarks/results/transfer]
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
  the larger ones, NAS-Bench-201 networks; within each, across its sizes unless
  ``--draw random``), the source adapted to them
  (:func:`annette_torch.transfer.fit_adaptation`), scored on the target's other
  networks; mean over ``--seeds`` draws. The target's mapping is the one its backend
  declares (:func:`annette_torch.transfer.backend_mapping`, fixed a priori: PyTorch
  eager runs every layer as its own kernel and optimizes nothing; OpenVINO and ONNX
  Runtime map as the source). ``auto`` adapts the source with the best leave-one-out
  score on the k samples (no peeking at the scored networks); ``auto, mapping by LOO``
  chooses the mapping (source's, unfused, eager) by leave-one-out with the terms
  instead, and ``auto, source mapping`` (where the backend's differs) keeps the
  source's.

The target's own profile (a full calibration campaign), where it has one, is listed for
comparison, and, for k > 0, the same profile adapted to k of the target's networks as
the other sources are ("own profile, adapted": no transfer, what k networks fix in the
calibrated layer models; not a candidate of ``auto``). Writes ``<out>.txt`` (the
tables) and ``<out>.json`` (every number).

``--score`` instead scores one profile (e.g. written by ``annette-torch adapt``) on the
measured networks of ``--target`` that are not among its reference networks.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from collections import Counter

import numpy as np
import torch
from tqdm import tqdm

from accuracy import GROUND_TRUTH, RESULTS_ROOT, ground_truth, metrics, networks
from annette_torch import Estimator, load_profile, trace
from annette_torch.atomic import atomic_path
from annette_torch.backends import get_backend
from annette_torch.calibration.store import fingerprint_folder
from annette_torch.machine import cpu_id, cpu_id_differences
from annette_torch.backends import BACKENDS
from annette_torch.transfer import (LOCAL_DESCRIPTORS, MAPPINGS, SourceKernels, backend_mapping, draw, fit_adaptation,
                                    mapping_choices, profile_from_descriptor)
from annette_torch.transfer.fewshot import SOURCE_MAPPING, candidate_name, remapped

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
    frame, statistic = ground_truth(folder)
    return {(r.set, r.network): float(getattr(r, GROUND_TRUTH[statistic])) for r in frame.itertuples()}


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


@functools.lru_cache(maxsize=None)
def policy_mappings(policy: str, target: str, profile: str) -> list:
    """The candidate mappings of the target under ``policy`` for a source profile:
    "backend" (what the target's backend declares, fixed a priori), "source" (the
    source's) or "choose" (every mapping that differs for the source, by leave-one-out)."""
    if policy == "backend":
        return [backend_mapping(BACKENDS[DEVICES[target][0]])]
    if policy == "source":
        return [SOURCE_MAPPING]
    return mapping_choices(load_profile(profile))


def evaluate_target(target: str, measured: dict, kernels: dict, strata: dict, ks: list[int], seeds: int,
                    sizes: dict | None = None) -> dict:
    """Every row of one target's table: (source, k) -> scores and the candidates chosen
    (mapping/terms; for auto: source/mapping); ``kernels``: profile -> mapping (each of
    ``MAPPINGS``) -> (set, network) -> source kernels; ``strata``: (set, network) -> the
    stratum its draws are stratified by; ``sizes``: (set, network) -> operations, to draw
    each stratum's share across its sizes (None: at random within the stratum). The per-source rows, ``auto`` and the own
    profile adapted use the mapping the target's backend declares; ``auto, source
    mapping`` (where that differs) and ``auto, mapping by LOO`` the other policies."""
    keys = sorted(measured)
    sources = [p for p in PROFILES if p != target]
    rows = {}
    if target in PROFILES:
        own = {key: kernels[target][SOURCE_MAPPING][key].estimate_ms() for key in keys}
        rows["own profile", 0] = {"scores": mean_scores([scores(keys, own, measured)]), "terms": {}}
    if 0 in ks:
        zero_shot = profile_from_descriptor(LOCAL_DESCRIPTORS[target],
                                            [(p, LOCAL_DESCRIPTORS[p]) for p in sources]).adaptation
        estimates = {key: kernels[zero_shot.source][SOURCE_MAPPING][key].estimate_ms(zero_shot) for key in keys}
        rows[f"descriptor ({zero_shot.source})", 0] = {
            "scores": mean_scores([scores(keys, estimates, measured)]), "terms": {},
            "compute_scale": zero_shot.compute_scale, "memory_scale": zero_shot.memory_scale}
        for source in sources:
            estimates = {key: kernels[source][SOURCE_MAPPING][key].estimate_ms() for key in keys}
            rows[source, 0] = {"scores": mean_scores([scores(keys, estimates, measured)]), "terms": {}}
    items = [(strata[key], key) for key in keys]
    policies = {"auto": "backend", "auto, mapping by LOO": "choose"}
    if policy_mappings("backend", target, target) != [SOURCE_MAPPING]:
        policies["auto, source mapping"] = "source"
    own_adapted = ["own profile, adapted"] if target in PROFILES else []
    for k in [k for k in ks if k > 0]:
        runs = {name: [] for name in [*sources, *policies, *own_adapted]}
        chosen = {name: Counter() for name in runs}
        for seed in range(seeds):
            drawn = [key for _, key in draw(items, k, seed, group=lambda item: item[0],
                                            size=None if sizes is None else lambda item: sizes[item[1]])]
            rest = [key for key in keys if key not in set(drawn)]
            y = np.array([measured[key] for key in drawn])
            fitted = {}                        # (policy, source) -> (LOO score, scores, mapping label)
            for policy in set(policies.values()):
                for source in [*sources, *(own_adapted if policy == "backend" else [])]:
                    profile = target if source == "own profile, adapted" else source
                    mappings = policy_mappings(policy, target, profile)
                    sample = {m: [kernels[profile][m][key] for key in drawn] for m in mappings}
                    adaptation = fit_adaptation(sample, y)
                    mapping = (adaptation.fusion, adaptation.optimizes_graph)
                    estimates = {key: kernels[profile][mapping][key].estimate_ms(adaptation) for key in rest}
                    loo = adaptation.fit["loo_log_error"]
                    fitted[policy, source] = (np.inf if loo is None else loo, scores(rest, estimates, measured),
                                              adaptation.mapping_label)
                    if policy == "backend":
                        runs[source].append(fitted[policy, source][1])
                        chosen[source][candidate_name(mapping, adaptation.terms)] += 1
            for name, policy in policies.items():
                best = min(sources, key=lambda s: fitted[policy, s][0])
                runs[name].append(fitted[policy, best][1])
                chosen[name][f"{best}/{fitted[policy, best][2]}"] += 1
        for name, results in runs.items():
            rows[name, k] = {"scores": mean_scores(results), "terms": dict(chosen[name])}
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
    k > 0: the source with the best leave-one-out score, mapping as the target's backend
    declares) with its Spearman on the NAS-Bench-201 networks alone; for comparison the
    automatic choice with the source's mapping and with the mapping chosen by
    leave-one-out, the best fixed source in hindsight and the target's own profile
    adapted the same way (k = 0: as is); MAPE and Spearman on all scored networks."""
    def cell(row, width=7):
        if row is None:
            return f"{'-':>{width}}{'-':>7}"
        return f"{row['scores']['all']['mape_mean']:{width}.1f}{row['scores']['all']['spearman_mean']:7.3f}"

    lines = ["\nsummary: automatic choice (k = 0: descriptor zero-shot; k > 0: source chosen per draw by "
             "leave-one-out on the k samples, mapping as the target's backend declares) vs the same with the "
             "source's mapping and with the mapping chosen by leave-one-out, the best fixed source in hindsight "
             "and the own profile adapted (MAPE %, Spearman; '=': the backend's mapping is the source's)",
             f"{'target':<20}{'k':>3}{'MAPE':>7}{'rho':>7}{'rho nb201':>10}   {'source map':>14}   {'LOO map':>14}   "
             f"{'best fixed source (hindsight)':<32}{'MAPE':>5}{'rho':>7}   {'own profile':>14}"]
    for target, rows in results.items():
        for k in ks:
            fixed = {s: r for (s, kk), r in rows.items() if kk == k and not s.startswith(("auto", "own profile"))}
            automatic = rows.get(("auto", k)) if k else next(
                (r for (s, kk), r in rows.items() if kk == 0 and s.startswith("descriptor")), None)
            if not fixed or automatic is None:
                continue
            best = min(fixed, key=lambda s: fixed[s]["scores"]["all"]["mape_mean"])
            own = rows.get(("own profile, adapted", k)) if k else rows.get(("own profile", 0))
            source_map = rows.get(("auto, source mapping", k))
            source_text = cell(source_map) if source_map or not k else f"{'=':>14}"
            lines.append(f"{target:<20}{k:>3}{cell(automatic)}{automatic['scores']['nb201']['spearman_mean']:10.3f}   "
                         f"{source_text}   {cell(rows.get(('auto, mapping by LOO', k)))}   {best:<32}"
                         f"{cell(fixed[best], 5)}   {cell(own)}")
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
    parser.add_argument("--draw", choices=("random", "sizes"), default="sizes",
                        help="within each stratum, draw the k networks across its sizes (operations), as "
                             "annette-torch adapt does, or at random (as adapt did before 2026-12-02)")
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
    # rows of networks the benchmark no longer builds (set nb201-v1: cells of an older
    # construction, see annette_torch.nas.nasbench201.CELL_VERSION) are history, not scored
    measured = {d: {key: ms for key, ms in m.items() if key in graphs} for d, m in measured.items()}
    for device, times in measured.items():
        unmeasured = [name for name in SETS[1:] if not any(key[0] == name for key in times)]
        if unmeasured:
            raise SystemExit(f"{device}: no measurements of set(s) {', '.join(unmeasured)}; measure them with "
                             f"benchmarks/accuracy.py --sets {','.join(unmeasured)} on that device first")
    kernels = {}           # profile -> mapping -> (set, network) -> source kernels
    for p in PROFILES:
        estimators = {m: Estimator(remapped(load_profile(p), m)) for m in MAPPINGS}
        kernels[p] = {m: {key: SourceKernels.of(estimator, graph) for key, graph in graphs.items()}
                      for m, estimator in estimators.items()}
    strata = {key: "nb201" if key[0] == "nb201" else "mobile" if graph.total("ops") < MOBILE_OPS else "large"
              for key, graph in graphs.items()}
    results, text = {}, []
    if missing:
        text.append(f"not measured here (no results folder): {', '.join(missing)}")
    here = cpu_id()
    differences = sorted({d for p in PROFILES for d in cpu_id_differences(load_profile(p).fingerprint.get("cpu_id", {}))})
    if not differences:
        text.append("caveat: every device is a configuration of the physical CPU the sources were calibrated on; "
                    "a source shares the target's caches and memory. Measurements are noisy (see the accuracy "
                    "tables: repeated runs differ by several % on average).")
    else:
        text.append(f"targets measured on this CPU ({here.get('vendor')} family {here.get('family')} model "
                    f"{here.get('model')}); the sources were calibrated on another ({'; '.join(differences)}): "
                    f"a cross-CPU transfer")
    text.append(f"draw of the k networks within each stratum: {args.draw}")
    sizes = {key: graph.total("ops") for key, graph in graphs.items()} if args.draw == "sizes" else None
    for target, times in tqdm(measured.items(), desc="targets", unit="target", file=sys.stderr):
        rows = evaluate_target(target, times, kernels, strata, ks, args.seeds, sizes)
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
