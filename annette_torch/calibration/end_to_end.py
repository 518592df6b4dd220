"""``calibrate --for ... --method end-to-end``: a table of kernel times fitted to whole networks' times.

Per-layer profiling is not the network's time (:mod:`.in_context`): on some hosts a
network's profiled kernels sum to 1.2-1.7 times its end-to-end time, more for small
kernels than for large ones. This method never profiles. Each network is timed end to
end with the measuring protocol (:func:`~annette_torch.measure.networks.measure_networks`)
and the times of the distinct kernels (by signature, :mod:`~annette_torch.measure.kernel_table`)
of every network the table has recorded are fitted jointly:

    measured[n] = overhead + sum over kernels s of count[n, s] * scale * prior[s] * factor[s]

``prior[s]`` is the profile's layer-model time of kernel ``s``; ``scale`` one factor for
all (the geometric mean of measured over estimated time); ``factor[s]`` is fitted by least
squares on relative errors, pulled toward 1 by :data:`REGULARIZATION`, so a kernel that few
networks contain stays near ``scale * prior[s]`` and one that many pin down moves. Fitted on
10 NAS-Bench-201 cells, such a table predicted the other 40 cells of the accuracy benchmark
to 3.3 % (AMD Zen 4) and 4.4-4.5 % (Zen 3) on average, against 6.5 and 8.0 % for the scale
alone (``benchmarks/end_to_end_fit.py`` on recorded ground truth, docs/cross-cpu.md).

The table folder keeps ``networks.csv``: one row per network measured (its name, measured
time, and its kernels as JSON ``{signature: [count, prior ms]}``), appended as soon as a
network is measured and never rewritten; where a network repeats, its last row wins. After
each run the fit is redone over all of them and every kernel's fitted time is appended to
``kernels.csv`` (tie "fitted"; there too the last row of a signature wins).
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.optimize import lsq_linear

from ..kinds import FEATURES
from ..measure.kernel_table import KernelTableError, append_rows, kernel_signatures
from ..validation import DataError, read_text

NETWORKS_FILE = "networks.csv"
NETWORK_COLUMNS = ("network", "measured_ms", "kernels", "measured_utc")
#: weight of each kernel's ``(factor - 1) ** 2`` against each network's squared relative
#: error (0.01: a factor moves by 0.1 where it removes a 1 % error of one network). Chosen in
#: an exploratory sweep on NAS-Bench-201 (10 cells fitted, 40 predicted, 40 draws; a scratch
#: script, not committed): 0.001, 0.01, 0.1 and 1 gave 3.2, 3.4, 3.8 and 4.6 % on Zen 4,
#: 4.2, 4.1, 4.4 and 5.1 % on Zen 3; 0.01 is the steadier of the two best.
REGULARIZATION = 0.01
#: the smallest factor a kernel's scaled prior may be multiplied by
MIN_FACTOR = 0.1


@dataclass(frozen=True)
class RecordedNetwork:
    """One row of ``networks.csv``: a network's measured time and its kernels
    (signature -> (count, prior ms))."""

    name: str
    measured_ms: float
    kernels: dict[str, tuple[int, float]]


@dataclass(frozen=True)
class KernelFit:
    """The fitted time of every kernel (signature -> ms), the common ``scale`` over the
    priors, and per network (name, measured ms, estimate with the priors scaled, estimate
    with the fitted times)."""

    times_ms: dict[str, float]
    scale: float
    networks: list[tuple[str, float, float, float]]

    def __str__(self) -> str:
        rows = np.array([[m, s, f] for _, m, s, f in self.networks])
        scaled, fitted = (100 * np.mean(np.abs(rows[:, i] / rows[:, 0] - 1)) for i in (1, 2))
        return (f"fitted {len(self.times_ms)} kernel times to the end-to-end times of {len(self.networks)} "
                f"network(s): the profile's estimates x{self.scale:.3f}; mean |error| on these networks "
                f"{scaled:.1f} % scaled, {fitted:.1f} % fitted")


def network_kernels(estimator: Any, graph: Any) -> dict[str, tuple[int, float]]:
    """``graph``'s executed kernels under ``estimator`` by signature: (count, the layer
    models' time in ms of one)."""
    times = estimator.kernel_times(graph)
    kernels: dict[str, tuple[int, float]] = {}
    for k, s in enumerate(kernel_signatures(times.table)):
        if not times.table.free[k]:
            count = kernels.get(s, (0, 0.0))[0]
            kernels[s] = (count + 1, float(times.time_ms[k]))
    return kernels


