"""How many candidates per second can a search score in the MobileNetV2-style space?
A benchmark: prints a table, asserts nothing.

    python benchmarks/search_speed.py [--resolution 224] [--cached 2000] [--uncached 20] [--measured 3]
    python benchmarks/search_speed.py --smoke

Methods, each over random candidates of ``MobileNetV2Space`` (fixed seed):

* ``cache, cold``: ``SignatureCache(estimator).blocks_cost(space.blocks(arch))`` with an
  empty cache, so every new block is built and traced once;
* ``cache, warm (same)``: the same candidates again (every block is a hit);
* ``cache, warm (new)``: as many new candidates after that (mostly hits, as in a search);
* ``no cache``: ``Estimator()(space.build(arch), input_shape=...)``: build, trace and
  estimate the whole network per candidate;
* ``measure``: ``get_backend(..., threads=1).measure(space.build(arch), ...)``: build,
  ONNX export, compile and ``--warmup`` + ``--repeats`` timed runs per candidate.

Targets (issue): >= 1,000 candidates/s with the cache; >= 100x faster than measuring.
Torch runs on one thread, as the measuring backend does.
"""
from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import torch

from annette_torch import Estimator
from annette_torch.backends import available_backends, get_backend
from annette_torch.estimator import DEFAULT_PROFILE
from annette_torch.nas import MobileNetV2Space, SignatureCache

SMOKE = {"cached": 300, "uncached": 5, "measured": 1, "warmup": 2, "repeats": 5}


def rate(fn: Callable[[object], object], archs: list) -> tuple[int, float]:
    """(candidates, seconds) for calling ``fn`` on each of ``archs``."""
    start = time.perf_counter()
    for arch in archs:
        fn(arch)
    return len(archs), time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--cached", type=int, default=2000, help="candidates scored through the cache")
    parser.add_argument("--uncached", type=int, default=20, help="candidates built, traced and estimated")
    parser.add_argument("--measured", type=int, default=3, help="candidates measured on the backend (at least 1)")
    parser.add_argument("--backend", default="openvino-cpu", choices=available_backends())
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true",
                        help="quick run: " + ", ".join(f"{k}={v}" for k, v in SMOKE.items()))
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    if min(args.cached, args.uncached, args.measured) < 1:
        parser.error("--cached, --uncached and --measured need at least 1 candidate each")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    space = MobileNetV2Space(resolution=args.resolution)
    shape = (1, 3, args.resolution, args.resolution)
    rng = random.Random(args.seed)
    first = [space.sample(rng) for _ in range(args.cached)]
    fresh = [space.sample(rng) for _ in range(args.cached)]
    estimator = Estimator(args.profile)
    cache = SignatureCache(estimator)
    backend = get_backend(args.backend, threads=1)
    score = lambda arch: cache.blocks_cost(space.blocks(arch))
    rows = [("cache, cold", *rate(score, first))]
    traced = cache.misses
    rows += [("cache, warm (same)", *rate(score, first)),
             ("cache, warm (new)", *rate(score, fresh)),
             ("no cache", *rate(lambda arch: estimator(space.build(arch), input_shape=shape),
                                first[:args.uncached])),
             (f"measure {args.backend}", *rate(lambda arch: backend.measure(
                 space.build(arch), shape, warmup=args.warmup, repeats=args.repeats), first[:args.measured]))]
    print(f"MobileNetV2Space(resolution={args.resolution}), profile {args.profile!r}, torch on 1 thread; "
          f"{args.backend}: 1 thread, {args.warmup} warm-up + {args.repeats} timed runs")
    print(f"cold pass traced {traced} distinct blocks; "
          f"the new-candidates pass traced {cache.misses - traced} more")
    measure_rate = rows[-1][1] / rows[-1][2]
    print(f"{'method':<24}{'candidates':>11}{'seconds':>10}{'candidates/s':>14}{'vs measuring':>14}")
    for name, count, seconds in rows:
        print(f"{name:<24}{count:>11}{seconds:>10.3f}{count / seconds:>14,.1f}"
              f"{count / seconds / measure_rate:>13,.0f}x")

if __name__ == "__main__":
    main()
