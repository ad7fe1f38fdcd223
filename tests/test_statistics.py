"""Statistics: PSR and DSR against their formulas, the stationary bootstrap, the Newey-West error, CSCV / PBO
against an independent reference, the paired Sharpe difference."""

from __future__ import annotations

import itertools
import logging
import math
import time
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, rankdata

from backtest import metrics, statistics
from backtest.errors import DataContractError

logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import quantstats as qs


def daily(values, start="2024-01-02") -> pd.Series:
    return pd.Series(values, index=pd.bdate_range(start, periods=len(values)), dtype="float64")


# --------------------------------------------------------------------------------------------------
# Probabilistic and deflated Sharpe ratio


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_psr_agrees_with_quantstats(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 800))
    returns = daily(rng.standard_t(4, n) * 0.015 + 0.0004)
    assert statistics.psr(returns) == pytest.approx(qs.stats.probabilistic_sharpe_ratio(returns), abs=1e-9)


SKEWED = [0.02, -0.01, 0.0, 0.05, -0.02, 0.01, 0.0, -0.005]


def hand_psr(values, sr_star):
    x = np.asarray(values)
    n = len(x)
    d = x - x.mean()
    m2, m3, m4 = (d**2).mean(), (d**3).mean(), (d**4).mean()
    skew = math.sqrt(n * (n - 1)) / (n - 2) * m3 / m2**1.5  # adjusted Fisher-Pearson (pandas)
    excess = (n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * m4 / m2**2 - 3 * (n - 1))
    sr = x.mean() / x.std(ddof=1)
    denominator = math.sqrt(1 - skew * sr + (excess + 3 - 1) / 4 * sr**2)
    return norm.cdf((sr - sr_star) * math.sqrt(n - 1) / denominator)


def test_psr_against_the_formula():
    returns = daily(SKEWED)
    assert statistics.psr(returns) == pytest.approx(hand_psr(SKEWED, 0.0), abs=1e-12)
    assert statistics.psr(returns, sharpe_benchmark=0.1) == pytest.approx(hand_psr(SKEWED, 0.1), abs=1e-12)
    assert statistics.psr(returns, 0.1) < statistics.psr(returns)


def test_dsr_deflates_by_the_expected_maximum_of_the_trials():
    gamma = 0.5772156649015329
    expected = (1 - gamma) * norm.ppf(0.9) + gamma * norm.ppf(1 - 1 / (10 * math.e))
    assert statistics.expected_max_sharpe(10, 1.0) == pytest.approx(expected, abs=1e-12)
    assert statistics.expected_max_sharpe(10, 1.0) == pytest.approx(1.574598, abs=1e-6)
    returns = daily(SKEWED)
    # Ten trials whose annualised Sharpes have variance 2.0: SR0 = sqrt(2 / 252) * E[max].
    sr0 = math.sqrt(2.0 / 252) * expected
    assert statistics.dsr(returns, n_trials=10, trial_sharpe_var=2.0) == pytest.approx(hand_psr(SKEWED, sr0), abs=1e-12)
    # One trial, or trials that all agree: nothing to deflate.
    assert statistics.dsr(returns, n_trials=1, trial_sharpe_var=2.0) == statistics.psr(returns)
    assert statistics.dsr(returns, n_trials=50, trial_sharpe_var=0.0) == statistics.psr(returns)


# --------------------------------------------------------------------------------------------------
# Stationary bootstrap, Newey-West


def test_stationary_bootstrap_blocks():
    rng = np.random.default_rng(0)
    never_break = statistics.stationary_bootstrap_indices(20, 50, rng, block_length=1e12)
    # One block per resample: consecutive days, wrapping around the end.
    assert ((np.diff(never_break, axis=1) % 20) == 1).all()
    short = statistics.stationary_bootstrap_indices(2000, 20, np.random.default_rng(1), block_length=10)
    breaks = (np.diff(short, axis=1) % 2000 != 1).mean()
    assert breaks == pytest.approx(0.1, abs=0.01)  # a new block starts with probability 1/10


