"""Multi-objective architecture search with Optuna: an accuracy proxy against estimated latency.

An Optuna study with the NSGA-II sampler (seeded) chooses, for each of the six searchable
stages of :class:`~annette_torch.nas.MobileNetV2Space`, a kernel size, an expansion ratio,
a width and a depth. Each trial returns two objectives:

* **an accuracy proxy, maximised** (``--proxy``). Neither is accuracy: nothing is trained.
  ``naswot`` (default) is the training-free score of Mellor et al., "Neural Architecture
  Search without Training" (ICML 2021): the network, with its random initial weights
  (seeded), runs one batch of random Gaussian images (``--batch``, seeded; no dataset);
  each ReLU6 unit gives every image a bit (active or not), K[i, j] counts the units on
  which images i and j agree, and the score is log|det K|. Networks whose units separate
  inputs better score higher; the paper reports a positive but loose rank correlation
  with trained accuracy, measured on real images. ``mops`` is the candidate's MOPs
  (2 ops per multiply-accumulate) as a capacity proxy.
* **the estimated latency, minimised**: ``SignatureCache(Estimator(--profile))``, so each
  distinct block is traced and estimated once and a repeated one costs a dictionary
  lookup; a candidate's latency equals ``Estimator(profile)(space.build(arch))``.

The study's Pareto front (``study.best_trials``, one row per distinct network) is printed
by latency; the last line, ``SUMMARY {json}``, is for tools. Nothing is measured.

    python search_examples/optuna_search.py                          # 300 trials at 224x224
    python search_examples/optuna_search.py --profile ncs2-myriad --proxy mops
    python search_examples/optuna_search.py --smoke                  # resolution 96, 40 trials, seconds

Needs Optuna: ``pip install 'annette_torch[search]'``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable, Hashable

import optuna
import torch
from torch import nn

from annette_torch import Estimator
from annette_torch.estimator import DEFAULT_PROFILE
from annette_torch.nas import MobileNetV2Space, SignatureCache, StageChoice

Arch = tuple[StageChoice, ...]
SMOKE = {"resolution": 96, "trials": 40, "population": 10, "batch": 8}
PROXIES = {"naswot": "NASWOT score (log|det K| of ReLU6 codes on random images; training-free, not accuracy)",
           "mops": "MOPs (a capacity proxy, not accuracy)"}


def naswot_score(model: nn.Module, images: torch.Tensor) -> float:
    """log|det K| with K[i, j] the number of ReLU/ReLU6 units on which images i and j are
    both active or both inactive (Mellor et al., 2021); batch norm uses batch statistics.
    ``model`` is left in train mode."""
    batch = images.shape[0]
    kernel = torch.zeros(batch, batch, dtype=torch.float64)

    def record(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        codes = (output.flatten(1) > 0).float()
        kernel.add_((codes @ codes.T + (1 - codes) @ (1 - codes).T).double())

    handles = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, (nn.ReLU, nn.ReLU6))]
    try:
        with torch.no_grad():
            model.train()(images)
    finally:
        for handle in handles:
            handle.remove()
    return float(torch.linalg.slogdet(kernel).logabsdet)


def random_images(batch: int, resolution: int, seed: int) -> torch.Tensor:
    """The proxy's input batch: standard normal images from a generator seeded with ``seed``."""
    return torch.randn(batch, 3, resolution, resolution, generator=torch.Generator().manual_seed(seed))


def seeded_network(space: MobileNetV2Space, arch: Arch, seed: int) -> nn.Module:
    """``space.build(arch)`` with weights drawn after ``torch.manual_seed(seed)``, leaving the
    global RNG as found: an architecture always gets the same initial weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return space.build(arch)


def suggest_arch(trial: optuna.Trial, space: MobileNetV2Space) -> Arch:
    """One :class:`StageChoice` per searchable stage (2-7), each field a categorical parameter."""
    return tuple(StageChoice(trial.suggest_categorical(f"stage{i + 2}_kernel", space.kernels),
                             trial.suggest_categorical(f"stage{i + 2}_expansion", space.expansions),
                             trial.suggest_categorical(f"stage{i + 2}_width", space.widths),
                             trial.suggest_categorical(f"stage{i + 2}_depth", space.depths(i)))
                 for i in range(space.num_stages))


def arch_of(params: dict, space: MobileNetV2Space) -> Arch:
    """The architecture a trial's parameters describe (the inverse of :func:`suggest_arch`)."""
    return tuple(StageChoice(*(params[f"stage{i + 2}_{field}"] for field in ("kernel", "expansion", "width", "depth")))
                 for i in range(space.num_stages))


def arch_text(arch: Arch) -> str:
    """Stages as ``k<kernel>e<expansion>w<width>d<depth>``, space-separated."""
    return " ".join(f"k{s.kernel}e{s.expansion}w{s.width:g}d{s.depth}" for s in arch)


def network_key(space: MobileNetV2Space, arch: Arch) -> Hashable:
    """The block signatures of ``arch``: choices that round to the same channels are one network."""
    return tuple(signature for signature, _, _ in space.blocks(arch))


