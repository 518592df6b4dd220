"""Do a profile's layer models see the short kernels? Per layer kind, a store's plain
kernels (as a fit uses them: grouped as the target ran them, times scaled by the fit's gap)
by how long they ran, against each profile's model of that kind (a benchmark: prints a
table, measures nothing).

    python benchmarks/short_kernels.py --store calibration/data/openvino-cpu-1t-... \\
        --profile openvino-cpu [OTHER.json ...] [--kinds conv,linear,...]

A kernel shorter than a fit's ``min_time_ms`` is not fitted on; the table shows what its
layer models then say about such kernels (a ratio above 1: estimated slower than it ran).
Kernels under 1 µs read 0-1 ticks of the profilers' microsecond clocks: their ratio uses
at least 0.5 µs.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

from annette_torch import Estimator
from annette_torch.fit import load_store, store_kernels
from annette_torch.fit.fused import is_plain
from annette_torch.kinds import FEATURES

BANDS_US = (0.0, 1.0, 2.0, 5.0, 10.0, np.inf)
KINDS = "conv,depthwise_conv,linear,add,mul,relu,hardsigmoid,global_avg_pool,concat,slice,split,avg_pool,max_pool"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--profile", nargs="+", required=True, help="built-in names or profile .json paths")
    parser.add_argument("--kinds", default=KINDS, help="comma-separated layer kinds")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gap, kernels = store_kernels(load_store(args.store), min_time_ms=0.0)
    kernels = kernels[is_plain(kernels)]
    measured_us = gap.scaled(kernels["time_ms"].to_numpy()) * 1e3
    estimators = [Estimator(profile) for profile in args.profile]
    print(f"{args.store}: {len(kernels)} plain kernels; per profile, estimated / measured: "
          f"of the band's sums, and the median of its kernels' ratios")
    for number, profile in enumerate(args.profile, 1):
        print(f"  profile {number}: {profile}")
    print(f"{'kind':<16}{'band µs':>10}{'kernels':>8}{'measured ms':>12}"
          + "".join(f"{f'{number}: sums':>10}{'median':>8}" for number in range(1, len(args.profile) + 1)))
    for kind in args.kinds.split(","):
        rows = np.flatnonzero((kernels["kind"] == kind).to_numpy())
        if not len(rows):
            continue
        features = kernels.iloc[rows][list(FEATURES)].to_numpy()
        estimates_us = [est.layer_model(kind)[2].predict(features)[0] * 1e6 for est in estimators]
        for low, high in zip(BANDS_US[:-1], BANDS_US[1:]):
            band = (measured_us[rows] >= low) & (measured_us[rows] < high)
            if not band.any():
                continue
            m = measured_us[rows][band]
            cells = "".join(f"{e[band].sum() / m.sum():>10.2f}{np.median(e[band] / np.maximum(m, 0.5)):>8.2f}"
                            for e in estimates_us)
            print(f"{kind:<16}{f'{low:g}-{high:g}':>10}{int(band.sum()):>8}{m.sum() / 1e3:>12.3f}{cells}")


if __name__ == "__main__":
    main()
