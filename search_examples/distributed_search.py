"""Random search over the MobileNetV2-style space on a Ray cluster: candidates estimated
by many workers at once (extra ``[fleet]``).

Each worker is a Ray actor that loads the profile once (``Estimator(profile)``, a
built-in name or a profile file that every node can read) and keeps a
``SignatureCache`` for its whole life, so after its first candidates it traces almost
no block anew and a candidate costs a few dictionary lookups. The driver draws
``--candidates`` architectures (seeded), hands them out in batches of ``--batch`` to
whichever worker is free, and keeps the candidate with the most MOPs (2 ops per
multiply-accumulate, a capacity proxy: nothing is trained) whose estimated latency is
at most ``--max-ms`` (default: MobileNetV2's estimate). The estimator is picklable by
value: at the end the driver estimates the winner itself and prints whether it agrees
with the worker's number (it must). The last line, ``SUMMARY {json}``, is for tools.

    python search_examples/distributed_search.py --ray local --workers 2 --candidates 4000
    python search_examples/distributed_search.py --ray auto --workers 16 --profile zcu102-dpu --max-ms 5
    python search_examples/distributed_search.py --smoke       # --ray local, 2 workers, 200 candidates
"""
from __future__ import annotations

import argparse
import json
import random
import time

from annette_torch import Estimator
from annette_torch.estimator import DEFAULT_PROFILE
from annette_torch.fleet import connected
from annette_torch.nas import MobileNetV2Space, SignatureCache

SMOKE = {"ray": "local", "workers": 2, "candidates": 200, "batch": 50, "resolution": 96}


class CandidateScorer:
    """A search worker: the profile loaded once, one signature cache for every batch."""

    def __init__(self, profile: str, resolution: int) -> None:
        self.space = MobileNetV2Space(resolution=resolution)
        self.cache = SignatureCache(Estimator(profile))

    def score(self, archs: list) -> list[tuple[float, float, float]]:
        """(estimated ms, ops, weight elements) of each architecture."""
        return [(c.time_ms, c.ops, c.weights) for c in self.cache.candidates(self.space, archs)]

    def cache_stats(self) -> dict[str, int]:
        """Block lookups answered from the cache and traced anew."""
        return {"hits": self.cache.hits, "misses": self.cache.misses}


def arch_text(arch) -> str:
    """Stages as ``k<kernel>e<expansion>w<width>d<depth>``, space-separated."""
    return " ".join(f"k{s.kernel}e{s.expansion}w{s.width:g}d{s.depth}" for s in arch)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray", default="local", help="Ray cluster: local (start one here), auto, or HOST:PORT")
    parser.add_argument("--workers", type=int, default=2, help="search workers (Ray actors, one CPU each)")
    parser.add_argument("--candidates", type=int, default=4000, help="architectures to draw")
    parser.add_argument("--batch", type=int, default=100, help="architectures per task")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name or .json path")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--max-ms", type=float, help="latency budget (default: MobileNetV2's estimate)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help=f"a few seconds: {SMOKE}")
    args = parser.parse_args(argv)
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    if min(args.workers, args.candidates, args.batch) < 1:
        parser.error("--workers, --candidates and --batch must be positive")
    return args


def search(args: argparse.Namespace, ray) -> dict:
    """Score every drawn candidate on the workers; the best within the budget and the counts."""
    space = MobileNetV2Space(resolution=args.resolution)
    local = SignatureCache(Estimator(args.profile))
    budget_ms = args.max_ms or local.blocks_cost(space.blocks(space.mobilenet_v2())).time_ms
    rng = random.Random(args.seed)
    archs = [space.sample(rng) for _ in range(args.candidates)]
    batches = [archs[i:i + args.batch] for i in range(0, len(archs), args.batch)]
    scorer = ray.remote(num_cpus=1)(CandidateScorer)
    workers = [scorer.remote(args.profile, args.resolution) for _ in range(args.workers)]
    ray.get([w.cache_stats.remote() for w in workers])          # loaded before the clock starts
    start = time.perf_counter()
    pending, results = {}, {}
    free, queue = list(workers), list(range(len(batches)))
    while queue or pending:
        while free and queue:
            worker, index = free.pop(), queue.pop(0)
            pending[worker.score.remote(batches[index])] = (worker, index)
        [ref], _ = ray.wait(list(pending))
        worker, index = pending.pop(ref)
        results[index] = ray.get(ref)
        free.append(worker)
    seconds = time.perf_counter() - start
    scored = [(arch, cost) for i, batch in enumerate(batches) for arch, cost in zip(batch, results[i])]
    feasible = [(arch, cost) for arch, cost in scored if cost[0] <= budget_ms]
    best = max(feasible, key=lambda item: item[1][1], default=None)
    stats = ray.get([w.cache_stats.remote() for w in workers])
    driver_ms = local.blocks_cost(space.blocks(best[0])).time_ms if best else None
    return {"budget_ms": budget_ms, "evaluated": len(scored), "feasible": len(feasible), "seconds": seconds,
            "workers": stats, "best": best, "driver_ms": driver_ms}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    print(f"random search on MobileNetV2Space(resolution={args.resolution}) with {args.workers} worker(s) on Ray "
          f"({args.ray}), profile {args.profile}: {args.candidates} candidates in batches of {args.batch}")
    with connected(args.ray, local_cpus=args.workers) as ray:
        found = search(args, ray)
    rate = found["evaluated"] / found["seconds"] if found["seconds"] > 0 else float("inf")
    print(f"search: {found['evaluated']} candidates in {found['seconds']:.2f} s ({rate:.0f} candidates/s), "
          f"{found['feasible']} within {found['budget_ms']:.3f} ms")
    for i, stats in enumerate(found["workers"]):
        print(f"worker {i}: {stats['hits']} block hits, {stats['misses']} blocks traced")
    summary = {"budget_ms": found["budget_ms"], "evaluated": found["evaluated"], "feasible": found["feasible"]}
    if found["best"] is None:
        print("no candidate within the budget; raise --max-ms")
    else:
        arch, (time_ms, ops, weights) = found["best"]
        print(f"best: {arch_text(arch)}: {time_ms:.3f} ms, {ops / 1e6:.1f} MOPs, {weights / 1e6:.2f} M weights")
        print(f"the driver's estimate of it: {found['driver_ms']:.3f} ms "
              f"({'equal to' if found['driver_ms'] == time_ms else 'DIFFERENT from'} the worker's)")
        summary.update(best=arch_text(arch), time_ms=time_ms, mops=ops / 1e6, driver_ms=found["driver_ms"])
    print("SUMMARY " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