def test_sharpe_ci_is_reproducible_and_brackets_the_estimate():
    returns = daily(np.random.default_rng(5).normal(0.001, 0.01, 500))
    low, high = statistics.sharpe_ci(returns, np.random.default_rng(42))
    assert (low, high) == statistics.sharpe_ci(returns, np.random.default_rng(42))
    assert low < metrics.sharpe(returns) < high
    # The standard error of an annualised Sharpe over 2 years is about sqrt(252 / 500) ~ 0.7.
    assert 1.5 < high - low < 4.5


def test_hac_standard_error_is_the_bartlett_weighted_long_run_variance():
    """Newey-West against its definition, Var(mean) = sum_i sum_j w(|i-j|) d_i d_j / n^2 with Bartlett
    weights w(l) = 1 - l / (L + 1) for l <= L: an overlapping-label series (a 5-day moving sum of white
    noise, true error sqrt(5) times the naive one) gets about sqrt(3.4) = 1.84 times it at lag 4."""
    rng = np.random.default_rng(11)
    noise = rng.normal(size=2004)
    overlapping = np.convolve(noise, np.ones(5), mode="valid")[:600]
    for lags in (0, 1, 4):
        d = overlapping - overlapping.mean()
        lag = np.abs(np.subtract.outer(np.arange(600), np.arange(600)))
        weights = np.where(lag <= lags, 1.0 - lag / (lags + 1), 0.0)
        expected = np.sqrt(d @ weights @ d) / 600
        assert statistics.hac_standard_error(overlapping, lags) == pytest.approx(expected, rel=1e-10)
    naive = overlapping.std() / np.sqrt(600)
    assert 1.5 < statistics.hac_standard_error(overlapping, 4) / naive < 2.3
    assert math.isnan(statistics.hac_standard_error(np.array([0.1, 0.2, np.nan]), 4))


# --------------------------------------------------------------------------------------------------
# An independent CSCV, straight from the paper's algorithm (loops, no shared code)


def _column_sharpe(rows: np.ndarray) -> np.ndarray:
    return rows.mean(axis=0) / rows.std(axis=0, ddof=1)


