"""Does the canary's drift correction pay, and how many canary runs does it need? A
simulation of the measuring protocol on synthetic machines (a benchmark: prints a table,
measures nothing, takes a few seconds).

    python benchmarks/drift_correction.py [--seeds 20]

Eight networks of 0.2 to 10 ms are measured in 3 interleaved rounds of 10 runs by the
real protocol code (:func:`annette_torch.measure.protocol.interleave`) on three
simulated machines: *quiet* (1 % noise that only slows runs down), *bursty* (2 % noise
and 5 % of runs slowed by a random burst) and *drifting* (1 % slower every second, in
+-5 % waves, and 2 % bursts). Each network takes 0.3 s to prepare (export, compile). The
table gives the mean round-to-round difference |round(r+1) - round(r)| / mean of the
rounds' p10 values, without correction, with the canary before and after each round
(what the protocol does) and with the median of the four nearest canary timings, for 5
and 20 canary runs per timing.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from annette_torch.measure.protocol import Protocol, combine, interleave

TRUE_MS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 0.3, 3.0)
MACHINES = {"quiet": (lambda t: 1.0, 0.01, 0.0), "bursty": (lambda t: 1.0, 0.02, 0.05),
            "drifting": (lambda t: (1 + 0.01 * t) * (1 + 0.05 * math.sin(t / 3)), 0.01, 0.02)}


class Machine:
    """A run takes ``true_ms * drift(t) * (1 + |N(0, sigma)|)``, times a burst with
    probability ``burst``; the clock advances by each run and by the set-up."""

    def __init__(self, drift, sigma: float, burst: float, seed: int) -> None:
        self.t, self.drift, self.sigma, self.burst = 0.0, drift, sigma, burst
        self.rng = np.random.default_rng(seed)

    def runs(self, true_ms: float, count: int, setup_s: float) -> list[float]:
        self.t += setup_s
        out = []
        for _ in range(count):
            ms = true_ms * self.drift(self.t) * (1 + abs(self.rng.normal(0, self.sigma)))
            if self.rng.random() < self.burst:
                ms *= 1 + self.rng.exponential(0.5)
            self.t += ms / 1e3
            out.append(ms)
        return out


def _round_to_round(measured) -> float:
    values = np.array(measured.round_values())
    return float(np.mean(np.abs(np.diff(values))) / np.mean(values))


def simulate(machine: str, canary_repeats: int, seed: int) -> dict[str, float]:
    """Mean round-to-round difference over the networks: raw, adjacent canaries, median of the four nearest."""
    drift, sigma, burst = MACHINES[machine]
    sim = Machine(drift, sigma, burst, seed)
    keys = list(range(len(TRUE_MS)))
    protocol = Protocol(rounds=3, repeats=10, canary_repeats=canary_repeats)
    session = interleave(keys, lambda k: sim.runs(TRUE_MS[k], protocol.repeats, 0.3), protocol,
                         canary=lambda: sim.runs(0.3, canary_repeats, 0.0))

    def median_of_four(key):
        canary = session.canary_ms
        return [float(np.median(canary[max(0, a - 1):b + 2])) / session.reference_ms for a, b in session._positions[key]]

    choices = {"uncorrected": lambda k: [1.0] * protocol.rounds, "canary before and after": session.factors,
               "median of 4 canaries": median_of_four}
    return {name: float(np.mean([_round_to_round(combine(session.results[k], factors(k), "p10")) for k in keys]))
            for name, factors in choices.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    print(f"mean round-to-round difference of p10 values, % (mean over {args.seeds} seeds)")
    print(f"{'machine':<10}{'canary runs':>12}{'uncorrected':>13}{'canary before and after':>25}"
          f"{'median of 4 canaries':>22}")
    for machine in MACHINES:
        for repeats in (5, 20):
            results = [simulate(machine, repeats, seed) for seed in range(args.seeds)]
            means = {name: 100 * np.mean([r[name] for r in results]) for name in results[0]}
            print(f"{machine:<10}{repeats:>12}{means['uncorrected']:13.3f}{means['canary before and after']:25.3f}"
                  f"{means['median of 4 canaries']:22.3f}")


if __name__ == "__main__":
    main()
