"""The model generator: a measurement store in, a fitted profile out.

    profile = fit_profile("calibration/data/openvino-cpu-1t-f32-...")
    profile.save("profiles/openvino-cpu.json")     # and its arrays, profiles/openvino-cpu.<digest>.npz
    print(format_report(profile.fit_metrics))

Steps (each in its own module):

1. trace every ok benchmark from its spec (:mod:`.table`);
2. learn the fusion rules (:mod:`.mapping`);
3. fit the per-inference overhead and the gap between summed kernel times and end-to-end
   time (:mod:`.overhead`); kernel times are multiplied by its factor (a scale that
   follows the kernel's duration) before fitting;
4. map each benchmark with the rules and join kernels with their measured times
   (:mod:`.table`); keep kernels grouped as the target grouped them, at least
   ``min_time_ms`` long (:data:`MIN_KERNEL_MS`, one tick of the profilers' microsecond
   clocks: kernels of 1-5 µs, such as squeeze-excite's 1x1 convs, are data too; left
   out, the models charged them 1.3-5x their time) and with a run-to-run spread up to
   ``max_spread``; weight each by ``1 / (0.05 + spread)``;
5. per kernel kind with ``min_rows`` kernels or more, fit the four model types
   (:mod:`.kinds`); a ``default`` roofline, fitted on kernels of at least
   :data:`ROOFLINE_MIN_MS` (a roofline has no per-kernel term for the fixed cost that
   dominates shorter ones), answers the other kinds. Kinds that are not
   products (pools, concats, activations, norms), and depthwise convs, are fitted on the
   kernels that read another kernel's output when there are ``min_rows`` of them (plain
   ones, for a depthwise conv): inside
   a network such a layer reads what a conv wrote, in the layout the conv wrote it
   (OpenVINO's blocked channels), not the plain layout of a network input (a depthwise
   conv reading the input ran ~1.5x slower there);
6. kinds are fitted on their plain kernels (nothing fused, or only batch norms folded
   into the weights), and each kind's entries record the range of kernel features they
   were fitted on (:mod:`.ranges`); the kernels with fused layers then give each fused
   layer kind's cost per output element (:mod:`.fused`);
7. the rate at which weights arrive from memory (:mod:`.weights`): in a real network a
   kernel's weights were evicted from the caches by the rest of the network since the
   last inference, so a kernel takes at least its weight bytes over that rate; fitted on
   the fully connected benchmarks whose weights outgrow the caches; where the store holds
   re-reads measured in context (``weight_rereads.json``,
   :mod:`annette_torch.calibration.weight_rereads`), the profile takes them: every kernel of
   a network then also takes the time to read again the weights a benchmark kept cached;
8. a training store (``torch-cpu-train``: kernels are forward + backward passes) also
   holds optimizer-step timings; their per-tensor and per-element terms become the
   profile's ``training`` field (:mod:`annette_torch.training.optimizers`).

Held-out check: benchmarks are split by a seeded hash of their id (:func:`.table.held_out`).
Everything above is first fitted on the training benchmarks and scored on the held-out
ones: per kind and model type the kernels' MAPE, the end-to-end MAPE of the held-out
benchmarks as the :class:`~annette_torch.estimator.Estimator` computes it, and the share
of fusion decisions the rules get right. Then (``refit_all=True``) the profile is fitted
again on every benchmark; its ``fit_metrics`` hold the held-out scores and choices.
"""
from __future__ import annotations

import dataclasses
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..calibration.store import StoreError
from ..calibration.weight_rereads import stored_rereads
from ..estimator import Estimator
from ..kinds import FEATURES, PRODUCT_KINDS
from ..layer_models import LayerModel, RefinedRoofline
from ..layer_models.fused_layers import FusedLayers
from ..mapping import Counting, FusionRule
from ..profiles import Profile
from ..profiles.profile import Range
from ..training.optimizers import fit_optimizer_steps
from ..validation import number, read_text, safe_name
from .fused import costly_members, fit_fused_costs, is_plain
from .kinds import KindFit, fit_kind, learner_errors, mape
from .mapping import PairDecision, describe_rule, learn_rules, rule_accuracy
from .overhead import Gap, fit_gap, kernel_decade_sums, scaled_kernel_sums
from .ranges import calibrated_ranges
from .roofline import as_plain, fit_roofline
from .table import (StoreData, benchmark_estimates, held_out, kernel_table, load_store, output_reorder_pattern,
                    runtime_kernels_ms)
