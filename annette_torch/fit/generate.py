"""The model generator: a measurement store in, a fitted profile out.

    profile = fit_profile("calibration/data/openvino-cpu-1t-f32-...")
    profile.save("profiles/openvino-cpu.json")
    print(format_report(profile.fit_metrics))

Steps (each in its own module):

1. trace every ok benchmark from its spec (:mod:`.table`);
2. learn the fusion rules (:mod:`.mapping`);
3. fit the per-inference overhead and the gap between summed kernel times and end-to-end
   time (:mod:`.overhead`); kernel times are multiplied by its ``scale`` before fitting;
4. map each benchmark with the rules and join kernels with their measured times
   (:mod:`.table`); keep kernels grouped as the target grouped them, at least
   ``min_time_ms`` long (shorter ones are a few ticks of the profilers' microsecond
   clocks) and with a run-to-run spread up to ``max_spread``; weight each by
   ``1 / (0.05 + spread)``;
5. per kernel kind with ``min_rows`` kernels or more, fit the four model types
   (:mod:`.kinds`); a ``default`` roofline answers the other kinds.

Held-out check: benchmarks are split by a seeded hash of their id (:func:`.table.held_out`).
Everything above is first fitted on the training benchmarks and scored on the held-out
ones: per kind and model type the kernels' MAPE, the end-to-end MAPE of the held-out
benchmarks as the :class:`~annette_torch.estimator.Estimator` computes it, and the share
of fusion decisions the rules get right. Then (``refit_all=True``) the profile is fitted
again on every benchmark; its ``fit_metrics`` hold the held-out scores and choices.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..estimator import Estimator
from ..kinds import FEATURES, PRODUCT_KINDS
from ..layer_models import LayerModel, RefinedRoofline
from ..mapping import FusionRule
from ..profiles import Profile
from .kinds import KindFit, fit_kind, learner_errors, mape
from .mapping import describe_rule, learn_rules, rule_accuracy
from .overhead import Gap, fit_gap
from .roofline import as_plain, fit_roofline
from .table import StoreData, held_out, kernel_table, load_store, runtime_kernels_ms

MODEL_TYPES = ("roofline", "refined_roofline", "statistical", "mixed")
PREFERENCE = ("mixed", "statistical", "refined_roofline", "roofline")


def _usable(table: pd.DataFrame, min_time_ms: float, max_spread: float) -> pd.DataFrame:
    keep = (table["measured"] & table["agrees"] & (table["time_ms"] >= min_time_ms)
            & ~(table["spread"] > max_spread))
    return table[keep]


def _weights(table: pd.DataFrame) -> np.ndarray:
    return 1.0 / (0.05 + table["spread"].fillna(0.05).to_numpy())


def _fit_models(table: pd.DataFrame, scale: float, min_rows: int, min_learned_rows: int,
                seed: int) -> tuple[dict[str, KindFit], RefinedRoofline]:
    """Per-kind fits and the default roofline from the usable kernel rows of ``table``.
    The default answers kinds without their own entry, which are rarely products (convs,
    matmuls have entries), so it is fitted on the other kinds' kernels when there are any."""
    fits = {}
    for kind, rows in table.groupby("kind"):
        if len(rows) < min_rows:
            continue
        fits[kind] = fit_kind(rows[list(FEATURES)].to_numpy(), rows["time_ms"].to_numpy() * scale / 1e3,
                              _weights(rows), min_learned_rows, seed)
    others = table[~table["kind"].isin(PRODUCT_KINDS)]
    basis = others if len(others) >= min_rows else table
    default = fit_roofline(basis[list(FEATURES)].to_numpy(), basis["time_ms"].to_numpy() * scale / 1e3,
                           _weights(basis))
    return fits, default


def _layer_models(fits: dict[str, KindFit], default) -> dict[str, dict[str, LayerModel]]:
    models: dict[str, dict[str, LayerModel]] = {t: {} for t in MODEL_TYPES}
    models["roofline"]["default"] = as_plain(default)
    models["refined_roofline"]["default"] = default
    for kind, fit in sorted(fits.items()):
        for type_name, model in fit.models.items():
            models[type_name][kind] = model
    return {t: m for t, m in models.items() if m}


def _profile(name: str, data: StoreData, rules: tuple[FusionRule, ...], gap: Gap, fits: dict[str, KindFit],
             default, fit_metrics: dict, notes: list[str]) -> Profile:
    fp = data.fingerprint
    models = _layer_models(fits, default)
    return Profile(
        name=name, fingerprint={**fp, "device": fp.get("cpu", fp.get("device", ""))}, layer_models=models,
        model_preference=tuple(t for t in PREFERENCE if t in models), mapping=rules, overhead_ms=gap.overhead_ms,
        description=(f"fitted on {len(data.networks)} benchmarks of {fp.get('backend')} {fp.get('runtime_version')}, "
                     f"{fp.get('threads')} thread(s), {fp.get('precision')}"),
        fit_metrics=fit_metrics, notes=notes)


