"""Baselines on the model's folds: the best factor and the linear ranker choose and fit on purged
training data only, and what they report is what their scores earn."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from backtest.baselines import (
    BASELINE_METRICS,
    BASELINES,
    RankedDays,
    baseline_scores,
    choose_factor,
)
from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import oracle_scores
from backtest.engine import plan_backtest, run_backtest
from backtest.features.build import build_features
from backtest.labels import LabelSpec, make_labels
from backtest.metrics import daily_ic, rank_ic_mean, sharpe
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from models.ranks import RankedPanel, fit_ridge
from tests.small_backtest import FEATURES, SCHEDULE, backtest, small_ranker


@pytest.fixture(scope="module")
def setup(tiny_panel):
    labels = make_labels(tiny_panel, LabelSpec())
    matrix = build_features(tiny_panel, FEATURES, data_fingerprint=panel_fingerprint(tiny_panel))
    calendar = pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique())
    folds = RollingSchedule(**SCHEDULE).folds(calendar, labels.label_end)
    return matrix, labels, folds


def test_a_baseline_never_sees_a_label_that_ends_after_its_folds_cutoff(setup) -> None:
    """Every label that ends after a fold's cutoff is replaced by a perfect copy of one feature (negated):
    a chooser that read any of them would pick that feature with a rank IC near -1, a ridge would load
    on it. The fold's choice and both baselines' scores stay bit-for-bit the same."""
    matrix, labels, folds = setup
    planted = list(matrix.names).index("rsi_14")
    feature = pd.Series(matrix.values[:, planted], index=matrix.index).reindex(labels.index)
    for fold in folds[1:4]:
        after = (labels.label_end > fold.cutoff).to_numpy()
        assert after.sum() > 1000
        fwd = labels.fwd_return.where(~after, -feature)
        target = labels.target.where(~after, (-feature).rank(pct=True).fillna(0.5).mul(9.99).astype(int))
        leaked = dataclasses.replace(labels, fwd_return=fwd, target=target)
        clean_scores, clean_choice = baseline_scores(matrix, labels, [fold])
        leaked_scores, leaked_choice = baseline_scores(matrix, leaked, [fold])
        pd.testing.assert_frame_equal(clean_choice, leaked_choice)
        for name in BASELINES:
            pd.testing.assert_series_equal(clean_scores[name], leaked_scores[name])
    # the plant would be found by a chooser that saw it: with every label planted, rsi_14 wins with IC -1
    everywhere = dataclasses.replace(labels, fwd_return=-feature)
    _, choice = baseline_scores(matrix, everywhere, folds[:1])
    assert choice.loc[0, "feature"] == "rsi_14" and choice.loc[0, "sign"] == -1
    assert choice.loc[0, "train_rank_ic"] == pytest.approx(-1.0, abs=1e-3)


def test_daily_rank_ic_matches_pandas_spearman(setup) -> None:
    """The per-day, per-feature rank IC the chooser averages, against pandas' groupby rank correlation."""
    matrix, labels, _ = setup
    ranked = RankedPanel.of(matrix, labels.fwd_return)
    ours = ranked.daily_rank_ic()
    # the ranks are of float32 values (DailyCrossSection.rank_pct): two labels a rounding error apart (the
    # same fen-rounded price ratio of two stocks, 2e-16 off) tie there, so the reference ranks float32 labels
    fwd = labels.fwd_return.reindex(matrix.index).astype(np.float32).astype(np.float64)
    days = pd.DatetimeIndex(np.unique(ranked.dates))
    for j in (0, 3):
        x = pd.Series(matrix.values[:, j].astype(np.float64), index=matrix.index)
        ok = fwd.notna()
        reference = daily_ic(x[ok], fwd[ok], "spearman")
        got = pd.Series(ours[:, j], index=days).reindex(reference.index)
        # a day whose every row has a label and a value: exactly Spearman; elsewhere a missing value
        # sits at the median rank and the ranks span the day's eligible rows: close to it
        complete = (ok & x.notna()).groupby(level=0).all().reindex(reference.index)
        assert complete.sum() > 100
        np.testing.assert_allclose(got[complete], reference[complete], atol=2e-4)  # float32 ranks
        assert np.corrcoef(got.dropna(), reference.reindex(got.dropna().index))[0, 1] > 0.99


