"""A fit that corrects a prior profile instead of fitting from scratch: few measurements
of this machine, the layer models of a profile that knows the rest.

    profile = fit_prior_corrected("calib/openvino-cpu-1t-f32-...", "openvino-cpu")
    print(format_prior_report(profile.fit_metrics))

Method (the argument and the evidence: ``docs/prior.md``):

1. **Fusion rules stay the prior's unless the data clearly contradict them**: per pair
   (primary kind, following kind) with at least :data:`MIN_PAIR_EXAMPLES` fusable edges
   in the store, where the prior's rules decide more than :data:`CONTRADICTED_SHARE` of
   them wrong and the rules learned from the store (:func:`.mapping.learn_rules`) at most
   :data:`LEARNED_ERROR_SHARE`, the learned rules replace the prior's for that pair.
2. Every measured kernel the rules group as the target did (:func:`.table.kernel_table`,
   the usual filters of :mod:`.generate`; kinds other than products only where they read
   another kernel's output, as in a network) gives one sample ``r = log(target / prior)``
   per model type that answers its kind: ``target`` is its measured time in end-to-end
   terms (scaled by the prior's gap, :class:`.overhead.Gap`, plus its per-kernel overhead), ``prior`` what
   the prior's estimator gives that kernel (fused-layer costs, per-kernel overhead and
   adaptation included, no weights-from-memory floor: a benchmark runs in a loop).
3. **Empirical Bayes per kind**: the kind's factor is ``exp(b * mean r)``, the weighted
   mean shrunk toward 0 (factor 1) by ``b = n / (n + sigma2 / tau2)``: ``n`` the kind's
   effective sample count, ``sigma2`` the pooled within-kind variance of ``r`` (at least
   :data:`NOISE_FLOOR` squared), ``tau2`` the spread of the kinds' true log factors around
   0 estimated from the kinds' means by the method of moments (at least
   :data:`SPREAD_FLOOR` squared). Many consistent samples give the kind's own mean, one
   noisy sample little of it. A kind without samples has no entry: the prior's time.
4. **A residual model where a kind has enough samples**: a ridge regression of what is
   left (``r`` minus the factor) on the kernel's size (log operations and log elements
   moved) from :data:`MIN_SIZE_KERNELS` kernels, from :data:`MIN_RESIDUAL_KERNELS` on
   the size or on all regression inputs, whichever cross-validates better, its penalty
   chosen by cross-validation, kept only if 5-fold cross-validation shows it
   cuts the mean absolute log error by at least :data:`RESIDUAL_GAIN`; the total
   correction is bounded by the largest ``|r|`` seen.

5. **The per-inference overhead** is refitted on the benchmarks' end-to-end times with
   the corrected kernels (:func:`fit_overhead`) when there are at least
   :data:`MIN_OVERHEAD_BENCHMARKS` of them; otherwise the prior's stays.

The corrected profile is the prior (layer models, per-kernel overhead, adaptation, ranges) with
the corrections (:class:`~annette_torch.layer_models.corrected.PriorCorrection`), the
store's fingerprint and fit metrics recording the prior (name and content digest), the
samples per kind, the held-out end-to-end errors of the prior and of the corrected
profile (first fitted on the training benchmarks, then refitted on all).
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold

from ..backends import BACKENDS
from ..estimator import Estimator
from ..kinds import FEATURES, PRODUCT_KINDS
from ..layer_models.corrected import KindCorrection, PriorCorrection
from ..layer_models.regressors import REGRESSION_INPUTS, LinearRegressor, regression_inputs
from ..mapping import FusionRule, map_kernels
from ..profiles import Profile, load_profile
from ..profiles.fingerprint import ProfileMismatchWarning
from ..profiles.profile import profile_digest
from ..validation import number, safe_name
from .kinds import mape
from .overhead import Gap
from .mapping import describe_rule, fusion_examples, learn_rules
from .table import (StoreData, benchmark_estimates, held_out, kernel_table, load_store, output_reorder_pattern,
                    runtime_kernels_ms)

#: a kind pair needs this many fusable edges before the data may overrule the prior's rules
MIN_PAIR_EXAMPLES = 10
#: ... and the prior's rules must decide more than this share of them wrong ...
CONTRADICTED_SHARE = 0.3
#: ... and the rules learned from the store at most this share
LEARNED_ERROR_SHARE = 0.05
#: the smallest within-kind noise of log(measured / prior) assumed (a 3 % measurement)
NOISE_FLOOR = 0.03
#: the within-kind noise assumed when no kind has two samples (10 %, a kernel's run-to-run spread)
DEFAULT_NOISE = 0.10
#: the smallest spread of the kinds' true log factors around 0 assumed (5 %)
SPREAD_FLOOR = 0.05
#: the per-inference overhead is refitted from this many benchmarks on (else the prior's stays)
MIN_OVERHEAD_BENCHMARKS = 10
#: a kind needs this many kernels for a residual model on its size (log operations and elements moved) ...
MIN_SIZE_KERNELS = 8
#: ... and this many for one on all its regression inputs
MIN_RESIDUAL_KERNELS = 30
SIZE_INPUTS = [REGRESSION_INPUTS.index("log_ops"), REGRESSION_INPUTS.index("log_elems_moved")]
#: a residual model is kept if it cuts the cross-validated mean |log error| by this share
RESIDUAL_GAIN = 0.05
_ALPHAS = np.logspace(-2, 3, 11)


def _weights(table: pd.DataFrame) -> np.ndarray:
    return 1.0 / (0.05 + table["spread"].fillna(0.05).to_numpy())


def _effective_rules(prior: Profile) -> tuple[tuple[FusionRule, ...], bool, bool]:
    """(fusion rules, whether the graph is optimized, whether elementwise subgraphs merge)
    the prior's estimator maps with."""
    if prior.adaptation is None:
        return prior.mapping, prior.optimizes_graph, prior.merges_elementwise
    adaptation = prior.adaptation
    return (adaptation.rules(prior.mapping), adaptation.folds(prior.optimizes_graph),
            adaptation.merges(prior.merges_elementwise))