from .weights import benchmark_weight_elems, fit_weight_bandwidth, fit_weight_cache

MODEL_TYPES = ("roofline", "refined_roofline", "statistical", "mixed")
PREFERENCE = ("mixed", "statistical", "refined_roofline", "roofline")
#: below this many ok benchmarks a fit warns (:class:`FewBenchmarksWarning`)
FEW_BENCHMARKS = 50


class FewBenchmarksWarning(UserWarning):
    """A profile is fitted on fewer than :data:`FEW_BENCHMARKS` benchmarks, or none is held out to score it."""


@dataclass
class _Pass:
    """Steps 2-5 fitted on one set of benchmarks; ``kernels`` holds the usable kernel
    rows of every benchmark, mapped with these rules, ``train`` marking the fitted ones."""

    rules: tuple[FusionRule, ...]
    decisions: list[PairDecision]
    gap: Gap
    kernels: pd.DataFrame
    fits: dict[str, KindFit]
    ranges: dict[str, Range]
    default: RefinedRoofline
    weight_bandwidth: tuple[float | None, dict]
    weight_cache: tuple[float | None, dict]
    fused_costs: tuple[dict[str, float], dict]


#: product kinds that networks almost never run on their input: fitted in context too (step 5)
CONTEXT_PRODUCTS = frozenset({"depthwise_conv"})
#: the shortest kernel a fit uses (ms): one tick of the profilers' microsecond clocks (step 4)
MIN_KERNEL_MS = 0.001
#: the shortest kernel the ``default`` roofline is fitted on (ms; step 5)
ROOFLINE_MIN_MS = 0.005


def _weights(table: pd.DataFrame) -> np.ndarray:
    return 1.0 / (0.05 + table["spread"].fillna(0.05).to_numpy())


def _xy(table: pd.DataFrame, gap: Gap) -> tuple[np.ndarray, np.ndarray]:
    """(feature matrix, target seconds = measured times scaled by ``gap``)."""
    return table[list(FEATURES)].to_numpy(), gap.scaled(table["time_ms"].to_numpy()) / 1e3


def _selected(data: StoreData, train: set[str], min_time_ms: float, max_spread: float,
              min_rows: int) -> tuple[tuple[FusionRule, ...], list[PairDecision], Gap, pd.DataFrame]:
    """Steps 2-4 on the benchmarks in ``train``: rules, their decisions, the gap, and the
    usable kernel rows of every benchmark (``train`` marking the fitted ones)."""
    rules, decisions = learn_rules(data, train)
    fitted = data.networks.index.isin(train)
    decade_sums = kernel_decade_sums(data.layers).reindex(data.networks.index, fill_value=0.0).to_numpy()
    gap = fit_gap(*(data.networks[c].to_numpy()[fitted] for c in ("time_ms", "layers_sum_ms", "kernels")),
                  decade_sums[fitted])
    table = kernel_table(data, rules, _backend_flag(data, "optimizes_graph"), _backend_flag(data, "trains"),
                         fit_counting(data),
                         merge_elementwise=_backend_flag(data, "merges_elementwise"),
                         output_reorders=output_reorder_pattern(data))
    keep = (table["measured"] & table["agrees"] & (table["time_ms"] >= min_time_ms)
            & ~(table["spread"] > max_spread))
    kernels = table[keep].assign(train=lambda t: t["benchmark"].isin(train))
    # see the module doc, step 5: layers other than products, and depthwise convs, are fitted (and scored) in context
    # (a kind is fitted on its plain kernels, step 6: a depthwise conv needs plain ones in context)
    context_kinds = {kind for kind, group in kernels[kernels["train"]].groupby("kind")
                     if (kind not in PRODUCT_KINDS and (~group["reads_input"]).sum() >= min_rows)
                     or (kind in CONTEXT_PRODUCTS and (~group["reads_input"] & is_plain(group)).sum() >= min_rows)}
    return rules, decisions, gap, kernels[~(kernels["kind"].isin(context_kinds) & kernels["reads_input"])]