def test_ranks_a_few_days_at_a_time_are_those_of_the_whole_panel(setup, monkeypatch) -> None:
    """baseline_scores ranks the days fold by fold, in blocks, from the first day a fold reads: a day's
    ranks, label ranks and daily rank IC are bit-for-bit those of ranking every row at once; dropped
    and unranked rows are refused, and so is a block that starts inside a day."""
    matrix, labels, _ = setup
    whole = RankedPanel.of(matrix, labels.fwd_return)
    known = labels.target.reindex(matrix.index).notna().to_numpy()
    dates = matrix.index.get_level_values(0)
    first_row = {d: int(i) for d, i in zip(*np.unique(dates.values, return_index=True), strict=True)}
    days = dates.unique()
    monkeypatch.setattr(RankedDays, "BLOCK_DAYS", 7)
    ranks = RankedDays(matrix, labels.fwd_return, known, start=first_row[days[40]])
    ranks.advance(first_row[days[70]])  # days 40..69: blocks of 7, 7, 7, 7 and 2 days
    ranks.advance(first_row[days[90]] - 5)  # the end of a day is ranked whole: through day 89
    assert [len(np.unique(b.day)) for b in ranks.blocks] == [7, 7, 7, 7, 2, 7, 7, 6]
    rows = np.arange(first_row[days[40]], first_row[days[90]])
    np.testing.assert_array_equal(ranks[rows], whole.X[rows])
    np.testing.assert_array_equal(ranks.y[rows], np.where(known[rows], whole.y[rows], np.nan))
    np.testing.assert_array_equal(ranks.daily_ic[40:90], whole.daily_rank_ic()[40:90])
    assert np.isnan(ranks.daily_ic[:40]).all() and np.isnan(ranks.daily_ic[90:]).all()
    ranks.forget_before(first_row[days[50]])  # the block of days 47..53 is still read
    np.testing.assert_array_equal(ranks[rows[rows >= first_row[days[47]]]], whole.X[rows[rows >= first_row[days[47]]]])
    for outside in (rows[:1], [first_row[days[90]]]):
        with pytest.raises(AssertionError, match="not ranked or were dropped"):
            ranks[np.asarray(outside)]
    with pytest.raises(ValueError, match="not the first row of its day"):
        RankedPanel.of(matrix, labels.fwd_return, start=first_row[days[40]] + 1)


def test_choose_factor_takes_the_largest_absolute_ic_with_its_sign() -> None:
    daily = np.array([[0.02, -0.05, 0.01], [0.04, -0.03, np.nan], [0.00, -0.04, 0.09]])
    j, choice = choose_factor(daily, np.array([0, 1]), ["a", "b", "c"], fold=7)
    assert (j, choice.feature, choice.sign, choice.fold) == (1, "b", -1, 7)
    assert choice.train_rank_ic == pytest.approx(-0.04)
    j, choice = choose_factor(daily, np.array([2]), ["a", "b", "c"], fold=8)
    assert (choice.feature, choice.sign) == ("c", 1)


def test_fit_ridge_solves_the_penalised_normal_equations() -> None:
    """Against the augmented least-squares form of ridge ([X; sqrt(n a/12) I] b = [y; 0]); unknown
    labels are left out."""
    rng = np.random.default_rng(0)
    X = (rng.uniform(size=(2000, 6)) - 0.5).astype(np.float32)
    y = X @ np.array([0.5, -0.2, 0.0, 0.0, 0.1, 0.0]) + 0.1 * rng.normal(size=2000)
    y[::10] = np.nan
    known = np.isfinite(y)
    alpha = 0.1
    aug_X = np.vstack([X[known].astype(np.float64), np.sqrt(known.sum() * alpha / 12) * np.eye(6)])
    aug_y = np.concatenate([y[known], np.zeros(6)])
    expected = np.linalg.lstsq(aug_X, aug_y, rcond=None)[0]
    np.testing.assert_allclose(fit_ridge(X, y, alpha), expected, rtol=1e-4, atol=1e-6)


def test_every_run_reports_its_baselines_from_their_own_scores(tiny_panel) -> None:
    result = backtest(tiny_panel)
    base = result.baselines
    assert base is not None and set(base.runs) == set(BASELINES)
    m = result.metrics
    for name in BASELINES:
        run = base.runs[name]
        assert all(f"baseline_{name}_{k}" in m for k in BASELINE_METRICS)
        # the same portfolio rules: the same test days, the same equal-weight benchmark
        pd.testing.assert_index_equal(run.portfolio.returns.index, result.portfolio.returns.index)
        pd.testing.assert_series_equal(run.portfolio.benchmark_returns, result.portfolio.benchmark_returns)
        assert m[f"baseline_{name}_sharpe"] == pytest.approx(sharpe(run.portfolio.returns))
        fwd = result.labels.fwd_return.reindex(run.scores.index)
        assert m[f"baseline_{name}_rank_ic_mean"] == pytest.approx(rank_ic_mean(run.scores, fwd))
        # scored on exactly the model's decision rows
        pd.testing.assert_index_equal(run.scores.index, result.scores.index)
    assert m["baseline_equal_weight_sharpe"] == pytest.approx(m["benchmark_sharpe"])
    for name in ("factor", "linear"):
        assert m[f"model_minus_{name}_sharpe"] == pytest.approx(m["sharpe"] - m[f"baseline_{name}_sharpe"])
        low, high = m[f"model_minus_{name}_sharpe_ci_low"], m[f"model_minus_{name}_sharpe_ci_high"]
        assert low < m[f"model_minus_{name}_sharpe"] < high
        assert m[f"model_minus_{name}_rank_ic"] == pytest.approx(
            m["rank_ic_mean"] - m[f"baseline_{name}_rank_ic_mean"], abs=2e-3
        )
        assert 0 < m[f"model_minus_{name}_rank_ic_se"] < 0.1
    assert len(base.choices) == m["n_folds"] and set(base.choices["feature"]) <= set(result.feature_names)


