"""Regressors stored as plain numbers: tree ensembles and linear models on log features.

The statistical and mixed layer models (:mod:`.statistical`) need a learned function of
the kernel features. It is stored as numbers only, never as pickled objects, so loading
a profile cannot execute anything:

* ``{"type": "trees", "inputs": [...], "base": b, "depth": d, "nodes": [...],
  "feature": [...], "threshold": [...], "left": [...], "right": [...], "value": [...]}``:
  the prediction is ``base + sum over trees of the value of the leaf each row reaches``.
  ``nodes`` holds each tree's node count; ``feature`` (one per node, trees one after
  another) is ``-1`` at a leaf, else the input an inner node splits on; ``threshold``,
  ``left`` and ``right`` hold one entry per inner node and ``value`` one per leaf, in node
  order. A row goes to ``left`` (a node index inside the tree) when ``input <=
  threshold``, else to ``right``; inputs are rounded to float32 first, as scikit-learn's
  trees do, so float32 thresholds (each the largest float32 not above the fitted one)
  split exactly as the fitted trees. Gradient boosting (learning rate folded into the
  values) and random forests (values divided by the number of trees) both have this form.
  A profile keeps these arrays in numpy's ``.npz`` file beside its JSON
  (:mod:`annette_torch.profiles.profile`), at the narrowest exact dtypes: int8/int16/int32
  indices, float32 thresholds, float64 values. The layout of version-1 profiles, a list
  ``"trees"`` of per-tree node lists inline in the JSON, still loads.
* ``{"type": "linear", "inputs": [...], "coef": [...], "intercept": c, "low": [...], "high": [...],
  "rows": array}``: ``c + coef . x``. ``low``/``high`` (optional; profiles before
  2026-12-03 lack them) hold each input's lowest and highest value among the rows it was
  fitted on; ``rows`` (optional, with them; profiles before 2026-12-08 lack it) the size
  inputs (the first :data:`SIZE_INPUTS`) of those rows, distinct, row after row, as
  float32. A mixed model evaluates the regressor on inputs moved into that range
  (:meth:`LinearRegressor.within_fitted`).

``inputs`` names the columns of :func:`regression_inputs`; loading checks them against
this version's list, so a profile built for other inputs fails with a clear error.
Prediction is vectorized numpy; on torch tensors the linear model runs in torch (it
has gradients), a tree ensemble runs in numpy and returns a constant tensor.

Why flat arrays in an ``.npz`` rather than a model format: ONNX-ML's TreeEnsemble needs an
ONNX Runtime session per kind to predict (milliseconds each to create, no torch path) and
stores values as float32 and indices as int64; treelite adds a dependency whose
checkpoints are tied to its version; skops rebuilds scikit-learn objects on load (an
audited-types list instead of nothing executed, and the scikit-learn version coupling of
pickles) and keeps per-node training statistics the prediction never reads.
``np.load(allow_pickle=False)`` parses a header literal and raw bytes only, and the
arrays are exactly what :meth:`TreeEnsemble.predict` walks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..validation import integer, number
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
    """The (kernels x :data:`REGRESSION_INPUTS`) matrix a regressor reads; an empty
    dimension (a kernel on 0 boxes) has utilisation 0, not 0/0."""
    moved = features[:, COLUMN["input_elems"]] + features[:, COLUMN["output_elems"]] + features[:, COLUMN["weight_elems"]]
    use = [features[:, COLUMN[d]] / xp.clip(xp.ceil(features[:, COLUMN[d]] / v) * v, v, None) for d, v in ALIGNMENTS]
    return xp.concatenate([xp.log1p(xp.concatenate([features, moved[:, None]], 1)), xp.stack(use, 1)], 1)


def _check_inputs(data: dict) -> None:
    if not isinstance(data.get("inputs"), list) or data["inputs"] != list(REGRESSION_INPUTS):
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
        """The stored form (see the module doc): numpy arrays at their narrowest exact dtypes."""
        inner_nodes = self.feature >= 0
        nodes = np.where(inner_nodes, np.maximum(self.left, self.right), 0).max(axis=1) + 1
        used = np.arange(self.feature.shape[1]) < nodes[:, None]
        feature = self.feature[used]
        inner = feature >= 0
        return {"type": "trees", "inputs": list(REGRESSION_INPUTS), "base": self.base, "depth": self.depth,
                "nodes": _narrow(nodes), "feature": _narrow(feature),
                "threshold": _float32_below(self.threshold[used][inner]),
                "left": _narrow(self.left[used][inner]), "right": _narrow(self.right[used][inner]),
                "value": self.value[used][~inner].astype(np.float64)}

    @classmethod
    def from_dict(cls, data: dict) -> TreeEnsemble:
        """Validate and build: one feature per node, one threshold and two children per
        inner node, one value per leaf; every node but a root the child of exactly one inner
        node before it in its tree; feature indices inside the inputs; finite numbers; the
        stored depth exact. Errors name the offending array."""
        _check_inputs(data)
        if "trees" in data:
            data = {**data, **_from_tree_lists(data["trees"])}
        nodes, feature = _array(data, "nodes", "iu"), _array(data, "feature", "iu")
        left, right = _array(data, "left", "iu"), _array(data, "right", "iu")
        threshold, value = _array(data, "threshold", "f"), _array(data, "value", "f")
        if not len(nodes) or (nodes < 1).any():
            raise ValueError("'nodes' must hold a positive node count per tree, for at least one tree")
        if nodes.sum() != len(feature):
            raise ValueError(f"'feature' must hold one entry per node: {nodes.sum()} nodes, {len(feature)} entries")
        if ((feature < -1) | (feature >= len(REGRESSION_INPUTS))).any():
            raise ValueError(f"'feature': an index outside -1..{len(REGRESSION_INPUTS) - 1}")
        inner = feature >= 0
        for name, array, count in (("threshold", threshold, inner.sum()), ("left", left, inner.sum()),
                                   ("right", right, inner.sum()), ("value", value, (~inner).sum())):
            if len(array) != count:
                raise ValueError(f"'{name}' must hold one entry per {'leaf' if name == 'value' else 'inner node'}: "
                                 f"{count} of them, {len(array)} entries")
        if not (np.isfinite(threshold).all() and np.isfinite(value).all()):
            raise ValueError("'threshold' and 'value' must be finite numbers")
        depth = _tree_depths(nodes, inner, left.astype(np.intp), right.astype(np.intp))
        if integer(data["depth"], "depth", 0) != depth:
            raise ValueError(f"stored depth {data['depth']} differs from the trees' depth {depth}")
        used = np.arange(nodes.max()) < nodes[:, None]
        padded = {}
        for name, values, where, fill, dtype in (
                ("feature", feature, slice(None), -1, np.intp), ("left", left, inner, -1, np.intp),
                ("right", right, inner, -1, np.intp), ("threshold", _float32_below(threshold), inner, 0, np.float32),
                ("value", value, ~inner, 0, np.float64)):
            flat = np.full(len(feature), fill, dtype=dtype)
            flat[where] = values
            padded[name] = np.full(used.shape, fill, dtype=dtype)
            padded[name][used] = flat
        return cls(number(data["base"], "base"), padded["feature"], padded["threshold"], padded["left"], padded["right"],
                   padded["value"], depth)


def _array(data: dict, name: str, kinds: str) -> np.ndarray:
    """``data[name]`` as a 1-D numpy array whose dtype kind is one of ``kinds``."""
    array = np.asarray(data[name])
    if array.ndim != 1 or array.dtype.kind not in kinds:
        wanted = {"f": "floating-point", "iu": "integer"}.get(kinds, "plain")
        raise ValueError(f"'{name}' must be a 1-D array of {wanted} numbers, got {array.dtype} of shape {array.shape}")
    return array


def _narrow(array: np.ndarray) -> np.ndarray:
    """``array`` as the narrowest of int8, int16, int32 that holds its values."""
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if array.size == 0 or (array.min() >= info.min and array.max() <= info.max):
            return array.astype(dtype)
    raise ValueError(f"indices up to {array.max()} do not fit int32")


def _float32_below(threshold: np.ndarray) -> np.ndarray:
    """The largest float32 at or below each threshold: a float32 input is ``<=`` it exactly
    when it is ``<=`` the threshold itself."""
    rounded = threshold.astype(np.float32)
    return np.where(rounded > threshold, np.nextafter(rounded, np.float32(-np.inf)), rounded)


def _from_tree_lists(trees: Any) -> dict:
    """The version-1 layout (a list of per-tree node lists) as this version's flat arrays."""
    if not isinstance(trees, list) or not trees:
        raise ValueError("a tree ensemble needs a non-empty list of trees")
    for i, tree in enumerate(trees):
        n = len(tree["feature"])
        if n == 0 or any(len(tree[key]) != n for key in ("threshold", "left", "right", "value")):
            raise ValueError(f"tree {i}: feature, threshold, left, right and value need the same, non-zero length")
    column = {key: np.concatenate([np.asarray(tree[key]) for tree in trees])
              for key in ("feature", "threshold", "left", "right", "value")}
    inner = column["feature"] >= 0
    return {"nodes": np.array([len(tree["feature"]) for tree in trees]), "feature": column["feature"],
            **{key: column[key][inner] for key in ("threshold", "left", "right")}, "value": column["value"][~inner]}