def _kernel_scores(profile: Profile, test: pd.DataFrame, scale: float) -> dict[str, Any]:
    """Per kind and overall: held-out kernel MAPE of each model type, each kernel
    answered as the estimator would (the type's entry for the kind, else its fallback)."""
    seconds = test["time_ms"].to_numpy() * scale / 1e3
    predicted = {t: np.zeros(len(test)) for t in profile.layer_models}
    answered: dict[str, dict[str, str]] = {}
    for kind, index in test.groupby("kind").indices.items():
        feats = test[list(FEATURES)].to_numpy()[index]
        answered[kind] = {}
        for type_name in profile.layer_models:
            used, entry, model = profile.model_for(kind, type_name)
            predicted[type_name][index] = model.predict(feats)[0]
            answered[kind][type_name] = used if entry == kind else f"{used} default"
    kinds = {}
    for kind, index in test.groupby("kind").indices.items():
        kinds[kind] = {"test_kernels": len(index), "answered_by": answered[kind],
                       "mape": {t: mape(p[index], seconds[index]) for t, p in predicted.items()}}
    overall = {t: mape(p, seconds) for t, p in predicted.items()}
    return {"kinds": kinds, "all_kernels_mape": overall}


def _network_scores(profile: Profile, data: StoreData, test_ids: list[str], scale: float) -> dict[str, Any]:
    """End-to-end MAPE of the held-out benchmarks, per model type and with or without
    the mapping model. The measured side leaves out the kernels the runtime inserted
    (``scale`` times their profiled time), which the estimator does not predict."""
    measured = (data.networks.loc[test_ids, "time_ms"] - scale * runtime_kernels_ms(data).loc[test_ids]).to_numpy()
    keep = measured > 0
    scores: dict[str, Any] = {"benchmarks": int(keep.sum())}
    for mapping in (True, False):
        for type_name in profile.layer_models:
            estimator = Estimator(profile, model_type=type_name, use_mapping=mapping)
            estimates = np.array([estimator(data.graphs[b]) for b in test_ids])
            key = type_name if mapping else f"{type_name} (no mapping)"
            scores[key] = mape(estimates[keep], measured[keep])
    return scores


def fit_profile(store_folder: str | os.PathLike, name: str | None = None, seed: int = 0,
                test_share: float = 0.2, min_time_ms: float = 0.005, max_spread: float = 1.0,
                min_rows: int = 3, min_learned_rows: int = 20, refit_all: bool = True,
                progress: bool = False) -> Profile:
    """Fit a profile to a measurement store (see the module doc for every step).

    ``name`` defaults to the backend (``-<n>t`` added for more than one thread); the
    profile's fingerprint is the store's, with ``device`` set to its CPU model.
    """
    data = load_store(store_folder, progress=progress)
    if data.networks.empty:
        raise ValueError(f"{store_folder}: no successfully measured benchmarks to fit")
    fp = data.fingerprint
    name = name or (fp["backend"] if int(fp.get("threads") or 1) == 1 else f"{fp['backend']}-{fp['threads']}t")
    ids = list(data.networks.index)
    is_test = held_out(ids, seed, test_share)
    train_ids = [b for b, t in zip(ids, is_test) if not t]
    test_ids = [b for b, t in zip(ids, is_test) if t]

    end_to_end, kernels = data.networks["time_ms"].to_numpy(), data.networks["layers_sum_ms"].to_numpy()

    # 1. fit on the training benchmarks, score on the held-out ones
    rules, _ = learn_rules(data, set(train_ids))
    gap = fit_gap(end_to_end[~is_test], kernels[~is_test])
    table = kernel_table(data, rules)
    table["test"] = table["benchmark"].isin(set(test_ids))
    usable = _usable(table, min_time_ms, max_spread)
    train, test = usable[~usable["test"]], usable[usable["test"]]
    fits, default = _fit_models(train, gap.scale, min_rows, min_learned_rows, seed)
    held = _profile(name, data, rules, gap, fits, default, {}, [])
    kernel_scores = _kernel_scores(held, test, gap.scale)
    for kind, fit in fits.items():
        info = kernel_scores["kinds"].setdefault(kind, {"test_kernels": 0})
        info.update(train_kernels=int((train["kind"] == kind).sum()), learner=fit.learner,
                    learner_cv_mape=fit.learner_cv_mape,
                    envelope={"peak_ops_s": fit.envelope[0], "bandwidth_bytes_s": fit.envelope[1]},
                    unroll_search=[vars(r) for r in fit.unroll_search])
        rows = test[test["kind"] == kind]
        if fit.learner and len(rows):
            info["learner_test_mape"] = learner_errors(
                train.loc[train["kind"] == kind, list(FEATURES)].to_numpy(),
                train.loc[train["kind"] == kind, "time_ms"].to_numpy() * gap.scale / 1e3,
                _weights(train[train["kind"] == kind]), fit.models["refined_roofline"],
                rows[list(FEATURES)].to_numpy(), rows["time_ms"].to_numpy() * gap.scale / 1e3, seed)
    metrics: dict[str, Any] = {
        "store": Path(store_folder).name, "store_fingerprint": dict(fp),
        "split": {"seed": seed, "test_share": test_share, "train_benchmarks": len(train_ids),
                  "test_benchmarks": len(test_ids)},
        "kernel_filter": {"min_time_ms": min_time_ms, "max_spread": max_spread, "kernels": len(table),
                          "usable": len(usable), "not_measured": int((~table["measured"]).sum()),
                          "grouped_otherwise": int((table["measured"] & ~table["agrees"]).sum())},
        "held_out": {**kernel_scores, "networks_mape": _network_scores(held, data, test_ids, gap.scale),
                     "mapping_accuracy": rule_accuracy(data, rules, set(test_ids)), "gap": gap.to_dict()},
    }

    # 2. the profile itself: everything again on all benchmarks
    if refit_all:
        rules, decisions = learn_rules(data)
        gap = fit_gap(end_to_end, kernels)
        usable = _usable(kernel_table(data, rules), min_time_ms, max_spread)
        fits, default = _fit_models(usable, gap.scale, min_rows, min_learned_rows, seed)
    else:
        _, decisions = learn_rules(data, set(train_ids))
    metrics.update(
        fitted_on="all benchmarks" if refit_all else "training benchmarks",
        gap=gap.to_dict(),
        mapping={"rules": [describe_rule(r) for r in rules],
                 "pairs": [{"primary": d.primary, "secondary": d.secondary, "examples": d.examples,
                            "fused": d.fused, "decision": d.how, "errors": d.errors} for d in decisions]},
        kinds={kind: {"kernels": int((usable["kind"] == kind).sum()), "learner": fit.learner,
                      "unroll": fit.models["refined_roofline"].unroll} for kind, fit in sorted(fits.items())})
    notes = [
        "Fitted by annette_torch.fit.fit_profile from the measurement store named in fit_metrics.store.",
        "Kernel times are the runtime profiler's; per-inference overhead and the end-to-end scale come "
        "from the benchmarks' end-to-end medians (fit_metrics.gap); reorders the runtime inserts at "
        "a network's input and output are not modelled.",
        "Kinds without their own entry use the 'default' roofline, fitted on the kernels of kinds "
        "that are not products (convs, linears, matmuls).",
    ]
    return _profile(name, data, rules, gap, fits, default, metrics, notes)


