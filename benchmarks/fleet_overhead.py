"""What does measuring through a fleet cost per benchmark over a local campaign? (a
benchmark: prints a table, asserts nothing; target: under 50 ms per benchmark).

    python benchmarks/fleet_overhead.py [--backend torch-cpu] [--benchmarks 24] [--chunk 8]
                                        [--rounds 2 --warmup 5 --repeats 12]
    python benchmarks/fleet_overhead.py --tiny      # a functional check, not a measurement

The same ``--benchmarks`` small convolution benchmarks are measured twice, each into a
fresh store: by a local campaign (:func:`~annette_torch.calibration.run_campaign`) and
by a fleet campaign (:func:`~annette_torch.fleet.run_fleet_campaign`) on a Ray cluster
of this machine started once for the benchmark (one node advertising the backend).
Both measure each chunk with the same code (:func:`~annette_torch.calibration.campaign.measure_chunk`
in the campaign's worker process) and write the same rows; what the fleet adds per
benchmark is each chunk's round trip seen by the driver less the time the node spent
measuring it (handing the chunk to the node's measurer, shipping the rows back), over
the chunk's benchmarks: the fleet summary's ``overhead_ms_per_benchmark``. The fleet's
start-up (its measurer actor, the worker process, the store's canary reference) comes
once per run and per node, and is printed apart; so are both runs' wall times. Run it
on a quiet machine.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from annette_torch.calibration import load_sweep, run_campaign
from annette_torch.calibration.campaign import CHUNK, REPEATS, ROUNDS
from annette_torch.fleet import connected, run_fleet_campaign

TINY = {"benchmarks": 4, "chunk": 2, "rounds": 1, "warmup": 0, "repeats": 1}
TARGET_MS = 50.0


def benchmarks(folder: Path, count: int) -> list:
    """``count`` small convolution benchmarks (a sweep file written into ``folder``)."""
    path = folder / f"overhead-{count}.csv"
    path.write_text("family,count,n,h,w,c,f,k,stride,groups,op,pool\n"
                    f"conv2d,{count},,8..16,,8..32,8..32,1|3,,,,\n")
    return load_sweep(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch-cpu")
    parser.add_argument("--benchmarks", type=int, default=24)
    parser.add_argument("--chunk", type=int, default=CHUNK, help=f"benchmarks per Ray task (default {CHUNK})")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--tiny", action="store_true", help=f"a functional check: {TINY}")
    args = parser.parse_args()
    if args.tiny:
        for name, value in TINY.items():
            setattr(args, name, value)
    protocol = dict(rounds=args.rounds, warmup=args.warmup, repeats=args.repeats)
    with tempfile.TemporaryDirectory() as scratch, connected("local", args.backend):
        specs = benchmarks(Path(scratch), args.benchmarks)
        start = time.perf_counter()
        local = run_campaign(args.backend, specs, Path(scratch) / "local", progress=False, **protocol)
        local_s = time.perf_counter() - start
        [fleet] = run_fleet_campaign(args.backend, specs, str(Path(scratch) / "fleet"), address="local",
                                     progress=False, chunk=args.chunk, **protocol)
    for name, summary in (("local", local), ("fleet", fleet)):
        if summary.measured != args.benchmarks:
            raise SystemExit(f"the {name} campaign measured {summary.measured} of {args.benchmarks} benchmarks "
                             f"({summary.failed} failed)")
    print(f"{args.backend}: {args.benchmarks} benchmarks, {args.rounds} round(s) of {args.warmup} warm-up + "
          f"{args.repeats} runs each, chunks of {args.chunk}")
    print(f"{'campaign':<10}{'wall s':>8}{'start-up s':>12}{'ms/benchmark':>14}")
    print(f"{'local':<10}{local_s:>8.2f}{'':>12}{local_s / args.benchmarks * 1e3:>14.1f}")
    print(f"{'fleet':<10}{fleet.wall_s:>8.2f}{fleet.startup_s:>12.2f}"
          f"{(fleet.wall_s - fleet.startup_s) / args.benchmarks * 1e3:>14.1f}")
    verdict = "under" if fleet.overhead_ms_per_benchmark < TARGET_MS else "OVER"
    print(f"fleet overhead: {fleet.overhead_ms_per_benchmark:.2f} ms per benchmark ({verdict} the {TARGET_MS:g} ms "
          f"target){'; --tiny: a functional check, not a measurement' if args.tiny else ''}")


if __name__ == "__main__":
    main()
