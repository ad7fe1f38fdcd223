"""The run summary prints the tearsheet's own numbers, and the guard verdicts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from backtest import metrics
from backtest.leakage import not_comparable_reasons
from backtest.reports.summary import RunSummary, summary_text

DATES = pd.bdate_range("2024-01-02", periods=250)
STRATEGY = pd.Series(np.tile([0.02, -0.01], 125), index=DATES)
BENCHMARK = pd.Series(np.tile([0.01, -0.01], 125), index=DATES)
RUN = RunSummary(
    n_folds=12,
    n_features=285,
    ndcg_depth=3,
    leak_guard="passed",
    feature_audit="disabled",
    not_comparable=not_comparable_reasons("passed", "disabled", tradable_days=250, test_days=250),
    run_id="abc",
    tearsheet_uri="file:///x/reports/tearsheet.html",
    ui="http://ui",
)


def test_summary_rows_are_the_tearsheet_values_of_both_series() -> None:
    text = summary_text(STRATEGY, BENCHMARK, {"rank_ic_mean": 0.0312, "ndcg": 0.5, "win_rate_vs_ew": 0.5}, RUN)
    lines = {line[:28].strip(): line[28:].split() for line in text.splitlines() if len(line) > 28}
    assert lines["Sharpe"] == [f"{metrics.sharpe(STRATEGY):+.2f}", f"{metrics.sharpe(BENCHMARK):+.2f}"]
    assert lines["max drawdown"] == ["-1.00%", f"{metrics.max_drawdown(BENCHMARK):+.2%}"]  # -2.22%: 0.9999 a pair
    ex_best = metrics.sharpe(metrics.drop_best_months(STRATEGY, 1))
    assert lines["Sharpe ex best month"][0] == f"{ex_best:+.2f}"
    assert "backtest 2024-01-02 .. 2024-12-16, 12 folds, 285 features" in text
    assert "rank IC +0.0312" in text and "NDCG@3 0.5000" in text  # the headline NDCG at the portfolio's depth
    assert "feature audit disabled   comparable NO" in text


def test_the_index_is_a_third_column_and_a_line_of_its_own() -> None:
    index = pd.Series(np.tile([0.005, -0.004], 125), index=DATES)
    m = {
        "excess_ann_return": 0.1,
        "index_excess_ann_return": 0.2345,
        "index_beta": 1.234,
        "index_tracking_error": 0.15,
        "index_information_ratio": 0.987,
    }
    run = dataclasses.replace(RUN, index="float-cap-weighted index of the universe")
    text = summary_text(STRATEGY, BENCHMARK, m, run, index=index)
    lines = {line[:28].strip(): line[28:].split() for line in text.splitlines() if len(line) > 28}
    header = next(line for line in text.splitlines() if "equal weight" in line)
    assert header.split() == ["strategy", "equal", "weight", "index"]
    assert lines["Sharpe"] == [f"{metrics.sharpe(s):+.2f}" for s in (STRATEGY, BENCHMARK, index)]
    assert "+10.00%   vs equal weight" in text
    assert "+23.45%   vs the index: beta 1.23, tracking error 15.00%, information ratio +0.99" in text
    assert "(index: float-cap-weighted index of the universe)" in text
    assert "vs the index" not in summary_text(STRATEGY, BENCHMARK, m, run)  # no index series, no index line