def _tree_depths(nodes: np.ndarray, inner: np.ndarray, left: np.ndarray, right: np.ndarray) -> int:
    """Depth of the deepest tree; ``ValueError`` unless every child index (local to its
    tree) lies after its parent and inside the tree, and every node but a root has
    exactly one parent."""
    start = np.cumsum(nodes) - nodes                     # each tree's first node
    tree = np.repeat(np.arange(len(nodes)), nodes)       # each node's tree
    local = np.arange(len(tree)) - start[tree]
    for name, child in (("left", left), ("right", right)):
        if ((child <= local[inner]) | (child >= nodes[tree[inner]])).any():
            raise ValueError(f"'{name}': a child index is not after its parent or lies outside its tree")
    children = np.concatenate([left, right]) + np.tile(start[tree[inner]], 2)
    if (np.bincount(children, minlength=len(tree))[local > 0] != 1).any():
        raise ValueError("'left', 'right': a node other than a root is not the child of exactly one inner node")
    parent = np.zeros(len(tree), dtype=np.intp)
    parent[children] = np.tile(np.flatnonzero(inner), 2)
    depth = np.zeros(len(tree), dtype=np.intp)
    while True:               # a tree: converges after as many steps as the deepest leaf is deep
        deeper = np.where(local > 0, depth[parent] + 1, 0)
        if (deeper == depth).all():
            return int(depth.max())
        depth = deeper


