"""Profiles: everything the estimator knows about one target, as plain data.

Format ``annette_torch.profile`` version 2 (loading never executes code): a JSON file and,
when the profile has tree ensembles, their arrays in a numpy ``.npz`` file beside it::

    {
      "format": "annette_torch.profile", "version": 2,
      "name": "ncs2-myriad",
      "description": "...",
      "fingerprint": {"backend": ..., "device": ..., "runtime_version": ...,
                      "threads": ..., "precision": ...},
      "overhead_ms": 0.0,                       # per inference, added once
      "kernel_overhead_ms": 0.0,                # per executed kernel (may be negative: what
                                                # the profiler added to each kernel's time)
      "weight_bandwidth_bytes_s": 1.5e10,       # weights arrive from memory at this rate
                                                # (optional; see layer_models.weights_from_memory)
      "weight_cache_bytes": 1.5e7,              # ... unless the network holds at most this many
                                                # bytes of weights: then they stay cached (optional)
      "weight_rereads": {"bytes_s": 1.6e10,     # every network re-reads each kernel's weights, up
                         "up_to_bytes": 1048576},  # to this many bytes, at this rate (optional)
      "fused_cost_s_per_elem": {"silu": 2e-10},  # per output element, per fused layer kind
                                                # (optional; see layer_models.fused_layers)
      "training": {"optimizer_step": {"sgd": {"per_tensor_ms": 0.004, "per_element_ns": 0.3}}},
                                                # a training profile (optional): its kernels are
                                                # forward + backward passes, and these are the
                                                # optimizer step's terms (Estimator.training_step)
      "optimizes_graph": true,                  # the target folds constant subgraphs and computes
                                                # repeated parameter-free layers once (optional,
                                                # default false; LayerGraph.folded)
      "removes_dead_code": true,                # layers whose results reach no output are free
                                                # (optional, default: optimizes_graph; LayerGraph.dead)
      "removes_identity_slices": true,          # slices selecting their whole input are free
                                                # (optional, default false; OpenVINO removes them,
                                                # ONNX Runtime runs them; LayerGraph.identity_slices)
      "folds_layout_transposes": true,          # transposes between channels-last and -first next to
                                                # a conv are free (optional, default false; OpenVINO;
                                                # LayerGraph.layout_transposes)
      "splits_shuffles_in_place": true,         # a split of a channel shuffle's output is free
                                                # (optional, default false; OpenVINO;
                                                # LayerGraph.shuffle_splits)
      "merges_elementwise": true,               # connected elementwise layers run as one kernel
                                                # (optional, default false; OpenVINO's Snippets;
                                                # mapping.kernels)
      "groups_split_convs": true,               # a split, the same conv on each part and their
                                                # concat run as one grouped conv (optional, default
                                                # false; OpenVINO; LayerGraph.split_conv_groups)
      "reorders_outputs": true,                 # returned feature maps are converted from the
                                                # target's layout to NCHW by a kernel of their own
                                                # (optional, default false; mapping.kernels)
      "mapping": [{"primary": "conv", "secondary": "relu", "result": "conv",
                   "condition": [{"layer": "secondary", "attr": "kernel_size",
                                  "op": "==", "value": 2}]}, ...],
      "counting": {"ops_scale": {"max_pool": 2.0}, "first_input_only": ["concat"],
                   "all_taps": [{"kind": "conv", "condition": [...]}], "post_op_inputs": false},
                                                # optional: where the layer models count layers
                                                # otherwise than annette_torch (mapping.counting)
      "layer_models": {                         # model type -> kernel kind -> parameters
        "roofline": {"default": {...}, "conv": {...}, ...},   # required, with "default"
        "refined_roofline": {"conv": {...,      # an entry may say over which kernel features
            "range": {"c": [8, 2048], ...}},    # it was calibrated (optional; missing: unknown)
          ...},
        "mixed": {"conv": {..., "regressor": {..., "threshold": {"array": "layer_models.mixed.conv.regressor.threshold"}}}}
      },
      "model_preference": ["mixed", "refined_roofline", "roofline"],
      "arrays": {"file": "torch-cpu.0123456789abcdef.npz", "sha256": "..."},
                                                # where the arrays are (absent without arrays)
      "fit_metrics": {...},                     # how well the models fit (if fitted)
      "adaptation": {...},                      # optional: a per-kernel correction to another
                                                # device and how that device maps layers to
                                                # kernels (its "fusion" and "optimizes_graph"
                                                # override "mapping" and "optimizes_graph";
                                                # layer_models.adapted, annette_torch.transfer)
      "correction": {...},                      # optional: per kernel kind, factors learned from
                                                # this machine's measurements on top of a prior
                                                # profile (layer_models.corrected, fit --prior)
      "notes": ["..."]                          # provenance and known gaps
    }

An array field is ``{"array": KEY}`` in the JSON, ``KEY`` its dotted path, and the
``.npz`` member ``KEY`` holds it (a tree ensemble's arrays: :mod:`annette_torch.layer_models.regressors`).
The ``.npz`` is named ``<json stem>.<first 16 hex digits of its SHA-256>.npz``: a save writes
it under that new name, then replaces the JSON, then removes the stem's other arrays
files, so a reader finds the arrays its JSON was saved with at every moment; a profile
is the JSON plus that file (copy both). Loading reads the arrays with
``np.load(allow_pickle=False)``, checks their digest, and validates them as every other
field. Version 1 files (tree ensembles inline as JSON lists, no ``arrays``) still load;
saving them writes version 2.

A kernel of kind K is answered by the first model type in the preference (or the type
the caller asks for), then the roofline, that has an entry for K; otherwise by the first
of them that has a ``default`` (as in ANNETTE, the roofline is always the fallback).
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import zipfile
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_path
from ..validation import DataError, boolean, number, read_bytes, read_json, text
from ..layer_models import LAYER_MODELS, LayerModel, layer_model_from_dict
from ..layer_models.adapted import Adaptation
from ..layer_models.corrected import PriorCorrection
from ..layer_models.weights_from_memory import WeightRereads
from ..kinds import FEATURES
from ..mapping import ELEMENTWISE_SUBGRAPH, Counting, FusionRule

FORMAT = "annette_torch.profile"
VERSION = 2
READABLE_VERSIONS = (1, 2)     # 1: tree ensembles inline in the JSON, no arrays file
FINGERPRINT_FIELDS = ("backend", "device", "runtime_version", "threads", "precision")
#: a calibrated range: feature -> (lowest, highest) value among the kernels a model was fitted on
Range = dict[str, tuple[float, float]]
# an indented JSON list of plain numbers (strings hold no raw newline, so none matches inside one)
_NUMBER_LIST = re.compile(r"\[\n\s*([-+0-9.eE,\s]+?)\n\s*\]")


class ProfileError(DataError):
    """A profile is missing, unreadable, of another version, or has an invalid field."""



def _optional_field(data: dict, name: str, build, source: str):
    """``build(data[name])``, or None when the field is absent or null; a ``ValueError``
    from ``build`` becomes a :class:`ProfileError` naming the profile."""
    if data.get(name) is None:
        return None
    try:
        return build(data[name])
    except ValueError as error:
        raise ProfileError(f"profile {source}: field {error}") from None

#: kernel kind -> kinds doing the same work, whose models answer it when a profile has none
#: of its own (the report's ``profile_entry`` names the one that did): an elementwise
#: subgraph or a unary op is one pass over its inputs and outputs, as an add or a multiply;
#: so are a division and a comparison (OpenVINO runs a division by a constant as a
#: multiply); a clamp is ReLU6's computation with other bounds; an einsum of two operands
#: is a batched matrix product (MaxViT's and MViT's attention); an embedding copies the
#: rows it gathers, as a slice or a concat copies; a reduction over a dimension reads its
#: input once, as a global pool. (Not a split: OpenVINO runs most splits in place, but a
#: partial slice as a copy, and a slice model gave MixNet's channel splits 17 ms of 9
#: measured; splits have their own calibration family.) An elementwise subgraph takes the
#: multiply's model first: an add's, fitted on the 1-5 µs adds too, charges a subgraph
#: holding a GELU as compute-bound (FastViT's stem add + GELU: 1.14 ms, the multiply's 0.48,
#: 0.08 measured in context). A channel shuffle is a transpose where a runtime has no kernel
#: of its own for it. A softmax along adjacent elements and one along a strided axis stand
#: in for each other (profiles fitted before session 35 have one softmax, on strided rows).
STAND_INS: dict[str, tuple[str, ...]] = {ELEMENTWISE_SUBGRAPH: ("mul", "add"), "unary": ("mul", "add"),
                                         "div": ("mul", "sub"), "compare": ("sub", "mul"),
                                         "clamp": ("relu6", "relu"), "einsum": ("matmul",),
                                         "embedding": ("slice", "concat"), "reduce": ("global_avg_pool",),
                                         "channel_shuffle": ("permute",),
                                         "softmax": ("softmax_strided",), "softmax_strided": ("softmax",)}


@dataclass
class Profile:
    """A target's mapping rules, per-kind layer models and per-inference overhead."""

    name: str
    fingerprint: dict[str, Any]
    layer_models: dict[str, dict[str, LayerModel]]   # model type -> kernel kind -> model
    model_preference: tuple[str, ...] = ("roofline",)
    mapping: tuple[FusionRule, ...] = ()
    overhead_ms: float = 0.0
    kernel_overhead_ms: float = 0.0
    weight_bandwidth_bytes_s: float | None = None
    weight_cache_bytes: float | None = None     # networks with at most these weight bytes read them from cache
    weight_rereads: WeightRereads | None = None  # what re-reading weights a benchmark kept cached costs in a network
    fused_cost_s_per_elem: dict[str, float] = field(default_factory=dict)
    optimizes_graph: bool = False
    removes_dead_code: bool | None = None   # None: as optimizes_graph
    removes_identity_slices: bool = False
    folds_layout_transposes: bool = False
    splits_shuffles_in_place: bool = False
    merges_elementwise: bool = False
    groups_split_convs: bool = False
    reorders_outputs: bool = False
    training: dict[str, Any] | None = None
    description: str = ""
    fit_metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    source: str = ""
    adaptation: Adaptation | None = None    # set for a profile adapted to another device
    correction: PriorCorrection | None = None  # set for a prior corrected by this machine's measurements
    counting: Counting | None = None        # how its layer models count layers (None: as annette_torch)
    ranges: dict[str, dict[str, Range]] = field(default_factory=dict)  # model type -> entry -> range

    def range_of(self, type_name: str, entry: str) -> Range | None:
        """The features over which entry ``entry`` of ``type_name`` was calibrated, or None
        when the profile does not say."""
        return self.ranges.get(type_name, {}).get(entry)

    def model_for(self, kernel_kind: str, model_type: str | None = None) -> tuple[str, str, LayerModel]:
        """(model type, entry, layer model) answering ``kernel_kind``: the first of the
        requested type (or the preference order) and then the roofline that has an entry
        for the kind or one of its :data:`STAND_INS` (the kind first); else the first of
        them that has a ``default``."""
        order = list(dict.fromkeys(((model_type,) if model_type else self.model_preference) + ("roofline",)))
        for entries in ((kernel_kind, *STAND_INS.get(kernel_kind, ())), ("default",)):
            for type_name in order:
                models = self.layer_models.get(type_name, {})
                for entry in entries:
                    if entry in models:
                        return type_name, entry, models[entry]
        raise AssertionError("validated profiles always have a roofline default")

    def model_types(self) -> list[str]:
        return list(self.layer_models)

    def reaches(self, model_type: str) -> bool:
        """Whether the model preference answers some kernel kind with ``model_type``'s models."""
        return any(self.model_for(kind)[0] == model_type for kind in self.layer_models.get(model_type, {}))

    def counted_as(self, backend_counting: dict) -> Profile:
        """This profile counting the dilated convs that compute their padding as a target
        backend does (its ``counting``'s ``all_taps``: a property of the target, not of the
        models), for adapting or correcting it to that target; its other counting
        conventions stay."""
        counting = (self.counting or Counting()).with_all_taps_of(backend_counting)
        return self if counting == self.counting else replace(self, counting=counting)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION, "name": self.name,
            "description": self.description, "fingerprint": dict(self.fingerprint),
            "overhead_ms": self.overhead_ms, "kernel_overhead_ms": self.kernel_overhead_ms,
            "weight_bandwidth_bytes_s": self.weight_bandwidth_bytes_s,
            **({"weight_cache_bytes": self.weight_cache_bytes} if self.weight_cache_bytes is not None else {}),
            **({"weight_rereads": self.weight_rereads.to_dict()} if self.weight_rereads is not None else {}),
            "fused_cost_s_per_elem": dict(self.fused_cost_s_per_elem),
            "optimizes_graph": self.optimizes_graph,
            **({"removes_dead_code": self.removes_dead_code} if self.removes_dead_code is not None else {}),
            **({"removes_identity_slices": True} if self.removes_identity_slices else {}),
            **({"folds_layout_transposes": True} if self.folds_layout_transposes else {}),
            **({"splits_shuffles_in_place": True} if self.splits_shuffles_in_place else {}),
            **({"merges_elementwise": True} if self.merges_elementwise else {}),
            **({"groups_split_convs": True} if self.groups_split_convs else {}),
            **({"reorders_outputs": True} if self.reorders_outputs else {}),
            **({"training": self.training} if self.training is not None else {}),
            "mapping": [r.to_dict() for r in self.mapping],
            **({"counting": self.counting.to_dict()} if self.counting is not None else {}),
            "layer_models": {t: {k: m.to_dict() | _range_field(self.range_of(t, k)) for k, m in models.items()}
                             for t, models in self.layer_models.items()},
            "model_preference": list(self.model_preference),
            "fit_metrics": self.fit_metrics, "notes": list(self.notes),
            **({"adaptation": self.adaptation.to_dict()} if self.adaptation is not None else {}),
            **({"correction": self.correction.to_dict()} if self.correction is not None else {}),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Validate the profile as loading does (:class:`ProfileError` and nothing written if it
        fails), then write it atomically: its arrays (if any) to a new ``.npz`` named by their
        digest, then the JSON (indented; lists of numbers on one line each) that names it,
        then remove the stem's previous arrays files (see the module doc)."""
        path = Path(path)
        data = self.to_dict()
        Profile.from_dict(data, source=f"{path} (not saved)")     # what is written, loading accepts
        arrays: dict[str, np.ndarray] = {}
        data = _split_arrays(data, "", arrays)
        arrays_file = None
        if arrays:
            blob = _npz_bytes(arrays)
            digest = hashlib.sha256(blob).hexdigest()
            arrays_file = path.parent / f"{path.stem}.{digest[:16]}.npz"
            data["arrays"] = {"file": arrays_file.name, "sha256": digest}
        text = _NUMBER_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]",
                                json.dumps(data, indent=2, allow_nan=False))
        if arrays_file is not None:
            with atomic_path(arrays_file) as tmp:
                tmp.write_bytes(blob)
        with atomic_path(path) as tmp:
            tmp.write_text(text + "\n")
        own = re.compile(re.escape(path.stem) + r"\.[0-9a-f]{16}\.npz")
        for old in path.parent.iterdir():
            if own.fullmatch(old.name) and old != arrays_file:
                old.unlink(missing_ok=True)
        return path

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Profile:
        """Validate and build; every error (a :class:`ProfileError`) names ``source`` and
        the offending field."""
        try:
            return cls._from_dict(data, source)
        except ProfileError:
            raise
        except DataError as error:
            raise ProfileError(f"profile {source}: {error}") from None

    @classmethod
    def _from_dict(cls, data: Any, source: str) -> Profile:
        def fail(field_name: str, problem: str) -> ProfileError:
            return ProfileError(f"profile {source}: field '{field_name}': {problem}")

        if not isinstance(data, dict):
            raise fail("<root>", "expected a JSON object")
        if data.get("format") != FORMAT:
            raise fail("format", f"expected {FORMAT!r}, got {data.get('format')!r}")
        version = data.get("version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise fail("version", f"this annette_torch reads versions {', '.join(map(str, READABLE_VERSIONS))}, "
                                  f"the file has {version!r}; rebuild or convert the profile")
        for name in ("name", "fingerprint", "layer_models"):
            if name not in data:
                raise fail(name, "missing")
        if not isinstance(data["fingerprint"], dict):
            raise fail("fingerprint", "expected an object")
        missing = [f for f in FINGERPRINT_FIELDS if f not in data["fingerprint"]]
        if missing:
            raise fail("fingerprint", f"missing {missing}")
        models_data = data["layer_models"]
        if not isinstance(models_data, dict) or not isinstance(models_data.get("roofline"), dict) \
                or "default" not in models_data["roofline"]:
            raise fail("layer_models", "expected an object with a 'roofline' set that has a 'default' entry")
        models: dict[str, dict[str, LayerModel]] = {}
        ranges: dict[str, dict[str, Range]] = {}
        for type_name, entries in models_data.items():
            if type_name not in LAYER_MODELS:
                raise fail(f"layer_models.{type_name}", f"unknown layer model type (known: {sorted(LAYER_MODELS)})")
            if not isinstance(entries, dict):
                raise fail(f"layer_models.{type_name}", "expected an object of kernel kind -> parameters")
            models[type_name] = {}
            for kind, entry in entries.items():
                try:
                    models[type_name][kind] = layer_model_from_dict(type_name, entry, f"layer_models.{type_name}.{kind}")
                except ValueError as error:
                    raise ProfileError(f"profile {source}: field {error}") from None
                if entry.get("range") is not None:
                    where = f"layer_models.{type_name}.{kind}.range"
                    ranges.setdefault(type_name, {})[kind] = _check_range(entry["range"], lambda p: fail(where, p))
        preference = data.get("model_preference", ["roofline"])
        if not isinstance(preference, list) or not all(isinstance(p, str) and p in models for p in preference):
            raise fail("model_preference", f"expected a list of model types present in layer_models "
                                           f"({sorted(models)}), got {preference!r}")
        rules = []
        if not isinstance(data.get("mapping") or [], list):
            raise fail("mapping", f"expected a list of fusion rules, got {data['mapping']!r}")
        for i, entry in enumerate(data.get("mapping") or ()):
            try:
                rules.append(FusionRule.from_dict(entry))
            except (KeyError, TypeError, ValueError) as error:
                raise fail(f"mapping[{i}]", f"invalid rule ({error})") from None
        overhead = number(data.get("overhead_ms", 0.0), "field 'overhead_ms'", low=0)
        per_kernel = number(data.get("kernel_overhead_ms", 0.0), "field 'kernel_overhead_ms'")
        bandwidth = data.get("weight_bandwidth_bytes_s")
        if bandwidth is not None:
            bandwidth = number(bandwidth, "field 'weight_bandwidth_bytes_s'", low=0, low_open=True)
        weight_cache = data.get("weight_cache_bytes")
        if weight_cache is not None:
            weight_cache = number(weight_cache, "field 'weight_cache_bytes'", low=0)
        folds = boolean(data.get("optimizes_graph", False), "field 'optimizes_graph'")
        dead = data.get("removes_dead_code")
        dead = None if dead is None else boolean(dead, "field 'removes_dead_code'")
        identity_slices = boolean(data.get("removes_identity_slices", False), "field 'removes_identity_slices'")
        layout_transposes = boolean(data.get("folds_layout_transposes", False), "field 'folds_layout_transposes'")
        shuffle_splits = boolean(data.get("splits_shuffles_in_place", False), "field 'splits_shuffles_in_place'")
        merges = boolean(data.get("merges_elementwise", False), "field 'merges_elementwise'")
        split_convs = boolean(data.get("groups_split_convs", False), "field 'groups_split_convs'")
        reorders = boolean(data.get("reorders_outputs", False), "field 'reorders_outputs'")
        fused_costs = data.get("fused_cost_s_per_elem") or {}
        if not isinstance(fused_costs, dict):
            raise fail("fused_cost_s_per_elem", f"expected an object of layer kind -> seconds, got {fused_costs!r}")
        fused_costs = {k: number(v, f"field 'fused_cost_s_per_elem.{k}'") for k, v in fused_costs.items()}
        training = data.get("training")
        if training is not None:
            _check_training(training, fail)
        counting, adaptation, correction, rereads = (_optional_field(data, name, build, source)
                                                     for name, build in (("counting", Counting.from_dict),
                                                                         ("adaptation", Adaptation.from_dict),
                                                                         ("correction", PriorCorrection.from_dict),
                                                                         ("weight_rereads", WeightRereads.from_dict)))
        for name, kind in (("description", str), ("fit_metrics", dict), ("notes", list)):
            if data.get(name) is not None and not isinstance(data[name], kind):
                raise fail(name, f"expected {'a string' if kind is str else 'an object' if kind is dict else 'a list'}, "
                                 f"got {data[name]!r}")
        return cls(name=text(data["name"], "field 'name'"), fingerprint=dict(data["fingerprint"]),
                   layer_models=models, model_preference=tuple(preference), mapping=tuple(rules), overhead_ms=overhead,
                   kernel_overhead_ms=per_kernel, weight_bandwidth_bytes_s=bandwidth,
                   weight_cache_bytes=weight_cache, weight_rereads=rereads,
                   fused_cost_s_per_elem={str(k): v for k, v in fused_costs.items()},
                   optimizes_graph=folds, removes_dead_code=dead, removes_identity_slices=identity_slices,
                   folds_layout_transposes=layout_transposes, splits_shuffles_in_place=shuffle_splits,
                   merges_elementwise=merges, groups_split_convs=split_convs, reorders_outputs=reorders, training=training, description=data.get("description") or "",
                   fit_metrics=dict(data.get("fit_metrics") or {}), notes=list(data.get("notes") or []),
                   source=source, adaptation=adaptation, correction=correction, counting=counting, ranges=ranges)