def _fit_pass(data: StoreData, train: set[str], min_time_ms: float, max_spread: float, min_rows: int,
              min_learned_rows: int, seed: int) -> _Pass:
    """Rules, gap and layer models fitted on the benchmarks in ``train``."""
    rules, decisions, gap, kernels = _selected(data, train, min_time_ms, max_spread, min_rows)
    rows = kernels[kernels["train"]]
    plain = is_plain(rows)
    fits = {}
    for kind, group in rows[plain].groupby("kind"):     # step 6: kinds on their plain kernels
        if len(group) >= min_rows:
            fits[kind] = fit_kind(*_xy(group, gap), _weights(group), min_learned_rows, seed)
    # the default answers kinds without an entry: rarely products (those have entries)
    long = rows[plain & (rows["time_ms"] >= ROOFLINE_MIN_MS)]
    others = long[~long["kind"].isin(PRODUCT_KINDS)]
    basis = others if len(others) >= min_rows else long if len(long) >= min_rows else rows[plain]
    default = fit_roofline(*_xy(basis, gap), _weights(basis))
    fused = rows[~plain]
    features, seconds = _xy(fused, gap)
    modelled = np.zeros(len(fused))
    for kind, index in fused.groupby("kind").indices.items():
        fit = fits.get(kind)
        model = default if fit is None else fit.models[next(t for t in PREFERENCE if t in fit.models)]
        modelled[index] = model.predict(features[index])[0]
    return _Pass(rules, decisions, gap, kernels, fits, calibrated_ranges(rows[plain], min_rows), default,
                 fit_weight_bandwidth(rows, gap, default.bit_weights),
                 fit_weight_cache(rows, benchmark_weight_elems(data.graphs), default.bit_weights),
                 fit_fused_costs(fused, modelled, seconds, min_rows))


def store_kernels(store: StoreData | str | os.PathLike, min_time_ms: float = MIN_KERNEL_MS, max_spread: float = 1.0,
                  min_rows: int = 3) -> tuple[Gap, pd.DataFrame]:
    """The kernels :func:`fit_profile` fits on, with these options, when it fits every
    benchmark of ``store`` (a store folder or loaded :class:`StoreData`; steps 2-4 of the
    module doc): the gap it scales their times by, and one row per kernel (its kind,
    features, measured ``time_ms``, ``spread``, whether it ``reads_input``, its fused kinds)."""
    data = store if isinstance(store, StoreData) else load_store(store)
    _, _, gap, kernels = _selected(data, set(data.networks.index), min_time_ms, max_spread, min_rows)
    return gap, kernels


def store_ranges(store: StoreData | str | os.PathLike, min_time_ms: float = MIN_KERNEL_MS, max_spread: float = 1.0,
                 min_rows: int = 3) -> dict[str, Range]:
    """Kind -> calibrated range (:mod:`.ranges`) of the layer models :func:`fit_profile`
    fits on every benchmark of ``store`` (a store folder or loaded :class:`StoreData`)
    with these options: the ranges a profile fitted on the store records."""
    _, kernels = store_kernels(store, min_time_ms, max_spread, min_rows)
    return calibrated_ranges(kernels[is_plain(kernels)], min_rows)


def _backend_flag(data: StoreData, flag: str) -> bool:
    """A class flag of the store's backend (:class:`~annette_torch.backends.Backend`):
    ``optimizes_graph`` (its compiler folds constant subgraphs and merges repeated
    layers; eager PyTorch does not) or ``trains`` (it times training passes, kernels
    are forward + backward); unknown backends are taken not to."""
    from ..backends import BACKENDS

    return bool(getattr(BACKENDS.get(data.fingerprint.get("backend")), flag, False))


