"""What re-reading weights costs inside a network, measured in context.

A calibration benchmark runs one layer in a loop, so a kernel's weights that fit in the L2
cache stay there; inside a network the other layers evict them and every inference reads
them again, and that traffic adds to the kernel's time
(:mod:`annette_torch.layer_models.weights_from_memory`). :func:`measure_weight_rereads`
profiles a few networks per layer on the machine (networks the profile will not be scored
on), ties their runtime kernels to the profile's estimates (as ``calibrate --for``
does) and fits, over the kernels that hold weights,

    measured / estimate = level + min(weight bytes, L2 size) / bytes_s / estimate

robustly: ``level``, one per network, takes the machine's speed when it was profiled (the
store may have been measured in another hour), ``bytes_s``, shared, the re-read rate. On
the profiles' Zen 4 six networks gave 16.9-23.2 GB/s in four runs within half an hour,
while their levels moved by up to 0.35 between passes. The result goes into the store
folder as ``weight_rereads.json`` (written whole or not at all); ``annette-torch fit``
gives the profile it fits on that store its ``weight_rereads`` (:func:`stored_rereads`).
"""
from __future__ import annotations

import json
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..atomic import atomic_path
from ..layer_models.weights_from_memory import WeightRereads, weight_bytes
from ..profiles.profile import profile_digest
from ..validation import DataError, read_json

#: the file in a store folder that holds the measured re-reads
FILE = "weight_rereads.json"
#: a fitted rate above this (bytes/s; faster than any cache) means the kernels took no time
#: for their weights
MAX_RATE = 1e13
#: how many interleaved passes over the networks :func:`measure_weight_rereads` profiles
PASSES = 3


def fit_rereads(networks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                up_to_bytes: float) -> tuple[list[float], float]:
    """(level per network, bytes_s) of ``measured / estimate = level + min(weight bytes,
    up_to_bytes) / bytes_s / estimate`` over the kernels of ``networks`` (per network:
    estimated ms, measured ms, weight bytes of its kernels), one rate shared by all, fitted
    robustly (soft-L1) on the ratios so that every kernel counts alike and a few disturbed
    ones do not; ``ValueError`` where the kernels show no re-read time."""
    from scipy.optimize import least_squares

    x = [np.minimum(w, up_to_bytes) / 1e6 / e for e, _, w in networks]       # MB per estimated ms
    ratios = [m / e for e, m, _ in networks]
    n = len(networks)

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.concatenate([p[i] + p[n] * xi - ri for i, (xi, ri) in enumerate(zip(x, ratios))])

    fitted = least_squares(residuals, [1.0] * n + [0.05], loss="soft_l1", f_scale=0.05).x
    ms_per_mb = fitted[n]
    if not ms_per_mb > 1e9 / MAX_RATE:
        raise ValueError(f"the {sum(len(r) for r in ratios)} kernels show no time for re-reading their weights "
                         f"(fitted {ms_per_mb:.3g} ms per MB); nothing to record")
    return [float(v) for v in fitted[:n]], float(1e9 / ms_per_mb)


def measure_weight_rereads(backend: Any, profile: Any, specs: Sequence[str], passes: int = PASSES,
                           warmup: int = 5, repeats: int = 20) -> dict[str, Any]:
    """Profile the networks ``specs`` (``torchvision:NAME``, ``timm:NAME``, an ONNX file,
    ...; one float input each) per layer on ``backend`` ``passes`` times, interleaved, and
    fit the re-read rate of their kernels' weights against ``profile``'s estimates made
    without re-reads or the weights-from-memory floor (median per kernel over the passes).
    Returns what :func:`save_rereads` writes: the rate, the L2 size it applies up to, and
    per network its kernels and level. ``ValueError`` names a network that cannot be
    measured so (several or non-float inputs, an ONNX file on a torch backend)."""
    from ..estimator import Estimator
    from .in_context import check_runnable, profile_network, resolve_network, tie_kernels
    from .matcher import match_kernels

    estimator = Estimator(profile, weights_from_memory=False)
    up_to = (estimator.profile.fingerprint.get("cpu_id") or {}).get("l2_bytes")
    if not up_to:
        raise DataError(f"profile {estimator.profile.name!r} records no L2 size (fingerprint cpu_id.l2_bytes): "
                        f"re-reads are measured for CPU profiles")
    networks = []
    for spec in specs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net = resolve_network(spec, command="calibrate --weight-rereads")
        times = estimator.kernel_times(net.graph)
        networks.append((spec, net, times, weight_bytes(times.table.features, estimator.weight_bits), []))
    check_runnable(backend, [net for _, net, *_ in networks], "calibrate --weight-rereads")
    for _ in range(passes):
        for _, net, times, _, tied in networks:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                profiled = profile_network(backend, net, warmup, repeats)
            tied.append(tie_kernels(times.table, match_kernels(net.graph, profiled.kernels), times.time_ms,
                                    backend.output_reorders)[0])
    rows = []
    for _, _, times, weights, tied in networks:
        measured = np.median(np.vstack(tied), axis=0)
        keep = (weights > 0) & ~np.isnan(measured) & (times.time_ms > 0)
        rows.append((times.time_ms[keep], measured[keep], weights[keep]))
    levels, rate = fit_rereads(rows, up_to)
    return {"bytes_s": round(rate, -6), "up_to_bytes": float(up_to), "kernels": int(sum(len(r[0]) for r in rows)),
            "passes": passes, "profile": estimator.profile.name, "profile_sha256": profile_digest(estimator.profile),
            "measured_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "networks": [{"network": spec, "kernels": len(r[0]), "level": round(level, 4)}
                         for (spec, *_), r, level in zip(networks, rows, levels)]}


def save_rereads(folder: str | os.PathLike, summary: dict[str, Any]) -> Path:
    """Write ``summary`` (:func:`measure_weight_rereads`) into the store folder ``folder``."""
    path = Path(folder) / FILE
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(summary, indent=1) + "\n")
    return path


def stored_rereads(folder: str | os.PathLike) -> tuple[WeightRereads, dict[str, Any]] | None:
    """The re-reads measured into the store folder ``folder`` and their record, or None
    where it has none."""
    path = Path(folder) / FILE
    if not path.exists():
        return None
    record = read_json(path, "weight re-reads")
    return WeightRereads.from_dict(record), record
