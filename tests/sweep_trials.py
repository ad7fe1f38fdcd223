"""The sweeps the study report's tests compare: a learning-rate sweep with misaligned dates, and trials
with daily rank IC and NDCG series (one recorded before those were stored).

Module-scoped fixtures shared by the tests of the numbers (``tests/test_comparison.py``) and of the pages
(``tests/reports/test_study_report.py``); ``tests/conftest.py`` loads them as a plugin.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from backtest.comparison import StudyReport, build_study_report

DAYS = pd.bdate_range("2023-10-02", periods=300)  # 2023-10-02 .. 2024-11-22


@pytest.fixture(scope="module")
def study_inputs() -> tuple[pd.DataFrame, pd.Series, pd.DataFrame]:
    rng = np.random.default_rng(11)
    base = pd.Series(rng.normal(0.0004, 0.01, len(DAYS)), index=DAYS)
    returns = pd.DataFrame(
        {
            "base": base,
            "better": base + 0.002,  # same noise, a constant edge
            "worse": base - 0.002,
            "reversed": pd.Series(base.to_numpy()[::-1], index=DAYS),  # the same days in reverse order
        }
    )
    benchmark = pd.Series(rng.normal(0.0003, 0.009, len(DAYS)), index=DAYS)
    # misaligned inputs: the benchmark lacks 3 dates, one trial has 2 missing values
    benchmark = benchmark.drop(DAYS[[10, 11, 200]])
    returns.loc[DAYS[[50, 250]], "worse"] = np.nan
    trial_metrics = pd.DataFrame(
        {
            "rank_ic_mean": [0.01, 0.03, -0.01, 0.0],
            "metrics.turnover": [12.0, 13.0, 11.0, 12.5],
            "metrics.ndcg": [0.5, 0.6, 0.4, 0.5],  # one key at every trial's depth (param ndcg_depth)
            "params.model.lr": [0.05, 0.1, 0.01, 0.05],
            "params.seed": [7, 7, 7, 7],  # the same everywhere: not a config difference
            "metrics.sharpe": [9.0, 9.0, 9.0, 9.0],  # a metric, never copied
        },
        index=["base", "better", "worse", "reversed"],
    )
    return returns, benchmark, trial_metrics


@pytest.fixture(scope="module")
def study(study_inputs) -> StudyReport:
    returns, benchmark, trial_metrics = study_inputs
    return build_study_report(
        returns, benchmark, title="LR sweep", trial_metrics=trial_metrics, n_trials=10, n_boot=400, seed=3
    )


@pytest.fixture(scope="module")
def ranking_inputs():
    """Three trials with the baseline's daily returns (so no Sharpe difference) and different daily rank ICs,
    and one run recorded before the daily series were stored."""
    rng = np.random.default_rng(21)
    base_returns = pd.Series(rng.normal(0.0004, 0.01, len(DAYS)), index=DAYS)
    returns = pd.DataFrame({name: base_returns for name in ("base", "edge", "noise", "old")})
    returns["old"] = base_returns + rng.normal(0, 0.002, len(DAYS))
    benchmark = pd.Series(rng.normal(0.0003, 0.009, len(DAYS)), index=DAYS)
    shared = pd.Series(rng.normal(0.03, 0.12, len(DAYS)), index=DAYS).rolling(5, min_periods=1).mean()
    base_ic = shared.copy()
    base_ic.iloc[[0, 1, 2]] = np.nan  # days whose label is unknown yet
    noise = pd.Series(rng.normal(0, 0.03, len(DAYS)), index=DAYS)
    noise = noise - noise.iloc[3:].mean() + 0.0008  # a rank IC edge of exactly 0.0008 on the common days
    daily = {
        "base": pd.DataFrame({"rank_ic": base_ic, "ndcg": 0.5 + shared / 4}),
        "edge": pd.DataFrame({"rank_ic": shared + 0.015 + rng.normal(0, 0.03, len(DAYS)), "ndcg": 0.5 + shared / 4}),
        "noise": pd.DataFrame({"rank_ic": shared + noise, "ndcg": 0.5 + shared / 4 - 0.01}),
        "old": None,
    }
    lags = {"base": 4, "edge": 4, "noise": 4}
    folds = pd.DataFrame({"base": [0.02, 0.03, 0.04], "edge": [0.04, 0.05, 0.05], "noise": [0.02, 0.04, 0.03]})
    return returns, benchmark, daily, lags, folds


@pytest.fixture(scope="module")
def ranked(ranking_inputs) -> StudyReport:
    returns, benchmark, daily, lags, folds = ranking_inputs
    return build_study_report(
        returns, benchmark, title="ranked", daily_ranking=daily, ic_lags=lags, fold_rank_ic=folds, n_boot=300
    )
