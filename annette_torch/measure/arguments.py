"""The measuring protocol's command-line options, shared by the commands, benchmarks and examples."""
from __future__ import annotations

import argparse
from typing import Sequence

from .canary import check_drift
from .protocol import ACROSS_ROUNDS, DRIFTS, STATISTICS, Protocol

#: the ``--compile`` choices, indexed by ``Protocol.compile_once``
COMPILE_CHOICES = ("each-round", "once")


def add_protocol_arguments(parser: argparse.ArgumentParser, defaults: Protocol = Protocol(),
                           statistics: Sequence[str] = STATISTICS, whole_networks: bool = True) -> None:
    """Add ``--rounds --warmup --repeats --statistic --drift`` with ``defaults``'s values
    (``--drift``: see :class:`~.protocol.Protocol`), and ``--compile --across-rounds`` where
    ``whole_networks`` (commands that time whole networks with
    :func:`~.networks.measure_networks`; a calibration campaign compiles each benchmark anew
    every round and pools its rounds)."""
    group = parser.add_argument_group("measuring protocol")
    group.add_argument("--rounds", type=int, default=defaults.rounds,
                       help=f"interleaved rounds over all networks (default {defaults.rounds})")
    group.add_argument("--warmup", type=int, default=defaults.warmup,
                       help=f"untimed inferences per network and round (default {defaults.warmup})")
    group.add_argument("--repeats", type=int, default=defaults.repeats,
                       help=f"timed inferences per network and round (default {defaults.repeats})")
    group.add_argument("--statistic", choices=tuple(statistics), default=defaults.statistic,
                       help=f"statistic of the pooled runs of all rounds (default {defaults.statistic})")
    group.add_argument("--drift", choices=DRIFTS, default=defaults.drift,
                       help="canary: divide each round by a canary network timed before it (for a machine "
                            "whose speed drifts; see annette-torch noise). With min or p10, use it where rounds are "
                            "combined by their median (--across-rounds median): pooled, a noisy correction made "
                            f"timings less reproducible; default {defaults.drift}")
    if whole_networks:
        group.add_argument("--across-rounds", choices=ACROSS_ROUNDS, default=defaults.across_rounds,
                           help="pool: the statistic of all rounds' runs pooled; median: the median over rounds of "
                                "each round's statistic (with --drift canary, for a host with slow spells; see "
                                f"annette-torch noise) (default {defaults.across_rounds})")
        default = COMPILE_CHOICES[defaults.compile_once]
        group.add_argument("--compile", choices=COMPILE_CHOICES, default=default,
                           help="once: compile each network once and keep it for all its rounds (rounds cost "
                                "only their runs; every network is held in memory); each-round: build and compile "
                                f"it anew every round, one in memory at a time (default {default})")


def protocol_from(args: argparse.Namespace, backend, defaults: Protocol = Protocol()) -> Protocol:
    """The :class:`Protocol` the options of :func:`add_protocol_arguments` ask for on
    ``backend``; ``ValueError`` names a bad one."""
    check_drift(backend, args.drift)
    return Protocol(rounds=args.rounds, warmup=args.warmup, repeats=args.repeats, statistic=args.statistic,
                    drift=args.drift, canary_repeats=defaults.canary_repeats,
                    compile_once=getattr(args, "compile", COMPILE_CHOICES[defaults.compile_once]) == "once",
                    across_rounds=getattr(args, "across_rounds", defaults.across_rounds))