def profile_digest(profile: Profile) -> str:
    """SHA-256 (hex) of what ``profile`` holds: its JSON form (keys sorted, arrays by their
    bytes), independent of the file it came from, its indentation and its source path."""
    arrays: dict[str, np.ndarray] = {}
    data = _split_arrays(profile.to_dict(), "", arrays)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, allow_nan=False).encode())
    if arrays:
        digest.update(_npz_bytes(arrays))
    return digest.hexdigest()


def _range_field(calibrated: Range | None) -> dict:
    """The ``"range"`` field of a layer-model entry (nothing when unknown)."""
    return {} if calibrated is None else {"range": {f: [lo, hi] for f, (lo, hi) in calibrated.items()}}


def _check_range(data: Any, fail) -> Range:
    """``data`` as a :data:`Range`; raises ``fail(problem)`` unless it maps kernel features
    to [low, high] pairs of finite numbers with low <= high."""
    if not isinstance(data, dict):
        raise fail(f"expected an object of feature -> [low, high], got {data!r}")
    checked: Range = {}
    for feature, bounds in data.items():
        if feature not in FEATURES:
            raise fail(f"unknown feature {feature!r} (known: {', '.join(FEATURES)})")
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)
                and bounds[0] <= bounds[1]):
            raise fail(f"{feature}: expected [low, high] with low <= high, got {bounds!r}")
        checked[feature] = (float(bounds[0]), float(bounds[1]))
    return checked


