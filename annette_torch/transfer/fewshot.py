"""Few-shot adaptation: move a profile to a new device from a few measured networks.

The source profile's layer models stay; what is added is how the target maps layers to
kernels and the per-kernel correction of :mod:`annette_torch.layer_models.adapted`
(``t' = scale * t ** exponent + per_kernel_ms``, one scale for compute-bound and one for
memory-bound kernels, times in ms).

The mapping is one of :data:`MAPPINGS`: the source's (its fusion rules and graph
optimization), "unfused" (no fusion, graph optimized) or "eager" (no fusion, no graph
optimization: every batch norm and activation its own kernel and repeated layers run
again, as in PyTorch eager mode). It is given (:func:`adapt_profile`: the source's by
default; ``annette-torch adapt``: what the backend declares, :func:`backend_mapping`)
or, with ``mapping="choose"``, a candidate like the terms (every mapping that differs
for the source). Under the mapping, the source's layer models predict the kernels, and
from k networks measured on the target the candidate corrections below are fitted by
least squares on relative errors
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
Model complexity follows k: with k samples only term sets of at most ``max(1, k - 2)``
terms are tried (k <= 3: the scale alone). Every (mapping, terms) candidate is scored
by leave-one-out over the samples (mean ``|log(estimate / measured)|`` of the left-out
network), and the simplest candidate (fewest terms, then the earlier mapping) within
5 % of the best score (or 1e-6 of it: exact fits tie) wins. (On this machine's five device configurations, choosing the
mapping this way was noisier than fixing it: ``benchmarks/results/transfer.txt``.) Everything is deterministic; the ``seed`` only picks which
samples are used when ``k`` is less than the samples given.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import warnings
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import numpy as np

from ..estimator import Estimator
from ..fit.kinds import mape
from ..graph import LayerGraph
from ..layer_models.adapted import Adaptation, mapping_label
from ..profiles import Profile, load_profile
from .references import draw

TERM_SETS: tuple[tuple[str, ...], ...] = (
    ("scale",), ("scale", "per_kernel"), ("scale", "exponent"), ("scale", "split"),
    ("scale", "exponent", "per_kernel"), ("scale", "split", "per_kernel"))
EXPONENTS = np.round(np.linspace(0.7, 1.3, 25), 3)
ONE = int(np.flatnonzero(EXPONENTS == 1.0)[0])
#: fewer measured networks than this adapt with a :class:`FewSamplesWarning`
FEW_SAMPLES = 3
SIMPLER_WITHIN = 1.05      # a simpler candidate wins unless the best scores 5 % better
#: scores closer than this are ties (mean |log error|: 1e-6 is 0.0001 %): candidates that
#: fit exactly score rounding noise, which must not pick the more complex one
SCORE_RESOLUTION = 1e-6
#: how the target may map layers to kernels, (fusion, optimizes_graph), in order of
#: preference: as the source does; no fusion but the graph optimized ("unfused"); no
#: fusion and no graph optimization ("eager", every layer as written, as PyTorch eager)
MAPPINGS: tuple[tuple[str, bool | None], ...] = (("source", None), ("none", True), ("none", False))
SOURCE_MAPPING = MAPPINGS[0]
MappingChoice = tuple[str, Union[bool, None]]     # (fusion, optimizes_graph), one of MAPPINGS
#: the mappings by name, and "choose" (every one that differs for the source, by leave-one-out)
MAPPING_NAMES: dict[str, MappingChoice] = {"source": MAPPINGS[0], "unfused": MAPPINGS[1], "eager": MAPPINGS[2]}


class FewSamplesWarning(UserWarning):
    """A profile is adapted to fewer than :data:`FEW_SAMPLES` measured networks."""


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


#: source kernels of the samples per candidate mapping, or a plain sequence (the source mapping's)
KernelsByMapping = Union[Sequence[SourceKernels], Mapping[MappingChoice, Sequence[SourceKernels]]]


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


def candidate_name(mapping: MappingChoice, terms: tuple[str, ...]) -> str:
    """How a candidate is named in the scores: ``<mapping label>/<terms>``, e.g.
    ``eager/scale+per_kernel``."""
    return f"{mapping_label(*mapping)}/{'+'.join(terms)}"


def _by_mapping(kernels: KernelsByMapping) -> dict[MappingChoice, Sequence[SourceKernels]]:
    """``kernels`` as {mapping: kernels}; a plain sequence is the source mapping's."""
    if isinstance(kernels, MappingABC):
        if not kernels:
            raise ValueError("no mapping candidates given")
        return dict(kernels)
    return {SOURCE_MAPPING: kernels}


