"""Build the built-in ``zcu102-dpu`` and ``ncs2-myriad`` profiles from the published
ANNETTE parameters in ``annette-published/`` (a copy of the reference data).

    python calibration/published/build_board_profiles.py        # rewrites annette_torch/profiles/builtin/

Layer models: the ``roofline`` set comes from the ``*-roofline.json`` files, the
``refined_roofline`` set from the ``*-ref_roofline.json`` files, so each set reproduces
the published estimator of that name. In the refined files, entries marked
``refined_roofline`` carry unrolling parameters (``<dim>_par``, ``<dim>_alpha``); the
other entries (with their own, sometimes different, peaks) become refined rooflines
without unrolled dimensions, which is the plain roofline formula. Mapping rules come from ``dnndk.json`` (ZCU102) and ``ov2.json``
(NCS2, the version with the learned ConvPool condition). The published statistical and
mixed models reference regressor files (``*.sav`` pickles) that were distributed
separately and are not available, so these profiles hold roofline and refined roofline
models only; the notes in each profile say so.

The parameters were fitted under ANNETTE's estimator, so these profiles count layers as
it does wherever that differs from annette_torch (:data:`ANNETTE_COUNTING`, the refined
rooflines' ``replicate``), and a per-layer figure reproduces ANNETTE's:

* refined roofline, replication: ANNETTE's ``BaseLayer.compute_efficiency`` sets the
  efficiency of an unrolled dimension smaller than its unroll factor to 1 (the layer is
  replicated across the idle units, ``replication=True`` where its layers call it), and
  applies formula 3 of the paper (``n / (ceil(n / par) * par)``) only from ``par`` up. A
  first conv on 3 channels on the NCS2 (c_par 32) then costs its plain roofline time
  (0.74 ms for ResNet-18's), not 1.8 ms;
* concat, first input only: ANNETTE's network descriptions (converted from ONNX/MMDNN)
  give a Concat layer the input shape of its first parent, and its ``Base`` roofline
  reads only that input (plus the whole output);
* pools, 2 ops per window tap: ANNETTE's ``PoolLayer`` counts
  ``outputs * window * 2`` operations (annette_torch counts 1 per tap), the count the
  published ``Pool`` peaks were fitted with. It matters on the ZCU102, whose pools are
  compute-bound; the NCS2's pool bandwidth makes its pools memory-bound either way.

Kept as annette_torch does it: ANNETTE's NCS2 refined-roofline file has no ``ConvPool``
entry, so ANNETTE estimates a fused conv+pool kernel (VGG-16's) with its ``Base`` layer,
which counts no operations: memory traffic only, a fallback bug of its own. Here a
``conv_pool`` kernel without a published model uses the kind's ``Conv`` model.

Calibrated ranges: the paper's micro-kernel sweeps cover 8 to 2048 input channels,
filters and neurons, kernel sizes 1 to 7 and pooling windows 2 to 10
(:data:`PAPER_RANGES`); the published conv, depthwise conv, pool and fully connected
entries record those ranges, so an estimate outside them says it extrapolates.
"""
from __future__ import annotations

import json
from pathlib import Path

from annette_torch.layer_models import layer_model_from_dict
from annette_torch.mapping import Counting, FusionRule
from annette_torch.profiles import Profile

HERE = Path(__file__).parent / "annette-published"
OUT = Path(__file__).resolve().parents[2] / "annette_torch" / "profiles" / "builtin"

POOL_KINDS = ["max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "global_avg_pool",
              "global_max_pool"]
#: ANNETTE layer type -> annette_torch kernel kinds it answers for.
TYPE_TO_KINDS = {
    "Base": ["default"], "Conv": ["conv"], "ConvPool": ["conv_pool"],
    "DepthwiseConv": ["depthwise_conv"], "FullyConnected": ["linear"], "Pool": POOL_KINDS,
    "ConvTranspose": ["conv_transpose"], "Add": ["add"], "Tanh": ["tanh"], "Exp": ["unary"],
}
#: ANNETTE layer type names in mapping rules -> annette_torch kinds.
RULE_KINDS = {"Conv": "conv", "DepthwiseConv": "depthwise_conv", "BatchNorm": "batch_norm",
              "Relu": "relu", "Relu6": "relu6", "LeakyRelu": "leaky_relu", "Pool": "max_pool",
              "ConvPool": "conv_pool"}