def checked_rules(data: StoreData, prior: Profile) -> tuple[tuple[FusionRule, ...], list[dict[str, Any]]]:
    """The prior's fusion rules with those of the pairs the store clearly contradicts
    replaced by rules learned from the store (module doc, step 1), and one record per
    pair checked: primary, secondary, examples, the prior's and the learned rules' errors,
    and whether it was replaced."""
    rules, _, _ = _effective_rules(prior)
    if prior.adaptation is not None and prior.adaptation.fusion != "source":
        return rules, []             # the adaptation's mapping decides; the rules are not used
    examples = fusion_examples(data)
    if examples.empty:
        return rules, []
    by_pair: dict[tuple[str, str], list[FusionRule]] = {}
    for rule in rules:
        by_pair.setdefault((rule.primary, rule.secondary), []).append(rule)
    wrong = []
    for row in examples.itertuples():
        graph = data.graphs[row.benchmark]
        fuses = any(r.applies(graph[row.primary], graph[row.secondary], row.returned)
                    for r in by_pair.get((row.primary_kind, row.secondary_kind), ()))
        wrong.append(fuses != row.fused)
    examples = examples.assign(prior_wrong=wrong)
    _, decisions = learn_rules(data)
    learned = {(d.primary, d.secondary): d for d in decisions}
    checks, replaced = [], {}
    for (primary, secondary), group in examples.groupby(["primary_kind", "secondary_kind"], sort=False):
        decision = learned[(primary, secondary)]
        n, prior_errors = len(group), int(group["prior_wrong"].sum())
        replace = (n >= MIN_PAIR_EXAMPLES and prior_errors > CONTRADICTED_SHARE * n
                   and decision.errors <= LEARNED_ERROR_SHARE * n)
        checks.append({"primary": primary, "secondary": secondary, "examples": n, "prior_errors": prior_errors,
                       "learned_errors": decision.errors, "replaced": bool(replace),
                       "learned_rules": [describe_rule(r) for r in decision.rules]})
        if replace:
            replaced[(primary, secondary)] = decision.rules
    if not replaced:
        return rules, checks
    kept = [r for r in rules if (r.primary, r.secondary) not in replaced]
    return tuple(kept) + tuple(r for pair_rules in replaced.values() for r in pair_rules), checks


