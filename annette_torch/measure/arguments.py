"""The measuring protocol's command-line options, shared by the commands, benchmarks and examples."""
from __future__ import annotations

import argparse
from typing import Sequence

from .canary import check_drift
from .protocol import DRIFTS, STATISTICS, Protocol


def add_protocol_arguments(parser: argparse.ArgumentParser, defaults: Protocol = Protocol(),
                           statistics: Sequence[str] = STATISTICS) -> None:
    """Add ``--rounds --warmup --repeats --statistic --drift`` with ``defaults``'s values
    (``--drift``: see :class:`~.protocol.Protocol`, default none)."""
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
                            f"whose speed drifts; see annette-torch noise); default {defaults.drift}")


def protocol_from(args: argparse.Namespace, backend, defaults: Protocol = Protocol()) -> Protocol:
    """The :class:`Protocol` the options of :func:`add_protocol_arguments` ask for on
    ``backend``; ``ValueError`` names a bad one."""
    check_drift(backend, args.drift)
    return Protocol(rounds=args.rounds, warmup=args.warmup, repeats=args.repeats, statistic=args.statistic,
                    drift=args.drift, canary_repeats=defaults.canary_repeats)
