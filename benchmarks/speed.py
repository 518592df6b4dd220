"""How fast is the estimator? Median time to trace a model, and to estimate an already
traced graph, per model and profile; the time to load each built-in profile; and the size
of the installed package (a benchmark: prints tables, asserts nothing).

    python benchmarks/speed.py [--models resnet50,mobilenet_v2,vit_b_16] [--repeats 21] [--load-repeats 5]
                               [--startup-repeats 5]

Targets (issue 2): estimate of a traced graph <= 1 ms; trace + estimate of resnet50 <= 100 ms.
Targets (issue 13): loading a built-in profile <= 100 ms; installed package <= 6 MB.
Target (issue 15): ``annette-torch estimate torchvision:resnet18`` in a fresh process at most
1.5 s more than ``python -c "import torch, torchvision"``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torchvision

from annette_torch import Estimator, load_profile, trace
from annette_torch.profiles import builtin_names

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) wall time in ms over ``repeats`` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), min(samples), max(samples)


def installed_files(root: Path = ROOT) -> list[Path]:
    """The package folder's files, caches left out: what a wheel installs, as long as
    pyproject.toml's package-data covers every data file in it."""
    return sorted(f for f in (root / "annette_torch").rglob("*")
                  if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")


def startup_s(repeats: int) -> tuple[float, float]:
    """Median wall time (s) of ``annette-torch estimate torchvision:resnet18`` and of
    ``python -c "import torch, torchvision"``, each in a fresh process, run alternately."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    commands = ([sys.executable, "-m", "annette_torch.cli", "estimate", "torchvision:resnet18"],
                [sys.executable, "-c", "import torch, torchvision"])
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for command, times in zip(commands, samples):
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,vit_b_16")
    parser.add_argument("--profiles", default="openvino-cpu,ncs2-myriad,zcu102-dpu")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--load-repeats", type=int, default=5, help="loads of each built-in profile to time")
    parser.add_argument("--startup-repeats", type=int, default=5, help="fresh processes per startup command")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads pinned to 1, {args.repeats} repeats after warm-up; "
          f"times in ms as median [min, max]")
    header = f"{'model':<14}{'profile':<13}{'layers':>7}{'kernels':>8}  {'trace':>22}  {'estimate (traced)':>22}  {'trace+estimate':>22}"
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        model = torchvision.models.get_model(name, weights=None).eval()
        shape = (1, 3, 224, 224)
        graph = trace(model, input_shape=shape)
        trace_t = timed(lambda: trace(model, input_shape=shape), args.repeats)
        for profile in args.profiles.split(","):
            est = Estimator(profile)
            kernels = len(est.report(graph))
            est_t = timed(lambda: est(graph), args.repeats)
            both_t = timed(lambda: est(model, input_shape=shape), args.repeats)
            fmt = lambda t: f"{t[0]:8.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
            print(f"{name:<14}{profile:<13}{len(graph):>7}{kernels:>8}  {fmt(trace_t):>22}  "
                  f"{fmt(est_t):>22}  {fmt(both_t):>22}")

    print(f"\nprofile load (load_profile, {args.load_repeats} loads after one warm-up), ms as median [min, max]")
    header = f"{'profile':<18}{'files':>6}{'size (kB)':>11}  {'load':>24}"
    print(header)
    print("-" * len(header))
    for name in builtin_names():
        profile = load_profile(name)
        source = Path(profile.source)
        files = [source] + sorted(source.parent.glob(f"{name}.*.npz"))
        load_t = timed(lambda: load_profile(name), args.load_repeats)
        print(f"{name:<18}{len(files):>6}{sum(f.stat().st_size for f in files) / 1e3:>11.0f}  "
              f"{load_t[0]:8.1f} [{load_t[1]:.1f}, {load_t[2]:.1f}]")
    files = installed_files()
    profiles = [f for f in files if "builtin" in f.parts]
    print(f"\ninstalled package (the annette_torch folder, as a wheel installs it): {len(files)} files, "
          f"{sum(f.stat().st_size for f in files) / 1e6:.2f} MB, of which built-in profiles "
          f"{len(profiles)} files, {sum(f.stat().st_size for f in profiles) / 1e6:.2f} MB")
    cli_s, torch_s = startup_s(args.startup_repeats)
    print(f"\nstartup (median of {args.startup_repeats} fresh processes each, run alternately): "
          f"`annette-torch estimate torchvision:resnet18` {cli_s:.2f} s, `python -c \"import torch, torchvision\"` "
          f"{torch_s:.2f} s: {cli_s - torch_s:+.2f} s (target <= +1.5 s)")


if __name__ == "__main__":
    main()