def _gap(prior: Profile) -> Gap:
    """The prior's gap between profiled kernel times and their end-to-end share (scale 1 if unrecorded)."""
    return Gap.from_dict(prior.fit_metrics.get("gap"))


@dataclasses.dataclass
class _Samples:
    """Per usable kernel row: its kind, benchmark, weight, target time (ms) and, per
    model type answering its kind, the prior's prediction (ms; NaN where the type does
    not answer the row's kind for any request)."""

    kernels: pd.DataFrame
    target_ms: np.ndarray
    predicted_ms: dict[str, np.ndarray]
    preferred: np.ndarray      # per row: the type the prior's preference answers its kind with


def _samples(data: StoreData, prior: Profile, rules: tuple[FusionRule, ...], min_time_ms: float,
             max_spread: float) -> _Samples:
    """The correction's samples (module doc, step 2)."""
    _, folds, merges = _effective_rules(prior)
    training = prior.training is not None
    reorders = output_reorder_pattern(data) if prior.reorders_outputs and folds else ""
    table = kernel_table(data, rules, folds, training, prior.counting, merges, reorders)
    keep = (table["measured"] & table["agrees"] & (table["time_ms"] >= min_time_ms)
            & ~(table["spread"] > max_spread))
    requests = [None, *prior.layer_models]
    with warnings.catch_warnings():        # they only answer kernels: the tables mapped below
        warnings.simplefilter("ignore", ProfileMismatchWarning)      # the prior describes another machine
        estimators = [Estimator(prior, model_type=r, weights_from_memory=False) for r in requests]
    predicted: dict[str, np.ndarray] = {}
    preferred = np.empty(len(table), dtype=object)
    position = 0
    for benchmark, graph in data.graphs.items():
        kernels = map_kernels(graph, rules, folds, True if training else None, prior.counting,
                              merge_elementwise=merges, reorder_outputs=bool(reorders))
        executed = np.flatnonzero(~kernels.free)
        row_of = {k: position + i for i, k in enumerate(executed)}
        for kind, rows in kernels.groups.items():
            rows = rows[~kernels.free[rows]]
            if not len(rows):
                continue
            at = np.array([row_of[r] for r in rows])
            for request, estimator in zip(requests, estimators):
                type_name = estimator.layer_model(kind)[0]
                if request is None:
                    preferred[at] = type_name
                values = predicted.setdefault(type_name, np.full(len(table), np.nan))
                if np.isnan(values[at[0]]):
                    values[at] = 1e3 * estimator.group_model(kernels, kind, rows).predict(kernels.features[rows])[0]
        position += len(executed)
    # layers other than products are sampled in context only: the prior was fitted on them in
    # context (a pool reading a conv's blocked layout) and a network runs them so
    keep &= ~(~table["kind"].isin(PRODUCT_KINDS) & table["reads_input"])
    index = np.flatnonzero(keep.to_numpy())
    measured = table["time_ms"].to_numpy()[index]
    scaled = _gap(prior).scaled(measured)
    target = np.maximum(scaled + prior.kernel_overhead_ms, 0.5 * scaled)
    return _Samples(table.iloc[index].reset_index(drop=True), target,
                    {t: p[index] for t, p in predicted.items()}, preferred[index])