def fit_counting(data: StoreData) -> Counting:
    """How a profile fitted on the store counts layers: as the store's backend computes them
    (:attr:`~annette_torch.backends.Backend.counting`), each kernel's inputs those of its
    primary layer (``post_op_inputs`` false: what the layers fused after it read is their
    cost per output element, :mod:`.fused`)."""
    from ..backends import BACKENDS

    counting = getattr(BACKENDS.get(data.fingerprint.get("backend")), "counting", None) or {}
    return Counting.from_dict({**counting, "post_op_inputs": False})


def _training(store_folder: str | os.PathLike) -> dict | None:
    """The optimizer-step terms of a training store (one with ``optimizer_steps.csv``,
    written by the training backend), else ``None``: an inference profile."""
    from ..backends.torch_train import OPTIMIZER_STEPS_FILE

    path = Path(store_folder) / OPTIMIZER_STEPS_FILE
    if not path.exists():
        return None
    try:
        measured = pd.read_csv(io.StringIO(read_text(path, "optimizer step timings")))
        for column in ("tensors", "elements", "time_ms"):
            if column in measured and not (pd.api.types.is_numeric_dtype(measured[column])
                                           and np.isfinite(measured[column]).all() and (measured[column] > 0).all()):
                raise ValueError(f"column {column!r} must hold positive numbers")
        return {"optimizer_step": fit_optimizer_steps(measured)}
    except (ValueError, pd.errors.ParserError) as error:
        raise StoreError(f"{path}: {error}") from None


def _profile(name: str, data: StoreData, fitted: _Pass, fit_metrics: dict, notes: list[str],
             training: dict | None = None) -> Profile:
    models: dict[str, dict[str, LayerModel]] = {t: {} for t in MODEL_TYPES}
    models["roofline"]["default"] = as_plain(fitted.default)
    models["refined_roofline"]["default"] = fitted.default
    ranges: dict[str, dict[str, Range]] = {}
    for kind, fit in sorted(fitted.fits.items()):
        for type_name, model in fit.models.items():
            models[type_name][kind] = model
            ranges.setdefault(type_name, {})[kind] = fitted.ranges[kind]
    models = {t: m for t, m in models.items() if m}
    fp = data.fingerprint
    return Profile(
        name=name, fingerprint={**fp, "device": fp.get("cpu", fp.get("device", ""))}, layer_models=models,
        model_preference=tuple(t for t in PREFERENCE if t in models), mapping=fitted.rules,
        overhead_ms=fitted.gap.overhead_ms, kernel_overhead_ms=fitted.gap.kernel_ms, weight_bandwidth_bytes_s=fitted.weight_bandwidth[0],
        weight_cache_bytes=fitted.weight_cache[0], fused_cost_s_per_elem=fitted.fused_costs[0], optimizes_graph=_backend_flag(data, "optimizes_graph"),
        removes_identity_slices=_backend_flag(data, "removes_identity_slices"),
        folds_layout_transposes=_backend_flag(data, "folds_layout_transposes"),
        splits_shuffles_in_place=_backend_flag(data, "splits_shuffles_in_place"),
        merges_elementwise=_backend_flag(data, "merges_elementwise"),
        groups_split_convs=_backend_flag(data, "groups_split_convs"), reorders_outputs=bool(output_reorder_pattern(data)),
        counting=fit_counting(data),
        training=training, description=(f"fitted on {len(data.networks)} benchmarks of {fp.get('backend')} {fp.get('runtime_version')}, "
                     f"{fp.get('threads')} thread(s), {fp.get('precision')}"),
        fit_metrics=fit_metrics, notes=notes, ranges=ranges)