def reference_cscv(values: np.ndarray, n_blocks: int, metric=_column_sharpe) -> tuple[float, np.ndarray]:
    """PBO and the logits, one per combination in itertools order. Blocks: numpy.array_split (the
    documented rule for a remainder: the first T mod S blocks get one row more)."""
    n_trials = values.shape[1]
    blocks = np.array_split(np.arange(len(values)), n_blocks)
    logits = []
    for chosen in itertools.combinations(range(n_blocks), n_blocks // 2):
        is_rows = np.concatenate([blocks[b] for b in chosen])
        oos_rows = np.concatenate([blocks[b] for b in range(n_blocks) if b not in chosen])
        best = int(np.argmax(metric(values[is_rows])))
        oos_rank = rankdata(metric(values[oos_rows]), method="average")[best]  # 1 = worst
        omega = oos_rank / (n_trials + 1)
        logits.append(np.log(omega / (1 - omega)))
    logits = np.array(logits)
    return float(np.mean(logits <= 0)), logits


@pytest.mark.parametrize(
    ("n_rows", "n_trials", "n_blocks", "seed"),
    [
        (500, 10, 14, 0),  # 3,432 combinations; remainder 500 mod 14 = 10
        (203, 5, 8, 1),  # 203 = 8 * 25 + 3: a remainder of 3 rows
        (97, 3, 10, 2),  # odd N: a median rank gives lambda = 0; remainder 7
        (64, 2, 2, 3),
        (150, 7, 12, 4),  # remainder 6
    ],
)
def test_pbo_matches_the_reference_cscv(n_rows: int, n_trials: int, n_blocks: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # trials of different skill so the selection is not pure noise
    values = rng.normal(0.0, 0.01, size=(n_rows, n_trials)) + rng.normal(0.0, 0.0008, size=n_trials)
    expected_pbo, expected_logits = reference_cscv(values, n_blocks)
    result = statistics.pbo_cscv(pd.DataFrame(values), n_blocks)
    assert result.n_blocks == n_blocks
    assert result.n_combinations == len(expected_logits)
    assert result.pbo == expected_pbo
    np.testing.assert_allclose(result.logits, expected_logits, rtol=0, atol=1e-12)
    assert sum(result.block_sizes) == n_rows
    assert result.block_sizes == tuple(len(b) for b in np.array_split(np.arange(n_rows), n_blocks))


def test_custom_metric_matches_the_reference_and_the_vectorised_sharpe() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(0.0002, 0.01, size=(123, 4))
    frame = pd.DataFrame(values, columns=list("abcd"))
    for metric in (_column_sharpe, lambda rows: rows.mean(axis=0)):
        expected_pbo, expected_logits = reference_cscv(values, 6, metric)
        result = statistics.pbo_cscv(frame, 6, metric=metric)
        assert result.pbo == expected_pbo
        np.testing.assert_allclose(result.logits, expected_logits, rtol=0, atol=1e-12)
    # the loop over combinations with the default metric gives the vectorised result
    vectorised = statistics.pbo_cscv(frame, 6)
    looped = statistics.pbo_cscv(frame, 6, metric=_column_sharpe)
    np.testing.assert_array_equal(vectorised.selected, looped.selected)
    np.testing.assert_allclose(vectorised.is_performance, looped.is_performance, rtol=1e-10)
    np.testing.assert_allclose(vectorised.oos_performance, looped.oos_performance, rtol=1e-10)


def test_pbo_is_fast_enough_for_the_papers_sixteen_blocks() -> None:
    frame = pd.DataFrame(np.random.default_rng(6).normal(0.0, 0.01, size=(500, 10)))
    statistics.pbo_cscv(frame, 16)  # warm-up
    start = time.perf_counter()
    result = statistics.pbo_cscv(frame, 16)
    elapsed = time.perf_counter() - start
    assert result.n_combinations == 12_870
    assert elapsed < 1.0, f"pbo_cscv took {elapsed:.2f}s for T=500, N=10, S=16"


# --------------------------------------------------------------------------------------------------
# Hand-made matrices with a known PBO


def test_a_trial_skilled_in_every_block_gives_pbo_zero() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(0.0, 0.01, size=(480, 6))
    values[:, 2] += 0.02  # two standard deviations of drift a day: best in every half
    result = statistics.pbo_cscv(pd.DataFrame(values, columns=[f"t{i}" for i in range(6)]), 16)
    assert result.pbo == 0.0
    assert (result.selected == 2).all()
    np.testing.assert_allclose(result.best_is_oos_rank, 6 / 7)  # OOS best of 6: rank 6 / (N + 1)
    np.testing.assert_allclose(result.logits, np.log(6.0), rtol=1e-12)
    assert result.prob_oos_loss == 0.0
    assert result.selection_counts()["t2"] == 12_870
    table = result.selection_table().set_index("trial")
    assert table.loc["t2", "share"] == 1.0 and table.loc["t2", "pbo_when_selected"] == 0.0
    assert table["selected_in_sample"].sum() == 12_870 and table.drop("t2")["pbo_when_selected"].isna().all()


def test_pure_noise_trials_give_pbo_near_one_half() -> None:
    # Trials of the same distribution with IS and OOS on disjoint days: the IS-best trial's OOS rank is
    # uniform on 1..N, so for an even N the expected PBO is exactly P(rank <= N/2) = 0.5. One matrix's
    # PBO is far from that (its 70 combinations reuse the same days: the spread across matrices is
    # about 0.25), so average 100 independent matrices: the standard error is about 0.025 and the
    # tolerance 0.08 is over three of them.
    pbos = [
        statistics.pbo_cscv(pd.DataFrame(np.random.default_rng(1000 + s).normal(0.0, 0.01, size=(400, 10))), 8).pbo
        for s in range(100)
    ]
    assert np.mean(pbos) == pytest.approx(0.5, abs=0.08)
    assert np.std(pbos) > 0.1  # and single matrices do spread widely


def _alternating_trials() -> pd.DataFrame:
    """6 trials over 8 blocks of 4 days. Each trial's block mean is +1 in 4 blocks and -1 in the other 4
    (a different pattern per trial), on top of the same within-block noise: an in-sample half with more
    +1 blocks leaves more -1 blocks out of sample. Dyadic values keep every sum exact, so trials with the
    same number of +1 blocks tie exactly."""
    noise = np.array([0.5, -0.5, 0.25, -0.25])
    patterns = [(0, 1, 2, 3), (0, 2, 4, 6), (1, 3, 5, 7), (4, 5, 6, 7), (0, 1, 6, 7), (2, 3, 4, 5)]
    columns = {}
    for i, plus in enumerate(patterns):
        signs = np.array([1.0 if b in plus else -1.0 for b in range(8)])
        columns[f"alt{i}"] = (signs[:, None] + noise[None, :]).ravel()
    return pd.DataFrame(columns)


def test_in_sample_winners_that_lose_out_of_sample_give_pbo_one() -> None:
    frame = _alternating_trials()
    assert frame.sum().eq(0).all()  # each trial's +1 and -1 blocks cancel over the period
    result = statistics.pbo_cscv(frame, 8)
    assert result.pbo == 1.0
    assert (result.logits <= 0).all()
    # the IS best is OOS worst (or tied for worst): never above the median
    expected_pbo, expected_logits = reference_cscv(frame.to_numpy(), 8)
    assert expected_pbo == 1.0
    np.testing.assert_allclose(result.logits, expected_logits, atol=1e-12)
    # where the selected trial is strictly the IS best, its OOS rank is 1: omega = 1/7
    assert np.isclose(result.best_is_oos_rank, 1 / 7).sum() > 0
    assert result.degradation_slope < 0


def test_pbo_errors_are_explicit() -> None:
    frame = pd.DataFrame(np.random.default_rng(8).normal(0.0, 0.01, size=(40, 3)))
    with pytest.raises(DataContractError, match="at least 2 trials"):
        statistics.pbo_cscv(frame[[0]], 4)
    for bad in (3, 0, 1, -2, 4.0, True):
        with pytest.raises(DataContractError, match="even integer"):
            statistics.pbo_cscv(frame, bad)
    with pytest.raises(DataContractError, match="at most|n_blocks <= 22"):
        statistics.pbo_cscv(frame, 24)
    with pytest.raises(DataContractError, match="cannot be cut into 16 blocks"):
        statistics.pbo_cscv(frame.iloc[:10], 16)
    holed = frame.copy()
    holed.iloc[5, 1] = np.nan
    with pytest.raises(DataContractError, match="common dates"):
        statistics.pbo_cscv(holed, 4)
    with pytest.raises(DataContractError, match="DataFrame"):
        statistics.pbo_cscv(frame.to_numpy(), 4)
    with pytest.raises(DataContractError, match="one value per trial"):
        statistics.pbo_cscv(frame, 4, metric=lambda rows: rows.mean())


# --------------------------------------------------------------------------------------------------
# Paired Sharpe difference


DAYS4 = pd.bdate_range("2024-01-01", periods=4)


def test_paired_difference_of_identical_series_is_zero() -> None:
    r = pd.Series(np.random.default_rng(9).normal(0.0005, 0.01, 250), index=pd.bdate_range("2024-01-01", periods=250))
    assert statistics.paired_sharpe_difference(r, r.copy(), np.random.default_rng(0), n_boot=200) == (0.0, 0.0, 0.0)


def test_paired_difference_hand_computed() -> None:
    strategy = pd.Series([0.01, -0.01, 0.02, 0.0], index=DAYS4)  # mean 0.005, std sqrt(5e-4 / 3)
    baseline = pd.Series([0.0, 0.01, 0.0, 0.01], index=DAYS4)  # mean 0.005, std 0.005 * sqrt(4 / 3)
    diff, low, high = statistics.paired_sharpe_difference(
        strategy, baseline, np.random.default_rng(1), n_boot=500, block_length=1
    )
    assert diff == pytest.approx(np.sqrt(252) * (np.sqrt(3 / 20) - np.sqrt(3 / 4)), rel=1e-12)
    assert diff == pytest.approx(-7.5995, abs=1e-4)
    assert low <= high


def test_a_constant_daily_excess_over_the_same_noise_is_detected() -> None:
    days = pd.bdate_range("2022-01-03", periods=500)
    baseline = pd.Series(np.random.default_rng(10).normal(0.0003, 0.012, 500), index=days)
    better = baseline + 0.0004  # same noise, 10% a year more
    diff, low, high = statistics.paired_sharpe_difference(better, baseline, np.random.default_rng(2))
    # every resample shifts the mean by 0.0004 at an unchanged std: each bootstrap difference is > 0
    assert diff == pytest.approx(0.0004 / baseline.std(ddof=1) * np.sqrt(252), rel=1e-9)
    assert 0 < low < diff < high
    # the pairing is what detects it: the two Sharpe intervals side by side overlap widely
    b_low, b_high = statistics.sharpe_ci(baseline, np.random.default_rng(3))
    s_low, s_high = statistics.sharpe_ci(better, np.random.default_rng(4))
    assert s_low < b_high and b_low < s_high
    worse_diff, worse_low, worse_high = statistics.paired_sharpe_difference(
        baseline - 0.0004, baseline, np.random.default_rng(2)
    )
    assert worse_low < worse_diff < worse_high < 0


def test_paired_difference_refuses_different_dates() -> None:
    a = pd.Series([0.01, -0.01, 0.02, 0.0], index=DAYS4)
    with pytest.raises(DataContractError, match="same dates.*only in returns: 1"):
        statistics.paired_sharpe_difference(a, a.iloc[:3], np.random.default_rng(0))
    with pytest.raises(DataContractError, match="Series"):
        statistics.paired_sharpe_difference(a.to_frame(), a, np.random.default_rng(0))


# --------------------------------------------------------------------------------------------------
# Paired daily differences, Holm, power


def _newey_west_by_hand(x: np.ndarray, lags: int) -> float:
    """The Newey-West s.e. of a mean, written out as the textbook sum (Bartlett weights 1 - j / (L + 1))."""
    n, mean = len(x), sum(x) / len(x)
    gamma = [sum((x[t] - mean) * (x[t - j] - mean) for t in range(j, n)) / n for j in range(lags + 1)]
    long_run = gamma[0] + 2 * sum((1 - j / (lags + 1)) * gamma[j] for j in range(1, lags + 1))
    return math.sqrt(long_run / n)


def test_paired_mean_difference_on_the_common_days_with_the_newey_west_error() -> None:
    days = pd.bdate_range("2024-01-01", periods=250)
    rng = np.random.default_rng(5)
    shared = pd.Series(rng.normal(0.03, 0.1, 250), index=days).rolling(5, min_periods=1).mean()  # overlapping
    trial = shared + 0.01 + rng.normal(0, 0.02, 250)
    trial.iloc[[3, 100]] = np.nan  # days the trial did not score
    baseline = shared.drop(days[[7]])  # a day the baseline did not score
    result = statistics.paired_mean_difference(trial, baseline, 4, np.random.default_rng(1), n_boot=500)
    common = trial.drop(days[[3, 7, 100]])
    daily = (common - baseline.reindex(common.index)).to_numpy()
    assert result.n_days == 247 == len(daily) and result.lags == 4
    assert result.diff == pytest.approx(daily.mean(), rel=1e-12)
    assert result.se == pytest.approx(_newey_west_by_hand(daily, 4), rel=1e-10)
    assert result.z == pytest.approx(result.diff / result.se, rel=1e-12)
    assert result.p_value == pytest.approx(2 * norm.sf(abs(result.z)), rel=1e-12)
    assert result.ci_low < result.diff < result.ci_high
    # the bootstrap is paired: a constant daily edge over the same noise is the same in every resample
    constant = statistics.paired_mean_difference(shared + 0.01, shared, 4, np.random.default_rng(2), n_boot=200)
    assert constant.ci_low == pytest.approx(0.01, abs=1e-12) and constant.ci_high == pytest.approx(0.01, abs=1e-12)
    assert constant.p_value == 0.0
    same = statistics.paired_mean_difference(shared, shared, 4, np.random.default_rng(3), n_boot=50)
    assert (same.diff, same.se, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 0.0, 1.0)


def test_paired_mean_difference_needs_enough_common_days_and_valid_lags() -> None:
    days = pd.bdate_range("2024-01-01", periods=5)
    a = pd.Series([0.1, 0.2, 0.0, 0.1, 0.3], index=days)
    short = statistics.paired_mean_difference(a, a.iloc[:4], 4, np.random.default_rng(0))
    assert short.n_days == 4 and np.isnan(short.diff) and np.isnan(short.p_value)  # 4 < lags + 2 days
    with pytest.raises(DataContractError, match="lags must be an integer >= 0"):
        statistics.paired_mean_difference(a, a, -1, np.random.default_rng(0))
    with pytest.raises(DataContractError, match="Series"):
        statistics.paired_mean_difference(a.to_numpy(), a, 0, np.random.default_rng(0))


def test_holm_adjusts_known_p_values_step_down() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> raised to 0.06 (monotone)
    np.testing.assert_allclose(statistics.holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(statistics.holm_adjust([0.5, 0.9]), [1.0, 1.0])  # capped at 1
    np.testing.assert_allclose(statistics.holm_adjust([0.04]), [0.04])  # one comparison: unchanged
    adjusted = statistics.holm_adjust([np.nan, 0.02, 0.01])  # NaN is not in the family (m = 2)
    assert np.isnan(adjusted[0]) and adjusted[1:].tolist() == [0.02, 0.02]
    assert statistics.holm_adjust([]).shape == (0,)


def test_minimum_detectable_difference_and_days_to_resolve() -> None:
    multiplier = norm.ppf(0.975) + norm.ppf(0.80)  # 2.8016
    assert statistics.minimum_detectable_difference(0.0046) == pytest.approx(multiplier * 0.0046, rel=1e-12)
    # money flow's planted effect: rank IC -0.0134 with an s.e. of 0.0046 over 483 days is resolved by
    # 483 * (2.8016 * 0.0046 / 0.0134)^2 = 446.9 days, fewer than the test has
    assert statistics.days_to_resolve(-0.0134, 0.0046, 483) == math.ceil(483 * (multiplier * 0.0046 / 0.0134) ** 2)
    assert statistics.days_to_resolve(-0.0134, 0.0046, 483) == 447
    # a difference of half the MDE needs four times the days
    half = statistics.minimum_detectable_difference(0.01) / 2
    assert statistics.days_to_resolve(half, 0.01, 100) == 400
    assert statistics.days_to_resolve(0.0, 0.01, 100) == math.inf
    assert math.isnan(statistics.days_to_resolve(float("nan"), 0.01, 100))
    with pytest.raises(DataContractError, match="alpha and power"):
        statistics.minimum_detectable_difference(0.01, power=1.0)
