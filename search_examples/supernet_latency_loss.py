"""FBNet-style differentiable supernet search on scikit-learn's digits with a latency penalty.

A small supernet (stem conv, five searchable positions, head) classifies the 8x8 digits
upsampled to 16x16. Each position chooses among inverted-residual blocks (kernel 3/5,
expansion 1/3/6) and, where the shape is kept, a skip. Architecture logits per position
weight the candidates; the latency lookup table (LUT) holds each candidate's time
estimated by :class:`Estimator` through a :class:`SignatureCache`, and :class:`LatencyLoss`
adds the expected latency to the cross-entropy.

For every penalty weight the search starts from the same warmed-up supernet and the same
seed, and alternates a weight step (one path sampled from the architecture distribution,
as ProxylessNAS: a sixth of the cost of the full mixture; 80 % of the training split) with
an architecture step (FBNet: all candidates mixed with Gumbel-softmax weights, the
cross-entropy plus the latency penalty; the other 20 %). The discrete network is then
derived (argmax per position), fine-tuned briefly from the weights it inherits from the
supernet, and tested on a held-out split. The table gives its latency from the LUT and
from the estimator run on the derived ``nn.Module`` (they agree), and its latency
measured end to end on this machine.

    python search_examples/supernet_latency_loss.py [--weights 0,0.1,0.5,2] [--profile ncs2-myriad]
        [--mode additive|multiplicative] [--measure-backend openvino-cpu|none] [--seed 0] [--smoke]

The additive penalty is latency over the uniform architecture's expected latency; the
cross-entropy's pull on the logits is weak, so 0.5 already reaches (nearly) the fastest
network. Full run: about two minutes on two cores; ``--smoke`` (first and last weight,
few epochs, 20 measure repeats): about 20 s, 35 s with both cores busy.
"""
from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from annette_torch import Estimator
from annette_torch.backends import get_backend
from annette_torch.measure import Protocol
from annette_torch.measure.networks import measure_networks
from annette_torch.estimator import DEFAULT_PROFILE
from annette_torch.nas import InvertedResidual, LatencyLoss, LatencyLUT, SignatureCache

RESOLUTION = 16                      # digits are upsampled from 8x8 so kernel sizes matter
STEM_CHANNELS, HEAD_CHANNELS, CLASSES = 8, 64, 10
#: Searchable positions: (input channels, output channels, stride).
POSITIONS = ((8, 8, 1), (8, 16, 2), (16, 16, 1), (16, 24, 2), (24, 24, 1))
#: Inverted-residual candidates: (expansion, kernel).
BLOCKS = tuple((e, k) for e in (1, 3, 6) for k in (3, 5))
INPUT_SHAPE = (1, 1, RESOLUTION, RESOLUTION)


@dataclass(frozen=True)
class Candidate:
    label: str
    signature: tuple
    build: Callable[[], nn.Module]


def stem() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, STEM_CHANNELS, 3, 1, 1, bias=False), nn.BatchNorm2d(STEM_CHANNELS),
                         nn.ReLU6())