def _residual(x: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int,
              columns: list[int]) -> tuple[LinearRegressor | None, dict]:
    """A ridge model of ``y`` (what the factor leaves) on the ``columns`` of regression
    inputs ``x`` (the other inputs get 0), or None when cross-validation says it does not
    pay (module doc, step 4)."""
    part = x[:, columns]
    mean, std = part.mean(axis=0), part.std(axis=0)
    std[std == 0] = 1.0
    z = (part - mean) / std
    errors, baseline = [], []
    for train, test in KFold(n_splits=min(5, len(y)), shuffle=True, random_state=seed).split(z):
        model = RidgeCV(alphas=_ALPHAS).fit(z[train], y[train], sample_weight=w[train])
        errors.append(np.average(np.abs(y[test] - model.predict(z[test])), weights=w[test]))
        baseline.append(np.average(np.abs(y[test]), weights=w[test]))
    record = {"inputs": [REGRESSION_INPUTS[c] for c in columns] if len(columns) < x.shape[1] else "all",
              "cv_mean_abs_log_error": float(np.mean(errors)), "cv_without": float(np.mean(baseline))}
    if not np.mean(errors) <= (1 - RESIDUAL_GAIN) * np.mean(baseline):
        return None, {**record, "kept": False}
    model = RidgeCV(alphas=_ALPHAS).fit(z, y, sample_weight=w)
    coef = np.zeros(x.shape[1])
    coef[columns] = model.coef_ / std
    return LinearRegressor(coef, float(model.intercept_ - coef[columns] @ mean)), {**record, "kept": True,
                                                                                   "alpha": float(model.alpha_)}


def fit_corrections(samples: _Samples, rows: np.ndarray, seed: int = 0) -> tuple[dict[str, dict[str, KindCorrection]], dict]:
    """Per model type and kind, the correction fitted on the sample ``rows`` (module doc,
    steps 3 and 4), and the statistics behind it (sigma2, tau2, per kind mean, shrinkage)."""
    kinds = samples.kernels["kind"].to_numpy()
    weights = _weights(samples.kernels)
    features = samples.kernels[list(FEATURES)].to_numpy()
    corrections: dict[str, dict[str, KindCorrection]] = {}
    stats: dict[str, Any] = {}
    for type_name, predicted in samples.predicted_ms.items():
        groups = {}
        for kind in sorted(set(kinds[rows])):
            at = rows[(kinds[rows] == kind) & np.isfinite(predicted[rows]) & (predicted[rows] > 0)]
            if len(at):
                groups[kind] = at
        if not groups:
            continue
        logs = {k: np.log(samples.target_ms[at] / predicted[at]) for k, at in groups.items()}
        means = {k: float(np.average(logs[k], weights=weights[at])) for k, at in groups.items()}
        n_eff = {k: float(weights[at].sum() ** 2 / (weights[at] ** 2).sum()) for k, at in groups.items()}
        dof = sum(len(at) - 1 for at in groups.values())
        within = sum(float(np.average((logs[k] - means[k]) ** 2, weights=weights[at])) * len(at)
                     for k, at in groups.items())
        sigma2 = max(within / dof, NOISE_FLOOR ** 2) if dof > 0 else DEFAULT_NOISE ** 2
        tau2 = max(float(np.mean([means[k] ** 2 - sigma2 / n_eff[k] for k in groups])), SPREAD_FLOOR ** 2)
        kinds_stats = {}
        for kind, at in groups.items():
            shrink = n_eff[kind] / (n_eff[kind] + sigma2 / tau2)
            log_scale = shrink * means[kind]
            residual, record = None, {}
            if len(at) >= MIN_SIZE_KERNELS:
                inputs = [SIZE_INPUTS] + ([list(range(len(REGRESSION_INPUTS)))] if len(at) >= MIN_RESIDUAL_KERNELS
                                          else [])
                tried = [_residual(regression_inputs(features[at]), logs[kind] - log_scale, weights[at], seed, columns)
                         for columns in inputs]      # the size alone, or all inputs: the better by cross-validation
                residual, record = min(tried, key=lambda t: (t[0] is None, t[1]["cv_mean_abs_log_error"]))
            max_log = max(float(np.abs(logs[kind]).max()), abs(log_scale))
            corrections.setdefault(type_name, {})[kind] = KindCorrection(log_scale, max_log, int(len(at)), residual)
            kinds_stats[kind] = {"kernels": int(len(at)), "benchmarks": int(samples.kernels["benchmark"].iloc[at].nunique()),
                                 "mean_log": means[kind], "shrinkage": shrink, "log_scale": log_scale,
                                 "factor": float(np.exp(log_scale)), "residual": record}
        stats[type_name] = {"sigma2": sigma2, "tau2": tau2, "kinds": kinds_stats}
    return corrections, stats


