"""How much a kind's learned residual moves when nothing that matters changes: the mixed
model's gradient-boosted residual of one kernel kind fitted on a store's rows with seed 0
and seed 1, and with seed 0 on targets changed by 0.02 % (the size of change 30 more
benchmarks made through the gap fit, session 26), per learner configuration. Prints, per
configuration, the mean and largest change of each accuracy network's summed kernels of
that kind (a benchmark: measures nothing).

    python benchmarks/fit_stability.py [--store DIR] [--profile openvino-cpu] [--kind conv]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor

from accuracy import networks
from annette_torch import Estimator
from annette_torch.backends.base import torch_threads
from annette_torch.fit.fused import is_plain
from annette_torch.fit.generate import _weights, _xy, store_kernels
from annette_torch.fit.learners import _export_trees, round_targets
from annette_torch.fit.unroll import fit_refined_roofline
from annette_torch.graph import trace
from annette_torch.layer_models.regressors import regression_inputs, regressor_from_dict

STORE = "calibration/data/openvino-cpu-1t-f32-2026.4.1-22982-e213a147257-releases_2026_4-c13e1653"
#: the shipped learner (annette_torch.fit.learners) and variants: keyword arguments of :func:`boosted`
CONFIGS = {
    "shipped: 200 trees, 80 % rows": {},
    "all rows (subsample 1.0)": {"subsample": 1.0},
    "400 trees, rate 0.03, 50 % rows": {"subsample": 0.5, "learning_rate": 0.03, "trees": 400},
    "at least 10 rows a leaf": {"leaf": 10},
    "3 ensembles averaged": {"bags": 3},
}


def boosted(x, y, w, seed, trees=200, depth=4, learning_rate=0.06, subsample=0.8, leaf=1, bags=1):
    """The shipped gradient-boosted residual with these settings; ``bags`` ensembles of
    seeds ``seed * bags + b`` averaged, as one exported ensemble."""
    base, exported = float(np.average(y, weights=w)), []
    for b in range(bags):
        model = GradientBoostingRegressor(n_estimators=trees, max_depth=depth, learning_rate=learning_rate,
                                          subsample=subsample, min_samples_leaf=leaf, init="zero",
                                          random_state=seed * bags + b).fit(x, y - base, sample_weight=w)
        exported += [e.tree_ for e in model.estimators_[:, 0]]
    return regressor_from_dict(_export_trees(exported, learning_rate / bags, base).to_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=STORE)
    parser.add_argument("--profile", default="openvino-cpu", help="maps the networks to kernels")
    parser.add_argument("--kind", default="conv")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    estimator, features = Estimator(args.profile), []
    with torch_threads(1):
        for net in networks(["zoo", "timm", "dense", "mbv2", "nb201"]):
            try:
                graph = trace(net.build(), input_shape=net.input_shape, name=net.name)
            except Exception:  # noqa: BLE001 -- a network that does not trace is left out, as accuracy.py does
                continue
            features += [(net.name, f) for kind, _, f, _ in estimator.plan(graph)[1] if kind == args.kind]
    gap, kernels = store_kernels(args.store)
    rows = kernels[(kernels["kind"] == args.kind) & is_plain(kernels)]
    store_features, seconds = _xy(rows, gap)
    weights = _weights(rows)
    refined, _ = fit_refined_roofline(store_features, seconds, weights)
    x = regression_inputs(store_features)
    target = np.log(seconds / refined.predict(store_features)[0])
    changed = target + np.random.default_rng(0).normal(0, 2e-4, len(target))
    network_features = np.concatenate([f for _, f in features])
    owner = np.concatenate([[i] * len(f) for i, (_, f) in enumerate(features)])
    roof, inputs = refined.predict(network_features)[0], regression_inputs(network_features)
    print(f"{args.kind}: {len(target)} plain store rows ({args.store}); {len(network_features)} kernels of "
          f"{len(features)} networks mapped by {args.profile}")
    print(f"{'learner':<34}{'seed 0 vs 1: mean':>18}{'max':>7}{'0.02 % targets: mean':>22}{'max':>7}{'s':>5}")
    for name, config in CONFIGS.items():
        start = time.time()
        fits = [boosted(x, round_targets(target), weights, 0, **config),
                boosted(x, round_targets(target), weights, 1, **config),
                boosted(x, round_targets(changed), weights, 0, **config)]
        sums = [np.bincount(owner, roof * np.exp(model.predict(inputs))) for model in fits]
        seed = 100 * np.abs(np.log(sums[1] / sums[0]))
        perturbed = 100 * np.abs(np.log(sums[2] / sums[0]))
        print(f"{name:<34}{seed.mean():17.2f}%{seed.max():6.1f}%{perturbed.mean():21.2f}%{perturbed.max():6.1f}%"
              f"{time.time() - start:5.0f}")


if __name__ == "__main__":
    main()