#: how ANNETTE counts layers where annette_torch counts otherwise (module docstring)
ANNETTE_COUNTING = {"ops_scale": {kind: 2.0 for kind in POOL_KINDS}, "first_input_only": ["concat"]}

#: the features of the paper's micro-kernel sweeps, per kernel kind with a published model:
#: channels, filters and neurons 8 to 2048, kernel sizes 1 to 7, pooling windows 2 to 10
PAPER_RANGES = {
    "conv": {"c": [8, 2048], "f": [8, 2048], "kh": [1, 7], "kw": [1, 7]},
    "depthwise_conv": {"c": [8, 2048], "kh": [1, 7], "kw": [1, 7]},
    "max_pool": {"c": [8, 2048], "kh": [2, 10], "kw": [2, 10]},
    "avg_pool": {"c": [8, 2048], "kh": [2, 10], "kw": [2, 10]},
    "linear": {"c": [8, 2048], "f": [8, 2048]},
}

BOARDS = {
    "zcu102-dpu": {
        "board": "dnndk", "mapping_file": "dnndk.json",
        "fingerprint": {"backend": "vitis-ai-dpu", "device": "Xilinx ZCU102 MPSoC, DPU",
                        "runtime_version": "DNNDK (DECENT + DNNC) as published with ANNETTE",
                        "threads": None, "precision": "int8"},
        "description": "Xilinx ZCU102 DPU, published ANNETTE roofline, refined-roofline and mapping models",
    },
    "ncs2-myriad": {
        "board": "ncs2", "mapping_file": "ov2.json",
        "fingerprint": {"backend": "openvino-myriad", "device": "Intel Neural Compute Stick 2 (Myriad X VPU)",
                        "runtime_version": "OpenVINO (MYRIAD plugin) as published with ANNETTE",
                        "threads": None, "precision": "fp16"},
        "description": "Intel NCS2 (Myriad X), published ANNETTE roofline, refined-roofline and mapping models",
    },
}


def layer_model(entry: dict, refined: bool) -> dict:
    """Our JSON parameters for one published entry (a roofline, or a refined roofline)."""
    arch = entry.get("architecture") or {}
    model = {"peak_ops_s": float(entry["op_s"]), "bandwidth_bytes_s": float(entry["bandwidth"]),
             "bit_act": int(arch.get("bit_act", 8)), "bit_weights": int(arch.get("bit_weights", 8))}
    if refined:
        unrolled = entry.get("est_type") == "refined_roofline"
        model["unroll"] = {d: {"par": float(arch[f"{d}_par"]), "alpha": float(arch[f"{d}_alpha"])}
                           for d in ("h", "w", "c", "f") if unrolled and f"{d}_par" in arch}
        model["replicate"] = True
    return model


def layer_model_set(data: dict, refined: bool) -> dict[str, dict]:
    """kernel kind -> parameters for the published entries of one file."""
    models: dict[str, dict] = {}
    for ann_type, kinds in TYPE_TO_KINDS.items():
        entry = data.get(ann_type)
        if not (isinstance(entry, dict) and "op_s" in entry):
            continue
        for kind in kinds:
            models[kind] = layer_model(entry, refined)
    return models


