"""How reproducible is the ground truth? The accuracy benchmark's networks measured twice,
minutes apart, with the measuring protocol (a benchmark: prints tables, asserts nothing).

    python benchmarks/reproducibility.py --backend openvino-cpu --threads 1 [--precision bf16] \\
        [--sets zoo,nb201] [--models a,b] [--nb201 50] [--gap-minutes 0] \\
        [--rounds 3 --warmup 5 --repeats 10] [--statistic p10] [--drift none] [--json FILE]

Two passes over the networks of ``benchmarks/accuracy.py`` (same sets, same seed), each
a session of the measuring protocol (:mod:`annette_torch.measure.protocol`), the second
``--gap-minutes`` after the first ends and expressed against the first pass's canary
reference. Per network the agreement is |pass 2 - pass 1| / pass 1; the tables give its
mean per set for the protocol's statistic (the headline, targets: at most 1.5 % over
all networks and 3 % over the NAS-Bench-201 cells), and for every statistic with and
without drift correction, so a run on a given machine is also evidence for the choice
of statistic. Nothing is written to the accuracy benchmark's results.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from annette_torch.atomic import atomic_path
from annette_torch.backends import get_backend
from annette_torch.measure import STATISTICS, Protocol
from annette_torch.measure.arguments import add_protocol_arguments, protocol_from
from annette_torch.measure.networks import measure_networks, measured_json
from annette_torch.measure.noise import round_to_round

TARGETS = {"all": 0.015, "nb201": 0.03}


def _accuracy_module():
    """benchmarks/accuracy.py, for its networks (loaded from this folder)."""
    spec = importlib.util.spec_from_file_location("accuracy", Path(__file__).with_name("accuracy.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy", module)       # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def agreement(first: dict, second: dict, statistic: str, corrected: bool = True) -> dict:
    """Per key measured in both passes: |second - first| / first of ``statistic``."""
    return {key: abs(second[key].value(statistic, corrected) / first[key].value(statistic, corrected) - 1)
            for key in first if key in second}


def _by_set(values: dict) -> dict[str, float]:
    """Mean of per-network values per set (keys are (set, name)) and over all."""
    sets = {}
    for (name, _), value in values.items():
        sets.setdefault(name, []).append(value)
    return {**{name: float(np.mean(v)) for name, v in sets.items()}, "all": float(np.mean(list(values.values())))}


def report(first, second, protocol: Protocol) -> list[str]:
    """The printed tables: headline per set against the targets, every statistic with and
    without drift correction, per network."""
    headline = agreement(first.measured, second.measured, protocol.statistic)
    if not headline:
        return ["no network was measured in both passes"]
    sets = _by_set(headline)
    lines = [f"agreement between the passes ({protocol.statistic}, drift "
             f"{'corrected' if protocol.drift == 'canary' else 'not corrected'}): mean |pass 2 - pass 1| / pass 1"]
    for name, value in sets.items():
        target = TARGETS.get(name)
        verdict = f" (target <= {target:.1%}: {'met' if value <= target else 'not met'})" if target else ""
        lines.append(f"  {name:<8}{value:8.2%}{verdict}")
    within = {key: round_to_round(m.round_values()) for key, m in first.measured.items()}
    lines.append(f"within pass 1, round to round: " + ", ".join(f"{k} {v:.2%}" for k, v in _by_set(within).items()))
    names = list(sets)
    lines += ["", f"{'statistic':<12}{'drift':<12}" + "".join(f"{n:>9}" for n in names)]
    for statistic in STATISTICS:
        for corrected in (True, False):
            if not corrected or protocol.drift == "canary":
                row = _by_set(agreement(first.measured, second.measured, statistic, corrected))
                lines.append(f"{statistic:<12}{'corrected' if corrected else 'as timed':<12}"
                             + "".join(f"{row[n]:9.2%}" for n in names))
    lines += ["", f"{'set':<6}{'network':<92}{'pass 1 ms':>10}{'pass 2 ms':>10}{'|diff|':>8}"]
    for key, value in headline.items():
        lines.append(f"{key[0]:<6}{key[1]:<92}{first.measured[key].time_ms:10.4f}{second.measured[key].time_ms:10.4f}"
                     f"{value:8.2%}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="openvino-cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default=None)
    parser.add_argument("--sets", default="zoo,nb201")
    parser.add_argument("--models", default=None, help="comma-separated network names to keep")
    parser.add_argument("--nb201", type=int, default=50, help="NAS-Bench-201 cells to sample")
    parser.add_argument("--gap-minutes", type=float, default=0.0, help="wait between the passes")
    parser.add_argument("--json", default=None, help="write both passes' measurements here")
    add_protocol_arguments(parser)
    args = parser.parse_args(argv)
    accuracy = _accuracy_module()
    torch.set_num_threads(1)
    nets = accuracy.networks(args.sets.split(","), args.models.split(",") if args.models else None, args.nb201)
    try:
        backend = get_backend(args.backend, threads=args.threads, precision=args.precision)
        protocol = protocol_from(args, backend)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    backend.prepare_process()        # this process only measures
    items = [((n.set, n.name), n.build, n.input_shape) for n in nets]
    print(f"{len(items)} networks, two passes of: {protocol}")
    start = time.perf_counter()
    first = measure_networks(backend, items, protocol)
    print(f"pass 1: {time.perf_counter() - start:.0f} s\n{first.report()}")
    time.sleep(args.gap_minutes * 60)
    middle = time.perf_counter()
    second = measure_networks(backend, items, protocol, reference_ms=first.session.reference_ms)
    print(f"pass 2: {time.perf_counter() - middle:.0f} s\n{second.report()}\n")
    for key, message in {**first.failures, **second.failures}.items():
        print(f"failed: {key[0]}/{key[1]}: {message}")
    print("\n".join(report(first, second, protocol)))
    if args.json:
        passes = [{f"{k[0]}/{k[1]}": measured_json(m) for k, m in p.measured.items()} for p in (first, second)]
        with atomic_path(args.json) as tmp:
            tmp.write_text(json.dumps({"fingerprint": backend.fingerprint(), "protocol": protocol.to_json(),
                                       "machine": [first.report(), second.report()], "passes": passes},
                                      indent=1) + "\n")


if __name__ == "__main__":
    main()