def _kernel_mape(samples: _Samples, corrections: dict[str, dict[str, KindCorrection]], rows: np.ndarray) -> dict:
    """Per kind, the preferred model's kernel MAPE on ``rows``, before and after the corrections."""
    features = samples.kernels[list(FEATURES)].to_numpy()
    kinds = samples.kernels["kind"].to_numpy()
    result = {}
    for kind in sorted(set(kinds[rows])):
        at = rows[kinds[rows] == kind]
        type_name = samples.preferred[at[0]]
        before = samples.predicted_ms[type_name][at]
        correction = corrections.get(type_name, {}).get(kind)
        after = before if correction is None else before * np.exp(correction.log_factor(features[at]))
        result[kind] = {"kernels": int(len(at)), "model_type": type_name,
                        "prior_mape": mape(before, samples.target_ms[at]), "corrected_mape": mape(after, samples.target_ms[at])}
    return result


def _network_mape(profile: Profile, data: StoreData, ids: list[str], gap: Gap) -> float:
    """End-to-end MAPE of benchmarks ``ids`` under ``profile`` (runtime-inserted kernels added as measured)."""
    if not ids:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileMismatchWarning)
        estimator = Estimator(profile, weights_from_memory=False)
    inserted = runtime_kernels_ms(data, profile.reorders_outputs, gap).loc[ids].to_numpy()
    estimates = benchmark_estimates(estimator, data, ids) + inserted
    return mape(estimates, data.networks.loc[ids, "time_ms"].to_numpy())


def fit_overhead(profile: Profile, data: StoreData, ids: list[str], gap: Gap) -> float | None:
    """The per-inference overhead (ms) that makes ``profile``'s kernel sums of benchmarks
    ``ids`` meet their end-to-end times: ``end_to_end ~ overhead + kernels`` fitted
    robustly (soft-L1 on relative errors, as :mod:`.overhead`), at least 0; None with fewer
    than :data:`MIN_OVERHEAD_BENCHMARKS` benchmarks (the prior's stays)."""
    if len(ids) < MIN_OVERHEAD_BENCHMARKS:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileMismatchWarning)
        estimator = Estimator(dataclasses.replace(profile, overhead_ms=0.0), weights_from_memory=False)
    kernels = (benchmark_estimates(estimator, data, ids)
               + runtime_kernels_ms(data, profile.reorders_outputs, gap).loc[ids].to_numpy())
    measured = data.networks.loc[ids, "time_ms"].to_numpy()
    result = least_squares(lambda p: (p[0] + kernels - measured) / measured, [profile.overhead_ms],
                           loss="soft_l1", f_scale=0.05, bounds=([0.0], [np.inf]))
    return float(result.x[0])


PRIOR_NOTE = ("Prior-corrected (annette_torch.fit.prior): the layer models, overheads and ranges are those of the "
              "prior named in correction.prior; 'correction' holds per kernel kind the factors learned from the "
              "store named in fit_metrics.store.")