def mapping_rules(data: dict) -> list[dict]:
    rules = []
    for entry in data.values():
        if not isinstance(entry, dict) or entry.get("sec_type") is None:
            continue  # decompositions (Softplus -> Exp, Power, Log) are not fusion rules
        condition = []
        for clause in ((entry.get("fuse_cond") or {}).get("secondary") or {}).values():
            if clause["name"] == "pooling_type":
                continue  # the secondary kind max_pool already says MAX
            if clause["name"] == "kernel_shape":
                condition.append({"layer": "secondary", "attr": "kernel_size", "op": clause["cond"],
                                  "value": int(clause["val"])})
        rule = {"primary": RULE_KINDS[entry["prim_type"]], "secondary": RULE_KINDS[entry["sec_type"]],
                "result": RULE_KINDS[entry["out_type"]]}
        if condition:
            rule["condition"] = list({json.dumps(c, sort_keys=True): c for c in condition}.values())
        rules.append(rule)
    return rules


def paper_ranges(models: dict[str, dict]) -> dict[str, dict]:
    """Model type -> kind -> :data:`PAPER_RANGES` entry, for the kinds of ``models``
    (model type -> kind -> parameters) that have one."""
    return {t: {kind: {f: tuple(map(float, b)) for f, b in PAPER_RANGES[kind].items()}
                for kind in entries if kind in PAPER_RANGES}
            for t, entries in models.items()}


def build(name: str) -> Profile:
    spec = BOARDS[name]
    board = spec["board"]
    roofline = layer_model_set(json.loads((HERE / "layer" / f"{board}-roofline.json").read_text()), False)
    refined = layer_model_set(json.loads((HERE / "layer" / f"{board}-ref_roofline.json").read_text()), True)
    notes = [
        f"Built by calibration/published/build_board_profiles.py from the published ANNETTE files "
        f"layer/{board}-roofline.json, layer/{board}-ref_roofline.json and mapping/{spec['mapping_file']}.",
        "Layer models are roofline and refined roofline only: the published statistical and mixed "
        "models rely on regressor files (*.sav) that were distributed separately and are not available.",
        "Kinds without their own entry use the roofline 'default' (ANNETTE's 'Base' layer).",
        "Per-inference overhead is not published; overhead_ms is 0.",
    ]
    for models, label in ((roofline, "roofline"), (refined, "refined roofline")):
        if "conv" in models and "conv_pool" not in models:
            models["conv_pool"] = models["conv"]
            notes.append(f"No published ConvPool {label} model: fused conv+pool kernels use the Conv one.")
    if name == "ncs2-myriad":
        notes.append("The Softplus decomposition rule (Softplus -> Exp, Power, Log) of ov2.json is not a "
                     "fusion and is not represented; Log layers use the 'unary' (Exp) model.")
    notes.append("Layers are counted as ANNETTE counts them where the published parameters were fitted so "
                 "(counting: 2 ops per pooling-window tap, a concat reads its first input only; refined "
                 "rooflines: replicate); see calibration/published/build_board_profiles.py.")
    notes.append("Calibrated ranges are the paper's micro-kernel sweep ranges (channels, filters and neurons "
                 "8-2048, kernel sizes 1-7, pooling windows 2-10); other entries record none.")
    mapping_data = json.loads((HERE / "mapping" / spec["mapping_file"]).read_text())
    models = {"roofline": roofline, "refined_roofline": refined}
    return Profile(
        name=name, fingerprint=spec["fingerprint"], description=spec["description"],
        layer_models={t: {k: layer_model_from_dict(t, m, f"{name}.{t}.{k}") for k, m in entries.items()}
                      for t, entries in models.items()},
        counting=Counting.from_dict(ANNETTE_COUNTING), ranges=paper_ranges(models),
        model_preference=("refined_roofline", "roofline"),
        mapping=tuple(FusionRule.from_dict(r) for r in mapping_rules(mapping_data)),
        overhead_ms=0.0, notes=notes,
        # both toolchains compile a graph built from the network's outputs (NCS2: the ONNX
        # export of backends/ncs2.py, which keeps only what reaches an output, for OpenVINO;
        # ZCU102: vai_q_pytorch's torch.jit trace for vai_c_xir): dead layers never run there
        removes_dead_code=True,
        fit_metrics={"source": "published ANNETTE parameters; no fit metrics available"},
    )


def main() -> None:
    for name in BOARDS:
        path = build(name).save(OUT / f"{name}.json")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
