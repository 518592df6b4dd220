"""Session 29: do the openvino-cpu store's convs run differently when they read the network's
input, and would a correction learned from that, plus OpenVINO's input reorder, help whole
networks? (measures nothing; about 6 minutes on 2 cores)

    python benchmarks/results/rerun-2026-12-06-s29/input_context.py > benchmarks/results/rerun-2026-12-06-s29/input-context.txt

1. The shipped profile's mixed models against the store's kernels (the rows ``fit`` uses, their
   times scaled by the fitted gap; in-sample), per kernel kind, kernel time and whether the
   kernel reads the network input: median measured / estimated.
2. Per product kind, a gradient-boosted correction of log(measured / estimated) on the
   regression inputs, with and without a reads-input flag: kernel MAPE over 5 folds grouped
   by benchmark (held out).
3. The store's runtime reorders of the network input to channels-last (``input_abcd_acdb_*``),
   per element of the input, by its channels: what every network pays before its stem conv
   and the estimator has no kernel for.
4. The 157 networks of the accuracy benchmark on four recorded ground truths: the shipped
   profile, with the input reorder added (1.0 ns per input element of a 3-channel input), then its conv kernels (and linear, depthwise) multiplied by the correction with
   the flag (each kernel flagged as the store's are), with and without the input reorder
   (1.0 ns per input element, step 3's 3-channel median).
"""
from __future__ import annotations

import glob
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.model_selection import GroupKFold

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
warnings.simplefilter("ignore")

from annette_torch import Estimator, trace  # noqa: E402
from annette_torch.fit.fused import costly_members  # noqa: E402
from annette_torch.fit.generate import _xy, store_kernels  # noqa: E402
from annette_torch.kinds import FEATURES  # noqa: E402
from annette_torch.layer_models.fused_layers import FusedLayers  # noqa: E402
from annette_torch.layer_models.regressors import regression_inputs  # noqa: E402
from annette_torch.profiles import load_profile  # noqa: E402

STORE = glob.glob(str(ROOT / "calibration/data/openvino-cpu-1t-f32-*"))[0]
FOLDER = "openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653"
GROUND_TRUTHS = ["rerun-2026-12-05", "rerun-2026-12-06", "rerun-2026-12-06-0508", "rerun-2026-12-06-s28"]
KINDS = ("conv", "linear", "depthwise_conv")
REORDER_NS = 1.0


def store_residuals(profile) -> pd.DataFrame:
    gap, kernels = store_kernels(STORE)
    kernels = kernels.reset_index(drop=True)
    features, seconds = _xy(kernels, gap)
    per_elem = np.array([sum(profile.fused_cost_s_per_elem.get(k, 0.0) for k in costly_members(f))
                         for f in kernels["fused_kinds"]])
    predicted = np.zeros(len(kernels))
    for kind, index in kernels.groupby("kind").indices.items():
        _, _, model = profile.model_for(kind, "mixed")
        predicted[index] = FusedLayers(model, per_elem[index]).predict(features[index])[0]
    return kernels.assign(measured_s=seconds, residual=np.log(seconds / predicted))


def booster() -> GradientBoostingRegressor:
    return GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=0)


def inputs(features: np.ndarray, reads_input: np.ndarray | None) -> np.ndarray:
    x = regression_inputs(features)
    return x if reads_input is None else np.concatenate([x, reads_input.astype(float)[:, None]], 1)


def corrections(kernels: pd.DataFrame) -> dict[str, GradientBoostingRegressor]:
    fitted = {}
    print("\n2. correction of log(measured / estimated), kernel MAPE % held out (5 folds by benchmark)")
    for kind in KINDS:
        rows = kernels[kernels["kind"] == kind].reset_index(drop=True)
        features, flag = rows[list(FEATURES)].to_numpy(), rows["reads_input"].to_numpy()
        y, w = rows["residual"].to_numpy(), 1 / (0.05 + rows["spread"].fillna(0.05).to_numpy())
        errors = {"none (in-sample model)": [], "without the flag": [], "with the flag": []}
        for train, test in GroupKFold(5).split(features, y, rows["benchmark"]):
            errors["none (in-sample model)"].append(np.abs(np.exp(y[test]) - 1))
            for label, use in (("without the flag", None), ("with the flag", flag)):
                x = inputs(features, use)
                model = booster().fit(x[train], y[train], sample_weight=w[train])
                errors[label].append(np.abs(np.exp(y[test] - model.predict(x[test])) - 1))
        print(f"   {kind:16s} {len(rows):5d} kernels: " + ", ".join(
            f"{label} {100 * np.concatenate(e).mean():.2f}" for label, e in errors.items()))
        fitted[kind] = booster().fit(inputs(features, flag), y, sample_weight=w)
    return fitted


