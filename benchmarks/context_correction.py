"""Would a per-kind correction from kernels measured in context beat anchoring alone?
An experiment on a profile fitted from a store's small benchmarks (measures nothing):

    annette-torch calibrate --backend openvino-cpu --for SPEC ... --profile P --out T   # prints "NAME: measured X ms end to end"
    python benchmarks/context_correction.py --profile P --measured T/<folder> --ctx-log calibrate-for.txt --out PREFIX
    python benchmarks/accuracy.py --profile PREFIX-anchored.json ...; ... --profile PREFIX-ctx-anchored.json

Per (layer model type, kernel kind) with at least ``--min-kernels`` kernels in the table,
the factor is the time-weighted geometric mean of measured over estimated kernel time;
the factors become the profile's per-kind ``correction`` (as ``fit --prior`` stores its
own, added to it where the profile has one). Both the profile and the corrected one are
then anchored on the networks' end-to-end times (``anchor_on_references``, what ``fit``
does with a store's references) and written as ``PREFIX-anchored.json`` and
``PREFIX-ctx-anchored.json``. The networks must be reference-pool networks
(:func:`annette_torch.transfer.references.reference_pool`), as a campaign measures them.
Results of 2026-12-03: docs/cross-cpu.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
import warnings

import numpy as np

from annette_torch import trace
from annette_torch.layer_models.corrected import KindCorrection, PriorCorrection
from annette_torch.profiles import load_profile
from annette_torch.transfer.adapt import Sample, anchor_on_references, print_fit
from annette_torch.transfer.references import reference_pool
from context_gap import kernel_pairs

LINE = re.compile(r"^(\S+): measured ([\d.eE+-]+) ms end to end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--measured", required=True, help="the table folder calibrate --for wrote")
    parser.add_argument("--ctx-log", required=True, help="calibrate --for's output (its end-to-end times)")
    parser.add_argument("--out", required=True, help="prefix of the two profiles written")
    parser.add_argument("--min-kernels", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    profile = load_profile(args.profile)
    pool = {net.name: net for net in reference_pool()}
    measured = {m.group(1).removeprefix("nb201:"): float(m.group(2))
                for m in map(LINE.match, open(args.ctx_log)) if m}
    unknown = sorted(set(measured) - set(pool))
    if unknown:
        raise SystemExit(f"not reference-pool networks: {', '.join(unknown)}")
    samples = [Sample(trace(pool[n].build(), input_shape=pool[n].input_shape, name=n), ms, n, pool[n].set)
               for n, ms in measured.items()]
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for kind, type_name, measured_ms, estimated_ms in kernel_pairs(profile, args.measured, [s.graph for s in samples]):
        if measured_ms > 0 and estimated_ms > 0:
            pairs.setdefault((type_name, kind), []).append((measured_ms, estimated_ms))
    factors: dict[str, dict[str, KindCorrection]] = {}
    print(f"{'model type':<18}{'kind':<20}{'kernels':>8}{'estimated ms':>14}{'measured ms':>13}{'factor':>8}")
    for (type_name, kind), values in sorted(pairs.items()):
        times, estimates = np.array(values).T
        log = float(np.sum(estimates / estimates.sum() * np.log(times / estimates)))
        print(f"{type_name:<18}{kind:<20}{len(values):>8}{estimates.sum():>14.3f}{times.sum():>13.3f}{math.exp(log):>8.3f}")
        if len(values) >= args.min_kernels:
            factors.setdefault(type_name, {})[kind] = KindCorrection(log, abs(log), len(values))
    if profile.correction is None:
        correction = PriorCorrection(profile.name, "none", factors, {"source": "kernels measured in context"})
    else:
        merged = {t: dict(kinds) for t, kinds in profile.correction.layer_models.items()}
        for type_name, kinds in factors.items():
            for kind, c in kinds.items():
                old = merged.setdefault(type_name, {}).get(kind)
                merged[type_name][kind] = c if old is None else KindCorrection(
                    old.log_scale + c.log_scale, old.max_log + abs(c.log_scale), old.samples, old.residual)
        correction = dataclasses.replace(profile.correction, layer_models=merged)
    corrected = dataclasses.replace(profile, correction=correction)
    for label, source in (("anchored", profile), ("ctx-anchored", corrected)):
        anchored = anchor_on_references(source, samples)
        print(f"== {label}")
        print_fit(anchored, source, samples)
        anchored.save(f"{args.out}-{label}.json")


if __name__ == "__main__":
    main()