def _kernel_scores(profile: Profile, test: pd.DataFrame, gap: Gap) -> dict[str, Any]:
    """Per kind and overall: held-out kernel MAPE of each model type, each kernel
    answered as the estimator would (the type's entry for the kind, else its fallback,
    plus the cost of its fused layers)."""
    features, seconds = _xy(test, gap)
    costs = profile.fused_cost_s_per_elem
    per_elem = np.array([sum(costs.get(k, 0.0) for k in costly_members(f)) for f in test["fused_kinds"]])
    predicted = {t: np.zeros(len(test)) for t in profile.layer_models}
    kinds = {}
    for kind, index in test.groupby("kind").indices.items():
        answered = {}
        for type_name in profile.layer_models:
            used, entry, model = profile.model_for(kind, type_name)
            predicted[type_name][index] = FusedLayers(model, per_elem[index]).predict(features[index])[0]
            answered[type_name] = used if entry == kind else f"{used} default"
        kinds[kind] = {"test_kernels": len(index), "answered_by": answered,
                       "mape": {t: mape(p[index], seconds[index]) for t, p in predicted.items()}}
    return {"kinds": kinds, "all_kernels_mape": {t: mape(p, seconds) for t, p in predicted.items()}}


def _network_scores(profile: Profile, data: StoreData, test_ids: list[str], gap: Gap,
                    long_ms: float = 1.0) -> dict[str, Any]:
    """End-to-end MAPE of the held-out benchmarks (all, and those of at least ``long_ms``),
    per model type with and without the mapping model. The estimator does not predict
    the kernels the runtime inserted (layout reorders around a single-layer benchmark, but
    the output reorders of a profile that models them), so their measured time (scaled by
    ``gap``) is added to every estimate. The row "measured
    kernels" is the floor set by the store itself: overhead plus the scaled measured
    kernel times, i.e. what perfect kernel predictions would score."""
    networks = data.networks.loc[test_ids]
    measured = networks["time_ms"].to_numpy()
    inserted = runtime_kernels_ms(data, profile.reorders_outputs, gap).loc[test_ids].to_numpy()
    long = measured >= long_ms
    scaled_sums = scaled_kernel_sums(data.layers, gap).reindex(test_ids, fill_value=0.0).to_numpy()
    estimates = {"measured kernels": (profile.overhead_ms + scaled_sums
                                      + profile.kernel_overhead_ms * networks["kernels"].to_numpy())}
    for mapping in (True, False):
        for type_name in profile.layer_models:
            # a benchmark runs in a loop: its weights stay cached, no weights-from-memory floor
            estimator = Estimator(profile, model_type=type_name, use_mapping=mapping, weights_from_memory=False)
            estimates[type_name if mapping else f"{type_name} (no mapping)"] = \
                benchmark_estimates(estimator, data, test_ids) + inserted
    return {"benchmarks": len(test_ids), "long_benchmarks": int(long.sum()), "long_ms": long_ms,
            "mape": {key: mape(e, measured) for key, e in estimates.items()},
            "mape_long": {key: mape(e[long], measured[long]) for key, e in estimates.items()}}


def _held_out_scores(profile: Profile, data: StoreData, fitted: _Pass, test_ids: list[str], seed: int) -> dict:
    """Everything :func:`format_report` shows about the held-out benchmarks."""
    kernels, gap = fitted.kernels, fitted.gap
    train, test = kernels[kernels["train"]], kernels[~kernels["train"]]
    scores = _kernel_scores(profile, test, gap)
    for kind, fit in fitted.fits.items():
        info = scores["kinds"].setdefault(kind, {"test_kernels": 0})
        info.update(train_kernels=int((train["kind"] == kind).sum()), learner=fit.learner,
                    learner_cv_mape=fit.learner_cv_mape,
                    envelope={"peak_ops_s": fit.envelope[0], "bandwidth_bytes_s": fit.envelope[1]},
                    unroll_search=[vars(r) for r in fit.unroll_search])
        rows = test[test["kind"] == kind]
        if fit.learner and len(rows):
            own = train[train["kind"] == kind]
            info["learner_test_mape"] = learner_errors(*_xy(own, gap), _weights(own), fit.models["refined_roofline"],
                                                       *_xy(rows, gap), seed)
    return {**scores, "networks": _network_scores(profile, data, test_ids, gap),
            "mapping_accuracy": rule_accuracy(data, fitted.rules, set(test_ids)), "gap": fitted.gap.to_dict()}


