"""Metrics: agreement with quantstats where it defines the same quantity, exact small-number tests elsewhere."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from backtest import metrics
from backtest.errors import ConfigError, DataContractError
from backtest.labels import cross_sectional_target
from backtest.portfolio import DEFAULT_TOP_K

logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import quantstats as qs


def daily(values, start="2024-01-02") -> pd.Series:
    return pd.Series(values, index=pd.bdate_range(start, periods=len(values)), dtype="float64")


def panel_series(rows: dict[tuple[str, str], float]) -> pd.Series:
    index = pd.MultiIndex.from_tuples([(pd.Timestamp(d), c) for d, c in rows], names=["date", "code"])
    return pd.Series(list(rows.values()), index=index, dtype="float64")


# --------------------------------------------------------------------------------------------------
# Agreement with quantstats 0.0.86


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_return_metrics_agree_with_quantstats(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 800))
    returns = daily(rng.standard_t(4, n) * 0.015 + 0.0004)
    assert metrics.sharpe(returns) == pytest.approx(qs.stats.sharpe(returns), abs=1e-9)
    assert metrics.sortino(returns) == pytest.approx(qs.stats.sortino(returns), abs=1e-9)
    assert metrics.ann_vol(returns) == pytest.approx(qs.stats.volatility(returns), abs=1e-9)
    assert metrics.cum_return(returns) == pytest.approx(qs.stats.comp(returns), abs=1e-9)
    # quantstats 0.0.86's cagr counts periods (years = n / periods), not calendar days.
    assert metrics.ann_return(returns) == pytest.approx(qs.stats.cagr(returns, periods=252), abs=1e-9)
    assert metrics.max_drawdown(returns) == pytest.approx(qs.stats.max_drawdown(returns), abs=1e-9)


def test_max_drawdown_agrees_with_quantstats_when_the_first_day_loses():
    returns = daily([-0.1, 0.05, -0.1, 0.2])
    assert metrics.max_drawdown(returns) == pytest.approx(qs.stats.max_drawdown(returns), abs=1e-12)
    # The peak is the starting equity 1.0, not the first close 0.9.
    assert metrics.max_drawdown(returns) == pytest.approx(0.9 * 1.05 * 0.9 - 1, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# Exact small numbers


def test_return_metrics_exact():
    returns = daily([0.1, -0.1])
    assert metrics.cum_return(returns) == pytest.approx(-0.01, abs=1e-15)
    assert metrics.ann_return(returns) == pytest.approx(0.99**126 - 1, abs=1e-12)
    assert metrics.ann_vol(returns) == pytest.approx(math.sqrt(0.02) * math.sqrt(252), abs=1e-12)
    assert metrics.sharpe(returns) == pytest.approx(0.0, abs=1e-12)
    # Downside deviation sqrt(0.01 / 2); mean 0.
    assert metrics.sortino(daily([0.3, -0.1])) == pytest.approx(0.1 / math.sqrt(0.005) * math.sqrt(252), abs=1e-9)
    assert metrics.max_drawdown(daily([0.1, -0.5, 0.2])) == -0.5
    assert metrics.max_drawdown(daily([0.01, 0.02])) == 0.0


def test_undefined_ratios_are_nan():
    assert math.isnan(metrics.sharpe(daily([0.01, 0.01, 0.01])))
    assert math.isnan(metrics.sortino(daily([0.01, 0.02])))
    assert math.isnan(metrics.sharpe(daily([0.01])))


def test_best_month_removal_ranks_months_by_compounded_return():
    jan = [0.01, 0.01]  # +2.01%
    feb = [0.5, -0.3]  # sum +20%, compounded +5%
    mar = [0.1, 0.0]  # +10%: the best month when compounded
    apr = [-0.02, 0.01]
    index = pd.to_datetime(
        ["2024-01-02", "2024-01-03", "2024-02-01", "2024-02-02", "2024-03-01", "2024-03-04", "2024-04-01", "2024-04-02"]
    )
    returns = pd.Series(jan + feb + mar + apr, index=index)
    rest = metrics.drop_best_months(returns, 1)
    assert rest.to_numpy().tolist() == jan + feb + apr
    rest3 = metrics.drop_best_months(returns, 3)
    assert rest3.to_numpy().tolist() == apr
    headline = metrics.headline_metrics(returns, returns * 0, pd.DataFrame({"strategy": [0.0], "benchmark": [0.0]}))
    assert headline["ann_return_ex_best_month"] == pytest.approx(
        (1.01 * 1.01 * 1.5 * 0.7 * 0.98 * 1.01) ** (252 / 6) - 1, rel=1e-12
    )
    assert headline["sharpe_ex_best_3_months"] == pytest.approx(
        -0.005 / np.std([-0.02, 0.01], ddof=1) * math.sqrt(252), rel=1e-12
    )
    assert headline["ann_return_ex_best_3_months"] == pytest.approx((0.98 * 1.01) ** 126 - 1, rel=1e-12)


def test_win_rate_vs_equal_weight():
    periods = pd.DataFrame({"strategy": [0.02, -0.01, 0.0, 0.03], "benchmark": [0.01, 0.0, 0.0, -0.01]})
    assert metrics.win_rate_vs_ew(periods) == 0.5  # the tie in period 3 is not a win
    s, b = daily([0.01, 0.0, -0.02]), daily([0.0, 0.0, -0.03])
    assert metrics.win_rate_vs_ew_daily(s, b) == pytest.approx(2 / 3)
    assert metrics.excess_ann_return(s, b) == pytest.approx((1.01 * 0.98) ** 84 - (0.97) ** 84, abs=1e-12)
    with pytest.raises(DataContractError, match="'strategy' and 'benchmark'"):
        metrics.win_rate_vs_ew(pd.DataFrame({"strategy": [0.1]}))


def test_beta_tracking_error_and_information_ratio_against_the_index():
    s, i = daily([0.02, -0.01, 0.03, 0.0]), daily([0.01, -0.01, 0.01, 0.01])
    # active returns 0.01, 0, 0.02, -0.01: mean 0.005, sum of squared deviations 0.0005 (variance 0.0005 / 3)
    active_sd = math.sqrt(0.0005 / 3)
    # deviations of s 0.01, -0.02, 0.02, -0.01 and of i 0.005, -0.015, 0.005, 0.005: covariance 0.0004 / 3, variance
    # of i 0.0003 / 3
    assert metrics.beta(s, i) == pytest.approx(4 / 3, rel=1e-12)
    assert metrics.tracking_error(s, i) == pytest.approx(active_sd * math.sqrt(252), rel=1e-12)
    assert metrics.information_ratio(s, i) == pytest.approx(0.005 / active_sd * math.sqrt(252), rel=1e-12)
    out = metrics.index_metrics(s, i)
    assert list(out) == list(metrics.INDEX_KEYS)
    assert out["index_beta"] == metrics.beta(s, i)
    assert out["index_information_ratio"] == pytest.approx(6.14817, abs=1e-5)  # the sharpe doctest's series
    assert out["index_excess_ann_return"] == pytest.approx(
        (1.02 * 0.99 * 1.03) ** 63 - (1.01 * 0.99 * 1.01 * 1.01) ** 63, rel=1e-12
    )  # as excess_ann_return against equal weight
    assert out["index_ann_return"] == metrics.ann_return(i) and out["index_sharpe"] == metrics.sharpe(i)
    assert out["index_max_drawdown"] == pytest.approx(0.99 - 1, rel=1e-12)  # 1.01 -> 0.9999
    assert all(math.isnan(v) for v in metrics.index_metrics(s, None).values())
    flat = daily([0.01] * 4)  # a constant index: no beta, and the tracking error of s itself
    assert math.isnan(metrics.beta(s, flat)) and metrics.tracking_error(s, flat) == pytest.approx(metrics.ann_vol(s))
    with pytest.raises(DataContractError, match="share one date index"):
        metrics.index_metrics(s, daily([0.0] * 4, start="2025-01-02"))


def ic_example():
    scores = panel_series(
        {
            ("2024-01-02", "a"): 1,
            ("2024-01-02", "b"): 2,
            ("2024-01-02", "c"): 3,
            ("2024-01-03", "a"): 3,
            ("2024-01-03", "b"): 2,
            ("2024-01-03", "c"): 1,
            ("2024-01-04", "a"): 1,
            ("2024-01-04", "b"): 2,
            ("2024-01-04", "c"): 3,
            ("2024-01-04", "d"): 4,
            ("2024-01-05", "a"): 1,
            ("2024-01-05", "b"): 1,  # constant scores: no IC that day
        }
    )
    labels = panel_series(
        {
            ("2024-01-02", "a"): 1,
            ("2024-01-02", "b"): 2,
            ("2024-01-02", "c"): 4,
            ("2024-01-03", "a"): 1,
            ("2024-01-03", "b"): 2,
            ("2024-01-03", "c"): 3,
            ("2024-01-04", "a"): 1,
            ("2024-01-04", "b"): 3,
            ("2024-01-04", "c"): 2,
            ("2024-01-04", "d"): 4,
            ("2024-01-05", "a"): 0.5,
            ("2024-01-05", "b"): -0.5,
            ("2024-01-06", "a"): 9.0,  # no score: dropped
        }
    )
    return scores, labels


def test_ic_and_rank_ic_on_hand_data():
    scores, labels = ic_example()
    # Day 1 Pearson: x = (-1, 0, 1), y = (-4/3, -1/3, 5/3): 3 / sqrt(2 * 14/3). Spearman: 1.
    # Day 2: -1 and -1. Day 3: Pearson 0.8 (x, y are both ranks), Spearman 1 - 6 * 2 / 60 = 0.8.
    day1 = 3 / math.sqrt(2 * 14 / 3)
    ic = metrics.daily_ic(scores, labels)
    np.testing.assert_allclose(ic.to_numpy()[:3], [day1, -1.0, 0.8], atol=1e-12)
    assert math.isnan(ic.iloc[3])
    assert metrics.ic_mean(scores, labels) == pytest.approx((day1 - 1 + 0.8) / 3, abs=1e-12)
    assert metrics.rank_ic_mean(scores, labels) == pytest.approx(0.8 / 3, abs=1e-12)
    rank_ic = np.array([1.0, -1.0, 0.8])
    assert metrics.icir(scores, labels) == pytest.approx(rank_ic.mean() / rank_ic.std(ddof=1), abs=1e-12)


def test_ndcg_at_5_on_a_hand_example():
    codes = list("abcdef")
    relevance = dict(zip(codes, [3, 2, 3, 0, 1, 2]))
    order = dict(zip(codes, [5, 6, 3, 1, 2, 4]))  # ranking by score: b, a, f, c, e, d
    scores = panel_series({("2024-01-02", c): order[c] for c in codes})
    rel = panel_series({("2024-01-02", c): relevance[c] for c in codes})
    # Gains 2^rel - 1 along the ranking: 3, 7, 3, 7, 1 (d cut at 5); ideal: 7, 7, 3, 3, 1.
    dcg = 3 + 7 / math.log2(3) + 3 / 2 + 7 / math.log2(5) + 1 / math.log2(6)
    idcg = 7 + 7 / math.log2(3) + 3 / 2 + 3 / math.log2(5) + 1 / math.log2(6)
    assert metrics.ndcg_at_k(scores, rel, k=5, gain="exponential") == pytest.approx(dcg / idcg, abs=1e-12)
    # Linear gains (the default, as in both models' training); a second day that is perfectly ranked
    # averages in with 1.0.
    dcg_lin = 2 + 3 / math.log2(3) + 2 / 2 + 3 / math.log2(5) + 1 / math.log2(6)
    idcg_lin = 3 + 3 / math.log2(3) + 2 / 2 + 2 / math.log2(5) + 1 / math.log2(6)
    assert metrics.ndcg_at_k(scores, rel, k=5) == pytest.approx(dcg_lin / idcg_lin, abs=1e-12)
    assert metrics.ndcg_at_k(scores, rel, k=5, gain=[0.0, 1.0, 2.0, 3.0]) == pytest.approx(dcg_lin / idcg_lin)
    perfect_scores = panel_series({("2024-01-03", c): relevance[c] + i / 10 for i, c in enumerate(codes)})
    rel_day2 = panel_series({("2024-01-03", c): relevance[c] for c in codes})
    two_days = metrics.daily_ndcg(pd.concat([scores, perfect_scores]), pd.concat([rel, rel_day2]), gain="exponential")
    np.testing.assert_allclose(two_days.to_numpy(), [dcg / idcg, 1.0], atol=1e-12)


def test_ndcg_ties_are_broken_in_code_order_and_zero_days_are_skipped():
    scores = panel_series(
        {("2024-01-02", "a"): 1, ("2024-01-02", "b"): 1, ("2024-01-03", "a"): 1, ("2024-01-03", "b"): 2}
    )
    rel = panel_series({("2024-01-02", "a"): 0, ("2024-01-02", "b"): 1, ("2024-01-03", "a"): 0, ("2024-01-03", "b"): 0})
    ndcg = metrics.daily_ndcg(scores, rel, k=1)
    assert ndcg.iloc[0] == 0.0  # tie: a (code order) comes first, and it is irrelevant
    assert math.isnan(ndcg.iloc[1])
    with pytest.raises(DataContractError, match="non-negative"):
        metrics.ndcg_at_k(scores, rel - 1)


def test_relevance_gains_is_the_one_gain_definition():
    np.testing.assert_array_equal(metrics.relevance_gains("linear", 3), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(metrics.relevance_gains("exponential", 4), [0.0, 1.0, 3.0, 7.0])
    np.testing.assert_array_equal(metrics.relevance_gains((0.0, 0.5, 4.0), 3), [0.0, 0.5, 4.0])
    with pytest.raises(ConfigError, match="linear, exponential"):
        metrics.relevance_gains("squared", 3)
    with pytest.raises(ConfigError, match="expected 3 finite non-negative gains"):
        metrics.relevance_gains((0.0, 1.0), 3)


def test_ndcg_grades_a_real_valued_label_into_ten_daily_bins():
    rng = np.random.default_rng(0)
    index = pd.MultiIndex.from_product(
        [pd.to_datetime(["2024-01-02", "2024-01-03"]), [f"s{i:02d}" for i in range(30)]], names=["date", "code"]
    )
    fwd = pd.Series(rng.normal(0.0, 0.02, len(index)), index=index)  # raw returns, negative ones too
    scores = pd.Series(rng.normal(size=len(index)), index=index)
    bins = pd.Series(cross_sectional_target(fwd.unstack().to_numpy(), "bins", 10).ravel(), index=index)
    pct = pd.Series(cross_sectional_target(fwd.unstack().to_numpy(), "rank").ravel(), index=index)
    expected = metrics.daily_ndcg(scores, bins, k=5)
    pd.testing.assert_series_equal(metrics.daily_ndcg(scores, fwd, k=5), expected)
    pd.testing.assert_series_equal(metrics.daily_ndcg(scores, pct, k=5), expected)
    three = metrics.daily_ndcg(scores, fwd, k=5, grades=3)
    assert not np.allclose(three.to_numpy(), expected.to_numpy())


# --------------------------------------------------------------------------------------------------
# Tables, headline


def test_per_year_table():
    index = pd.to_datetime(["2023-12-28", "2023-12-29", "2024-01-02", "2024-01-03", "2024-01-04"])
    s = pd.Series([0.1, -0.1, 0.02, 0.0, 0.01], index=index)
    b = pd.Series([0.0, 0.0, 0.01, 0.01, 0.01], index=index)
    table = metrics.per_year_table(s, b)
    assert table.index.tolist() == [2023, 2024]
    assert table["n_days"].tolist() == [2, 3]
    np.testing.assert_allclose(table["return"], [-0.01, 1.02 * 1.01 - 1], atol=1e-12)
    np.testing.assert_allclose(table["excess_return"], [-0.01, 1.02 * 1.01 - 1.01**3], atol=1e-12)
    np.testing.assert_allclose(table["max_drawdown"], [-0.1, 0.0], atol=1e-12)  # 1.1 -> 0.99
    np.testing.assert_allclose(table["win_rate_vs_ew_daily"], [0.5, 1 / 3], atol=1e-12)


def test_headline_metrics_keys_and_values():
    rng = np.random.default_rng(3)
    s = daily(rng.normal(0.001, 0.01, 300))
    b = daily(rng.normal(0.0005, 0.008, 300))
    periods = pd.DataFrame({"strategy": [0.01, -0.02, 0.03], "benchmark": [0.0, 0.0, 0.0]})
    scores, labels = ic_example()
    out = metrics.headline_metrics(
        s,
        b,
        periods,
        scores=scores,
        labels=labels,
        relevance=labels.clip(lower=0),
        turnover=12.5,
        n_trials=5,
        trial_sharpe_var=0.3,
        rng=np.random.default_rng(0),
        n_boot=200,
        ic_lags=0,
        index=b * 0.5 + 0.0002,
    )
    assert list(out) == list(metrics.HEADLINE_KEYS)
    assert {
        "sharpe",
        "sortino",
        "ann_return",
        "cum_return",
        "ann_vol",
        "max_drawdown",
        "win_rate_vs_ew",
        "excess_ann_return",
        "sharpe_ex_best_month",
        "ann_return_ex_best_month",
        "sharpe_ex_best_3_months",
        "ann_return_ex_best_3_months",
        "ic_mean",
        "rank_ic_mean",
        "icir",
        "ndcg",
        "turnover",
        "psr",
        "dsr",
        "index_ann_return",
        "index_sharpe",
        "index_excess_ann_return",
        "index_beta",
        "index_tracking_error",
        "index_information_ratio",
        "index_max_drawdown",
    } <= set(out)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.values())
    assert {k: out[k] for k in metrics.INDEX_KEYS} == metrics.index_metrics(s, b * 0.5 + 0.0002)
    assert out["sharpe"] == metrics.sharpe(s)
    assert out["win_rate_vs_ew"] == pytest.approx(2 / 3)
    assert out["turnover"] == 12.5
    assert out["rank_ic_mean"] == pytest.approx(0.8 / 3)
    daily_rank_ic = metrics.daily_ic(scores, labels, "spearman")
    assert out["rank_ic_se"] == pytest.approx(daily_rank_ic.std(ddof=0) / np.sqrt(3))  # lag 0: the plain error
    assert out["dsr"] < out["psr"]
    assert out["sharpe_ci_low"] < out["sharpe"] < out["sharpe_ci_high"]
    bare = metrics.headline_metrics(s, b, periods)
    assert all(
        math.isnan(bare[k])
        for k in (
            "ic_mean",
            "rank_ic_mean",
            "rank_ic_se",
            "icir",
            "ndcg",
            "turnover",
            "sharpe_ci_low",
            "sharpe_ci_high",
            *metrics.INDEX_KEYS,
        )
    )
    assert bare["dsr"] == bare["psr"]
    with_index = metrics.headline_metrics(s, b, periods, index=b * 0.5)
    assert {k: with_index[k] for k in metrics.INDEX_KEYS} == metrics.index_metrics(s, b * 0.5)
    others = [k for k in metrics.HEADLINE_KEYS if k not in metrics.INDEX_KEYS and not math.isnan(bare[k])]
    assert [with_index[k] for k in others] == [bare[k] for k in others]  # the index changes no other key


def test_the_headline_ndcg_follows_the_portfolio_depth():
    """A portfolio of 3 stocks reports its NDCG@3 under the one key ``ndcg``: the keys never carry the depth."""
    rng = np.random.default_rng(3)
    s, b = daily(rng.normal(0.001, 0.01, 300)), daily(rng.normal(0.0005, 0.008, 300))
    periods = pd.DataFrame({"strategy": [0.01, -0.02], "benchmark": [0.0, 0.0]})
    scores, labels = ic_example()
    at = {
        k: metrics.headline_metrics(
            s, b, periods, scores=scores, labels=labels, relevance=labels.clip(lower=0), ndcg_depth=k
        )
        for k in (1, 3)
    }
    assert list(at[3]) == list(at[1]) == list(metrics.HEADLINE_KEYS) and "ndcg_at_5" not in at[3]
    assert at[3]["ndcg"] == metrics.ndcg_at_k(scores, labels.clip(lower=0), 3)
    assert at[1]["ndcg"] == metrics.ndcg_at_k(scores, labels.clip(lower=0), 1) != at[3]["ndcg"]
    default = metrics.headline_metrics(s, b, periods, scores=scores, labels=labels, relevance=labels.clip(lower=0))
    assert default["ndcg"] == metrics.ndcg_at_k(scores, labels.clip(lower=0), DEFAULT_TOP_K)  # the portfolio's


def test_bad_return_series_are_rejected_with_a_reason():
    with pytest.raises(DataContractError, match="NaN"):
        metrics.sharpe(daily([0.01, np.nan, 0.02]))
    with pytest.raises(DataContractError, match="one date index"):
        metrics.win_rate_vs_ew_daily(daily([0.01, 0.02]), daily([0.01, 0.02], start="2025-01-01"))
    with pytest.raises(DataContractError, match="Series"):
        metrics.sharpe([0.01, 0.02])


def test_mean_daily_rank_ic_matches_the_frame_version():
    rng = np.random.default_rng(5)
    scores, labels = rng.normal(size=600), rng.integers(0, 10, 600).astype(float)
    scores[:200] = 1.0  # a constant day is skipped, as rank_ic_mean skips it
    dates = np.repeat(pd.date_range("2024-01-01", periods=3), 200)
    index = pd.MultiIndex.from_arrays([dates, np.tile(np.arange(200), 3)], names=["date", "code"])
    frame_value = metrics.rank_ic_mean(pd.Series(scores, index=index), pd.Series(labels, index=index))
    assert metrics.mean_daily_rank_ic(scores, labels, np.array([0, 200, 400, 600])) == pytest.approx(frame_value)


# --------------------------------------------------------------------------------------------------
# The signal and the book (the signal and portfolio pages' numbers)


@pytest.mark.parametrize("seed", range(4))
def test_score_quantiles_are_pandas_qcut_day_by_day(seed):
    rng = np.random.default_rng(seed)
    parts = []
    for day, size in zip(pd.bdate_range("2024-01-02", periods=12), rng.integers(1, 60, 12), strict=True):
        values = np.round(rng.normal(size=size), int(rng.integers(0, 3)))  # 0 decimals: many ties
        values[rng.random(size) < 0.1] = np.nan
        parts.append(pd.Series(values, index=pd.MultiIndex.from_product([[day], [f"c{i:02d}" for i in range(size)]])))
    scores = pd.concat(parts)
    got = metrics.score_quantiles(scores, 10)
    cut = 0
    for _, values in scores.groupby(level=0):
        try:
            expected = pd.qcut(values.dropna(), 10, labels=False) + 1.0
            cut += 1
        except ValueError:  # repeated edges: alphalens leaves the day out
            expected = pd.Series(np.nan, index=values.dropna().index)
        pd.testing.assert_series_equal(got[values.dropna().index], expected, check_names=False)
        assert got[values.index[values.isna()]].isna().all()
    assert 0 < cut < 12  # both kinds of day were met


def test_rank_autocorrelation_counts_lags_in_trading_days():
    days = pd.bdate_range("2024-01-02", periods=4)
    scores = panel_series(
        {
            **{(days[0], c): v for c, v in zip("abcd", [1.0, 2.0, 3.0, 4.0], strict=True)},
            **{(days[1], c): v for c, v in zip("abcd", [10.0, 20.0, 30.0, 40.0], strict=True)},
            **{(days[3], c): v for c, v in zip("abce", [4.0, 3.0, 2.0, 9.0], strict=True)},
        }
    )
    # lag 1: (day 1, day 0) = +1; day 3 follows day 2, which has no scores: no pair
    assert metrics.rank_autocorrelation(scores, (1, 2), days=days).tolist() == [1.0, -1.0]
    # over the scored days only, day 3 follows day 1: the common names a, b, c rank 3, 2, 1 against 1, 2, 3
    assert metrics.rank_autocorrelation(scores, (1, 2, 3)).tolist()[:2] == [0.0, -1.0]
    assert np.isnan(metrics.rank_autocorrelation(scores, (3,))[3])
    with pytest.raises(ConfigError, match="lags must be whole trading days >= 1"):
        metrics.rank_autocorrelation(scores, (0,))


def test_rank_ic_by_group_is_the_spearman_within_each_group_and_day():
    d0, d1 = pd.Timestamp("2024-01-02"), pd.Timestamp("2024-01-03")
    keys = [(d0, "a"), (d0, "b"), (d0, "c"), (d0, "d"), (d0, "e"), (d1, "a"), (d1, "b"), (d1, "c"), (d1, "d")]
    scores = panel_series(dict(zip(keys, [1.0, 2.0, 3.0, 1.0, 2.0, 1.0, 2.0, 3.0, 5.0], strict=True)))
    returns = panel_series(dict(zip(keys, [0.1, 0.2, 0.4, 0.2, 0.1, 0.3, 0.2, 0.1, 0.0], strict=True)))
    groups = pd.Series(["X", "X", "X", "Y", "Y", "X", "X", "X", "Y"], index=scores.index)
    table = metrics.rank_ic_by_group(scores, returns, groups, horizon=1)
    # X: +1 on day 0, -1 on day 1; Y: -1 on day 0, a single name on day 1 (no IC)
    assert table.index.tolist() == ["X", "Y"]
    assert table.loc["X", ["rank_ic_mean", "n_days", "names"]].tolist() == [0.0, 2, 3.0]
    assert table.loc["Y", ["rank_ic_mean", "n_days", "names"]].tolist() == [-1.0, 1, 1.5]


def test_signal_analysis_of_a_score_that_is_the_5_day_return():
    days = pd.bdate_range("2024-01-29", periods=30)  # end of January to March
    rng = np.random.default_rng(0)
    index = pd.MultiIndex.from_product([days, [f"c{i:02d}" for i in range(20)]], names=["date", "code"])
    scores = pd.Series(rng.normal(size=len(index)), index=index)
    noise = pd.Series(rng.normal(size=len(index)), index=index)
    forward = pd.DataFrame({"fwd_ret_2d": 0.01 * noise, "fwd_ret_5d": 0.01 * scores}, index=index)
    forward.loc[forward.index.get_level_values(0) == days[-1], "fwd_ret_5d"] = np.nan  # not known yet
    a = metrics.signal_analysis(scores, forward, 5, groups=None, rolling_days=3)
    assert a.ic_decay.loc[5, "rank_ic_mean"] == pytest.approx(1.0, abs=1e-15) and a.ic_decay.loc[5, "n_days"] == 29
    assert a.ic_decay.loc[2, "rank_ic_mean"] == pytest.approx(metrics.rank_ic_mean(scores, forward["fwd_ret_2d"]))
    assert a.monthly_rank_ic.index.tolist() == [2024] and a.monthly_rank_ic.notna().sum(axis=1).tolist() == [3]
    assert a.monthly_rank_ic.loc[2024, 2] == pytest.approx(a.daily_rank_ic[a.daily_rank_ic.index.month == 2].mean())
    assert a.rolling_rank_ic.isna().sum() == 2 and a.rolling_days == 3
    # 20 names: each decile holds 2; the spread is the mean of the top two minus the bottom two, every day
    quantiles = metrics.score_quantiles(scores)
    by_quantile = metrics.quantile_daily_returns(quantiles, forward["fwd_ret_5d"])
    first = scores.xs(days[0], level=0).sort_values()
    assert by_quantile.iloc[0, -1] - by_quantile.iloc[0, 0] == pytest.approx(
        0.01 * (first.iloc[-2:].mean() - first.iloc[:2].mean()), rel=1e-12
    )
    spread = (by_quantile[10] - by_quantile[1]).dropna()
    assert a.spread.loc[5, ["mean", "se", "n_days"]].tolist() == [
        spread.mean(),
        metrics.hac_standard_error(spread, 4),
        29,
    ]
    assert a.quantile_mean[5].is_monotonic_increasing  # the score is the return: deciles in order
    one_day = metrics.quantile_daily_returns(quantiles, forward["fwd_ret_2d"])
    pd.testing.assert_frame_equal(a.quantile_wealth, (1 + one_day).cumprod())
    with pytest.raises(DataContractError, match="not the label's 10"):
        metrics.signal_analysis(scores, forward, 10)


def test_industry_and_size_exposure_of_the_book_against_the_universe():
    d0, d1 = pd.Timestamp("2024-01-02"), pd.Timestamp("2024-01-03")
    universe = pd.MultiIndex.from_product([[d0], ["a", "b", "c", "d"]], names=["date", "code"])
    industry = pd.Series(["bank", "bank", "coal", "tech"], index=universe)
    cap = pd.Series([1.0, np.e, np.e**2, np.e**3], index=universe)  # log caps 0, 1, 2, 3: z = (x - 1.5) / 1.118
    periods = pd.DataFrame({"execution_date": [d1]}, index=pd.DatetimeIndex([d0], name="decision_date"))
    positions = pd.DataFrame({"date": [d1, d1, d1], "code": ["a", "c", "x"], "weight": [0.5, 0.3, 0.2]})
    active = metrics.industry_exposure(positions, periods, industry)
    # book: bank 0.5, coal 0.3, x (not scored that day) 0.2; universe: bank 0.5, coal 0.25, tech 0.25
    expected = {"(not scored)": 0.2, "bank": 0.0, "coal": 0.05, "tech": -0.25}
    assert active.loc[d0].to_dict() == pytest.approx(expected)
    z = (np.array([0.0, 2.0]) - 1.5) / np.std([0.0, 1.0, 2.0, 3.0])
    assert metrics.size_exposure(positions, periods, cap)[d0] == pytest.approx((0.5 * z[0] + 0.3 * z[1]) / 0.8)