def head() -> nn.Module:
    cin = POSITIONS[-1][1]
    return nn.Sequential(nn.Conv2d(cin, HEAD_CHANNELS, 1, bias=False), nn.BatchNorm2d(HEAD_CHANNELS), nn.ReLU6(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(HEAD_CHANNELS, CLASSES))


def search_space() -> list[tuple[tuple[int, ...], list[Candidate]]]:
    """(input shape, candidates) per position; signatures name everything that shapes a block."""
    space, size = [], RESOLUTION
    for cin, cout, stride in POSITIONS:
        shape = (1, cin, size, size)
        candidates = [Candidate(f"e{e}k{k}", ("mbconv", cin, cout, stride, e, k, size),
                                lambda cin=cin, cout=cout, s=stride, e=e, k=k: InvertedResidual(cin, cout, s, e, k))
                      for e, k in BLOCKS]
        if stride == 1 and cin == cout:
            candidates.append(Candidate("skip", ("skip", cin, size), nn.Identity))
        space.append((shape, candidates))
        size //= stride
    return space


def fixed_blocks() -> list[tuple]:
    """(signature, build, input shape) of the parts that are not searched."""
    size = RESOLUTION
    for _, _, stride in POSITIONS:
        size //= stride
    return [(("stem", RESOLUTION), stem, INPUT_SHAPE),
            (("head", POSITIONS[-1][1], size), head, (1, POSITIONS[-1][1], size, size))]


def build_lut(space, profile: str) -> tuple[LatencyLUT, Estimator]:
    estimator = Estimator(profile)
    positions = [(shape, [(c.signature, c.build) for c in candidates]) for shape, candidates in space]
    return LatencyLUT.build(SignatureCache(estimator), positions, fixed_blocks()), estimator


class Supernet(nn.Module):
    """Stem, one :class:`nn.ModuleList` of candidates per position, head; the forward mixes
    each position's candidate outputs with ``weights[p, c]``. Candidates of weight exactly 0
    are not run: a one-hot (detached) ``weights`` runs one path; a softmax weight is 0 only
    on underflow, where its gradient is 0 too."""

    def __init__(self, space) -> None:
        super().__init__()
        self.stem, self.head = stem(), head()
        self.positions = nn.ModuleList(nn.ModuleList(c.build() for c in candidates) for _, candidates in space)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for p, ops in enumerate(self.positions):
            x = sum(weights[p, c] * op(x) for c, op in enumerate(ops) if weights[p, c] != 0)
        return self.head(x)

    def derive(self, choices: list[int]) -> nn.Sequential:
        """The discrete network of ``choices``, with the supernet's weights (a copy)."""
        chosen = [ops[c] for ops, c in zip(self.positions, choices)]
        return copy.deepcopy(nn.Sequential(self.stem, *chosen, self.head))


def digits(seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Train-weights / train-architecture / test splits of the digits, 16x16, standardised."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(RESOLUTION, RESOLUTION), mode="bilinear", align_corners=False)
    y = torch.tensor(data.target)
    idx = np.arange(len(y))
    train, test = train_test_split(idx, test_size=0.25, stratify=data.target, random_state=seed)
    weights, arch = train_test_split(train, test_size=0.2, stratify=data.target[train], random_state=seed)
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return {name: (x[i], y[i]) for name, i in (("weights", weights), ("arch", arch), ("train", train), ("test", test))}


def batches(split, batch_size: int, generator: torch.Generator):
    x, y = split
    order = torch.randperm(len(y), generator=generator)
    for start in range(0, len(y), batch_size):
        i = order[start:start + batch_size]
        yield x[i], y[i]


def weight_step(net: Supernet, optimizer, lut: LatencyLUT, logits: torch.Tensor, x, y) -> None:
    """One step of the supernet's weights on one path sampled from softmax(logits) (a hard
    Gumbel sample, as in ProxylessNAS: one path costs a sixth of the full mixture)."""
    optimizer.zero_grad()
    F.cross_entropy(net(x, lut.weights(logits.detach(), gumbel=True, hard=True).detach()), y).backward()
    optimizer.step()


def warm_up(net: Supernet, lut: LatencyLUT, data, epochs: int, generator: torch.Generator) -> None:
    """Train the supernet's weights on uniformly sampled paths."""
    logits = torch.zeros(lut.table_ms.shape)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(epochs):
        for x, y in batches(data["weights"], 64, generator):
            weight_step(net, optimizer, lut, logits, x, y)


def search(net: Supernet, lut: LatencyLUT, data, penalty: float, mode: str, epochs: int,
           generator: torch.Generator) -> torch.Tensor:
    """Alternate weight steps (on the "weights" split) and architecture steps (FBNet: all
    candidates mixed with Gumbel-softmax weights, on the "arch" split, cross-entropy plus
    latency penalty); returns the architecture logits.

    The penalty is the expected latency under softmax(logits) (tau 1, no noise): the
    Gumbel samples pick candidate c with that probability, so it is the mean latency of
    the architectures the search samples from."""
    logits = torch.zeros(lut.table_ms.shape, requires_grad=True)
    loss_fn = LatencyLoss(lut, weight=penalty, mode=mode)
    w_opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    a_opt = torch.optim.Adam([logits], lr=0.05)
    for epoch in range(epochs):
        tau = 2.0 * 0.25 ** (epoch / max(1, epochs - 1))   # anneal 2.0 -> 0.5
        arch_batches = batches(data["arch"], 32, generator)
        for x, y in batches(data["weights"], 64, generator):
            weight_step(net, w_opt, lut, logits, x, y)
            xa, ya = next(arch_batches, (None, None))
            if xa is None:
                continue
            a_opt.zero_grad()
            loss_fn(F.cross_entropy(net(xa, lut.weights(logits, tau, gumbel=True)), ya), logits).backward()
            a_opt.step()
    return logits.detach()


def fine_tune(model: nn.Module, data, epochs: int, generator: torch.Generator) -> float:
    """Train ``model`` on the whole training split for ``epochs``; its test accuracy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(epochs):
        for x, y in batches(data["train"], 64, generator):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    x, y = data["test"]
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def lut_range_ms(lut: LatencyLUT) -> tuple[float, float]:
    """Latency of the fastest and of the slowest architecture of the space."""
    fastest = lut.table_ms.masked_fill(~lut.valid, float("inf")).min(dim=1).values.sum()
    return float(fastest) + lut.fixed_ms, float(lut.table_ms.max(dim=1).values.sum()) + lut.fixed_ms


def measured(backend, model: nn.Module, repeats: int) -> str:
    """``model`` measured with the measuring protocol (three rounds against the canary)."""
    if backend is None:
        return "-"
    session = measure_networks(backend, [("net", lambda: model, INPUT_SHAPE)],
                               Protocol(rounds=3, warmup=5, repeats=max(1, repeats // 3)), progress=False)
    if session.failures:
        return f"failed: {session.failures['net']}"
    m = session.measured["net"]
    return f"{m.time_ms:.4f} (spread {m.spread:.0%})"


def print_header(args, estimator: Estimator, lut: LatencyLUT) -> None:
    profile = estimator.profile.name
    print(f"FBNet-style supernet search on digits ({RESOLUTION}x{RESOLUTION}, test split 25 %), "
          f"LatencyLoss mode {args.mode}, seed {args.seed}; epochs: warm-up {args.warmup_epochs}, "
          f"search {args.search_epochs}, fine-tune {args.tune_epochs} (derived nets are fine-tuned "
          f"from the weights they inherit from the supernet, then tested).")
    print(f"lut_ms, estimator_ms: estimates for the {profile} profile's target board (the LUT's sum and "
          f"Estimator on the derived nn.Module), not this CPU. measured_ms: {args.measure_backend} on this "
          f"machine, 1 thread, p10 of {args.repeats // 3 * 3} runs in 3 drift-corrected rounds of 5 warm-up "
          f"runs and {args.repeats // 3} timed ones (the measuring protocol), spread = (p90 - p10) / median. The two scales differ; compare the trend (higher penalty, lower latency).")
    fastest, slowest = lut_range_ms(lut)
    print(f"LUT latency range of the space: {fastest:.6g} ms (fastest) .. {slowest:.6g} ms (slowest)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0,0.1,0.5,2", help="comma-separated latency penalty weights")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="estimator profile (built-in name or JSON path)")
    parser.add_argument("--mode", default="additive", choices=("additive", "multiplicative"))
    parser.add_argument("--measure-backend", default="openvino-cpu", help="backend to measure on, or 'none'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="first and last weight, few epochs and repeats")
    args = parser.parse_args()
    args.weights = [float(w) for w in args.weights.split(",")]
    if args.smoke:
        args.weights = [args.weights[0], args.weights[-1]] if len(args.weights) > 1 else args.weights
    args.warmup_epochs, args.search_epochs, args.tune_epochs, args.repeats = (
        (3, 3, 3, 20) if args.smoke else (8, 15, 8, 100))
    return args


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    torch.set_num_threads(1)
    space = search_space()
    lut, estimator = build_lut(space, args.profile)
    backend = None if args.measure_backend == "none" else get_backend(args.measure_backend, threads=1)
    data = digits(args.seed)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    supernet = Supernet(space)
    warm_up(supernet, lut, data, args.warmup_epochs, generator)
    print_header(args, estimator, lut)
    header = f"{'penalty':>7}  {'architecture':<31}  {'test_acc':>8}  {'lut_ms':>10}  {'estimator_ms':>12}  measured_ms"
    print(header)
    print("-" * (len(header) + 12))
    labels = [[c.label for c in candidates] for _, candidates in space]
    for penalty in args.weights:
        torch.manual_seed(args.seed)
        run_generator = torch.Generator().manual_seed(args.seed)
        net = copy.deepcopy(supernet)
        logits = search(net, lut, data, penalty, args.mode, args.search_epochs, run_generator)
        choices = lut.derive(logits)
        derived = net.derive(choices)
        accuracy = fine_tune(derived, data, args.tune_epochs, run_generator)
        arch = "-".join(labels[p][c] for p, c in enumerate(choices))
        print(f"{penalty:>7g}  {arch:<31}  {accuracy:>8.3f}  {lut.latency_ms(choices):>10.6g}  "
              f"{estimator(derived, input_shape=INPUT_SHAPE):>12.6g}  {measured(backend, derived, args.repeats)}",
              flush=True)
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
