"""The estimator: trace -> mapping model -> layer models -> total time in milliseconds.

    est = Estimator()                    # the default profile, openvino-cpu; or Estimator("ncs2-myriad")
    ms = est(model, input_shape=(1, 3, 224, 224))
    table = est.report(model, input_shape=(1, 3, 224, 224))

A traced :class:`LayerGraph` can be passed instead of a module; estimating an already
traced graph is the fast path for search loops (mapping is cached on the graph, layer
models run once per kernel kind on arrays). ``__call__`` and ``report`` run the same
per-kind predictions and sum them in the same order: their totals are equal.

Each kernel of a report says what its estimate can vouch for (``confidence``):

* ``calibrated``: a model fitted for its kind (or for the kind standing in for it,
  :data:`~annette_torch.profiles.profile.STAND_INS`, which ``profile_entry`` names), its
  features inside the range the model was calibrated on (the profile's per-entry ``range``);
* ``extrapolated``: such a model, some feature outside that range (``outside_range``
  names them);
* ``unranged``: such a model, but the profile records no calibrated range for it;
* ``fallback``: the profile's ``default`` entry answered (a kind without its own model,
  or a kind no formula claims);
* ``measured``: measured in context on this machine (``Estimator(measured=...)``, made by
  ``annette-torch calibrate --for``): the table's time, not a model's;
* ``free``: a view or a layer the target's compiler removes; it costs nothing.
"""
from __future__ import annotations

import collections
import math
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .graph import LayerGraph, trace
from .kinds import FEATURES
from .layer_models.adapted import AdaptedKernels
from .layer_models.base import ScaledKernels
from .layer_models.corrected import CorrectedKernels
from .layer_models.fused_layers import FusedLayers
from .layer_models.weights_from_memory import RereadWeights, WeightsFromMemory
from .mapping import NO_INPUT_GRAD, KernelTable, map_kernels, removed_layers
from .measure.kernel_table import MeasuredKernels
from .memory import MemoryEstimate, estimate_memory
from .profiles import Profile, load_profile
from .profiles import check_machine
from .training.optimizers import optimizer_step_ms

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_PROFILE = "openvino-cpu"   # OpenVINO CPU, 1 thread, f32: calibrated on this project's machine
# how to get the statistical set a fit left out (annette_torch.fit.generate.fit_profile)
_STATISTICAL_HINT = ("; a fit keeps the statistical set only when its model preference reaches it or when asked: "
                     "refit with `annette-torch fit --data STORE --out DIR --with-statistical` (Python: "
                     "fit_profile(STORE, with_statistical=True)), STORE the measurement store it was fitted on "
                     "({store}; the stores that built the shipped profiles are in the repository's calibration/data)")


class EstimateError(ValueError):
    """An estimate would not be a number of milliseconds: a profile entry gave a kernel a
    NaN, negative or implausible time (above :data:`MAX_KERNEL_S`), or a measured kernel
    or the overhead is invalid; the message names the kernel, the profile entry and its file."""


class UnknownKindWarning(UserWarning):
    """Some layers have a kind no formula claims; they were estimated by the roofline."""


class ModelStateWarning(UserWarning):
    """The module is in train mode for an inference profile, or holds weights of another
    precision than the profile's: the estimate is of what the profile describes."""


#: a profile's precision -> the parameter dtypes of a model it describes
_PRECISION_DTYPES = {"f32": {torch.float32}, "fp32": {torch.float32}, "bf16": {torch.bfloat16, torch.float32},
                     "f16": {torch.float16, torch.float32}, "fp16": {torch.float16, torch.float32}}


class FreeWorkWarning(UserWarning):
    """A large share of a network's operations is costed as free because the target's
    graph compiler removes it (dead, constant or repeated layers)."""