def _term_sets_for(k: int) -> list[tuple[str, ...]]:
    """The term sets of :data:`TERM_SETS` that ``k`` samples can fit: at most ``max(1, k - 2)`` terms."""
    return [t for t in TERM_SETS if len(t) <= max(1, k - 2)]


def _loo_scores(by_mapping: dict[MappingChoice, Sequence[SourceKernels]], measured_ms: np.ndarray,
                candidates: Sequence[tuple[MappingChoice, tuple[str, ...]]]) -> dict[str, float]:
    """Leave-one-out score of each (mapping, terms) candidate, by :func:`candidate_name`."""
    return {candidate_name(m, t): loo_error(by_mapping[m], measured_ms, t) for m, t in candidates}


def choose_correction(kernels: KernelsByMapping, measured_ms: np.ndarray
                      ) -> tuple[MappingChoice, tuple[str, ...], dict[str, float]]:
    """(the chosen mapping, the chosen terms, leave-one-out score of every candidate tried)
    for these samples. ``kernels``: the samples' source kernels under each candidate
    mapping ({(fusion, optimizes_graph): kernels}, first the source's; a plain sequence:
    the source mapping only). Candidates are every mapping with every term set of at
    most ``max(1, k - 2)`` terms; the simplest (fewest terms, then the earlier mapping)
    within 5 % of the best score (or :data:`SCORE_RESOLUTION` of it) wins. With one sample: the first mapping, the scale
    alone and no score."""
    by_mapping = _by_mapping(kernels)
    mappings = list(by_mapping)
    k = len(measured_ms)
    term_sets = _term_sets_for(k)
    candidates = sorted(((m, t) for m in mappings for t in term_sets),
                        key=lambda c: (len(c[1]), mappings.index(c[0]), TERM_SETS.index(c[1])))
    if k < 2:
        return (*candidates[0], {})
    scores = _loo_scores(by_mapping, measured_ms, candidates)
    best = min(scores.values())
    if not np.isfinite(best):
        raise ValueError("no candidate correction fits these samples with positive scales")
    mapping, terms = next(c for c in candidates
                          if scores[candidate_name(*c)] <= best * SIMPLER_WITHIN + SCORE_RESOLUTION)
    return mapping, terms, scores


def fit_adaptation(kernels: KernelsByMapping, measured_ms: Sequence[float], terms: tuple[str, ...] | None = None,
                   mapping: MappingChoice | None = None) -> Adaptation:
    """The correction for these samples, with its fit statistics in ``fit``: the
    leave-one-out score of each candidate (``candidates``) and of the chosen one
    (``loo_log_error``), the in-sample mean |error| % before (the source as is) and after.

    ``kernels``: as for :func:`choose_correction`, the samples' source kernels per
    candidate mapping (or a plain sequence: the source mapping's). ``mapping`` restricts
    the candidates to that one; the mapping and the terms are chosen by
    :func:`choose_correction` unless ``terms`` are given (then with the one mapping
    candidate left)."""
    measured = np.asarray(measured_ms, float)
    given = _by_mapping(kernels)
    if not len(measured):
        raise ValueError("fitting an adaptation needs at least one measured sample")
    if any(len(group) != len(measured) for group in given.values()):
        raise ValueError("every mapping candidate needs the kernels of every measured sample")
    by_mapping = given
    if mapping is not None:
        if mapping not in given:
            raise ValueError(f"mapping {mapping!r} is not among the candidates given ({', '.join(map(str, given))})")
        by_mapping = {mapping: given[mapping]}
    scores: dict[str, float] = {}
    if terms is None:
        mapping, terms, scores = choose_correction(by_mapping, measured)
    elif len(by_mapping) > 1:
        raise ValueError("terms given with several mapping candidates: give the mapping too")
    else:
        mapping = next(iter(by_mapping))
        if len(measured) >= 2:       # scored as choose_correction scores them, for the report
            scores = _loo_scores(by_mapping, measured,
                                 [(mapping, t) for t in dict.fromkeys([*_term_sets_for(len(measured)), terms])])
    params = fit_terms(by_mapping[mapping], measured, terms)
    if params is None:
        raise ValueError(f"no correction with terms {'+'.join(terms)} fits these samples with positive scales")
    adaptation = Adaptation(**params, fusion=mapping[0], optimizes_graph=mapping[1], terms=terms)
    source = given.get(SOURCE_MAPPING)
    before = None if source is None else np.array([k.estimate_ms() for k in source])
    after = np.array([k.estimate_ms(adaptation) for k in by_mapping[mapping]])
    fit = {"loo_log_error": scores.get(candidate_name(mapping, terms)), "candidates": scores,
           "mape_before": None if before is None else mape(before, measured), "mape_after": mape(after, measured)}
    return dataclasses.replace(adaptation, fit=fit)


