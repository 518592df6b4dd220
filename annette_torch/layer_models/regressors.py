"""Regressors stored as plain JSON: tree ensembles and linear models on log features.

The statistical and mixed layer models (:mod:`.statistical`) need a learned function of
the kernel features. It is stored as numbers only, never as pickled objects, so loading
a profile cannot execute anything:

* ``{"type": "trees", "inputs": [...], "base": b, "depth": d, "trees": [{"feature": [...],
  "threshold": [...], "left": [...], "right": [...], "value": [...]}, ...]}``: the
  prediction is ``base + sum over trees of value[leaf]``. A node whose ``feature`` is
  ``-1`` is a leaf; otherwise a row goes to ``left`` when ``input <= threshold`` (inputs
  rounded to float32 first, as scikit-learn's trees do), else to ``right``. Gradient
  boosting (learning rate folded into the values) and random forests (values divided
  by the number of trees) both have this form.
* ``{"type": "linear", "inputs": [...], "coef": [...], "intercept": c}``: ``c + coef . x``.

``inputs`` names the columns of :func:`regression_inputs`; loading checks them against
this version's list, so a profile built for other inputs fails with a clear error.
Prediction is vectorized numpy; on torch tensors the linear model runs in torch (it
has gradients), a tree ensemble runs in numpy and returns a constant tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import COLUMN

#: Channel dimensions and block widths whose utilisation is a regression input: CPU
#: kernels compute channels in blocks of 8 or 16 (AVX2/AVX-512 registers of float32), so
#: a kernel on 96 channels can run faster than one on 90; ONNX Runtime runs a conv in its
#: blocked NCHWc layout only when the channels are a multiple of 4 (10x faster for
#: depthwise convs here).
ALIGNMENTS: tuple[tuple[str, int], ...] = (("c", 4), ("c", 8), ("c", 16), ("f", 4), ("f", 8), ("f", 16))

#: Regression inputs: log1p of every kernel feature, log1p of the elements moved, and the
#: utilisation ``d / (ceil(d / v) * v)`` of each of :data:`ALIGNMENTS`.
REGRESSION_INPUTS: tuple[str, ...] = (tuple(f"log_{name}" for name in COLUMN) + ("log_elems_moved",)
                                      + tuple(f"{d}_use_{v}" for d, v in ALIGNMENTS))


def regression_inputs(features: Any, xp: Any = np) -> Any:
    """The (kernels x :data:`REGRESSION_INPUTS`) matrix a regressor reads."""
    moved = features[:, COLUMN["input_elems"]] + features[:, COLUMN["output_elems"]] + features[:, COLUMN["weight_elems"]]
    use = [features[:, COLUMN[d]] / (xp.ceil(features[:, COLUMN[d]] / v) * v) for d, v in ALIGNMENTS]
    return xp.concatenate([xp.log1p(xp.concatenate([features, moved[:, None]], 1)), xp.stack(use, 1)], 1)


def _check_inputs(data: dict) -> None:
    if list(data["inputs"]) != list(REGRESSION_INPUTS):
        raise ValueError(f"regressor inputs {data['inputs']} differ from this version's {list(REGRESSION_INPUTS)}")


def _numpy(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


def _like(values: np.ndarray, reference: Any, xp: Any) -> Any:
    if xp is np:
        return values
    return xp.as_tensor(values, dtype=reference.dtype, device=reference.device)


@dataclass
class TreeEnsemble:
    """``base + sum of leaf values`` over binary regression trees (see module doc)."""

    base: float
    feature: np.ndarray      # (trees x nodes) int, -1 at leaves and padding
    threshold: np.ndarray    # (trees x nodes) float
    left: np.ndarray         # (trees x nodes) int child index
    right: np.ndarray
    value: np.ndarray        # (trees x nodes) float
    depth: int

    def predict(self, inputs: Any, xp: Any = np) -> Any:
        """One value per row of ``inputs`` (columns :data:`REGRESSION_INPUTS`)."""
        x = _numpy(inputs).astype(np.float32).astype(np.float64)
        rows, (trees, width) = x.shape[0], self.feature.shape
        feature, threshold = self.feature.ravel(), self.threshold.ravel()      # one flat node array:
        left, right, value = self.left.ravel(), self.right.ravel(), self.value.ravel()   # 1-D gathers
        offset = np.arange(trees) * width                       # each tree's first node in the flat arrays
        node = np.broadcast_to(offset, (rows, trees)).copy()
        cells = x.ravel()
        row_start = (np.arange(rows) * x.shape[1])[:, None]
        for _ in range(self.depth):
            feat = feature[node]
            inner = feat >= 0
            if not inner.any():
                break                                           # every row has reached a leaf
            goes_left = cells[row_start + np.maximum(feat, 0)] <= threshold[node]
            step = np.where(goes_left, left[node], right[node]) + offset
            node = np.where(inner, step, node)
        return _like(self.base + value[node].sum(axis=1), inputs, xp)

    def to_dict(self) -> dict:
        trees = []
        for t in range(self.feature.shape[0]):
            n = _used_nodes(self.feature[t], self.left[t], self.right[t])
            trees.append({"feature": self.feature[t, :n].tolist(),
                          "threshold": [float(f"{v:.9g}") for v in self.threshold[t, :n]],
                          "left": self.left[t, :n].tolist(), "right": self.right[t, :n].tolist(),
                          "value": [float(f"{v:.9g}") for v in self.value[t, :n]]})
        return {"type": "trees", "inputs": list(REGRESSION_INPUTS), "base": self.base, "depth": self.depth,
                "trees": trees}

    @classmethod
    def from_dict(cls, data: dict) -> TreeEnsemble:
        """Validate and build: equal-length node lists, children after their parent and
        inside the tree, feature indices inside the inputs, the stored depth exact."""
        _check_inputs(data)
        trees = data["trees"]
        if not isinstance(trees, list) or not trees:
            raise ValueError("a tree ensemble needs a non-empty list of trees")
        width = max(len(t["feature"]) for t in trees)
        shape = (len(trees), width)
        feature = np.full(shape, -1, dtype=np.intp)
        left, right = np.full(shape, -1, dtype=np.intp), np.full(shape, -1, dtype=np.intp)
        threshold, value = np.zeros(shape), np.zeros(shape)
        depth = 0
        for i, tree in enumerate(trees):
            n = len(tree["feature"])
            if n == 0 or any(len(tree[key]) != n for key in ("threshold", "left", "right", "value")):
                raise ValueError(f"tree {i}: feature, threshold, left, right and value need the same, non-zero length")
            feature[i, :n] = np.asarray(tree["feature"], dtype=np.intp)
            threshold[i, :n] = np.asarray(tree["threshold"], dtype=np.float64)
            left[i, :n] = np.asarray(tree["left"], dtype=np.intp)
            right[i, :n] = np.asarray(tree["right"], dtype=np.intp)
            value[i, :n] = np.asarray(tree["value"], dtype=np.float64)
            depth = max(depth, _check_tree(i, feature[i, :n], left[i, :n], right[i, :n]))
        if int(data["depth"]) != depth:
            raise ValueError(f"stored depth {data['depth']} differs from the trees' depth {depth}")
        if not (np.isfinite(threshold).all() and np.isfinite(value).all()):
            raise ValueError("thresholds and values must be finite numbers")
        return cls(float(data["base"]), feature, threshold, left, right, value, depth)


def _used_nodes(feature: np.ndarray, left: np.ndarray, right: np.ndarray) -> int:
    """Number of nodes of a padded tree row (1 + the largest child index reached)."""
    internal = feature >= 0
    return int(max(left[internal].max(initial=0), right[internal].max(initial=0)) + 1)


def _check_tree(i: int, feature: np.ndarray, left: np.ndarray, right: np.ndarray) -> int:
    """Depth of tree ``i``; ``ValueError`` when its structure is invalid."""
    n = len(feature)
    if (feature >= len(REGRESSION_INPUTS)).any() or (feature < -1).any():
        raise ValueError(f"tree {i}: feature index outside 0..{len(REGRESSION_INPUTS) - 1}")
    nodes = np.arange(n)
    internal = feature >= 0
    for child in (left, right):
        if ((child[internal] <= nodes[internal]) | (child[internal] >= n)).any():
            raise ValueError(f"tree {i}: a child index is not after its parent or lies outside the tree")
    depth = np.zeros(n, dtype=np.intp)
    for node in nodes[internal]:   # children come after parents, so one pass in order suffices
        depth[left[node]] = depth[right[node]] = depth[node] + 1
    return int(depth.max())


@dataclass
class LinearRegressor:
    """``intercept + coef . inputs`` (a ridge regression on log features: a power law)."""

    coef: np.ndarray
    intercept: float

    def predict(self, inputs: Any, xp: Any = np) -> Any:
        """One value per row of ``inputs`` (columns :data:`REGRESSION_INPUTS`)."""
        if xp is np:
            return inputs @ self.coef + self.intercept
        return inputs @ xp.as_tensor(self.coef, dtype=inputs.dtype, device=inputs.device) + self.intercept

    def to_dict(self) -> dict:
        return {"type": "linear", "inputs": list(REGRESSION_INPUTS),
                "coef": [float(f"{v:.12g}") for v in self.coef], "intercept": float(self.intercept)}

    @classmethod
    def from_dict(cls, data: dict) -> LinearRegressor:
        _check_inputs(data)
        coef = np.asarray(data["coef"], dtype=np.float64)
        if coef.shape != (len(REGRESSION_INPUTS),) or not np.isfinite(coef).all():
            raise ValueError(f"coef must be {len(REGRESSION_INPUTS)} finite numbers")
        return cls(coef, float(data["intercept"]))


REGRESSOR_TYPES = {"trees": TreeEnsemble, "linear": LinearRegressor}


def regressor_from_dict(data: Any) -> TreeEnsemble | LinearRegressor:
    """A regressor from its JSON form; ``ValueError`` says what is wrong."""
    if not isinstance(data, dict) or data.get("type") not in REGRESSOR_TYPES:
        raise ValueError(f"a regressor must be an object with type one of {sorted(REGRESSOR_TYPES)}")
    return REGRESSOR_TYPES[data["type"]].from_dict(data)
