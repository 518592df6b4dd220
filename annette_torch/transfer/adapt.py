"""What ``annette-torch adapt`` does: measure reference networks on a backend and adapt a
profile to them (few-shot), or build a zero-shot profile from a device descriptor.
Both print what they did and return the new profile; the command writes it. And what
``annette-torch check`` does: measure a few reference networks and say how far a profile
is off on this machine now (:func:`check_profile`).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, Sequence

import numpy as np

from ..backends import get_backend
from ..backends.base import torch_threads
from ..estimator import Estimator
from ..graph import trace
from ..measure import Protocol
from ..measure.networks import NetworkSession, measure_networks, network_protocol
from ..profiles import Profile, builtin_names, load_profile
from .descriptor import LOCAL_DESCRIPTORS, DeviceDescriptor, local_sources, profile_from_descriptor
from .fewshot import SIMPLER_WITHIN, Sample, adapt_profile, backend_mapping, choose_source, unadapted
from .references import Network, draw, reference_pool


def measure_references(backend, k: int, seed: int, protocol: Protocol | None = None,
                       fleet: Callable[[list], NetworkSession] | None = None,
                       pool: Sequence[Network] | None = None) -> list[Sample]:
    """``k`` networks of the reference ``pool`` (default :func:`reference_pool`) drawn by
    ``seed`` across the sizes (operations) of each set, measured on ``backend`` with the
    measuring ``protocol`` (:mod:`annette_torch.measure.protocol`; default
    :func:`~annette_torch.measure.networks.network_protocol`, as the ground truth) and traced; a network
    the backend fails on is reported and left out. ``fleet``: measure the items there
    instead (a function of the items that returns the session, e.g. on a fleet node,
    :func:`annette_torch.fleet.measure_networks_on_fleet`)."""
    pool = reference_pool() if pool is None else list(pool)
    if not 0 <= k <= len(pool):
        raise ValueError(f"the reference networks to measure (adapt --samples, calibrate --references, "
                         f"check --samples) must be between 0 and {len(pool)} (the reference pool), got {k}")
    if not k:
        return []
    protocol = network_protocol(backend) if protocol is None else protocol
    with torch_threads(1):       # tracing; the backend pins its own threads
        graphs = {net.name: trace(net.build(), input_shape=net.input_shape, name=net.name) for net in pool}
    nets = draw(pool, k, seed, size=lambda net: graphs[net.name].total("ops"))
    items = [(net.name, net.build, net.input_shape) for net in nets]
    session = measure_networks(backend, items, protocol) if fleet is None else fleet(items)
    print(session.report(), file=sys.stderr)
    for name, message in session.failures.items():
        print(f"skipped {name}: {message}", file=sys.stderr)
    return [Sample(graphs[net.name], session.measured[net.name].time_ms, net.name, net.set)
            for net in nets if net.name in session.measured]


@dataclasses.dataclass
class CheckResult:
    """A profile against reference networks measured now: per network (set, name, measured
    ms, estimated ms), the mean |error| and the median signed error (fractions)."""

    rows: list[tuple[str, str, float, float]]
    mean_abs_error: float
    median_error: float

    def __str__(self) -> str:
        lines = [f"{'set':<7}{'network':<60}{'measured ms':>12}{'estimate ms':>12}{'err %':>8}"]
        lines += [f"{s:<7}{n[:58]:<60}{m:12.3f}{e:12.3f}{(e / m - 1) * 100:8.1f}" for s, n, m, e in self.rows]
        lines.append(f"mean |error| {100 * self.mean_abs_error:.1f} %, median error {100 * self.median_error:+.1f} % "
                     f"over {len(self.rows)} reference networks")
        return "\n".join(lines)


def check_profile(profile: Profile, backend, k: int, seed: int, protocol: Protocol | None = None) -> CheckResult:
    """Measure ``k`` reference networks (drawn as ``adapt`` draws them) on ``backend``
    (``protocol``: as :func:`measure_references`) and
    compare them with ``profile``'s estimates; ``ValueError`` for ``k`` < 1 or beyond the
    pool, or when none could be measured."""
    if k < 1:
        raise ValueError(f"check needs at least 1 reference network (--samples), got {k}")
    samples = measure_references(backend, k, seed, protocol)
    if not samples:
        raise ValueError(f"no reference network could be measured on {backend.name}")
    est = Estimator(profile)
    rows = [(s.set, s.name, s.measured_ms, est(s.graph)) for s in samples]
    errors = np.array([e / m - 1 for _, _, m, e in rows])
    return CheckResult(rows, float(np.abs(errors).mean()), float(np.median(errors)))


def print_fit(profile: Profile, source: Profile, samples: Sequence[Sample]) -> None:
    """The correction and, per sample, the source's and the adapted profile's error."""
    adaptation = profile.adaptation
    if adaptation is None:
        print("no samples: the profile is the source profile")
        return
    fusion = f"{source.name}'s fusion rules" if adaptation.fusion == "source" else "no fusion"
    folds = "graph optimized" if adaptation.folds(source.optimizes_graph) else "graph not optimized"
    print(f"mapping: {adaptation.mapping_label} ({fusion}, {folds})")
    print(f"correction ({'+'.join(adaptation.terms)}): compute_scale {adaptation.compute_scale:.4g}, "
          f"memory_scale {adaptation.memory_scale:.4g}, exponent {adaptation.exponent:.3g}, "
          f"per_kernel_ms {adaptation.per_kernel_ms:.4g}")
    candidates = adaptation.fit.get("candidates") or {}
    if candidates:
        print("leave-one-out mean |log error| per candidate (mapping/terms): "
              + ", ".join(f"{name} {score:.3f}" for name, score in candidates.items()))
    before, after = Estimator(unadapted(source)), Estimator(profile)
    print(f"{'set':<7}{'network':<60}{'measured ms':>12}{'source ms':>11}{'err %':>8}{'adapted ms':>12}{'err %':>8}")
    for s in samples:
        old, new = before(s.graph), after(s.graph)
        print(f"{s.set:<7}{s.name[:58]:<60}{s.measured_ms:12.3f}{old:11.3f}{(old / s.measured_ms - 1) * 100:8.1f}"
              f"{new:12.3f}{(new / s.measured_ms - 1) * 100:8.1f}")
    print(f"mean |error| on these samples: {adaptation.fit['mape_before']:.1f} % before, "
          f"{adaptation.fit['mape_after']:.1f} % after (in-sample)")


def stored_references(folder: str | os.PathLike) -> list[Sample]:
    """The reference networks a store folder holds (``references.csv``, written by a
    budgeted campaign), traced again from :func:`reference_pool` by name, with their
    measured times; ``ValueError`` naming a network the pool does not hold."""
    from ..calibration.store import read_references

    table = read_references(folder)
    if table.empty:
        return []
    pool = {net.name: net for net in reference_pool()}
    unknown = sorted(set(table["benchmark"]) - set(pool))
    if unknown:
        raise ValueError(f"{folder}/references.csv: {', '.join(unknown)} is not a reference network of this "
                         f"version (annette_torch.transfer.references); remove the line(s), or fit with --no-anchor")
    samples = []
    with torch_threads(1):
        for row in table.itertuples(index=False):
            net = pool[row.benchmark]
            graph = trace(net.build(), input_shape=net.input_shape, name=net.name)
            samples.append(Sample(graph, float(row.time_ms), net.name, net.set))
    return samples


def anchor_on_references(profile: Profile, samples: Sequence[Sample], seed: int = 0,
                         terms: tuple[str, ...] | None = None) -> Profile:
    """``profile`` (fitted on a store's small benchmarks) corrected on whole reference
    networks measured on the same machine: :func:`adapt_profile` with the profile's own
    mapping (and the correction ``terms`` if given), keeping its name and fingerprint.
    No samples: ``profile`` itself."""
    if not samples:
        return profile
    anchored = adapt_profile(profile, samples, seed=seed, name=profile.name, fingerprint=profile.fingerprint,
                             terms=terms)
    return dataclasses.replace(
        anchored, description=f"{profile.description}; anchored on {len(samples)} whole reference networks "
                              f"measured with its store ({'+'.join(anchored.adaptation.terms)})")


def anchor_fit_or_prior(fitted: Profile, prior: Profile, samples: Sequence[Sample], seed: int = 0,
                        terms: tuple[str, ...] | None = None) -> tuple[Profile, Profile, dict[str, float | None]]:
    """``fitted`` (a store's small benchmarks fitted as corrections of ``prior``) and
    ``prior`` itself, each anchored on the reference networks ``samples``
    (:func:`anchor_on_references`). Returns (the anchored profile kept, the profile it was
    anchored from, the leave-one-out mean |log error| of each on the references, keys
    "fit" and "prior"). The fit is kept unless the anchored prior predicts the left-out
    references better by more than :data:`~.fewshot.SIMPLER_WITHIN` (small benchmarks
    alone predicted whole networks 10-44 % off on other CPUs, docs/cross-cpu.md); a prior
    kept takes the fit's name and fingerprint. With fewer than 3 references nothing can
    be left out: the fit is kept."""
    anchored = anchor_on_references(fitted, samples, seed=seed, terms=terms)
    if not samples:
        return anchored, fitted, {"fit": None, "prior": None}
    base = dataclasses.replace(prior, name=fitted.name, fingerprint=dict(fitted.fingerprint))
    instead = anchor_on_references(base, samples, seed=seed, terms=terms)
    scores = {"fit": anchored.adaptation.fit.get("loo_log_error"), "prior": instead.adaptation.fit.get("loo_log_error")}
    if None in scores.values() or scores["prior"] * SIMPLER_WITHIN >= scores["fit"]:
        return anchored, fitted, scores
    return dataclasses.replace(
        instead, description=f"{prior.name} anchored on {len(samples)} whole reference networks measured with "
                             f"its store, kept over the fit of the store's benchmarks (leave-one-out mean |log "
                             f"error| on the references {scores['prior']:.3f} against {scores['fit']:.3f})",
        notes=[*instead.notes, f"the fit of the store's benchmarks as corrections of {prior.name} predicted the "
                               f"left-out reference networks worse than {prior.name} itself: the prior was kept"]
    ), base, scores


def few_shot(sources: Sequence[str], backend_name: str, threads: int, precision: str | None, k: int, seed: int,
             name: str | None = None, protocol: Protocol | None = None, mapping: str = "backend",
             ray_address: str | None = None, ray_resource: str | None = None) -> Profile:
    """Measure ``k`` reference networks on the backend with ``protocol`` (default
    :func:`~annette_torch.measure.networks.network_protocol`), choose the source that adapts best
    (when several are given) and adapt it; the profile's fingerprint is the backend's.
    ``mapping``: "backend" (what the backend declares, :func:`backend_mapping`) or as for
    :func:`adapt_profile`. ``ray_address``: measure on a node of that Ray cluster that
    advertises ``ray_resource`` (default the backend's name; :mod:`annette_torch.fleet`),
    whose fingerprint the profile then records."""
    backend = get_backend(backend_name, threads=threads, precision=precision)
    protocol = network_protocol(backend) if protocol is None else protocol
    target_mapping = backend_mapping(backend) if mapping == "backend" else mapping
    profiles = [load_profile(s).counted_as(backend.counting) for s in sources]
    node_fingerprint: dict = {}         # of the fleet node that measured the samples

    def on_fleet(items: list) -> NetworkSession:
        from ..fleet import measure_networks_on_fleet

        fingerprint, session = measure_networks_on_fleet(backend_name, items, protocol, ray_address, ray_resource,
                                                         threads, backend.precision)
        node_fingerprint.update(fingerprint)
        return session

    samples = measure_references(backend, k, seed, protocol, on_fleet if ray_address is not None else None)
    if k and not samples:
        raise ValueError(f"no reference network could be measured on {backend_name}")
    index, scores = choose_source(profiles, samples, target_mapping) if len(profiles) > 1 else (0, {})
    if scores:
        print("leave-one-out mean |log error| per source: "
              + ", ".join(f"{n} {v:.3f}" for n, v in scores.items()) + f"; adapting {profiles[index].name}")
    fingerprint = dict(node_fingerprint) or backend.fingerprint()     # k = 0 on a fleet: nothing measured there
    fingerprint["device"] = fingerprint.get("cpu")
    source = profiles[index]
    name = name or (f"{backend.name}-{backend.threads}t-{backend.precision}-from-{source.name}")
    profile = adapt_profile(source, samples, seed=seed, name=name, fingerprint=fingerprint, mapping=target_mapping)
    print_fit(profile, source, samples)
    return profile


def zero_shot(descriptor_path: str, sources: Sequence[str] | None, name: str | None = None) -> Profile:
    """A profile for the device of the descriptor file, from the nearest of ``sources``
    (built-in profiles with a known descriptor; default all of them)."""
    target = DeviceDescriptor.load(descriptor_path)
    available = [n for n in LOCAL_DESCRIPTORS if n in builtin_names()]
    profile = profile_from_descriptor(target, local_sources(sources or available), name)
    a = profile.adaptation
    print(f"zero-shot from {a.source}: compute-bound kernels x{a.compute_scale:.4g}, memory-bound kernels "
          f"x{a.memory_scale:.4g} (unknown ratios taken as 1: {', '.join(a.fit['unknown_ratios_taken_as_1']) or 'none'})")
    return profile

