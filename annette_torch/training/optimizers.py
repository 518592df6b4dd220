"""The optimizer step of a training step: which optimizers, how they are measured, the model.

An optimizer step touches every trainable parameter tensor once, elementwise, so its time
is modelled as

    step_ms = per_tensor_ms * tensors + per_element_ns * 1e-6 * elements

per optimizer (PerfNetV2's per-op launch term and a bandwidth term). Both are fitted by
non-negative least squares on synthetic parameter sets timed on the target
(:func:`measure_optimizer_steps`, stored as ``optimizer_steps.csv`` in a training
store), so the profile knows the optimizer independently of the networks.
"""
from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    import pandas as pd

OPTIMIZERS = ("sgd", "momentum", "adam")
# synthetic parameter sets: tensor counts x total elements (from a few small layers to a large model)
_TENSORS = (1, 8, 64, 256)
_ELEMENTS = (1e4, 1e5, 1e6, 1e7, 3e7)


def make_optimizer(name: str, parameters: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer ``name`` (:data:`OPTIMIZERS`: plain SGD, SGD with momentum 0.9, or
    Adam) over ``parameters``, with PyTorch's default implementation choice."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01)
    if name == "momentum":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")


def measure_optimizer_steps(threads: int = 1, warmup: int = 3, repeats: int = 15,
                            device: str = "cpu") -> pd.DataFrame:
    """Time ``optimizer.step()`` of every optimizer on every synthetic parameter set
    (median of ``repeats`` after ``warmup``, ``threads`` torch threads): one row per
    (optimizer, tensors, elements) with ``time_ms`` and ``spread``. The parameters and
    gradients are drawn from a generator of its own; the global RNG is not touched."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    rows = []
    try:
        for name, tensors, elements in itertools.product(OPTIMIZERS, _TENSORS, _ELEMENTS):
            size = max(int(elements) // tensors, 1)
            params = [torch.nn.Parameter(torch.randn(size, generator=generator).to(device)) for _ in range(tensors)]
            for p in params:
                p.grad = torch.randn(size, generator=generator).to(device)
            optimizer = make_optimizer(name, params)
            runs = []
            for i in range(warmup + repeats):
                start = time.perf_counter()
                optimizer.step()
                if device != "cpu":
                    torch.cuda.synchronize()
                if i >= warmup:
                    runs.append((time.perf_counter() - start) * 1e3)
            p10, median, p90 = np.percentile(runs, [10, 50, 90])
            rows.append({"optimizer": name, "tensors": tensors, "elements": size * tensors,
                         "time_ms": float(median), "spread": float((p90 - p10) / median)})
    finally:
        torch.set_num_threads(previous)
    import pandas as pd  # imported on use, like scipy below: estimating needs neither

    return pd.DataFrame(rows)


def fit_optimizer_steps(measured: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per optimizer, ``{"per_tensor_ms", "per_element_ns", "mape"}`` fitted by
    non-negative least squares on relative errors (every row weighs the same)."""
    from scipy.optimize import nnls

    missing = {"optimizer", "tensors", "elements", "time_ms"} - set(measured.columns)
    if missing:
        raise ValueError(f"optimizer step measurements lack the columns {sorted(missing)}")
    fitted = {}
    for name, rows in measured.groupby("optimizer"):
        y = rows["time_ms"].to_numpy()
        basis = np.column_stack([rows["tensors"].to_numpy(), rows["elements"].to_numpy() * 1e-6])
        coef, _ = nnls(basis / y[:, None], np.ones_like(y))
        error = np.abs(basis @ coef - y) / y
        fitted[str(name)] = {"per_tensor_ms": float(coef[0]), "per_element_ns": float(coef[1]),
                             "mape": float(100 * error.mean())}
    return fitted


def optimizer_step_ms(terms: dict[str, float], parameter_sizes: Sequence[int]) -> float:
    """Modelled time of one step over parameter tensors of ``parameter_sizes`` elements."""
    return terms["per_tensor_ms"] * len(parameter_sizes) + terms["per_element_ns"] * 1e-6 * float(sum(parameter_sizes))
