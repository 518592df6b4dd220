"""Runtime configurations of a grouped network (seed 002): which configuration fits a
latency budget on each target, by estimate and, on this machine's runtimes, by measurement.

    python search_examples/dynamic_groups.py [--budget-ms 0.4 | --budget-ms 0.4 ncs2-myriad=0.3 openvino-cpu/2=0.3]
        [--profile PATH ...] [--runtimes openvino-cpu/1 openvino-cpu/2 onnxruntime-cpu/1 torch-cpu/1] [--smoke]

It builds the dynamic network of seed 002 ("Incremental Training and Group Convolution
Pruning"), prunes it to its 25/50/75/100 % configurations (1..4 of 4 groups), estimates
each configuration on every built-in profile and every ``--profile`` file, and picks the
largest configuration within the budget per target. Then it measures every configuration
on the local runtimes (``backend/threads``, the runtime's thread count fixed) with the
measuring protocol (:mod:`annette_torch.measure.protocol`): 5 rounds in which the
configurations take turns, each round 20 warm-up and 40 timed runs, drift-corrected
against the canary; the 10th percentile of the 200 runs and their spread. It picks by measurement, checks that measured time grows
with the configuration, and compares with the estimate-based pick wherever a profile's
fingerprint names that runtime (backend and threads).
``--budget-ms``: one value for every target, and/or ``target=value`` pairs; a measured
runtime takes its ``backend/threads`` value, else its ``backend`` value, else the single value.
``--smoke``: two runtimes, one round of 5 warm-up and 20 timed runs (well under a minute).

Taken from seed 002: channels of every convolution split into four groups with no
connections between groups, each with its own activation (a ReLU over all channels is
elementwise, so it is), concatenated before the fully connected layer; the k-group
configuration keeps groups 1..k (the order of incremental training); CIFAR-10 input
(3x32x32, batch 1, 10 classes); an AlexNet topology with layer sizes reduced for CIFAR
and fewer FC layers. The seed's Table II is not in its text, so these are our choices:

- five stride-1 convolutions, 5x5, 5x5, 3x3, 3x3, 3x3 (AlexNet's 11x11/4 stem is for
  224-pixel images), with 48/128/192/192/128 channels in all (AlexNet's
  96/256/384/384/256 halved), i.e. 12/32/48/48/32 per group; ReLU after each; 3x3/2
  overlapping max pools after conv1, conv2 and conv5 as in AlexNet (32 -> 16 -> 8 -> 4
  pixels); one FC layer (the seed concatenates "before the fully connected layer"); no
  LRN (across channels it would couple neighbouring groups) and no dropout (a no-op at
  inference).
- grouped convolutions (``groups=k``, channels scaled by k/4) rather than k parallel
  branches: the seed calls its design group convolution and notes it is equivalent to
  copied branches; one grouped kernel per layer is also what a runtime executes. conv1
  reads the shared RGB image, so its k groups form one dense convolution of 12k filters.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from annette_torch import Estimator, LayerGraph, Profile, load_profile, trace
from annette_torch.backends import available_backends, get_backend
from annette_torch.measure import Measured, Protocol
from annette_torch.measure.networks import measure_networks
from annette_torch.profiles import builtin_names

GROUPS = 4
WIDTHS = (48, 128, 192, 192, 128)        # channels of conv1..conv5 with all four groups
KERNELS = (5, 5, 3, 3, 3)
POOL_AFTER = (0, 1, 4)                   # conv indices followed by a 3x3/2 max pool
INPUT_SHAPE = (1, 3, 32, 32)
NUM_CLASSES = 10
RUNTIMES = ("openvino-cpu/1", "openvino-cpu/2", "onnxruntime-cpu/1", "torch-cpu/1")
SMOKE_RUNTIMES = ("openvino-cpu/1", "torch-cpu/1")
FULL_TIMING, SMOKE_TIMING = Protocol(rounds=5, warmup=20, repeats=40), Protocol(rounds=1, warmup=5, repeats=20)
DEFAULT_BUDGET_MS = 0.4


class GroupedAlexNet(nn.Module):
    """The CIFAR AlexNet of seed 002 with ``active_groups`` (1..4) of its four groups."""

    def __init__(self, active_groups: int = GROUPS, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        if active_groups not in range(1, GROUPS + 1):
            raise ValueError(f"active_groups must be 1..{GROUPS}, got {active_groups!r}")
        self.active_groups = active_groups
        self.num_classes = num_classes
        layers: list[nn.Module] = []
        in_channels = INPUT_SHAPE[1]
        for i, (width, kernel) in enumerate(zip(WIDTHS, KERNELS)):
            out_channels = width * active_groups // GROUPS
            groups = 1 if i == 0 else active_groups   # conv1: every group reads the whole image
            layers += [nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, groups=groups),
                       nn.ReLU()]
            if i in POOL_AFTER:
                layers.append(nn.MaxPool2d(3, stride=2, padding=1))
            in_channels = out_channels
        self.features = nn.Sequential(*layers)
        side = INPUT_SHAPE[2] // 2 ** len(POOL_AFTER)
        self.classifier = nn.Linear(in_channels * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def prune_groups(model: GroupedAlexNet, active_groups: int) -> GroupedAlexNet:
    """Group-convolution pruning: a ``GroupedAlexNet(active_groups)`` holding the first
    ``active_groups`` groups of ``model``'s weights. Every group is a leading block of each
    weight dimension it scales (conv filters, FC input features), so each pruned tensor
    is the leading slice of the full one."""
    pruned = GroupedAlexNet(active_groups, model.num_classes)
    full = model.state_dict()
    with torch.no_grad():
        for name, tensor in pruned.state_dict().items():
            tensor.copy_(full[name][tuple(slice(n) for n in tensor.shape)])
    return pruned.eval()


def config_name(k: int) -> str:
    return f"{100 * k // GROUPS}%"


def parse_budgets(items: list[str]) -> dict[str | None, float]:
    """``["0.4", "ncs2-myriad=0.3"]`` -> ``{None: 0.4, "ncs2-myriad": 0.3}``."""
    budgets: dict[str | None, float] = {}
    for item in items:
        target, _, value = item.rpartition("=")
        try:
            budgets[target or None] = float(value)
        except ValueError:
            raise ValueError(f"--budget-ms: expected MS or TARGET=MS, got {item!r}") from None
    return budgets


def budget_for(budgets: dict[str | None, float], *keys: str) -> float | None:
    """The budget of the first key that has one, else the single value (or None)."""
    return next((budgets[key] for key in keys if key in budgets), budgets.get(None))


def parse_runtime(spec: str) -> tuple[str, int]:
    """``"openvino-cpu/2"`` -> ``("openvino-cpu", 2)``; a bare backend name means 1 thread."""
    name, _, threads = spec.partition("/")
    threads = threads or "1"
    if name not in available_backends():
        raise ValueError(f"unknown backend {name!r}; available: {', '.join(available_backends())}")
    if not threads.isdigit() or int(threads) < 1:
        raise ValueError(f"runtime {spec!r}: threads must be a positive integer")
    return name, int(threads)


def check_budget_targets(budgets: dict[str | None, float], targets: list[str]) -> None:
    """Fail on a ``target=value`` budget whose target is neither a profile nor a runtime."""
    unknown = [key for key in budgets if key is not None and key not in targets]
    if unknown:
        raise SystemExit(f"--budget-ms: unknown target(s) {', '.join(unknown)}; "
                         f"known: {', '.join(targets)}")


def load_profiles(paths: list[str]) -> dict[str, Profile]:
    """Built-in profiles by name, then ``--profile`` files (by their name, or path if taken)."""
    profiles = {name: load_profile(name) for name in builtin_names()}
    for path in paths:
        profile = load_profile(path)
        profiles[path if profile.name in profiles else profile.name] = profile
    return profiles


def largest_fitting(times_ms: dict[int, float], budget_ms: float) -> int | None:
    return max((k for k, ms in times_ms.items() if ms <= budget_ms), default=None)


def choice_text(times_ms: dict[int, float], budget_ms: float | None) -> str:
    if budget_ms is None:
        return "no budget given"
    k = largest_fitting(times_ms, budget_ms)
    if k is None:
        return f"budget {budget_ms:g} ms -> none fits ({config_name(1)} takes {times_ms[1]:.3f} ms)"
    return f"budget {budget_ms:g} ms -> {config_name(k)} ({times_ms[k]:.3f} ms)"


def monotone_text(times_ms: dict[int, float], bands: dict[int, tuple[float, float]] | None = None) -> str:
    """"yes" if time strictly grows with the configuration, else the first pair that does
    not, noting when their (10th, 90th) percentile ``bands`` of runs overlap."""
    for k in range(2, GROUPS + 1):
        if times_ms[k] <= times_ms[k - 1]:
            noisy = bands is not None and bands[k][1] >= bands[k - 1][0]
            return (f"no: {config_name(k)} {times_ms[k]:.3f} ms <= {config_name(k - 1)} "
                    f"{times_ms[k - 1]:.3f} ms{' (within run-to-run spread)' if noisy else ''}")
    return "yes"


def print_table(title: str, columns: dict[str, dict[int, str]]) -> None:
    """Configurations as rows, one column per target; cells are preformatted."""
    widths = {label: max(len(label), *(len(cell) for cell in cells.values())) for label, cells in columns.items()}
    print(f"\n{title}")
    print("config  " + "  ".join(f"{label:>{widths[label]}}" for label in columns))
    for k in range(1, GROUPS + 1):
        print(f"{config_name(k):<6}  " + "  ".join(f"{cells[k]:>{widths[label]}}" for label, cells in columns.items()))


def print_configurations(models: dict[int, GroupedAlexNet]) -> dict[int, LayerGraph]:
    """Print parameters and operations per configuration; return the traced graphs."""
    graphs = {k: trace(model, input_shape=INPUT_SHAPE) for k, model in models.items()}
    print(f"Seed-002 grouped AlexNet for CIFAR-10, input {'x'.join(map(str, INPUT_SHAPE))}; "
          f"configuration k/{GROUPS} keeps groups 1..k")
    print_table("Configurations", {
        "groups": {k: str(k) for k in models},
        "parameters": {k: f"{sum(p.numel() for p in m.parameters()):,}" for k, m in models.items()},
        "MOPs": {k: f"{g.total('ops') / 1e6:.2f}" for k, g in graphs.items()},
    })
    return graphs


def estimate_all(profiles: dict[str, Profile], graphs: dict[int, LayerGraph]) -> dict[str, dict[int, float]]:
    return {label: {k: Estimator(profile)(graph) for k, graph in graphs.items()}
            for label, profile in profiles.items()}


def report_estimates(estimates: dict[str, dict[int, float]], budgets: dict[str | None, float]) -> None:
    print_table("Estimated latency (ms)", {label: {k: f"{ms:.3f}" for k, ms in times.items()}
                                           for label, times in estimates.items()})
    print("\nLargest configuration within budget, by estimate")
    for label, times in estimates.items():
        print(f"  {label:<20} {choice_text(times, budget_for(budgets, label))}; "
              f"monotone: {monotone_text(times)}")


def measure_all(runtimes: list[str], models: dict[int, GroupedAlexNet],
                timing: Protocol) -> dict[str, dict[int, Measured]]:
    """Per runtime and configuration, the measurement with the measuring protocol:
    configurations take turns within each round, so a change in the machine's load
    hits all of them alike, and each round is drift-corrected against the canary."""
    measured = {}
    for runtime in runtimes:
        name, threads = parse_runtime(runtime)
        backend = get_backend(name, threads=threads)
        session = measure_networks(backend, [(k, lambda model=model: model, INPUT_SHAPE) for k, model in models.items()],
                                   timing, progress=False)
        if session.failures:
            raise SystemExit(f"{runtime}: {next(iter(session.failures.values()))}")
        measured[runtime] = session.measured
    return measured


def matching_profiles(profiles: dict[str, Profile], runtime: str) -> list[str]:
    """Labels of the profiles whose fingerprint names this ``backend/threads``."""
    name, threads = parse_runtime(runtime)
    return [label for label, p in profiles.items()
            if p.fingerprint.get("backend") == name and p.fingerprint.get("threads") == threads]


def report_measurements(measured: dict[str, dict[int, Measured]], timing: Protocol,
                        estimates: dict[str, dict[int, float]], profiles: dict[str, Profile],
                        budgets: dict[str | None, float]) -> None:
    print_table(f"Measured latency on this machine (ms): {timing} (spread = (p90 - p10) / median)",
                {runtime: {k: f"{m.time_ms:.3f} ({m.spread:.0%})" for k, m in lats.items()}
                 for runtime, lats in measured.items()})
    print("\nLargest configuration within budget, by measurement and by estimate")
    for runtime, lats in measured.items():
        times = {k: m.time_ms for k, m in lats.items()}
        bands = {k: tuple(np.percentile(m.runs_ms, [10, 90])) for k, m in lats.items()}
        budget = budget_for(budgets, runtime, runtime.partition("/")[0])
        measured_k = largest_fitting(times, budget) if budget is not None else None
        print(f"  {runtime:<20} measured: {choice_text(times, budget)}; monotone: {monotone_text(times, bands)}")
        for line in comparison_lines(runtime, measured_k, budget, estimates, profiles):
            print(f"  {'':<20} {line}")


def comparison_lines(runtime: str, measured_k: int | None, budget: float | None,
                     estimates: dict[str, dict[int, float]], profiles: dict[str, Profile]) -> list[str]:
    """One line per profile calibrated for ``runtime``: its choice and whether it agrees."""
    labels = matching_profiles(profiles, runtime)
    if not labels:
        threads = int(runtime.partition("/")[2])
        return [(f"no calibrated profile for {runtime} thread{'s' if threads > 1 else ''} yet: "
                 f"estimate-based choice not available")]
    lines = []
    for label in labels:
        text = choice_text(estimates[label], budget)
        if budget is not None:
            agrees = largest_fitting(estimates[label], budget) == measured_k
            text += f", {'agrees with' if agrees else 'differs from'} the measured choice"
        lines.append(f"estimate-based ({label}): {text}")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-ms", nargs="+", default=[str(DEFAULT_BUDGET_MS)], metavar="[TARGET=]MS",
                        help=f"latency budget: one value for all targets and/or TARGET=MS pairs "
                             f"(default {DEFAULT_BUDGET_MS})")
    parser.add_argument("--profile", action="append", default=[], metavar="PATH",
                        help="an extra profile JSON file (repeatable)")
    parser.add_argument("--runtimes", nargs="*", metavar="BACKEND/THREADS",
                        help=f"local runtimes to measure (default {' '.join(RUNTIMES)}; "
                             f"with --smoke {' '.join(SMOKE_RUNTIMES)}); --runtimes with no names: skip measuring")
    parser.add_argument("--smoke", action="store_true", help="fewer runtimes and timed runs")
    args = parser.parse_args(argv)
    if args.runtimes is None:
        args.runtimes = SMOKE_RUNTIMES if args.smoke else RUNTIMES
    try:
        args.budgets = parse_budgets(args.budget_ms)
        args.runtimes = ["/".join(map(str, parse_runtime(spec))) for spec in args.runtimes]
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    profiles = load_profiles(args.profile)
    backends = sorted({runtime.partition("/")[0] for runtime in args.runtimes})
    check_budget_targets(args.budgets, [*profiles, *args.runtimes, *backends])
    full = GroupedAlexNet(GROUPS)
    models = {k: prune_groups(full, k) for k in range(1, GROUPS + 1)}
    graphs = print_configurations(models)
    estimates = estimate_all(profiles, graphs)
    report_estimates(estimates, args.budgets)
    if args.runtimes:
        timing = SMOKE_TIMING if args.smoke else FULL_TIMING
        measured = measure_all(args.runtimes, models, timing)
        report_measurements(measured, timing, estimates, profiles, args.budgets)
    print(f"\ndone in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