NOTES = [
    "Fitted by annette_torch.fit.fit_profile from the measurement store named in fit_metrics.store.",
    "Kernel times are the runtime profiler's; per-inference overhead and the end-to-end scale come "
    "from the benchmarks' end-to-end medians (fit_metrics.gap); layout reorders the runtime inserts "
    "at a network's input are not modelled, those of its returned feature maps are where the backend "
    "reports them (output_reorder kernels).",
    "Kinds without their own entry use the 'default' roofline, fitted on the kernels of kinds that "
    "are not products (convs, linears, matmuls).",
]


TRAINING_NOTE = ("A training profile: each kernel's time is its layer's forward and backward pass in train mode "
                 "(the input gradient included); 'training.optimizer_step' holds the optimizer step's per-tensor and "
                 "per-element terms, fitted on the store's optimizer_steps.csv.")


def fit_profile(store_folder: str | os.PathLike, name: str | None = None, seed: int = 0,
                test_share: float = 0.2, min_time_ms: float = MIN_KERNEL_MS, max_spread: float = 1.0,
                min_rows: int = 3, min_learned_rows: int = 20, refit_all: bool = True,
                first: int | None = None, sample: int | None = None, progress: bool = False,
                with_statistical: bool = False) -> Profile:
    """Fit a profile to a measurement store (see the module doc for every step).

    ``name`` defaults to the backend (``-<n>t`` added for more than one thread); the
    profile's fingerprint is the store's, with ``device`` set to its CPU model.
    ``first`` fits on the store's first benchmarks only (stores are append-only, so
    this reproduces a fit of the store as it was); ``sample`` fits on that many of them
    drawn at random (seeded by ``seed``), as a campaign cut short by ``--minutes`` would
    have measured them (campaigns run the sweep in a shuffled order). The statistical
    models are fitted and scored always, but kept only ``with_statistical`` or when the
    model preference reaches them (:func:`without_unreached_statistical`).
    """
    number(test_share, "test_share (the share of benchmarks held out)", low=0, high=0.9)
    data = load_store(store_folder, first=first, sample=sample, seed=seed, progress=progress)
    if data.networks.empty:
        raise ValueError(f"{store_folder}: no successfully measured benchmarks to fit")
    fp = data.fingerprint
    name = safe_name(name or (fp["backend"] if fp["threads"] == 1 else f"{fp['backend']}-{fp['threads']}t"),
                     "profile name")
    ids = list(data.networks.index)
    is_test = held_out(ids, seed, test_share)
    train_ids = {b for b, t in zip(ids, is_test) if not t}
    test_ids = [b for b, t in zip(ids, is_test) if t]
    if len(ids) < FEW_BENCHMARKS or not test_ids or not train_ids:
        warnings.warn(f"{store_folder}: fitting on {len(train_ids)} benchmarks and scoring on {len(test_ids)} held out "
                      f"(of {len(ids)} measured ok); below {FEW_BENCHMARKS} benchmarks, or without held-out ones, the "
                      f"fitted models are unreliable and their errors unknown: measure more (annette-torch calibrate "
                      f"... --sweep quick) or give --test-share", FewBenchmarksWarning, stacklevel=2)
    options = dict(min_time_ms=min_time_ms, max_spread=max_spread, min_rows=min_rows,
                   min_learned_rows=min_learned_rows, seed=seed)

    held = _fit_pass(data, train_ids, **options)
    metrics: dict[str, Any] = {
        "store": Path(store_folder).name, "store_fingerprint": dict(fp), "first_benchmarks": first, "sampled_benchmarks": sample,
        "measuring_s": float(data.networks["wall_s"].fillna(0.0).sum()),
        "split": {"seed": seed, "test_share": test_share, "train_benchmarks": len(train_ids),
                  "test_benchmarks": len(test_ids)},
        "kernel_filter": {"min_time_ms": min_time_ms, "max_spread": max_spread, "usable_kernels": len(held.kernels)},
        "held_out": _held_out_scores(_profile(name, data, held, {}, []), data, held, test_ids, seed),
    }
    final = _fit_pass(data, set(ids), **options) if refit_all else held
    metrics.update(
        fitted_on="all benchmarks" if refit_all else "training benchmarks", gap=final.gap.to_dict(),
        weight_bandwidth=final.weight_bandwidth[1], weight_bandwidth_bytes_s=final.weight_bandwidth[0],
        weight_cache=final.weight_cache[1], weight_cache_bytes=final.weight_cache[0],
        fused_costs={"s_per_elem": final.fused_costs[0], **final.fused_costs[1]},
        mapping={"rules": [describe_rule(r) for r in final.rules],
                 "pairs": [{"primary": d.primary, "secondary": d.secondary, "examples": d.examples,
                            "fused": d.fused, "decision": d.how, "errors": d.errors} for d in final.decisions]},
        kinds={kind: {"kernels": int((final.kernels["train"] & (final.kernels["kind"] == kind)).sum()),
                      "learner": fit.learner, "unroll": fit.models["refined_roofline"].unroll}
               for kind, fit in sorted(final.fits.items())})
    training = _training(store_folder)
    notes = list(NOTES) + ([TRAINING_NOTE] if training else [])
    rereads = stored_rereads(store_folder)
    if rereads is not None:
        metrics["weight_rereads"] = {k: v for k, v in rereads[1].items() if k not in ("bytes_s", "up_to_bytes")}
    profile = dataclasses.replace(_profile(name, data, final, metrics, notes, training),
                                  weight_rereads=None if rereads is None else rereads[0])
    return profile if with_statistical else without_unreached_statistical(profile)