def mapping_choices(profile: Profile) -> list[MappingChoice]:
    """The candidate mappings of :data:`MAPPINGS` that differ for this source, in order
    of preference (for a source without fusion rules that does not optimize the graph,
    such as PyTorch eager, "eager" is the source mapping itself and left out)."""
    choices, seen = [], set()
    for fusion, folds in MAPPINGS:
        adaptation = Adaptation(fusion=fusion, optimizes_graph=folds)
        key = (bool(adaptation.rules(profile.mapping)), adaptation.folds(profile.optimizes_graph))
        if key not in seen:
            seen.add(key)
            choices.append((fusion, folds))
    return choices


def mapping_candidates(profile: Profile, mapping: str | MappingChoice) -> list[MappingChoice]:
    """The candidate mappings ``mapping`` stands for with this source: "choose" (every one
    of :func:`mapping_choices`, picked by leave-one-out with the terms), a name of
    :data:`MAPPING_NAMES` ("source", "unfused", "eager") or a (fusion, optimizes_graph)
    pair (that one)."""
    if isinstance(mapping, str):
        if mapping == "choose":
            return mapping_choices(unadapted(profile))
        if mapping not in MAPPING_NAMES:
            raise ValueError(f"mapping must be 'choose', one of {', '.join(MAPPING_NAMES)} or a "
                             f"(fusion, optimizes_graph) pair; got {mapping!r}")
        return [MAPPING_NAMES[mapping]]
    if not isinstance(mapping, tuple) or len(mapping) != 2:
        raise ValueError(f"mapping must be 'choose', a name or a (fusion, optimizes_graph) pair; got {mapping!r}")
    Adaptation(fusion=mapping[0], optimizes_graph=mapping[1])        # validates the pair
    return [mapping]


def backend_mapping(backend: Any) -> MappingChoice:
    """The mapping a backend declares (class attributes ``fuses_layers`` and
    ``optimizes_graph``): a fusing runtime maps as the source does ("source"; its
    compiler's rules are the best guess for another compiler's), one that does not fuse
    runs every layer as its own kernel, with or without graph optimization ("unfused",
    "eager": PyTorch eager mode)."""
    if getattr(backend, "fuses_layers", True):
        return MAPPING_NAMES["source"]
    return MAPPING_NAMES["unfused" if getattr(backend, "optimizes_graph", True) else "eager"]


def remapped(profile: Profile, mapping: MappingChoice) -> Profile:
    """``profile`` without adaptation, mapping as ``mapping`` (fusion, optimizes_graph)
    says: the plain profile whose kernels an adaptation with that mapping corrects."""
    base = unadapted(profile)
    adaptation = Adaptation(fusion=mapping[0], optimizes_graph=mapping[1])
    eager = mapping[1] is False                 # the target removes nothing (eager PyTorch)
    return dataclasses.replace(base, mapping=adaptation.rules(base.mapping),
                               optimizes_graph=adaptation.folds(base.optimizes_graph),
                               removes_dead_code=False if eager else base.removes_dead_code,
                               removes_identity_slices=base.removes_identity_slices and not eager,
                               folds_layout_transposes=base.folds_layout_transposes and not eager,
                               splits_shuffles_in_place=base.splits_shuffles_in_place and not eager,
                               merges_elementwise=adaptation.merges(base.merges_elementwise),
                               groups_split_convs=adaptation.merges(base.groups_split_convs),
                               reorders_outputs=base.reorders_outputs and not eager)


def source_kernels(profile: Profile, graphs: Sequence[LayerGraph],
                   mappings: Sequence[MappingChoice] | None = None) -> dict[MappingChoice, list[SourceKernels]]:
    """{mapping: the source kernels of ``graphs``} for each candidate mapping of
    ``profile`` (default: :func:`mapping_choices`)."""
    return {m: [SourceKernels.of(Estimator(remapped(profile, m)), g) for g in graphs]
            for m in (mapping_choices(unadapted(profile)) if mappings is None else mappings)}


def correction_terms(text: str) -> tuple[str, ...]:
    """The correction form ``text`` names (terms joined by ``+``, one of :data:`TERM_SETS`);
    ``ValueError`` names the valid forms."""
    terms = tuple(text.split("+"))
    _check_terms(terms)
    return terms


def _check_terms(terms: tuple[str, ...]) -> None:
    if terms not in TERM_SETS:
        raise ValueError(f"{'+'.join(terms)!r} is not a correction form; give one of "
                         + ", ".join("+".join(t) for t in TERM_SETS))