def make_objective(args: argparse.Namespace, space: MobileNetV2Space,
                   cache: SignatureCache) -> Callable[[optuna.Trial], tuple[float, float]]:
    """(proxy score, estimated ms) of a trial's architecture; a network seen before reuses its score."""
    images = random_images(args.batch, args.resolution, args.seed) if args.proxy == "naswot" else None
    scores: dict[Hashable, float] = {}

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        arch = suggest_arch(trial, space)
        cost = cache.blocks_cost(space.blocks(arch))
        key = network_key(space, arch)
        if key not in scores:
            scores[key] = (cost.ops / 1e6 if images is None
                           else naswot_score(seeded_network(space, arch, args.seed), images))
        trial.set_user_attr("mops", cost.ops / 1e6)
        trial.set_user_attr("mweights", cost.weights / 1e6)
        return scores[key], cost.time_ms

    return objective


def pareto_front(study: optuna.Study, space: MobileNetV2Space) -> list[optuna.trial.FrozenTrial]:
    """The study's Pareto-optimal trials, one per distinct network (the first trial of
    each), by estimated latency."""
    front: dict[Hashable, optuna.trial.FrozenTrial] = {}
    for trial in sorted(study.best_trials, key=lambda t: t.number):
        front.setdefault(network_key(space, arch_of(trial.params, space)), trial)
    return sorted(front.values(), key=lambda t: (t.values[1], -t.values[0]))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="built-in profile name or .json path")
    parser.add_argument("--proxy", choices=sorted(PROXIES), default="naswot", help="the accuracy proxy to maximise")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--population", type=int, default=50, help="NSGA-II population size")
    parser.add_argument("--batch", type=int, default=16, help="random images the NASWOT score is computed on")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sampler, the images and the initial weights")
    parser.add_argument("--smoke", action="store_true",
                        help="quick run: " + ", ".join(f"{k}={v}" for k, v in SMOKE.items()))
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    for name in ("resolution", "trials", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive")
    if args.population < 2:
        parser.error("--population must be at least 2 (NSGA-II crosses two parents)")
    return args


def print_front(front: list[optuna.trial.FrozenTrial], space: MobileNetV2Space, proxy: str) -> None:
    print(f"\nPareto front: {len(front)} networks (stages 2-7 as k<kernel>e<expansion>w<width>d<depth>):")
    print(f"{'#':>2}{'trial':>7}{'est ms':>9}{proxy + ' score':>14}{'MOPs':>9}{'M weights':>11}  architecture")
    for rank, trial in enumerate(front, 1):
        score, ms = trial.values
        print(f"{rank:>2}{trial.number:>7}{ms:>9.3f}{score:>14.2f}{trial.user_attrs['mops']:>9.1f}"
              f"{trial.user_attrs['mweights']:>11.3f}  {arch_text(arch_of(trial.params, space))}")


def summary(args: argparse.Namespace, study: optuna.Study, front: list[optuna.trial.FrozenTrial],
            space: MobileNetV2Space, cache: SignatureCache) -> str:
    rows = [{"trial": t.number, "arch": [[s.kernel, s.expansion, s.width, s.depth] for s in arch_of(t.params, space)],
             "score": t.values[0], "est_ms": t.values[1], "mops": t.user_attrs["mops"],
             "mweights": t.user_attrs["mweights"]} for t in front]
    return "SUMMARY " + json.dumps({"profile": cache.estimator.profile.name, "proxy": args.proxy,
                                    "resolution": args.resolution, "batch": args.batch, "seed": args.seed,
                                    "trials": len(study.trials), "block_hits": cache.hits,
                                    "block_misses": cache.misses, "front": rows})


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = MobileNetV2Space(resolution=args.resolution)
    estimator = Estimator(args.profile)
    cache = SignatureCache(estimator)
    device = estimator.profile.fingerprint.get("device", estimator.profile.name)
    print(f"Optuna NSGA-II on MobileNetV2Space(resolution={args.resolution}): {args.trials} trials, population "
          f"{args.population}, seed {args.seed}")
    print(f"objectives: maximise {PROXIES[args.proxy]}"
          + (f", on {args.batch} images" if args.proxy == "naswot" else "")
          + f"; minimise estimated latency (profile {estimator.profile.name!r}, {device})")
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=optuna.samplers.NSGAIISampler(population_size=args.population, seed=args.seed))
    start = time.perf_counter()
    study.optimize(make_objective(args, space, cache), n_trials=args.trials, show_progress_bar=sys.stderr.isatty())
    seconds = time.perf_counter() - start
    distinct = len({network_key(space, arch_of(t.params, space)) for t in study.trials})
    print(f"study: {len(study.trials)} trials ({distinct} distinct networks) in {seconds:.2f} s; latency "
          f"estimates: block cache {cache.hits} hits / {cache.misses} misses, kernel cache {cache.kernel_hits} "
          f"hits / {cache.kernel_misses} misses")
    front = pareto_front(study, space)
    print_front(front, space, args.proxy)
    print(summary(args, study, front, space, cache))


if __name__ == "__main__":
    main()