def fit_prior_corrected(store: str | os.PathLike | StoreData, prior: str | os.PathLike | Profile,
                        name: str | None = None, seed: int = 0, test_share: float = 0.2, min_time_ms: float = 0.005,
                        max_spread: float = 1.0, first: int | None = None, sample: int | None = None,
                        progress: bool = False) -> Profile:
    """The ``prior`` profile (a name, a path or a :class:`Profile`) corrected by the
    measurements of ``store`` (a store folder or loaded :class:`StoreData`; see the
    module doc). A store without successful benchmarks gives the prior's estimates
    exactly. ``first``/``sample`` as for :func:`~annette_torch.fit.fit_profile`."""
    number(test_share, "test_share (the share of benchmarks held out)", low=0, high=0.9)
    prior = load_profile(prior)
    if prior.correction is not None:
        raise ValueError(f"profile {prior.name!r} is prior-corrected already (from {prior.correction.prior_name!r}); "
                         f"give that prior with all the measurements instead")
    data = store if isinstance(store, StoreData) else load_store(store, first=first, sample=sample, seed=seed,
                                                                 progress=progress)
    fp = data.fingerprint
    prior = prior.counted_as(getattr(BACKENDS.get(fp.get("backend")), "counting", {}))
    store_name = Path(store).name if not isinstance(store, StoreData) else "<in memory>"
    name = safe_name(name or f"{prior.name}-corrected", "profile name")
    rules, rule_checks = checked_rules(data, prior)
    samples = _samples(data, prior, rules, min_time_ms, max_spread)
    ids = list(data.networks.index)
    is_test = held_out(ids, seed, test_share)
    test_ids = [b for b, t in zip(ids, is_test) if t]
    benchmarks = samples.kernels["benchmark"].to_numpy()
    train_rows = np.flatnonzero(~np.isin(benchmarks, test_ids))
    all_rows = np.arange(len(benchmarks))
    digest = profile_digest(prior)
    gap = _gap(prior)

    # an adaptation that maps without fusion ignores the rules: the prior's stay as they were
    mapping = rules if prior.adaptation is None or prior.adaptation.fusion == "source" else prior.mapping

    def corrected(corrections: dict, fit: dict, fitted_ids: list[str]) -> Profile:
        """The prior with ``corrections`` and the overhead fitted on ``fitted_ids``."""
        profile = dataclasses.replace(
            prior, name=name, fingerprint={**fp, "device": fp.get("cpu", fp.get("device", ""))}, mapping=mapping,
            correction=PriorCorrection(prior.name, digest, corrections, fit), source="",
            description=f"{prior.name} corrected by {len(ids)} benchmarks of {fp.get('backend')} "
                        f"{fp.get('runtime_version')}, {fp.get('threads')} thread(s), {fp.get('precision')}",
            notes=[*prior.notes, PRIOR_NOTE])
        overhead = fit_overhead(profile, data, fitted_ids, gap)
        return profile if overhead is None else dataclasses.replace(profile, overhead_ms=overhead)

    train_ids = [b for b, t in zip(ids, is_test) if not t]
    held_corrections, _ = fit_corrections(samples, train_rows, seed)
    held = {"benchmarks": len(test_ids),
            "prior_mape": _network_mape(dataclasses.replace(prior, mapping=mapping), data, test_ids, gap),
            "corrected_mape": _network_mape(corrected(held_corrections, {}, train_ids), data, test_ids, gap)}
    corrections, stats = fit_corrections(samples, all_rows, seed)
    final = corrected(corrections, {"store": store_name, "benchmarks": len(ids), "seed": seed}, ids)
    kernels = _kernel_mape(samples, corrections, all_rows)
    metrics = {
        "method": "prior-corrected", "prior": {"name": prior.name, "sha256": digest, "source": prior.source},
        "store": store_name, "store_fingerprint": dict(fp), "first_benchmarks": first, "sampled_benchmarks": sample,
        "benchmarks": len(ids), "measuring_s": float(data.networks["wall_s"].fillna(0.0).sum()) if ids else 0.0,
        "usable_kernels": len(samples.kernels),
        "samples_per_kind": {k: int(v) for k, v in samples.kernels["kind"].value_counts().sort_index().items()},
        "kinds": kernels, "shrinkage": stats, "gap": gap.to_dict(),
        "held_out": held, "split": {"seed": seed, "test_share": test_share, "test_benchmarks": len(test_ids)},
        "fusion": {"pairs": rule_checks, "rules": [describe_rule(r) for r in rules],
                   "replaced": [f"{c['primary']} + {c['secondary']}" for c in rule_checks if c["replaced"]]},
        "uncorrected_kinds": sorted(set().union(*(m for m in prior.layer_models.values())) - {"default"}
                                    - set(samples.kernels["kind"])),
        "overhead_ms": {"prior": prior.overhead_ms, "fitted": final.overhead_ms if len(ids) >= MIN_OVERHEAD_BENCHMARKS
                        else None},
    }
    return dataclasses.replace(final, fit_metrics=metrics)


