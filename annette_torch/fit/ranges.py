"""Calibrated ranges: over which kernel features each fitted layer model was fitted.

A kind's range is, per kernel feature (:data:`~annette_torch.kinds.FEATURES`), the lowest
and highest value among the kernels its models were fitted on. :func:`fit_profile
<annette_torch.fit.generate.fit_profile>` records it in every entry of the kind
(``"range"``); the estimator calls a kernel whose features lie outside it
``extrapolated`` (:mod:`annette_torch.estimator`). :func:`store_ranges
<annette_torch.fit.generate.store_ranges>` computes the same ranges straight from a
measurement store, for profiles fitted before ranges were recorded.
"""
from __future__ import annotations

import pandas as pd

from ..kinds import FEATURES
from ..profiles.profile import Range


def calibrated_ranges(kernels: pd.DataFrame, min_rows: int = 3) -> dict[str, Range]:
    """Kind -> feature -> (min, max) over ``kernels`` (rows of :func:`~.table.kernel_table`),
    for the kinds with at least ``min_rows`` rows (those the fit gives models)."""
    counts = kernels.groupby("kind").size()
    fitted = kernels[kernels["kind"].isin(counts.index[counts >= min_rows])]
    grouped = fitted.groupby("kind")[list(FEATURES)]
    low, high = grouped.min(), grouped.max()
    return {kind: {f: (float(low.at[kind, f]), float(high.at[kind, f])) for f in FEATURES} for kind in low.index}