def _cell(value: float) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def format_report(metrics: dict) -> str:
    """The held-out errors of a fitted profile's ``fit_metrics`` as text tables."""
    held = metrics["held_out"]
    split = metrics["split"]
    lines = [f"store {metrics['store']}: {split['train_benchmarks']} training and {split['test_benchmarks']} "
             f"held-out benchmarks (seed {split['seed']})",
             "", "held-out kernel MAPE (%) per kind and model type (learner chosen by 3-fold CV on training rows):"]
    header = f"{'kind':<16}{'train':>6}{'test':>6}" + "".join(f"{t:>18}" for t in MODEL_TYPES) + "   learners (statistical/mixed)"
    lines.append(header)
    for kind, info in sorted(held["kinds"].items(), key=lambda kv: -kv[1].get("test_kernels", 0)):
        mapes = info.get("mape", {})
        cells = []
        for t in MODEL_TYPES:
            text = _cell(mapes.get(t))
            if info.get("answered_by", {}).get(t, t) != t:
                text += "*"
            cells.append(f"{text:>18}")
        learners = info.get("learner") or {}
        lines.append(f"{kind:<16}{info.get('train_kernels', 0):>6}{info.get('test_kernels', 0):>6}" + "".join(cells)
                     + "   " + "/".join(learners.get(t, "-") for t in ("statistical", "mixed")))
    lines.append(f"{'all kernels':<28}" + "".join(f"{_cell(held['all_kernels_mape'].get(t)):>18}" for t in MODEL_TYPES))
    lines.append("(* the kind has no model of that type; the estimator's fallback answered)")
    nets = held["networks_mape"]
    lines += ["", f"held-out end-to-end MAPE (%) of {nets['benchmarks']} benchmarks, with / without the mapping model:"]
    lines.append("  " + ", ".join(f"{t} {_cell(nets.get(t))} / {_cell(nets.get(t + ' (no mapping)'))}"
                                  for t in MODEL_TYPES if t in nets))
    gap = held["gap"]
    lines += ["", f"fusion decisions right on held-out edges: {100 * held['mapping_accuracy']:.1f}%",
              f"overhead {metrics['gap']['overhead_ms']:.4f} ms per inference, scale {metrics['gap']['scale']:.3f} "
              f"(training fit: end-to-end MAPE {_cell(gap['mape_sum'])}% for the plain sum, {_cell(gap['mape_fit'])}% fitted)",
              "", "fusion rules:"] + [f"  {rule}" for rule in metrics["mapping"]["rules"]]
    return "\n".join(lines)
