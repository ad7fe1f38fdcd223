"""Window operators and daily ranks against pandas on random data with missing values (properties)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from backtest.features import rolling as R
from backtest.features.cross_section import DailyCrossSection


@st.composite
def series(draw):
    """A (dates x stocks) matrix with leading NaNs (late listings), interior NaNs and flat stretches."""
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(1, 60))
    m = draw(st.integers(1, 5))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m)).cumsum(axis=0) + 50
    x[rng.random((n, m)) < draw(st.sampled_from([0.0, 0.1, 0.4]))] = np.nan
    for j in range(m):
        if rng.random() < 0.5:
            x[: rng.integers(0, n + 1), j] = np.nan  # listed late
        if rng.random() < 0.3 and n > 3:
            x[n // 3 : n // 2 + 1, j] = 7.0  # a flat stretch
    return x


windows = st.integers(1, 12)


def direct_std(x: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """Sample std of each trailing window computed directly (two-pass per window, no running sums).

    The reference for ``rolling_std``: pandas' add/remove algorithm loses digits on nearly flat windows
    of large values (it reported 3.2801e-06 for a window whose exact std is 3.2853e-06).
    """
    padded = np.vstack([np.full((window - 1, x.shape[1]), np.nan), x])
    views = np.lib.stride_tricks.sliding_window_view(padded, window, axis=0)  # (n, m, window)
    count = np.sum(~np.isnan(views), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(views, axis=-1) / count
        var = np.nansum((views - mean[..., None]) ** 2, axis=-1) / (count - 1)
    var[(count < max(min_periods, 2))] = np.nan
    return np.sqrt(var)


def _min_periods(draw_value: float, window: int) -> int:
    return max(1, int(round(draw_value * window)))


@settings(max_examples=60, deadline=None)
@given(series(), windows, st.floats(0.0, 1.0))
def test_window_statistics_match_pandas(x, window, frac):
    mp = _min_periods(frac, window)
    df = pd.DataFrame(x).rolling(window, min_periods=mp)
    np.testing.assert_allclose(R.rolling_mean(x, window, mp), df.mean(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(R.rolling_sum(x, window, mp), df.sum(), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(R.rolling_max(x, window, mp), df.max())
    np.testing.assert_array_equal(R.rolling_min(x, window, mp), df.min())
    if window >= 2:
        np.testing.assert_allclose(R.rolling_std(x, window, mp), direct_std(x, window, mp), rtol=1e-6, atol=1e-12)
        returns = x[1:] / x[:-1] - 1.0  # the one-pass formula is for series centered near 0
        np.testing.assert_allclose(
            R.rolling_std(returns, window, mp, two_pass=False),
            pd.DataFrame(returns).rolling(window, min_periods=mp).std(),
            rtol=1e-6,
            atol=1e-9,
        )


@settings(max_examples=60, deadline=None)
@given(series(), st.floats(0.05, 1.0), st.integers(1, 10))
def test_ewm_matches_pandas_on_gap_free_series(x, alpha, mp):
    x = R.forward_fill(x)  # the recursive averages run on forward-filled prices
    expected = pd.DataFrame(x).ewm(alpha=alpha, adjust=False, min_periods=mp).mean()
    np.testing.assert_allclose(R.ewm_mean(x, alpha, mp), expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(series(), st.floats(0.05, 1.0), st.integers(1, 10))
def test_ewm_carries_the_last_input_over_interior_gaps(x, alpha, mp):
    # a suspended day's input is the last valid one; the result is that of the forward-filled series
    np.testing.assert_array_equal(R.ewm_mean(x, alpha, mp), R.ewm_mean(R.forward_fill(x), alpha, mp))
    alone = [R.ewm_mean(x[:, [j]], alpha, mp)[:, 0] for j in range(x.shape[1])]  # no other stock involved
    np.testing.assert_array_equal(R.ewm_mean(x, alpha, mp), np.column_stack(alone))


@settings(max_examples=60, deadline=None)
@given(series())
def test_forward_fill_and_lag_match_pandas(x):
    np.testing.assert_array_equal(R.forward_fill(x), pd.DataFrame(x).ffill())
    np.testing.assert_array_equal(R.lag(x, 3), pd.DataFrame(x).shift(3))


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 8), st.integers(1, 40), st.sampled_from([0, 1, 2]))
def test_daily_rank_matches_pandas(seed, n_days, n_codes, decimals):
    rng = np.random.default_rng(seed)
    day = np.repeat(np.arange(n_days), n_codes)
    values = np.round(rng.standard_normal(day.size) * 3, decimals).astype(np.float32).astype(np.float64)
    values[rng.random(day.size) < 0.1] = np.nan
    eligible = rng.random(day.size) < 0.8
    got = DailyCrossSection.of(day, eligible, n_days).rank_pct(values)
    expected = pd.Series(np.where(eligible, values, np.nan)).groupby(day).rank(pct=True)
    np.testing.assert_array_equal(got, expected.to_numpy())


@settings(max_examples=40, deadline=None)
@given(series(), series(), st.integers(3, 12))
def test_skew_corr_and_trend_match_pandas(x, y, window):
    returns = x[1:] / x[:-1] - 1.0
    mp = max(3, window // 2)
    df = pd.DataFrame(returns)
    np.testing.assert_allclose(
        R.rolling_skew(returns, window, mp), df.rolling(window, min_periods=mp).skew(), rtol=1e-6, atol=1e-8
    )
    if y.shape == x.shape:
        yr = y[1:] / y[:-1] - 1.0
        both = df.notna() & pd.DataFrame(yr).notna()
        expected = df.where(both).rolling(window, min_periods=mp).corr(pd.DataFrame(yr).where(both))
        got = R.rolling_corr(returns, yr, window, mp)
        # pandas reports noise where a window is flat; ours is NaN there (no defined correlation)
        finite = np.isfinite(got)
        np.testing.assert_allclose(got[finite], expected.to_numpy()[finite], rtol=1e-6, atol=1e-8)
    filled = R.forward_fill(x)
    slope, r2 = R.rolling_trend(filled, window)
    t = np.arange(window)
    expected_slope = pd.DataFrame(filled).rolling(window).apply(lambda w: np.polyfit(t, w, 1)[0], raw=True)
    np.testing.assert_allclose(slope, expected_slope, rtol=1e-7, atol=1e-9)
    assert np.all((r2[np.isfinite(r2)] >= 0) & (r2[np.isfinite(r2)] <= 1))