def _cell(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def format_prior_report(metrics: dict) -> str:
    """What ``fit --prior`` prints: the prior, the samples and factor per kind, the kernel
    MAPE before and after (in-sample), the held-out end-to-end MAPE, the fusion check."""
    prior = metrics["prior"]
    lines = [f"correcting {prior['name']} (sha256 {prior['sha256'][:16]}) with {metrics['benchmarks']} benchmarks "
             f"of store {metrics['store']} ({metrics['usable_kernels']} usable kernels)"]
    if metrics["kinds"]:
        lines += ["", f"{'kind':<20}{'kernels':>8}{'model':>18}{'factor':>9}{'shrink':>8}{'residual':>10}"
                      f"{'prior MAPE %':>14}{'corrected %':>13}"]
    for kind, info in sorted(metrics["kinds"].items(), key=lambda kv: -kv[1]["kernels"]):
        own = metrics["shrinkage"].get(info["model_type"], {}).get("kinds", {}).get(kind, {})
        residual = "ridge" if (own.get("residual") or {}).get("kept") else "-"
        lines.append(f"{kind:<20}{info['kernels']:>8}{info['model_type']:>18}{own.get('factor', 1.0):>9.3f}"
                     f"{own.get('shrinkage', 0.0):>8.2f}{residual:>10}{_cell(info['prior_mape']):>14}"
                     f"{_cell(info['corrected_mape']):>13}")
    if metrics["kinds"]:
        lines.append("(kernel MAPE in-sample, against the measured kernel times in end-to-end terms)")
    untouched = metrics["uncorrected_kinds"]
    lines.append(f"kinds without samples keep the prior: {', '.join(untouched) if untouched else 'none'}")
    held = metrics["held_out"]
    overhead = metrics["overhead_ms"]
    lines.append(f"overhead per inference: {overhead['prior']:.4f} ms (prior)"
                 + (f" -> {overhead['fitted']:.4f} ms (fitted on the benchmarks)" if overhead["fitted"] is not None
                    else f", kept: fewer than {MIN_OVERHEAD_BENCHMARKS} benchmarks"))
    lines.append(f"held-out end-to-end MAPE of {held['benchmarks']} benchmarks: prior {_cell(held['prior_mape'])} %, "
                 f"corrected {_cell(held['corrected_mape'])} %")
    pairs = metrics["fusion"]["pairs"]
    replaced = metrics["fusion"]["replaced"]
    edges = sum(p["examples"] for p in pairs)
    wrong = sum(p["prior_errors"] for p in pairs)
    lines.append(f"fusion rules: the prior's ({edges - wrong} of {edges} fusable edges decided as measured)"
                 + (f"; replaced by the store's for {', '.join(replaced)}" if replaced else ""))
    return "\n".join(lines)