def _check_training(training: Any, fail) -> None:
    """Raise ``fail("training...", problem)`` unless ``training`` maps ``optimizer_step``
    to optimizer -> {per_tensor_ms, per_element_ns} of non-negative numbers."""
    steps = training.get("optimizer_step") if isinstance(training, dict) else None
    if not isinstance(steps, dict) or not steps:
        raise fail("training", "expected an object with a non-empty 'optimizer_step' object")
    for optimizer, terms in steps.items():
        for term in ("per_tensor_ms", "per_element_ns"):
            value = terms.get(term) if isinstance(terms, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise fail(f"training.optimizer_step.{optimizer}.{term}", f"expected a number >= 0, got {value!r}")


def builtin_dir() -> Path:
    return Path(str(resources.files("annette_torch.profiles") / "builtin"))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.json"))


def load_profile(name_or_path: str | os.PathLike | Profile) -> Profile:
    """A built-in profile by name, or a profile JSON file by path (its arrays file found
    beside it)."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, os.PathLike) or text.endswith(".json") or "/" in text or os.sep in text
    if not looks_like_path:
        if text not in builtin_names():
            raise ProfileError(f"unknown profile {text!r}; available: {', '.join(builtin_names())} "
                               f"(or give the path to a profile .json file)")
        path = builtin_dir() / f"{text}.json"
    else:
        path = Path(text)
    try:
        data = read_json(path, "profile file")
    except DataError as error:
        raise ProfileError(str(error)) from None
    if not isinstance(data, dict) or data.get("arrays") is None:
        return Profile.from_dict(data, source=str(path))
    arrays, arrays_path = _read_arrays(path, data["arrays"])
    try:
        return Profile.from_dict(_join_arrays(data, arrays, path, arrays_path), source=str(path))
    except ProfileError as error:
        raise ProfileError(f"{error} (arrays from {arrays_path})") from None


def _split_arrays(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    """``value`` with each numpy array replaced by ``{"array": its dotted key}``, the
    arrays collected in ``arrays``, and each NaN or infinite number by null (the free-form
    ``fit_metrics`` hold such scores; the validated fields cannot)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"array": key}
    if isinstance(value, dict):
        return {k: _split_arrays(v, f"{key}.{k}" if key else str(k), arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split_arrays(v, f"{key}[{i}]", arrays) for i, v in enumerate(value)]
    return value


def _join_arrays(value: Any, arrays: dict[str, np.ndarray], path: Path, arrays_path: Path) -> Any:
    """``value`` with each ``{"array": key}`` replaced by ``arrays[key]``."""
    if isinstance(value, dict):
        if list(value) == ["array"]:
            if value["array"] not in arrays:
                raise ProfileError(f"profile {path}: field {value['array']!r}: no such array in {arrays_path}")
            return arrays[value["array"]]
        return {k: _join_arrays(v, arrays, path, arrays_path) for k, v in value.items()}
    if isinstance(value, list):
        return [_join_arrays(v, arrays, path, arrays_path) for v in value]
    return value


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as a compressed ``.npz`` whose bytes depend on the arrays alone (members
    sorted, timestamps fixed), so refitting the same data gives the same file."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for key in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def _read_arrays(path: Path, spec: Any) -> tuple[dict[str, np.ndarray], Path]:
    """(the arrays of the profile at ``path``, their file) from its ``arrays`` field: a
    plain ``.npz`` beside it whose SHA-256 matches, read without unpickling anything."""
    name = spec.get("file") if isinstance(spec, dict) else None
    if not (isinstance(name, str) and name.endswith(".npz") and Path(name).name == name and "\\" not in name
            and not name.startswith(".") and isinstance(spec.get("sha256"), str)):
        raise ProfileError(f"profile {path}: field 'arrays': expected {{'file': a .npz file name beside the profile, "
                           f"'sha256': its digest}}, got {spec!r}")
    arrays_path = path.parent / name
    try:
        blob = read_bytes(arrays_path, "arrays file")
    except DataError as error:
        raise ProfileError(f"profile {path}: field 'arrays': cannot read {arrays_path} ({error}); "
                           f"the arrays file travels with the profile, copy both") from None
    if hashlib.sha256(blob).hexdigest() != spec["sha256"]:
        raise ProfileError(f"profile {path}: field 'arrays': {arrays_path} is not the arrays file this profile was "
                           f"saved with (SHA-256 differs): damaged, or written by another save")
    arrays, key = {}, "<archive>"
    try:
        archive = np.load(io.BytesIO(blob), allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with archive:
            for key in archive.files:
                arrays[key] = archive[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ProfileError(f"profile arrays {arrays_path}: field {key!r}: not a plain numeric array ({error})") from None
    return arrays, arrays_path


def list_profiles() -> list[Profile]:
    """All built-in profiles, loaded."""
    return [load_profile(name) for name in builtin_names()]