def fit_kernel_times(networks: Sequence[RecordedNetwork], overhead_ms: float,
                     regularization: float = REGULARIZATION) -> KernelFit:
    """Fit every kernel of ``networks`` to their measured times (see the module doc);
    ``ValueError`` without networks."""
    if not networks:
        raise ValueError("fitting kernel times needs at least one measured network")
    signatures = sorted({s for net in networks for s in net.kernels})
    column = {s: j for j, s in enumerate(signatures)}
    counts = np.zeros((len(networks), len(signatures)))
    prior = np.zeros(len(signatures))
    for i, net in enumerate(networks):
        for s, (count, prior_ms) in net.kernels.items():
            counts[i, column[s]], prior[column[s]] = count, prior_ms
    measured = np.array([net.measured_ms for net in networks])
    prior = np.maximum(prior, 1e-9)
    estimated = counts @ prior
    scale = float(np.exp(np.mean(np.log(np.maximum(measured - overhead_ms, 0.05 * measured) / estimated))))
    design = counts * (scale * prior) / measured[:, None]
    target = (measured - overhead_ms) / measured
    weight = math.sqrt(regularization)
    factors = lsq_linear(np.vstack([design, weight * np.eye(len(signatures))]),
                         np.concatenate([target, np.full(len(signatures), weight)]),
                         bounds=(MIN_FACTOR, np.inf)).x
    times = scale * prior * factors
    rows = [(net.name, net.measured_ms, overhead_ms + scale * estimated[i], overhead_ms + float(counts[i] @ times))
            for i, net in enumerate(networks)]
    return KernelFit(dict(zip(signatures, times.tolist())), scale, rows)


def kernel_rows(fit: KernelFit, networks: Sequence[RecordedNetwork]) -> list[dict[str, Any]]:
    """Rows of ``kernels.csv`` for every fitted kernel (kind, fused kinds and features read
    back from its signature)."""
    occurrences: dict[str, int] = {}
    for net in networks:
        for s, (count, _) in net.kernels.items():
            occurrences[s] = occurrences.get(s, 0) + count
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = []
    for s, time_ms in fit.times_ms.items():
        kind, fused, features = s.split("|")
        rows.append({"signature": s, "kind": kind, "fused": fused,
                     **{name: float(v) for name, v in zip(FEATURES, features.split(","))},
                     "time_ms": float(time_ms), "spread": 0.0, "occurrences": occurrences[s], "tie": "fitted",
                     "network": f"fit of {len(networks)} networks", "measured_utc": now})
    return rows


def append_network(path: Path, name: str, measured_ms: float, kernels: dict[str, tuple[int, float]]) -> None:
    """Append one network's row to ``networks.csv`` (one write and ``fsync``)."""
    append_rows(path, NETWORK_COLUMNS, [{
        "network": name, "measured_ms": float(measured_ms),
        "kernels": json.dumps({s: [count, prior] for s, (count, prior) in kernels.items()}, separators=(",", ":")),
        "measured_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}])


def read_networks(path: Path) -> list[RecordedNetwork]:
    """The networks of ``networks.csv`` (empty when missing; the last row of a name wins);
    ``KernelTableError`` names the file and line of a malformed row. JSON only: nothing
    in the file is executed."""
    if not path.exists():
        return []
    try:
        text = read_text(path, "measured networks")
    except DataError as error:
        raise KernelTableError(str(error)) from None
    reader = csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1]))      # a line cut by a kill is left out
    if tuple(reader.fieldnames or ()) != NETWORK_COLUMNS:
        raise KernelTableError(f"{path}: the header must be {','.join(NETWORK_COLUMNS)}")
    found: dict[str, RecordedNetwork] = {}
    for line, row in enumerate(reader, start=2):
        try:
            measured = float(row["measured_ms"])
            kernels = {s: (int(c), float(p)) for s, (c, p) in json.loads(row["kernels"]).items()}
        except (TypeError, ValueError, AttributeError) as error:
            raise KernelTableError(f"{path} line {line}: not a measured network ({error})") from None
        if not (math.isfinite(measured) and measured > 0) or not kernels or \
                any(c < 1 or not (math.isfinite(p) and p >= 0) or s.count("|") != 2 for s, (c, p) in kernels.items()):
            raise KernelTableError(f"{path} line {line}: needs a positive measured time and kernels "
                                   f"{{signature: [count >= 1, prior ms >= 0]}}")
        found[row["network"]] = RecordedNetwork(row["network"], measured, kernels)
    return list(found.values())