def adapt_profile(source: str | Profile, samples: Sequence[Sample | tuple[LayerGraph, float]], seed: int = 0,
                  k: int | None = None, name: str | None = None,
                  fingerprint: dict[str, Any] | None = None, mapping: str | MappingChoice = "source",
                  terms: tuple[str, ...] | None = None) -> Profile:
    """``source`` adapted to the device ``samples`` were measured on.

    ``samples``: :class:`Sample` objects or (traced graph, measured ms) pairs. With ``k``,
    only ``k`` of them are used, drawn by ``seed`` (stratified by ``Sample.set``); the
    seed is recorded either way. With no samples (or ``k=0``) the result is the source
    profile itself (a copy, renamed if ``name`` is given): same estimates, adaptation
    unchanged. Otherwise the correction is fitted to the source's estimates without its
    own adaptation (which the new one replaces), under the target's ``mapping``: "source"
    (the source's fusion rules and graph optimization), "unfused", "eager", a (fusion,
    optimizes_graph) pair, or "choose" (picked with the terms by leave-one-out; see
    :func:`mapping_candidates`, :func:`backend_mapping` for what a backend declares).
    ``name`` defaults to ``<source>-adapted``; ``fingerprint`` (the target's) defaults to
    the source's. ``terms`` (one of :data:`TERM_SETS`) fixes the correction's form, which
    is otherwise chosen by leave-one-out (:func:`choose_correction`); it needs a single
    mapping candidate.
    """
    if terms is not None:
        terms = tuple(terms)
        _check_terms(terms)
    profile = load_profile(source)
    samples = [s if isinstance(s, Sample) else Sample(*s) for s in samples]
    if k is not None:
        samples = draw(samples, k, seed)
    if not samples:
        return dataclasses.replace(profile, name=name or profile.name,
                                   fingerprint=dict(fingerprint or profile.fingerprint))
    if len(samples) < FEW_SAMPLES:
        warnings.warn(f"adapting {profile.name!r} to {len(samples)} measured network(s): a scale fitted to so few "
                      f"follows their noise and nothing checks it (leave-one-out needs {FEW_SAMPLES}); measure 10 "
                      f"(--samples 10)", FewSamplesWarning, stacklevel=2)
    base = unadapted(profile)
    kernels = source_kernels(base, [s.graph for s in samples], mapping_candidates(base, mapping))
    measured = np.array([s.measured_ms for s in samples])
    adaptation = fit_adaptation(kernels, measured, terms)
    if adaptation.fit["mape_before"] is None:              # the source mapping was no candidate
        before = np.array([Estimator(base)(s.graph) for s in samples])
        adaptation.fit["mape_before"] = mape(before, measured)
    adaptation = dataclasses.replace(adaptation, method="few-shot", source=profile.name, samples=len(samples),
                                     seed=seed, reference_networks=tuple(s.name for s in samples))
    return dataclasses.replace(
        base, name=name or f"{profile.name}-adapted", fingerprint=dict(fingerprint or profile.fingerprint),
        adaptation=adaptation, source="",
        description=f"{profile.name} adapted to another device from {len(samples)} measured networks "
                    f"({adaptation.mapping_label} mapping, {'+'.join(adaptation.terms)})",
        notes=[*profile.notes, f"adapted from {profile.name} with {len(samples)} measured networks (seed {seed}); "
                               f"in-sample mean |error| {adaptation.fit['mape_before']:.1f} % before, "
                               f"{adaptation.fit['mape_after']:.1f} % after"])


def choose_source(sources: Sequence[str | Profile], samples: Sequence[Sample | tuple[LayerGraph, float]],
                  mapping: str | MappingChoice = "source") -> tuple[int, dict[str, float]]:
    """(index of the source that adapts best to ``samples`` under the target's
    ``mapping`` (as for :func:`adapt_profile`), leave-one-out score of each source's
    chosen correction by name). Fewer than two samples cannot be scored: the first
    source is chosen."""
    samples = [s if isinstance(s, Sample) else Sample(*s) for s in samples]
    profiles = [unadapted(load_profile(s)) for s in sources]
    if not profiles:
        raise ValueError("choose_source needs at least one source profile")
    if len(samples) < 2:
        return 0, {}
    measured = np.array([s.measured_ms for s in samples])
    scores = []
    for profile in profiles:
        kernels = source_kernels(profile, [s.graph for s in samples], mapping_candidates(profile, mapping))
        mapping, terms, candidates = choose_correction(kernels, measured)
        scores.append(candidates[candidate_name(mapping, terms)])
    return int(np.argmin(scores)), {p.name: score for p, score in zip(profiles, scores)}