STATISTICAL_NOTE = ("The statistical layer models were fitted and scored (fit_metrics.held_out) but not kept: the "
                    "model preference answers every kind they cover with another type. Refit with "
                    "--with-statistical (fit_profile(..., with_statistical=True)) to keep them.")


def without_unreached_statistical(profile: Profile) -> Profile:
    """``profile`` without its statistical set (and a note saying so) when its model
    preference answers no kernel kind with it; else ``profile`` itself."""
    if "statistical" not in profile.layer_models or profile.reaches("statistical"):
        return profile
    return dataclasses.replace(
        profile, layer_models={t: m for t, m in profile.layer_models.items() if t != "statistical"},
        model_preference=tuple(t for t in profile.model_preference if t != "statistical"),
        notes=[*profile.notes, STATISTICAL_NOTE])


def _cell(value: float) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def _weight_line(summary: dict, bandwidth: float | None) -> str:
    if bandwidth is None:
        return (f"weights from memory: not fitted ({summary.get('kernels', 0)} fully connected kernels with "
                f"at least {summary.get('min_weight_bytes', 0) / 2 ** 20:.0f} MiB of weights)")
    return (f"weights from memory at {bandwidth / 1e9:.1f} GB/s (median of {summary['kernels']} fully connected "
            f"kernels with {summary['min_weight_bytes'] / 2 ** 20:.0f}-{summary['largest_weight_bytes'] / 2 ** 20:.0f} "
            f"MiB of weights)")


def _cache_line(summary: dict, cache_bytes: float | None) -> str:
    if "largest_cached_bytes" not in summary:
        return (f"weights cached between inferences: not fitted ({summary.get('kernels', 0)} batch-1 fully "
                f"connected kernels with at least 1 MiB of weights)")
    split = (f"benchmarks of up to {summary['largest_cached_bytes'] / 2 ** 20:.1f} MiB of weights ran them at "
             f"{summary['cached_bytes_s'] / 1e9:.1f} GB/s, from {summary['smallest_from_memory_bytes'] / 2 ** 20:.1f} "
             f"MiB at {summary['from_memory_bytes_s'] / 1e9:.1f} GB/s; {summary['kernels']} batch-1 fully connected kernels")
    if cache_bytes is None:
        return f"weights cached between inferences: not fitted, the two rates are too close ({split})"
    return f"weights cached between inferences in networks of up to {cache_bytes / 2 ** 20:.1f} MiB of weights ({split})"


