"""The measuring protocol's command-line options, shared by the commands, benchmarks and examples."""
from __future__ import annotations

import argparse
from typing import Sequence

from .canary import check_drift
from .networks import network_protocol
from .protocol import ACROSS_ROUNDS, DRIFTS, STATISTICS, Protocol

#: the ``--compile`` choices, indexed by ``Protocol.compile_once``
COMPILE_CHOICES = ("each-round", "once")
#: what the protocol options of a command that times whole networks default to on a board
#: (``otherwise`` of :func:`add_protocol_arguments`; see :func:`whole_network_protocol`)
BOARD_OTHERWISE = ("a board", Protocol())


def add_protocol_arguments(parser: argparse.ArgumentParser, defaults: Protocol = Protocol(),
                           statistics: Sequence[str] = STATISTICS, whole_networks: bool = True,
                           otherwise: tuple[str, Protocol] | None = None) -> None:
    """Add ``--rounds --warmup --repeats --statistic --drift`` with ``defaults``'s values
    (``--drift``: see :class:`~.protocol.Protocol`), and ``--compile --across-rounds`` where
    ``whole_networks`` (commands that time whole networks with
    :func:`~.networks.measure_networks`; a calibration campaign compiles each benchmark anew
    every round and pools its rounds). ``otherwise``: (a mode of the command, e.g.
    ``"--for"``, and its defaults): the options whose defaults differ there are left
    ``None`` for :func:`fill_defaults`, and their help names both defaults."""
    def default(name: str, value) -> tuple[object, str]:
        other = getattr(otherwise[1], name) if otherwise else value
        if name == "compile_once":
            value, other = COMPILE_CHOICES[value], COMPILE_CHOICES[other]
        if other == value:
            return value, f"default {value}"
        return None, f"default {value}; {other} with {otherwise[0]}"

    group = parser.add_argument_group("measuring protocol")
    value, shown = default("rounds", defaults.rounds)
    group.add_argument("--rounds", type=int, default=value, help=f"interleaved rounds over all networks ({shown})")
    value, shown = default("warmup", defaults.warmup)
    group.add_argument("--warmup", type=int, default=value, help=f"untimed inferences per network and round ({shown})")
    value, shown = default("repeats", defaults.repeats)
    group.add_argument("--repeats", type=int, default=value, help=f"timed inferences per network and round ({shown})")
    value, shown = default("statistic", defaults.statistic)
    group.add_argument("--statistic", choices=tuple(statistics), default=value,
                       help=f"statistic of the pooled runs of all rounds ({shown})")
    value, shown = default("drift", defaults.drift)
    group.add_argument("--drift", choices=DRIFTS, default=value,
                       help="canary: divide each round by a canary network timed before it (for a machine "
                            "whose speed drifts; see annette-torch noise). With min or p10, use it where rounds are "
                            "combined by their median (--across-rounds median): pooled, a noisy correction made "
                            f"timings less reproducible; {shown}")
    if whole_networks:
        value, shown = default("across_rounds", defaults.across_rounds)
        group.add_argument("--across-rounds", choices=ACROSS_ROUNDS, default=value,
                           help="pool: the statistic of all rounds' runs pooled; median: the median over rounds of "
                                "each round's statistic (with --drift canary, for a host with slow spells; see "
                                f"annette-torch noise) ({shown})")
        value, shown = default("compile_once", defaults.compile_once)
        group.add_argument("--compile", choices=COMPILE_CHOICES, default=value,
                           help="once: compile each network once and keep it for all its rounds (rounds cost "
                                "only their runs; every network is held in memory); each-round: build and compile "
                                f"it anew every round, one in memory at a time ({shown})")


def fill_defaults(args: argparse.Namespace, defaults: Protocol) -> None:
    """Set the protocol options :func:`add_protocol_arguments` left ``None`` (those whose
    default depends on the command's mode) to ``defaults``'s values, in ``args``."""
    for option in ("rounds", "warmup", "repeats", "statistic", "drift", "across_rounds"):
        if getattr(args, option, "") is None:
            setattr(args, option, getattr(defaults, option))
    if getattr(args, "compile", "") is None:
        args.compile = COMPILE_CHOICES[defaults.compile_once]


def protocol_from(args: argparse.Namespace, backend, defaults: Protocol = Protocol()) -> Protocol:
    """The :class:`Protocol` the options of :func:`add_protocol_arguments` ask for on
    ``backend``; ``ValueError`` names a bad one."""
    check_drift(backend, args.drift)
    return Protocol(rounds=args.rounds, warmup=args.warmup, repeats=args.repeats, statistic=args.statistic,
                    drift=args.drift, canary_repeats=defaults.canary_repeats,
                    compile_once=getattr(args, "compile", COMPILE_CHOICES[defaults.compile_once]) == "once",
                    across_rounds=getattr(args, "across_rounds", defaults.across_rounds))


def whole_network_protocol(args: argparse.Namespace, backend) -> Protocol:
    """The protocol a command times whole networks with on ``backend`` (``check``, ``adapt``,
    the accuracy benchmark): the options given, the others from
    :func:`~.networks.network_protocol`."""
    defaults = network_protocol(backend)
    fill_defaults(args, defaults)
    return protocol_from(args, backend, defaults)
