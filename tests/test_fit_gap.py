"""The gap between profiled kernel times and end-to-end time (annette_torch.fit.overhead)."""
import numpy as np
import pandas as pd
import pytest

from annette_torch.fit.overhead import Gap, decades, fit_gap, kernel_decade_sums, scaled_kernel_sums


def _benchmarks(gap: Gap, seed: int = 0, count: int = 400):
    """Layer rows of ``count`` synthetic benchmarks (1-30 kernels of 3 us to 30 ms) and their
    end-to-end times as ``gap`` relates them, with 1 % noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(count):
        for t in 10 ** rng.uniform(-2.5, 1.5, size=rng.integers(1, 31)):
            rows.append({"benchmark": f"b{b}", "time_ms": float(t)})
    layers = pd.DataFrame(rows)
    sums = layers.groupby("benchmark")["time_ms"].agg(["sum", "size"])
    e2e = (gap.overhead_ms + scaled_kernel_sums(layers, gap) + gap.kernel_ms * sums["size"])
    e2e *= 1 + 0.01 * rng.standard_normal(len(e2e))
    return layers, sums, e2e


def test_the_factor_follows_kernel_duration_within_two_decades():
    gap = Gap(0.0, 0.9, 0.0, 0, np.nan, np.nan, slope=0.05)
    times = np.array([0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 1000.0])
    np.testing.assert_allclose(decades(times), [-2, -2, -1, 0, 1, 2, 2])
    np.testing.assert_allclose(gap.factor(times), [0.8, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0])
    np.testing.assert_allclose(gap.scaled(times), times * gap.factor(times))


def test_fit_gap_recovers_a_known_slope_scale_and_overhead():
    truth = Gap(0.008, 0.88, 0.0, 0, np.nan, np.nan, slope=0.06)
    layers, sums, e2e = _benchmarks(truth)
    fitted = fit_gap(e2e.to_numpy(), sums["sum"].to_numpy(), sums["size"].to_numpy(),
                     kernel_decade_sums(layers).reindex(sums.index).to_numpy())
    assert fitted.scale == pytest.approx(0.88, abs=0.01)
    assert fitted.slope == pytest.approx(0.06, abs=0.01)
    assert fitted.overhead_ms == pytest.approx(0.008, abs=0.002)
    assert fitted.mape_fit < 2.0 < fitted.mape_sum


def test_without_kernel_decades_the_slope_stays_zero():
    layers, sums, e2e = _benchmarks(Gap(0.0, 0.95, 0.0, 0, np.nan, np.nan))
    fitted = fit_gap(e2e.to_numpy(), sums["sum"].to_numpy(), sums["size"].to_numpy())
    assert fitted.slope == 0.0
    assert fitted.scale == pytest.approx(0.95, abs=0.01)


def test_a_profile_gap_round_trips_and_old_profiles_read_with_no_slope():
    gap = Gap(0.01, 0.9, -0.001, 12, 20.0, 10.0, slope=0.05)
    assert Gap.from_dict(gap.to_dict()) == gap
    old = Gap.from_dict({"overhead_ms": 0.01, "scale": 0.93, "kernel_ms": 0.0, "benchmarks": 5,
                         "mape_sum": 20.0, "mape_fit": 15.0})
    assert old.slope == 0.0 and old.scale == 0.93
    assert Gap.from_dict(None).scale == 1.0 and Gap.from_dict({"scale": -1}).scale == 1.0


def test_a_negligible_slope_is_dropped_and_the_gap_fitted_without_it():
    layers, sums, e2e = _benchmarks(Gap(0.0, 0.97, 0.0, 0, np.nan, np.nan, slope=0.002))
    args = (e2e.to_numpy(), sums["sum"].to_numpy(), sums["size"].to_numpy())
    with_decades = fit_gap(*args, kernel_decade_sums(layers).reindex(sums.index).to_numpy())
    assert with_decades == fit_gap(*args)
    assert with_decades.slope == 0.0