def input_reorders() -> None:
    layers = pd.read_csv(Path(STORE) / "layers.csv.gz")
    reorders = layers[(layers["kernel_type"] == "Reorder") & layers["kernel"].str.startswith("input_abcd_acdb_", na=False)]
    reorders = reorders.assign(consumer=reorders["kernel"].str.slice(len("input_abcd_acdb_")))
    consumers = layers[layers["kind"].notna()].drop_duplicates(["benchmark", "kernel"])[["benchmark", "kernel", "input_elems", "c"]]
    both = reorders.merge(consumers, left_on=["benchmark", "consumer"], right_on=["benchmark", "kernel"])
    both = both[both["time_ms"] > 0]
    ns = both["time_ms"] * 1e6 / both["input_elems_y"] if "input_elems_y" in both else both["time_ms"] * 1e6 / both["input_elems"]
    both = both.assign(ns=ns, channels=pd.cut(both["c_y"] if "c_y" in both else both["c"], [0, 3, 16, 64, 100000]))
    print(f"\n3. the store's input reorders to channels-last: {len(both)} with a conv or depthwise conv after them; ns per input element")
    for channels, group in both.groupby("channels", observed=True):
        print(f"   input channels {str(channels):12s} {len(group):5d}: median {group['ns'].median():.2f}, "
              f"p10 {group['ns'].quantile(.1):.2f}, p90 {group['ns'].quantile(.9):.2f}")


def network_deltas(models: dict[str, GradientBoostingRegressor]) -> dict[str, dict]:
    import accuracy
    estimator, out = Estimator("openvino-cpu"), {}
    for network in accuracy.networks(["zoo", "timm", "dense", "mbv2", "nb201"]):
        shapes = network.input_shape if isinstance(network.input_shape[0], tuple) else (network.input_shape,)
        graph = trace(network.build(), *shapes)
        times = estimator.kernel_times(graph)
        table, delta = times.table, {}
        for kind, model in models.items():
            rows = [i for i, k in enumerate(table.kinds) if k == kind and not table.free[i]]
            if rows:
                flag = np.array([not graph[table.names[i]].parents for i in rows])
                factor = np.exp(model.predict(inputs(table.features[rows], flag)))
                delta[kind] = float(np.sum(times.time_ms[rows] * (factor - 1)))
        out[network.name] = {"delta": delta, "input_elems": float(np.prod(shapes[0])), "channels": shapes[0][1]}
    return out


def rescore(deltas: dict[str, dict]) -> None:
    print("\n4. mixed + map MAPE % per set, all, share within +-10 %, mean signed error % per set")
    variants = [("shipped", (), 0.0), ("input reorder only", (), REORDER_NS), ("conv corrected", ("conv",), 0.0),
                ("conv corrected + input reorder", ("conv",), REORDER_NS),
                ("conv, linear, dw corrected + reorder", KINDS, REORDER_NS)]
    with tempfile.TemporaryDirectory() as scratch:
        for name in GROUND_TRUTHS:
            path = Path(scratch) / f"{name}.json"
            subprocess.run([sys.executable, str(ROOT / "benchmarks/accuracy.py"), "--backend", "openvino-cpu", "--threads", "1",
                            "--profile", "openvino-cpu", "--sets", "zoo,timm,dense,mbv2,nb201", "--ground-truth",
                            str(ROOT / "benchmarks/results" / name / FOLDER), "--json", str(path)],
                           check=True, capture_output=True, cwd=ROOT)
            rows = [r for r in json.loads(path.read_text())["rows"] if not r.get("reference")]
            print(f"   ground truth {name}")
            for label, kinds, reorder_ns in variants:
                errors: dict[str, list[float]] = {}
                for r in rows:
                    d = deltas[r["network"]]
                    estimate = (r["mixed+map"] + sum(d["delta"].get(k, 0.0) for k in kinds)
                                + (reorder_ns * 1e-6 * d["input_elems"] if d["channels"] == 3 else 0.0))
                    errors.setdefault(r["set"], []).append(estimate / r["measured_ms"] - 1)
                every = np.concatenate(list(errors.values()))
                print(f"     {label:38s}" + " ".join(f"{s} {100 * np.mean(np.abs(e)):5.2f}" for s, e in sorted(errors.items()))
                      + f"  all {100 * np.mean(np.abs(every)):5.2f} ({100 * np.mean(np.abs(every) <= 0.1):.0f} %)  bias "
                      + " ".join(f"{s} {100 * np.mean(e):+.1f}" for s, e in sorted(errors.items())))


def main() -> None:
    profile = load_profile("openvino-cpu")
    kernels = store_residuals(profile)
    print("1. the shipped openvino-cpu profile on its store's kernels (in-sample): median measured / estimated")
    for kind in KINDS:
        rows = kernels[kernels["kind"] == kind]
        buckets = pd.cut(rows["measured_s"] * 1e3, [0, 0.005, 0.02, 0.1, 0.5, np.inf]).rename("kernel ms")
        table = rows.groupby([buckets, "reads_input"], observed=True)["residual"].agg(["size", lambda r: np.exp(np.median(r))])
        table.columns = ["kernels", "measured/estimated"]
        print(f"   {kind} (kernel ms, reads the network input)\n" + table.round(3).to_string().replace("\n", "\n   "))
    models = corrections(kernels)
    input_reorders()
    rescore(network_deltas(models))


if __name__ == "__main__":
    main()