#: How many leading regression inputs are logs of kernel sizes (all but the utilisations):
#: linear in the logs of a kernel's dimensions, so a point on the line between two
#: kernels' inputs describes a kernel whose sizes agree with each other as theirs do.
SIZE_INPUTS = len(COLUMN) + 1


@dataclass
class LinearRegressor:
    """``intercept + coef . inputs`` (a ridge regression on log features: a power law);
    ``low``/``high``: the range of each input over the rows it was fitted on, if known;
    ``rows``: those rows' size inputs (rows x :data:`SIZE_INPUTS`), if known."""

    coef: np.ndarray
    intercept: float
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    rows: np.ndarray | None = None

    def predict(self, inputs: Any, xp: Any = np) -> Any:
        """One value per row of ``inputs`` (columns :data:`REGRESSION_INPUTS`)."""
        if xp is np:
            return inputs @ self.coef + self.intercept
        return inputs @ xp.as_tensor(self.coef, dtype=inputs.dtype, device=inputs.device) + self.intercept

    def within_fitted(self, inputs: Any, xp: Any = np) -> Any:
        """``inputs`` moved into the range the model was fitted on (unchanged without a
        recorded range). With recorded ``rows``, a row whose size inputs leave the range
        moves along the line from it to the nearest fitted row (distances in units of each
        input's range) until they all lie inside: to a calibrated kernel of like shape,
        whose sizes agree with each other as the row's do. Clamping each input alone, as
        profiles without ``rows`` are read, pairs the largest calibrated token count with
        the row's element count, a kernel no shape has (torch-cpu's gelu model fell with
        token count beyond its range; docs/accuracy.md, session 39). Then each input is
        clamped into its range."""
        if self.low is None:
            return inputs
        if self.rows is not None:
            inputs = self._toward_nearest_row(inputs, xp)
        if xp is np:
            return np.clip(inputs, self.low, self.high)
        bounds = [xp.as_tensor(b, dtype=inputs.dtype, device=inputs.device) for b in (self.low, self.high)]
        return xp.clamp(inputs, *bounds)

    def _toward_nearest_row(self, inputs: Any, xp: Any) -> Any:
        """Each row's size inputs at ``near + a * (row - near)``, ``near`` the nearest fitted
        row, with the largest ``a`` in [0, 1] that keeps every input that varied among the
        fitted rows inside its range; rows inside the range and the utilisations unchanged."""
        n = SIZE_INPUTS
        low, high = self.low[:n], self.high[:n]
        size = _numpy(inputs[:, :n]).astype(np.float64)
        varied = high > low
        outside = (((size < low) | (size > high)) & varied).any(axis=1)
        if not outside.any():
            return inputs
        span = np.where(varied, high - low, 1.0)
        fitted = self.rows.astype(np.float64)
        scaled = (fitted[:, varied] / span[varied])[None]
        distance = ((size[outside][:, None, varied] / span[varied] - scaled) ** 2).sum(axis=2)
        near = np.zeros_like(size)
        near[outside] = fitted[np.argmin(distance, axis=1)]
        step = size - near
        room = np.where(step > 0, high - near, low - near)
        limit = np.where((step != 0) & varied, room / np.where(step == 0, 1.0, step), 1.0)
        share = np.where(outside, np.clip(limit.min(axis=1), 0.0, 1.0), 1.0)
        near_x, share_x = _like(near, inputs, xp), _like(share[:, None], inputs, xp)
        moved = near_x + share_x * (inputs[:, :n] - near_x)
        return xp.concatenate([moved, inputs[:, n:]], 1)

    def to_dict(self) -> dict:
        bounds = {} if self.low is None else {name: [float(f"{v:.12g}") for v in values]
                                               for name, values in (("low", self.low), ("high", self.high))}
        if self.rows is not None:
            bounds["rows"] = self.rows.astype(np.float32).ravel()
        return {"type": "linear", "inputs": list(REGRESSION_INPUTS),
                "coef": [float(f"{v:.12g}") for v in self.coef], "intercept": float(self.intercept), **bounds}

    @classmethod
    def from_dict(cls, data: dict) -> LinearRegressor:
        _check_inputs(data)
        coef = _array(data, "coef", "iuf").astype(np.float64)
        if coef.shape != (len(REGRESSION_INPUTS),) or not np.isfinite(coef).all():
            raise ValueError(f"coef must be {len(REGRESSION_INPUTS)} finite numbers")
        if ("low" in data) != ("high" in data):
            raise ValueError("'low' and 'high' go together: the range of the inputs the model was fitted on")
        if "rows" in data and "low" not in data:
            raise ValueError("'rows' (the fitted rows' size inputs) needs 'low' and 'high', the range they span")
        if "low" not in data:
            return cls(coef, number(data["intercept"], "intercept"))
        low, high = (_array(data, name, "iuf").astype(np.float64) for name in ("low", "high"))
        if low.shape != coef.shape or high.shape != coef.shape or not (np.isfinite(low) & np.isfinite(high)).all():
            raise ValueError(f"'low' and 'high' must be {len(REGRESSION_INPUTS)} finite numbers each")
        if (low > high).any():
            raise ValueError(f"'low' exceeds 'high' for input {REGRESSION_INPUTS[int(np.argmax(low > high))]}")
        rows = None
        if "rows" in data:
            rows = _array(data, "rows", "f")
            if rows.size == 0 or rows.size % SIZE_INPUTS or not np.isfinite(rows).all():
                raise ValueError(f"'rows' must hold a non-zero multiple of {SIZE_INPUTS} finite numbers "
                                 f"(the fitted rows' size inputs), got {rows.size}")
            rows = rows.reshape(-1, SIZE_INPUTS)
        return cls(coef, number(data["intercept"], "intercept"), low, high, rows)


REGRESSOR_TYPES = {"trees": TreeEnsemble, "linear": LinearRegressor}


def regressor_from_dict(data: Any) -> TreeEnsemble | LinearRegressor:
    """A regressor from its JSON form; ``ValueError`` says what is wrong."""
    if not isinstance(data, dict) or data.get("type") not in REGRESSOR_TYPES:
        raise ValueError(f"a regressor must be an object with type one of {sorted(REGRESSOR_TYPES)}")
    return REGRESSOR_TYPES[data["type"]].from_dict(data)