def test_the_oracle_bounds_what_a_model_captures(tiny_market) -> None:
    """On a synthetic market the run reports the rank IC of the oracle (the planted observable components
    of the expected return, from the generator's states) on the model's scored rows, and the model's
    share of it."""
    label = LabelSpec()
    oracle = oracle_scores(tiny_market, label.holding_days)
    panel = tiny_market.panel
    plan = plan_backtest(panel, label=label, schedule=RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec())
    result = run_backtest(
        plan,
        features=FEATURES,
        ranker_factory=small_ranker,
        data_fingerprint=panel_fingerprint(panel),
        seed=3,
        oracle=oracle,
    )
    m = result.metrics
    fwd = result.labels.fwd_return.reindex(result.scores.index)
    assert m["oracle_rank_ic"] == pytest.approx(rank_ic_mean(oracle.reindex(result.scores.index), fwd))
    assert m["signal_capture"] == pytest.approx(m["rank_ic_mean"] / m["oracle_rank_ic"])
    assert m["oracle_rank_ic"] > 0.1 > m["rank_ic_mean"]  # the states are known to the oracle only
    assert m["oracle_rank_ic"] > max(m["baseline_factor_rank_ic_mean"], m["baseline_linear_rank_ic_mean"])


def test_the_comparison_reads_the_runs_metrics_and_says_what_the_difference_means() -> None:
    from backtest.baselines import baseline_verdict, baseline_verdicts, comparison_table
    from backtest.reports.summary import baseline_lines
    from backtest.reports.tearsheet import RunEvidence, robustness_html

    m = {
        "rank_ic_mean": 0.046,
        "rank_ic_se": 0.0044,
        "sharpe": 1.17,
        "sharpe_ex_best_month": 0.57,
        "baseline_factor_rank_ic_mean": 0.039,
        "baseline_factor_rank_ic_se": 0.0045,
        "baseline_factor_sharpe": 1.58,
        "baseline_factor_sharpe_ex_best_month": 1.25,
        "baseline_equal_weight_sharpe": 0.73,
        "baseline_equal_weight_sharpe_ex_best_month": 0.12,
        "oracle_rank_ic": 0.232,
        "signal_capture": 0.198,
        "model_minus_factor_rank_ic": 0.007,
        "model_minus_factor_rank_ic_se": 0.0047,
        "model_minus_factor_sharpe": -0.41,
        "model_minus_factor_sharpe_ci_low": -2.05,
        "model_minus_factor_sharpe_ci_high": 1.33,
    }
    table = comparison_table(m)
    rows = ["model", "best single factor", "equal weight", "oracle (planted observable components)"]
    assert list(table.index) == rows  # no linear baseline in these metrics: no row
    assert table.loc["best single factor", "rank IC"] == 0.039 and table.loc["model", "s.e."] == 0.0044
    assert "no detectable difference from the best factor" in baseline_verdict(m)  # 0.007 is 1.5 s.e.
    assert "beats" in baseline_verdict({**m, "model_minus_factor_rank_ic": 0.010})  # 2.1 standard errors
    assert "LOSES" in baseline_verdict({**m, "model_minus_factor_rank_ic": -0.010})
    linear = {**m, "model_minus_linear_rank_ic": -0.012, "model_minus_linear_rank_ic_se": 0.004}
    assert len(baseline_verdicts(m)) == 1  # no linear difference recorded: no line for it
    assert baseline_verdicts(linear)[1].startswith(
        "model - linear ranker: rank IC -0.0120 (s.e. 0.0040; the model LOSES"
    )
    text = "\n".join(baseline_lines(m))
    assert "+0.0390 (0.0045)" in text and "signal capture  19.8%" in text
    page = robustness_html(RunEvidence(metrics=m, leak_guard="passed", feature_audit="passed", not_comparable=()))
    assert "<td>best single factor</td><td>+0.0390</td><td>0.0045</td><td>1.58</td><td>1.25</td>" in page
    assert "signal capture 19.8% of the oracle" in page
    assert baseline_lines({"sharpe": 1.0}) == [] and baseline_verdicts({}) == []  # a run without baselines
