"""How well kernel times fitted to some networks of a search space predict the others, on recorded ground truth.

    python benchmarks/end_to_end_fit.py benchmarks/results/<ground-truth folder> [--profile P] [--sets nb201,mbv2]

What ``calibrate --for --method end-to-end`` does (:mod:`annette_torch.calibration.end_to_end`),
replayed on a ground truth that holds a search space's networks: fit the kernel times to
``--fitted`` networks' measured times, estimate the set's other networks with the fitted
table and the profile's models times the fit's scale for kernels outside it (as the
estimator does), and compare with one scale fitted on the same networks (what an adapted
profile does). The fitted and the predicted networks
come from one measuring session, so no session-to-session drift enters: this is the fit's
own accuracy. Per set: the first ``--fitted`` networks (as ``calibrate --for`` took them),
and ``--draws`` random draws of as many. Measures nothing.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

from accuracy import GROUND_TRUTH, ground_truth, networks
from annette_torch import Estimator, trace
from annette_torch.calibration.end_to_end import RecordedNetwork, fit_kernel_times, network_kernels


def errors(fitted: list[RecordedNetwork], others: list[RecordedNetwork], overhead_ms: float) -> tuple[float, float]:
    """Mean |error| (%) on ``others`` of one scale and of the kernel fit, both fitted on
    ``fitted``; with the fit, kernels outside the table take the profile's time times the
    fit's scale, as the estimator does (``scale.json``)."""
    fit = fit_kernel_times(fitted, overhead_ms)
    scaled = [overhead_ms + fit.scale * sum(c * p for c, p in n.kernels.values()) for n in others]
    table = [overhead_ms + sum(c * fit.times_ms.get(s, fit.scale * p) for s, (c, p) in n.kernels.items())
             for n in others]
    measured = np.array([n.measured_ms for n in others])
    return tuple(100 * float(np.mean(np.abs(np.array(e) / measured - 1))) for e in (scaled, table))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ground_truth", help="a results folder of benchmarks/accuracy.py (measured.csv)")
    parser.add_argument("--profile", default="openvino-cpu")
    parser.add_argument("--sets", default="nb201,mbv2")
    parser.add_argument("--fitted", type=int, default=10, help="networks the kernels are fitted to (default 10)")
    parser.add_argument("--draws", type=int, default=40, help="random draws of the fitted networks (default 40)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    measured, statistic = ground_truth(args.ground_truth)
    times = {(r.set, r.network): getattr(r, GROUND_TRUTH[statistic]) for r in measured.itertuples()}
    estimator = Estimator(args.profile)
    print(f"profile {args.profile}, ground truth {args.ground_truth} ({statistic}); mean |error| % on the networks "
          f"not fitted: one scale / the fitted kernel table")
    for name in args.sets.split(","):
        recorded = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for net in networks([name]):
                if (net.set, net.name) in times:
                    graph = trace(net.build(), input_shape=net.input_shape, name=net.name)
                    recorded.append(RecordedNetwork(net.name, float(times[net.set, net.name]),
                                                    network_kernels(estimator, graph)))
        if len(recorded) <= args.fitted:
            print(f"{name}: {len(recorded)} networks measured, too few to fit {args.fitted} and predict the rest")
            continue
        first = errors(recorded[:args.fitted], recorded[args.fitted:], estimator.profile.overhead_ms)
        rng = np.random.default_rng(0)
        draws = []
        for _ in range(args.draws):
            chosen = set(rng.choice(len(recorded), args.fitted, replace=False).tolist())
            draws.append(errors([n for i, n in enumerate(recorded) if i in chosen],
                                [n for i, n in enumerate(recorded) if i not in chosen], estimator.profile.overhead_ms))
        mean = np.mean(draws, axis=0)
        print(f"{name}: {len(recorded)} networks, {args.fitted} fitted; the first {args.fitted}: {first[0]:.1f} / "
              f"{first[1]:.1f}; {args.draws} random draws: {mean[0]:.1f} / {mean[1]:.1f} "
              f"(the table better in {np.mean([t < s for s, t in draws]) * 100:.0f} % of draws)")


if __name__ == "__main__":
    main()