def _fused_line(summary: dict) -> str:
    costs = summary.get("s_per_elem") or {}
    if not costs:
        return "fused layers: no cost fitted"
    listed = ", ".join(f"{kind} {cost * 1e12:.0f}" for kind, cost in sorted(costs.items(), key=lambda kv: -kv[1]))
    return (f"fused layers, ps per output element: {listed} (fitted on {summary['kernels']} kernels with fused "
            f"layers: their MAPE {_cell(summary['mape_without'])}% -> {_cell(summary['mape_with'])}%)")


def format_report(metrics: dict) -> str:
    """The held-out errors of a fitted profile's ``fit_metrics`` as text tables."""
    held = metrics["held_out"]
    split = metrics["split"]
    lines = [f"store {metrics['store']}: {split['train_benchmarks']} training and {split['test_benchmarks']} "
             f"held-out benchmarks (seed {split['seed']})",
             "", "held-out kernel MAPE (%) per kind and model type:",
             f"{'kind':<16}{'train':>6}{'test':>6}" + "".join(f"{t:>18}" for t in MODEL_TYPES)]
    kinds = sorted(held["kinds"].items(), key=lambda kv: -kv[1].get("test_kernels", 0))
    for kind, info in kinds:
        cells = []
        for t in MODEL_TYPES:
            text = _cell(info.get("mape", {}).get(t))
            cells.append(f"{text + ('*' if info.get('answered_by', {}).get(t, t) != t else ''):>18}")
        lines.append(f"{kind:<16}{info.get('train_kernels', 0):>6}{info.get('test_kernels', 0):>6}" + "".join(cells))
    lines.append(f"{'all kernels':<28}" + "".join(f"{_cell(held['all_kernels_mape'].get(t)):>18}" for t in MODEL_TYPES))
    lines.append("(* the kind has no model of that type: the estimator's fallback answered)")

    lines += ["", "learner per kind, chosen by 3-fold CV MAPE (%) on the training kernels; held-out MAPE after the slash:"]
    for kind, info in kinds:
        for type_name in ("statistical", "mixed"):
            chosen = (info.get("learner") or {}).get(type_name)
            if not chosen:
                continue
            cv, test = info["learner_cv_mape"][type_name], info.get("learner_test_mape", {}).get(type_name, {})
            scores = ", ".join(f"{name} {_cell(cv[name])}/{_cell(test.get(name))}" for name in cv)
            lines.append(f"  {kind:<16}{type_name:<12} -> {chosen:<18} ({scores})")

    nets = held["networks"]
    lines += ["", f"held-out end-to-end MAPE (%), with / without the mapping model, of all {nets['benchmarks']} "
                  f"benchmarks and of the {nets['long_benchmarks']} of at least {nets['long_ms']:g} ms:"]
    for key in ("measured kernels",) + tuple(t for t in MODEL_TYPES if t in nets["mape"]):
        no_mapping = f"{key} (no mapping)"
        lines.append(f"  {key:<18}{_cell(nets['mape'][key]):>6} / {_cell(nets['mape'].get(no_mapping)):<6}"
                     f"{_cell(nets['mape_long'][key]):>10} / {_cell(nets['mape_long'].get(no_mapping))}")
    gap = metrics["gap"]
    lines += ["", f"fusion decisions right on held-out edges: {_cell(100 * held['mapping_accuracy'])}%",
              f"overhead {gap['overhead_ms']:.4f} ms per inference and {1e3 * gap.get('kernel_ms', 0.0):+.2f} us per "
              f"kernel, scale {gap['scale']:.3f} on kernel times of {gap.get('reference_kernel_ms', 0.1):g} ms, "
              f"{gap.get('slope', 0.0):+.3f} per decade (end-to-end MAPE of {gap['benchmarks']} benchmarks: "
              f"{_cell(gap['mape_sum'])}% for the plain sum of their kernels, {_cell(gap['mape_fit'])}% with these)",
              _weight_line(metrics.get("weight_bandwidth", {}), metrics.get("weight_bandwidth_bytes_s")),
              _cache_line(metrics.get("weight_cache", {}), metrics.get("weight_cache_bytes")),
              _fused_line(metrics.get("fused_costs", {})),
              "", "fusion rules:"] + [f"  {rule}" for rule in metrics["mapping"]["rules"] or ["(none)"]]
    return "\n".join(lines)