#: the longest time one kernel may be estimated at (seconds): 11.6 days; a longer one
#: comes from broken parameters (a peak of 1e-300), and an estimate refuses it
MAX_KERNEL_S = 1e6
_WEIGHT_ELEMS = FEATURES.index("weight_elems")
#: warn (:class:`FreeWorkWarning`) when layers the compiler removes hold more than this
#: share of a network's operations
FREE_OPS_WARNING_SHARE = 0.25


@dataclass(frozen=True)
class KernelTimes:
    """Per-kernel predictions for one graph."""

    table: KernelTable
    time_ms: np.ndarray
    compute_bound: np.ndarray
    bytes_moved: np.ndarray
    model_type: list[str]    # which layer-model type answered each kernel ("free" for free ones)
    model_entry: list[str]   # which profile entry (kernel kind or "default") answered it
    confidence: np.ndarray   # per kernel: calibrated, extrapolated, unranged, fallback or free
    outside: np.ndarray      # bool (kernels x FEATURES): a feature outside its calibrated range
    total_ms: float          # what __call__ returns for the graph: kernels + overhead_ms


class Estimator:
    """Estimate network execution time on the target a profile describes.

    ``profile``: a built-in profile name (see ``annette-torch profiles``), a path to a
    profile JSON file, or a :class:`Profile`. ``model_type`` picks one layer-model type
    (e.g. ``"roofline"``) instead of the profile's preference; kinds it has no entry for
    use the roofline. ``use_mapping=False`` skips the fusion rules (every layer is its
    own kernel), for comparing against the stacked model. A profile adapted to another
    device maps with its adaptation's ``fusion`` and ``optimizes_graph``
    (:mod:`annette_torch.layer_models.adapted`). A network holding more weight bytes
    than the profile's ``weight_cache_bytes`` (any network, where it has none) reads
    them from memory at each inference: each kernel takes at least its weight bytes over
    the profile's weight bandwidth (:mod:`annette_torch.layer_models.weights_from_memory`);
    where the profile measured it (``weight_rereads``), every kernel of every network also
    takes the time to read its weights again, which a benchmark kept cached.
    ``weights_from_memory=False`` drops both for every network, as for a calibration
    benchmark run in a loop.
    ``measured``: a table of kernels measured in context on this machine (a folder made
    by ``annette-torch calibrate --for``, or a
    :class:`~annette_torch.measure.kernel_table.MeasuredKernels`); a kernel it holds takes
    its measured time instead of the layer models' (``layer_model`` "measured" in
    :meth:`report`); a table fitted to whole networks also scales the layer models' times
    of the kernels it lacks by its fit's scale. It must describe the profile's backend,
    threads and precision.

    An estimator pickles by value, its profile included, and estimates the same in the
    process that unpickles it (a Ray task, a multiprocessing worker:
    ``search_examples/distributed_search.py``); a worker may as well rebuild it from the
    profile's name or path.
    """

    def __init__(self, profile: str | Profile = DEFAULT_PROFILE, model_type: str | None = None,
                 use_mapping: bool = True, weights_from_memory: bool = True,
                 measured: str | os.PathLike | MeasuredKernels | None = None) -> None:
        self.profile = load_profile(profile)
        check_machine(self.profile)
        self.measured = measured if measured is None or isinstance(measured, MeasuredKernels) \
            else MeasuredKernels.load(measured, self.profile.fingerprint)
        if self.measured is not None:
            self.measured.check_profile(self.profile.fingerprint, self.profile.name)
        if model_type is not None and model_type not in self.profile.layer_models:
            raise ValueError(f"profile {self.profile.name!r} has no {model_type!r} layer models; "
                             f"it has: {', '.join(self.profile.model_types())}"
                             + (_STATISTICAL_HINT.format(store=self.profile.fit_metrics.get("store", "not recorded"))
                                if model_type == "statistical" else ""))
        self.model_type = model_type
        self.use_mapping = use_mapping
        self.weights_from_memory = weights_from_memory and self.profile.weight_bandwidth_bytes_s is not None
        self._rereads = self.profile.weight_rereads if weights_from_memory else None
        #: bits per weight the profile's roofline counts (32 unless it says otherwise)
        self.weight_bits = getattr(self.profile.layer_models.get("roofline", {}).get("default"), "bit_weights", 32)
        self._models: dict[str, tuple[str, str, Any]] = {}
        adaptation = self.profile.adaptation        # an adapted profile maps as its target does
        rules = self.profile.mapping if adaptation is None else adaptation.rules(self.profile.mapping)
        self._rules = rules if use_mapping else ()
        self._folds = (self.profile.optimizes_graph if adaptation is None
                       else adaptation.folds(self.profile.optimizes_graph))
        compiles = adaptation is None or adaptation.optimizes_graph is not False   # not adapted to eager torch
        dead = self.profile.optimizes_graph if self.profile.removes_dead_code is None else self.profile.removes_dead_code
        self._removes = (self._folds, self._folds or (dead and compiles),
                         self.profile.removes_identity_slices and compiles,
                         self.profile.folds_layout_transposes and compiles,
                         self.profile.splits_shuffles_in_place and compiles)
        self._merges = use_mapping and (self.profile.merges_elementwise if adaptation is None
                                        else adaptation.merges(self.profile.merges_elementwise))
        self._groups_convs = use_mapping and (self.profile.groups_split_convs if adaptation is None
                                              else adaptation.merges(self.profile.groups_split_convs))
        # a returned map's layout reorder is the graph compiler's, as folding is (not fusion's)
        self._reorders = self.profile.reorders_outputs and self._folds and compiles
        self._plan_key = ("plan", object())  # this estimator's entry in a graph's cache

    def __repr__(self) -> str:
        measured = f", measured={str(self.measured.folder)!r}" if self.measured is not None else ""
        return (f"Estimator(profile={self.profile.name!r}, model_type={self.model_type!r}, "
                f"use_mapping={self.use_mapping}, weights_from_memory={self.weights_from_memory}{measured})")

    def graph_of(self, model: nn.Module | LayerGraph, *, training: bool | None = None,
                 **trace_kwargs: Any) -> LayerGraph:
        """``model`` itself if it is a traced graph, else ``trace(model, **trace_kwargs)``
        (``input_shape=``, ``example_inputs=``, ``leaf_modules=``), with a
        :class:`ModelStateWarning` for a module in train mode when the estimate is not of
        ``training`` (default: what the profile describes) or of another precision."""
        if isinstance(model, LayerGraph):
            return model
        self._warn_state(model, self.profile.training is not None if training is None else training)
        return trace(model, **trace_kwargs)

    def _warn_state(self, model: nn.Module, training: bool) -> None:
        """:class:`ModelStateWarning` for a module in train mode for an inference estimate
        and for floating-point weights of a dtype the profile's precision does not run."""
        name = type(model).__name__
        if isinstance(model, nn.Module) and model.training and not training:
            warnings.warn(f"{name} is in train mode: dropout and batch norm are traced as in training, but profile "
                          f"{self.profile.name!r} describes inference; call model.eval() first",
                          ModelStateWarning, stacklevel=4)
        allowed = _PRECISION_DTYPES.get(str(self.profile.fingerprint.get("precision")))
        dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} if isinstance(model, nn.Module) else set()
        if allowed and dtypes - allowed:
            warnings.warn(f"{name} has {', '.join(sorted(str(d).replace('torch.', '') for d in dtypes - allowed))} "
                          f"weights, but profile {self.profile.name!r} runs {self.profile.fingerprint['precision']}: "
                          f"the estimate is of the network at {self.profile.fingerprint['precision']}",
                          ModelStateWarning, stacklevel=4)

    def kernel_table(self, graph: LayerGraph) -> KernelTable:
        """The kernels ``graph`` runs as on this target (cached on the graph)."""
        training = False if self.profile.training is not None else None   # a data batch requires no grad
        folds, dead, identity_slices, layout_transposes, shuffle_splits = self._removes
        return map_kernels(graph, self._rules, folds, training, self.profile.counting, dead, identity_slices,
                           self._merges, self._reorders, layout_transposes, self._groups_convs, shuffle_splits)

    def layer_model(self, kernel_kind: str) -> tuple[str, str, Any]:
        """(model type, profile entry, layer model) that answers ``kernel_kind``, without
        the weights-from-memory floor (:meth:`group_model` adds it)."""
        if kernel_kind not in self._models:
            kind = kernel_kind
            if kind.endswith(NO_INPUT_GRAD) and not any(kind in m for m in self.profile.layer_models.values()):
                kind = kind[: -len(NO_INPUT_GRAD)]     # not calibrated: the kind with its input gradient
            self._models[kernel_kind] = self.profile.model_for(kind, self.model_type)
        return self._models[kernel_kind]

    @staticmethod
    def weight_elems(table: KernelTable) -> float:
        """The weight elements of ``table``'s executed kernels: what a network holds."""
        return float(table.features[~table.free, _WEIGHT_ELEMS].sum())

    @property
    def max_cached_weight_elems(self) -> float | None:
        """The most weight elements a network may hold and still find them cached at each
        inference: the profile's ``weight_cache_bytes`` in elements; None where every
        network reads its weights from memory (the profile knows no such size), infinite
        where none does (this estimator applies no weights-from-memory floor)."""
        if not self.weights_from_memory:
            return math.inf
        cache = self.profile.weight_cache_bytes
        return None if cache is None else cache / (self.weight_bits / 8.0)

    def reads_weights_from_memory(self, weight_elems: float) -> bool:
        """Whether a network of ``weight_elems`` weight elements reads its weights from
        memory at each inference (more than :attr:`max_cached_weight_elems`): its
        kernels then take at least their weight bytes over the profile's weight bandwidth
        (:mod:`annette_torch.layer_models.weights_from_memory`)."""
        limit = self.max_cached_weight_elems
        return limit is None or weight_elems > limit

    def table_reads_weights_from_memory(self, table: KernelTable) -> bool:
        """:meth:`reads_weights_from_memory` for the network whose kernel table is ``table``."""
        return self.reads_weights_from_memory(self.weight_elems(table))

    def weight_regimes(self) -> set[bool]:
        """The values :meth:`reads_weights_from_memory` takes over networks of any size:
        both where the profile's cache size decides, one where every network is alike."""
        return {self.reads_weights_from_memory(0.0), self.reads_weights_from_memory(math.inf)}

    def group_model(self, table: KernelTable, kind: str, rows: np.ndarray, from_memory: bool | None = None) -> Any:
        """The layer model that predicts the kernels ``rows`` (all of kind ``kind``) of
        ``table``: the kind's model plus the time to read their weights again where the
        profile measured it (``weight_rereads``), at least their weight bytes over the profile's weight
        bandwidth where ``from_memory`` (None: where :meth:`reads_weights_from_memory`
        says so for ``table``'s network), plus the profile's cost of the layers fused into
        each of them and its per-kernel overhead (:mod:`annette_torch.layer_models.fused_layers`),
        corrected by the profile's adaptation to another device if it has one
        (:mod:`annette_torch.layer_models.adapted`), then by its correction of a prior from
        this machine's measurements if it has one (:mod:`annette_torch.layer_models.corrected`),
        then times the scale of the measured table if it has one (the kernels it lacks;
        :mod:`annette_torch.measure.kernel_table`)."""
        type_name, _, model = self.layer_model(kind)
        if from_memory is None:
            from_memory = self.table_reads_weights_from_memory(table)
        if self._rereads is not None:
            model = RereadWeights(model, self._rereads, self.weight_bits)
        if from_memory:
            model = WeightsFromMemory(model, self.profile.weight_bandwidth_bytes_s, self.weight_bits)
        costs = self.profile.fused_cost_s_per_elem
        per_elem = np.array([sum(costs.get(k, 0.0) for k in table.layer_kinds[r][1:]) for r in rows])
        if per_elem.any() or self.profile.kernel_overhead_ms:
            model = FusedLayers(model, per_elem, self.profile.kernel_overhead_ms / 1e3)
        if self.profile.adaptation is not None:
            model = AdaptedKernels(model, self.profile.adaptation)
        correction = None if self.profile.correction is None else self.profile.correction.for_kind(type_name, kind)
        if correction is not None:
            model = CorrectedKernels(model, correction)
        if self.measured is not None and self.measured.scale != 1.0:
            model = ScaledKernels(model, self.measured.scale)
        return model

    def model_groups(self, table: KernelTable, skip: np.ndarray | None = None,
                     from_memory: bool | None = None) -> list[tuple[np.ndarray, Any]]:
        """(row indices, layer model) per kernel kind of ``table``, free kernels (and
        those ``skip`` marks) left out: what one vectorized prediction per kind needs
        (``from_memory``: see :meth:`group_model`)."""
        skip = table.free if skip is None else table.free | skip
        if from_memory is None:
            from_memory = self.table_reads_weights_from_memory(table)
        groups = [(kind, rows[~skip[rows]]) for kind, rows in table.groups.items()]
        return [(rows, self.group_model(table, kind, rows, from_memory)) for kind, rows in groups if len(rows)]

    def measured_ms(self, table: KernelTable) -> np.ndarray:
        """Per kernel of ``table``: its time measured in context (``measured``), NaN where
        there is none and for free kernels."""
        if self.measured is None:
            return np.full(len(table), np.nan)
        times = self.measured.lookup(table)
        times[table.free] = np.nan
        return times

    def plan(self, graph: LayerGraph) -> tuple[KernelTable, list[tuple[str, np.ndarray, np.ndarray, Any]], np.ndarray]:
        """The kernel table of ``graph``, per kernel kind (kind, rows, features, layer
        model) of its executed kernels the layer models answer, and per kernel its
        measured time (NaN where the layer models answer): all an estimate of the graph
        computes. Cached on the graph; the warnings about unknown kinds and free work come
        once per graph."""
        plan = graph._cache.get(self._plan_key)
        if plan is None:
            table = self.kernel_table(graph)
            measured = self.measured_ms(table)
            plan = table, [(table.kinds[rows[0]], rows, table.features[rows], model)
                           for rows, model in self.model_groups(table, np.isfinite(measured))], measured
            graph._cache[self._plan_key] = plan
            self._warn_unknown(graph, table)
            self._warn_free(graph)
        return plan

    def kernel_times(self, graph: LayerGraph) -> KernelTimes:
        """Map ``graph`` to kernels and predict each kernel's time and confidence; a
        kernel measured in context takes its measured time (confidence "measured"), its
        bound and bytes still from its layer model."""
        table, groups, measured = self.plan(graph)
        n = len(table)
        time_ms, moved = np.zeros(n), np.zeros(n)
        bound, outside = np.zeros(n, dtype=bool), np.zeros((n, len(FEATURES)), dtype=bool)
        types, entries = ["free"] * n, [""] * n
        confidence = np.full(n, "free", dtype=object)
        total_s = 0.0
        for kind, rows, feats, model in groups:
            type_name, entry, _ = self.layer_model(kind)
            seconds, compute = model.predict(feats)
            total_s += self.checked_sum(graph, table, kind, rows, seconds)
            time_ms[rows], bound[rows], moved[rows] = seconds * 1e3, compute, model.bytes_moved(feats)
            confidence[rows], outside[rows] = self._confidence(type_name, entry, feats)
            for r in rows:
                types[r], entries[r] = type_name, entry
        known = np.isfinite(measured)
        for rows, model in self.model_groups(table, ~known) if known.any() else ():
            feats = table.features[rows]
            bound[rows], moved[rows] = model.predict(feats)[1], model.bytes_moved(feats)
            time_ms[rows], confidence[rows] = measured[rows], "measured"
            for r in rows:
                types[r], entries[r] = "measured", "measured"
        return KernelTimes(table, time_ms, bound, moved, types, entries, confidence, outside,
                           self._total_ms(graph, total_s, measured))

    def _confidence(self, type_name: str, entry: str, features: np.ndarray) -> tuple[Any, np.ndarray]:
        """(confidence, features outside the calibrated range) of kernels answered by
        ``entry`` of ``type_name``; see the module docstring."""
        outside = np.zeros(features.shape, dtype=bool)
        if entry == "default":
            return "fallback", outside
        calibrated = self.profile.range_of(type_name, entry)
        if calibrated is None:
            return "unranged", outside
        columns = [FEATURES.index(f) for f in calibrated]
        low, high = np.array(list(calibrated.values())).T
        slack = 1e-9 * np.maximum(np.abs(low), np.abs(high))
        outside[:, columns] = (features[:, columns] < low - slack) | (features[:, columns] > high + slack)
        return np.where(outside.any(1), "extrapolated", "calibrated"), outside

    def __call__(self, model: nn.Module | LayerGraph, **trace_kwargs: Any) -> float:
        """Estimated time of one inference in milliseconds (kernels + per-inference overhead).

        The fast path for search loops: per graph, the kernel table and which layer model
        answers which rows are worked out once (:meth:`plan`); a call is one prediction
        per kernel kind.
        """
        graph = self.graph_of(model, **trace_kwargs)
        table, groups, measured = self.plan(graph)
        seconds = 0.0
        for kind, rows, features, layer_model in groups:
            seconds += self.checked_sum(graph, table, kind, rows, layer_model.predict(features)[0])
        return self._total_ms(graph, seconds, measured)

    def _total_ms(self, graph: LayerGraph, kernel_s: float, measured: np.ndarray) -> float:
        """``kernel_s`` (the checked sum of the modelled kernel times) in ms plus the
        kernels measured in context (``measured``, NaN or infinite where the models answer)
        and the profile's ``overhead_ms``; :class:`EstimateError` if a measured time is
        negative or the overhead not a finite number >= 0 (a profile built in Python,
        which no load validated)."""
        overhead = self.profile.overhead_ms
        if not (isinstance(overhead, (int, float)) and 0 <= overhead < math.inf):
            raise EstimateError(f"{graph.model_name or 'the model'}: profile {self.profile.name!r} has overhead_ms "
                                f"{overhead!r}; it must be a finite number >= 0")
        known = measured[np.isfinite(measured)]
        if (known < 0).any():
            raise EstimateError(f"{graph.model_name or 'the model'}: a kernel measured in context has the negative "
                                f"time {float(known.min()):g} ms (measured kernels of {self.measured.folder})")
        return kernel_s * 1e3 + float(known.sum()) + overhead

    def checked_sum(self, graph: LayerGraph, table: KernelTable, kind: str, rows: np.ndarray,
                    seconds: np.ndarray) -> float:
        """The sum of the kernel times ``seconds`` (of ``rows`` of ``table``, all of kind
        ``kind``); :class:`EstimateError` naming the first kernel whose time is NaN,
        negative or above :data:`MAX_KERNEL_S` (infinite included) and the profile entry
        that answered it. Every path that sums layer-model times (the signature cache,
        the width latency too) goes through here."""
        total = float(seconds.sum())
        if total <= MAX_KERNEL_S * len(seconds) and (seconds >= 0).all() and (seconds <= MAX_KERNEL_S).all():
            return total                                   # (False for NaN, too)
        flagged = np.flatnonzero(~((seconds >= 0) & (seconds <= MAX_KERNEL_S)))
        bad = int(flagged[0])
        type_name, entry, _ = self.layer_model(kind)
        where = f" ({self.profile.source})" if self.profile.source else ""
        raise EstimateError(
            f"{graph.model_name or 'the model'}: kernel '{table.names[rows[bad]]}' ({kind}) was estimated at "
            f"{float(seconds[bad]) * 1e3:g} ms by profile {self.profile.name!r}{where}, entry "
            f"layer_models.{type_name}.{entry}: its parameters give this kernel no time between 0 and "
            f"{MAX_KERNEL_S:g} s (too small a peak or bandwidth, an overflowing regressor); fix or refit the profile")

    estimate = __call__

    def report(self, model: nn.Module | LayerGraph, **trace_kwargs: Any) -> pd.DataFrame:
        """One row per kernel: name, kind, absorbed layers, ops, bytes, time, model, bound,
        confidence and the features outside the calibrated range (``"c=3 (8..2048)"``).

        ``report.attrs`` holds ``total_ms`` (including ``overhead_ms``; equal to what
        ``self(model)`` returns), the profile name, the network's ``weight_bytes``,
        whether it reads them from memory (``weights_from_memory``) and the profile's
        ``weight_cache_bytes`` that decided it (None where there is no such size).
        """
        import pandas as pd  # imported on use: estimating needs no pandas

        graph = self.graph_of(model, **trace_kwargs)
        times = self.kernel_times(graph)
        table = times.table
        bound = np.where(table.free, "free", np.where(times.compute_bound, "compute", "memory"))
        layers = {layer.name: layer for layer in graph.layers}
        frame = pd.DataFrame({
            "kernel": table.names,
            "kind": table.kinds,
            "layers": ["+".join(names) for names in table.layers],
            "fusion": table.fusion,
            "module_path": [layers[name].module_path for name in table.names],
            "output_shape": [layers[(names or (name,))[-1]].output_shapes[0]      # an output reorder: its map's
                             if layers[(names or (name,))[-1]].output_shapes else ()
                             for name, names in zip(table.names, table.layers)],
            "ops": table.features[:, FEATURES.index("ops")],
            "bytes": times.bytes_moved,
            "time_ms": times.time_ms,
            "layer_model": times.model_type,
            "profile_entry": times.model_entry,
            "bound": bound,
            "confidence": times.confidence,
            "outside_range": self._outside_text(times),
        })
        weight_elems = self.weight_elems(table)
        frame.attrs.update(total_ms=times.total_ms,
                           overhead_ms=self.profile.overhead_ms, profile=self.profile.name,
                           model=graph.model_name, weight_bytes=weight_elems * self.weight_bits / 8.0,
                           weights_from_memory=self.reads_weights_from_memory(weight_elems),
                           weight_cache_bytes=self.profile.weight_cache_bytes if self.weights_from_memory else None)
        return frame

    def _outside_text(self, times: KernelTimes) -> list[str]:
        """Per kernel, its features outside the calibrated range with that range ("" if none)."""
        text = [""] * len(times.table)
        for r in np.flatnonzero(times.outside.any(1)):
            calibrated = self.profile.range_of(times.model_type[r], times.model_entry[r])
            text[r] = ", ".join(f"{FEATURES[c]}={times.table.features[r, c]:g} ({calibrated[FEATURES[c]][0]:g}.."
                                f"{calibrated[FEATURES[c]][1]:g})" for c in np.flatnonzero(times.outside[r]))
        return text

    def training_step(self, model: nn.Module | LayerGraph, optimizer: str = "sgd", **trace_kwargs: Any) -> float:
        """Estimated time of one training step in milliseconds, with a training profile
        (e.g. ``torch-cpu-train``):

            step = sum of the kernels' forward + backward times + the profile's overhead_ms
                   + the optimizer step: per_tensor_ms * tensors + per_element_ns * elements

        i.e. exactly :meth:`__call__` (whose kernels are forward + backward passes in
        such a profile) plus :meth:`optimizer_step` over the trainable parameters.
        ``optimizer``: one the profile has terms for ("sgd", "momentum", "adam")."""
        graph = self.graph_of(model, **trace_kwargs)
        step = self.optimizer_step(graph, optimizer)
        if not (math.isfinite(step) and step >= 0):
            raise EstimateError(f"{graph.model_name or 'the model'}: the optimizer step of {optimizer!r} was estimated "
                                f"at {step:g} ms by profile {self.profile.name!r}, field training.optimizer_step")
        return self(graph) + step

    def optimizer_step(self, model: nn.Module | LayerGraph, optimizer: str = "sgd", **trace_kwargs: Any) -> float:
        """Estimated time of ``optimizer.step()`` over the model's trainable parameters, in ms."""
        if self.profile.training is None:
            raise ValueError(f"profile {self.profile.name!r} describes inference; a training step needs a "
                             f"training profile such as 'torch-cpu-train'")
        steps = self.profile.training["optimizer_step"]
        if optimizer not in steps:
            raise ValueError(f"profile {self.profile.name!r} has no terms for optimizer {optimizer!r}; "
                             f"it has: {', '.join(sorted(steps))}")
        graph = self.graph_of(model, **trace_kwargs)
        if graph.parameter_sizes is None:
            raise ValueError(f"{graph.model_name or 'this graph'}: its trainable parameters are unknown "
                             f"(graphs imported from ONNX do not have them); pass the nn.Module or a graph traced from it")
        return optimizer_step_ms(steps[optimizer], graph.parameter_sizes)

    def memory(self, model: nn.Module | LayerGraph, training: bool = False, optimizer: str = "sgd",
               **trace_kwargs: Any) -> MemoryEstimate:
        """Memory of one inference or training step (``optimizer``: "sgd", "momentum" or
        "adam"), in bytes; see :mod:`annette_torch.memory`."""
        return estimate_memory(self.graph_of(model, training=training, **trace_kwargs), training, optimizer)

    def _warn_free(self, graph: LayerGraph) -> None:
        names = removed_layers(graph, *self._removes)
        if not names:
            return
        ops = graph.features[:, FEATURES.index("ops")]
        total = float(ops.sum())
        removed = float(sum(ops[graph.index[name]] for name in names))
        if total <= 0 or removed <= FREE_OPS_WARNING_SHARE * total:
            return
        dead, slices = len(graph.dead & names), len(graph.identity_slices & names - graph.dead)
        layout = len((graph.layout_transposes | graph.export_dropped | graph.shuffle_splits) & names
                     - graph.dead - graph.identity_slices)
        warnings.warn(f"{graph.model_name}: {removed / total:.0%} of its operations are costed as free, because "
                      f"{self.profile.name!r} describes a graph compiler that removes them ({dead} layer(s) whose "
                      f"results reach no output, {len(names) - dead - slices - layout} computed from constants, "
                      f"repeated or arithmetic with 0 or 1"
                      + (f", {slices} slice(s) of a whole tensor" if slices else "")
                      + (f", {layout} transpose(s), copies or splits of layout only" if layout else "") + "). "
                      f"If the network really computes them, check that its outputs depend on them",
                      FreeWorkWarning, stacklevel=4)

    @staticmethod
    def _warn_unknown(graph: LayerGraph, table: KernelTable) -> None:
        if "unknown" not in table.groups:
            return
        ops = collections.Counter(layer.attrs.get("op", "?") for layer in graph.unknown_layers())
        listed = ", ".join(f"{op} x{n}" for op, n in ops.most_common())
        warnings.warn(f"{graph.model_name}: {sum(ops.values())} layer(s) of unknown kind ({listed}) "
                      f"were estimated with the roofline fallback", UnknownKindWarning, stacklevel=4)


def estimate(model: Any, profile: str | Profile = DEFAULT_PROFILE, **trace_kwargs: Any) -> float:
    """Shortcut: ``Estimator(profile)(model, **trace_kwargs)``."""
    return Estimator(profile)(model, **trace_kwargs)
