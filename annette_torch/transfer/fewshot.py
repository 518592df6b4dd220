"""Few-shot adaptation: move a profile to a new device from a few measured networks.

The source profile's mapping rules and layer models stay; what is learned is the
per-kernel correction of :mod:`annette_torch.layer_models.adapted`
(``t' = scale * t ** exponent + per_kernel_ms``, one scale for compute-bound and one for
memory-bound kernels, times in ms). From k networks measured on the target, the
candidate corrections below are fitted by least squares on relative errors
(``sum ((estimate - measured) / measured) ** 2``; for a fixed exponent the problem is
linear, the exponent is searched on a grid from 0.7 to 1.3):

=========================  ==========================================================
terms                      what is fitted
=========================  ==========================================================
scale                      one scale for all kernels (exponent 1, no per-kernel term)
scale, per_kernel          + milliseconds added to every kernel (dispatch cost)
scale, exponent            + the exponent (small kernels scale differently from large)
scale, split               compute-bound and memory-bound kernels scaled separately
scale, exponent, per_kernel
scale, split, per_kernel
=========================  ==========================================================

The fit ignores the floor a kernel's adapted time keeps (half its scaled time, which
only a negative ``per_kernel_ms`` can reach); the scores below use the real estimates.
Model complexity follows k: with k samples only candidates of at most ``max(1, k - 2)``
terms are tried (k <= 3: the scale alone), each is scored by leave-one-out over the
samples (mean ``|log(estimate / measured)|`` of the left-out network), and the simplest
candidate within 5 % of the best score wins. Everything is deterministic; the ``seed``
only picks which samples are used when ``k`` is less than the samples given.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..estimator import Estimator
from ..graph import LayerGraph
from ..layer_models.adapted import Adaptation
from ..profiles import Profile, load_profile
from .references import draw

TERM_SETS: tuple[tuple[str, ...], ...] = (
    ("scale",), ("scale", "per_kernel"), ("scale", "exponent"), ("scale", "split"),
    ("scale", "exponent", "per_kernel"), ("scale", "split", "per_kernel"))
EXPONENTS = np.round(np.linspace(0.7, 1.3, 25), 3)
ONE = int(np.flatnonzero(EXPONENTS == 1.0)[0])
SIMPLER_WITHIN = 1.05      # a simpler candidate wins unless the best scores 5 % better


@dataclass(frozen=True)
class Sample:
    """A network measured on the target device: its traced ``graph``, the measured time
    in ms, a ``name`` (default: the graph's) and the ``set`` it belongs to (draws are
    stratified by set, e.g. "zoo" and "nb201")."""

    graph: LayerGraph
    measured_ms: float
    name: str = ""
    set: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.graph, LayerGraph):
            raise TypeError(f"sample {self.name!r}: expected a traced LayerGraph (annette_torch.trace), "
                            f"got {type(self.graph).__name__}")
        if isinstance(self.measured_ms, bool) or not (isinstance(self.measured_ms, numbers.Real)
                                                      and np.isfinite(self.measured_ms) and self.measured_ms > 0):
            raise ValueError(f"sample {self.name or self.graph.model_name!r}: measured_ms must be a positive "
                             f"number, got {self.measured_ms!r}")
        if not self.name:
            object.__setattr__(self, "name", self.graph.model_name)


@dataclass(frozen=True)
class SourceKernels:
    """What the source profile predicts for one network, before any adaptation: the
    times (ms) and compute-bound flags of its executed (non-free) kernels and the
    per-inference overhead (ms)."""

    time_ms: np.ndarray
    compute: np.ndarray
    overhead_ms: float

    @classmethod
    def of(cls, estimator: Estimator, graph: LayerGraph) -> SourceKernels:
        """The kernels of ``graph`` under ``estimator`` (whose profile must not be adapted)."""
        if estimator.profile.adaptation is not None:
            raise ValueError(f"profile {estimator.profile.name!r} is adapted already; "
                             f"source kernels come from an unadapted profile")
        times = estimator.kernel_times(graph)
        executed = ~times.table.free
        return cls(times.time_ms[executed], times.compute_bound[executed], estimator.profile.overhead_ms)

    @functools.cached_property
    def powered_sums(self) -> np.ndarray:
        """Per exponent of :data:`EXPONENTS`: the sums of ``time_ms ** exponent`` over the
        compute-bound and over the memory-bound kernels (shape ``(len(EXPONENTS), 2)``)."""
        powered = self.time_ms[None, :] ** EXPONENTS[:, None]
        return np.stack([powered[:, self.compute].sum(1), powered[:, ~self.compute].sum(1)], axis=1)

    def estimate_ms(self, adaptation: Adaptation | None = None) -> float:
        """The network time with ``adaptation`` applied (none: the source estimate); the
        same number as ``Estimator`` of the adapted profile gives."""
        if adaptation is None:
            return float(self.time_ms.sum()) + self.overhead_ms
        return float(adaptation.kernel_ms(self.time_ms, self.compute).sum()) + self.overhead_ms


def unadapted(profile: Profile) -> Profile:
    """``profile`` without its adaptation (the base every adaptation is fitted to)."""
    return profile if profile.adaptation is None else dataclasses.replace(profile, adaptation=None)


def _columns(sums: np.ndarray, counts: np.ndarray, terms: tuple[str, ...]) -> np.ndarray:
    """Design matrix of ``terms``: per network, the summed powered times of all kernels (or
    of the compute-bound and the memory-bound ones: ``sums``), and the kernel count."""
    columns = [sums] if "split" in terms else [sums.sum(1, keepdims=True)]
    return np.concatenate(columns + ([counts[:, None]] if "per_kernel" in terms else []), axis=1)


def fit_terms(kernels: Sequence[SourceKernels], measured_ms: np.ndarray,
              terms: tuple[str, ...]) -> dict[str, float] | None:
    """The correction of ``terms`` that fits ``measured_ms`` best in relative squared error
    (``compute_scale``, ``memory_scale``, ``exponent``, ``per_kernel_ms``), or None when no
    exponent gives positive scales."""
    measured = np.asarray(measured_ms, float)
    overhead = np.array([k.overhead_ms for k in kernels])
    sums = np.stack([k.powered_sums for k in kernels])
    counts = np.array([len(k.time_ms) for k in kernels], float)
    best, best_loss = None, np.inf
    for index in (range(len(EXPONENTS)) if "exponent" in terms else (ONE,)):
        exponent = EXPONENTS[index]
        columns = _columns(sums[:, index], counts, terms)
        theta = np.linalg.lstsq(columns / measured[:, None], (measured - overhead) / measured, rcond=None)[0]
        scales = theta[:2] if "split" in terms else theta[:1].repeat(2)
        if not np.all(scales > 0):
            continue
        loss = float(np.sum((columns @ theta + overhead - measured) ** 2 / measured ** 2))
        if loss < best_loss - 1e-12:
            per_kernel = float(theta[-1]) if "per_kernel" in terms else 0.0
            best, best_loss = {"compute_scale": float(scales[0]), "memory_scale": float(scales[1]),
                               "exponent": float(exponent), "per_kernel_ms": per_kernel}, loss
    return best


def loo_error(kernels: Sequence[SourceKernels], measured_ms: np.ndarray, terms: tuple[str, ...]) -> float:
    """Leave-one-out score of ``terms``: mean ``|log(estimate / measured)|`` of each sample
    estimated by the correction fitted to the others (inf when a fit fails)."""
    measured = np.asarray(measured_ms, float)
    errors = []
    for left_out in range(len(kernels)):
        keep = [i for i in range(len(kernels)) if i != left_out]
        params = fit_terms([kernels[i] for i in keep], measured[keep], terms)
        if params is None:
            return float("inf")
        estimate = kernels[left_out].estimate_ms(Adaptation(**params))
        errors.append(abs(np.log(max(estimate, 1e-12) / measured[left_out])))
    return float(np.mean(errors))


def choose_terms(kernels: Sequence[SourceKernels], measured_ms: np.ndarray) -> tuple[tuple[str, ...], dict[str, float]]:
    """(the chosen terms, leave-one-out score of every candidate tried) for these samples:
    candidates of at most ``max(1, k - 2)`` terms; with one sample, the scale alone and no
    score."""
    k = len(kernels)
    candidates = [t for t in TERM_SETS if len(t) <= max(1, k - 2)]
    if k < 2:
        return candidates[0], {}
    scores = {"+".join(t): loo_error(kernels, measured_ms, t) for t in candidates}
    best = min(scores.values())
    chosen = next(t for t in candidates if scores["+".join(t)] <= best * SIMPLER_WITHIN)
    return chosen, scores


def fit_adaptation(kernels: Sequence[SourceKernels], measured_ms: Sequence[float],
                   terms: tuple[str, ...] | None = None) -> Adaptation:
    """The correction for these samples (``terms`` chosen by :func:`choose_terms` unless
    given), with its fit statistics in ``fit``: the leave-one-out score of each
    candidate and the in-sample mean |error| % before and after."""
    measured = np.asarray(measured_ms, float)
    if not len(kernels):
        raise ValueError("fitting an adaptation needs at least one measured sample")
    scores: dict[str, float] = {}
    if terms is None:
        terms, scores = choose_terms(kernels, measured)
    params = fit_terms(kernels, measured, terms)
    if params is None:
        raise ValueError(f"no correction with terms {'+'.join(terms)} fits these samples with positive scales")
    adaptation = Adaptation(**params, terms=terms)
    before = np.array([k.estimate_ms() for k in kernels])
    after = np.array([k.estimate_ms(adaptation) for k in kernels])
    fit = {"loo_log_error": scores.get("+".join(terms)), "candidates": scores,
           "mape_before": float(np.mean(np.abs(before - measured) / measured) * 100),
           "mape_after": float(np.mean(np.abs(after - measured) / measured) * 100)}
    return dataclasses.replace(adaptation, fit=fit)


def adapt_profile(source: str | Profile, samples: Sequence[Sample | tuple[LayerGraph, float]], seed: int = 0,
                  k: int | None = None, name: str | None = None,
                  fingerprint: dict[str, Any] | None = None) -> Profile:
    """``source`` adapted to the device ``samples`` were measured on.

    ``samples``: :class:`Sample` objects or (traced graph, measured ms) pairs. With ``k``,
    only ``k`` of them are used, drawn by ``seed`` (stratified by ``Sample.set``); the
    seed is recorded either way. With no samples (or ``k=0``) the result is the source
    profile itself (a copy, renamed if ``name`` is given): same estimates, adaptation
    unchanged. Otherwise the correction is fitted to the source's estimates without its
    own adaptation (which the new one replaces). ``name`` defaults to
    ``<source>-adapted``; ``fingerprint`` (the target's) defaults to the source's.
    """
    profile = load_profile(source)
    samples = [s if isinstance(s, Sample) else Sample(*s) for s in samples]
    if k is not None:
        samples = draw(samples, k, seed)
    if not samples:
        return dataclasses.replace(profile, name=name or profile.name,
                                   fingerprint=dict(fingerprint or profile.fingerprint))
    base = unadapted(profile)
    estimator = Estimator(base)
    kernels = [SourceKernels.of(estimator, s.graph) for s in samples]
    adaptation = fit_adaptation(kernels, [s.measured_ms for s in samples])
    adaptation = dataclasses.replace(adaptation, method="few-shot", source=profile.name, samples=len(samples),
                                     seed=seed, reference_networks=tuple(s.name for s in samples))
    return dataclasses.replace(
        base, name=name or f"{profile.name}-adapted", fingerprint=dict(fingerprint or profile.fingerprint),
        adaptation=adaptation, source="",
        description=f"{profile.name} adapted to another device from {len(samples)} measured networks "
                    f"({'+'.join(adaptation.terms)})",
        notes=[*profile.notes, f"adapted from {profile.name} with {len(samples)} measured networks (seed {seed}); "
                               f"in-sample mean |error| {adaptation.fit['mape_before']:.1f} % before, "
                               f"{adaptation.fit['mape_after']:.1f} % after"])


def choose_source(sources: Sequence[str | Profile], samples: Sequence[Sample | tuple[LayerGraph, float]]
                  ) -> tuple[int, dict[str, float]]:
    """(index of the source that adapts best to ``samples``, leave-one-out score of each
    source's chosen correction by name). Fewer than two samples cannot be scored: the
    first source is chosen."""
    samples = [s if isinstance(s, Sample) else Sample(*s) for s in samples]
    profiles = [unadapted(load_profile(s)) for s in sources]
    if not profiles:
        raise ValueError("choose_source needs at least one source profile")
    if len(samples) < 2:
        return 0, {}
    measured = np.array([s.measured_ms for s in samples])
    scores = []
    for profile in profiles:
        estimator = Estimator(profile)
        kernels = [SourceKernels.of(estimator, s.graph) for s in samples]
        terms, candidates = choose_terms(kernels, measured)
        scores.append(candidates["+".join(terms)])
    return int(np.argmin(scores)), {p.name: score for p, score in zip(profiles, scores)}
