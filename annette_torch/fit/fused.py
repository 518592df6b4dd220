"""Fitting the cost of the layers a runtime fuses into a kernel after its primary layer
(see :mod:`annette_torch.layer_models.fused_layers` for how estimates use it).

Kernel kinds are fitted on their *plain* kernels: those that absorbed nothing, or only
layers the exporter folds into the weights (:data:`FOLDED`) or that only change where
the kernel reads or writes (:data:`LAYOUT`). The other kernels then tell what each
fused layer kind adds: per kernel,

    measured - model(kernel) = output elements * sum over its fused layers of cost[kind]

solved by least squares on errors relative to the measured time, over the fused layer
kinds seen in at least ``min_rows`` kernels, each cost bounded at 0: a fused layer still
computes per element, and what it reads besides its producer's output (a residual add's
second input) is its own cost, not the kernel model's (the kernel table counts a kernel's
primary layer's inputs only: :mod:`annette_torch.mapping.counting`, ``post_op_inputs``).
Until 2026-12-06 those reads counted among the kernel's input elements and an arithmetic
kind's cost was left unbounded: openvino-cpu's add came out at -0.20 ns per element, which
put NAS-Bench-201's 3x3 convs with their node sums at 0.037 ms, under the 0.040 of the same
conv alone and the 0.042 they took in context (docs/accuracy.md, session 28). Estimates keep a
kernel at half its model time or more
(:data:`~annette_torch.layer_models.fused_layers.MIN_MODEL_SHARE`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from ..layer_models.fused_layers import MIN_MODEL_SHARE

#: layer kinds the ONNX export folds into the preceding conv's weights: free when fused
FOLDED = frozenset({"batch_norm"})
#: data movement that a kernel absorbing it does as addressing: it writes its output
#: transposed or split (OpenVINO's attention kernel writes timm's ``transpose(1, 2)``
#: that way, its transpose kernel the ``unbind`` after it) or reads a slice in place.
#: Free when fused, so an attention kernel that always absorbs its transpose is plain.
LAYOUT = frozenset({"permute", "split", "slice"})


def costly_members(fused_kinds: str) -> list[str]:
    """The fused layer kinds (``+``-joined, primary excluded) that may cost time."""
    return [k for k in fused_kinds.split("+") if k and k not in FOLDED and k not in LAYOUT]


def is_plain(kernels: pd.DataFrame) -> np.ndarray:
    """Bool per kernel: it absorbed no layer that may cost time of its own."""
    return np.array([not costly_members(f) for f in kernels["fused_kinds"]], dtype=bool)


def fit_fused_costs(kernels: pd.DataFrame, model_seconds: np.ndarray, measured_seconds: np.ndarray,
                    min_rows: int = 5) -> tuple[dict[str, float], dict]:
    """(seconds per output element per fused layer kind, summary) from ``kernels`` (the
    kernel table's rows with fused layers), their ``model_seconds`` (the kind models'
    predictions) and ``measured_seconds``."""
    members = [costly_members(f) for f in kernels["fused_kinds"]]
    counts = pd.Series([k for m in members for k in set(m)]).value_counts()
    kinds = sorted(counts[counts >= min_rows].index)
    if not kinds:
        return {}, {"kernels": 0}
    use = np.array([bool(m) and set(m) <= set(kinds) for m in members])
    elems = kernels["output_elems"].to_numpy()[use]
    measured, modelled = measured_seconds[use], model_seconds[use]
    design = np.array([[m.count(k) for k in kinds] for m, u in zip(members, use) if u], dtype=float)
    design *= (elems / measured)[:, None]
    cost = lsq_linear(design, (measured - modelled) / measured, bounds=(0.0, np.inf), method="bvls").x
    after = np.maximum(modelled + design @ cost * measured, MIN_MODEL_SHARE * modelled)
    return ({k: float(c) for k, c in zip(kinds, cost)},
            {"kernels": int(use.sum()), "kernels_per_kind": {k: int(counts[k]) for k in kinds},
             "mape_without": float(100 * np.mean(np.abs(modelled - measured) / measured)),
             "mape_with": float(100 * np.mean(np.abs(after - measured) / measured))})
