"""Tearsheet: quantstats offline on pandas 3, and the reduced fallback when quantstats breaks."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from backtest.errors import DataContractError
from backtest.leakage import not_comparable_reasons
from backtest.reports.returns import check_daily_returns
from backtest.reports.tearsheet import (
    RunEvidence,
    fallback_html,
    format_metric,
    robustness_html,
    rolling_min_days,
    tearsheet_metrics,
    write_tearsheet,
)

DATES = pd.bdate_range("2023-01-02", periods=250, name="date")
# +2% / -1% alternating: mean 0.005, std(ddof=1) = 0.015 * sqrt(250/249) -> Sharpe 5.2809 (shown 5.28).
STRATEGY = pd.Series(np.tile([0.02, -0.01], 125), index=DATES)
# +1% / -1% alternating: mean 0 -> Sharpe 0.0.
BENCHMARK = pd.Series(np.tile([0.01, -0.01], 125), index=DATES)
HAND_SHARPE = 0.005 / (0.015 * math.sqrt(250 / 249)) * math.sqrt(252)


def sharpe_row(page: str) -> tuple[str, str]:
    """(benchmark, strategy) cells of the Sharpe row of a tearsheet page."""
    found = re.search(r"<tr><td>Sharpe</td><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    assert found, "no Sharpe row"
    return found.group(1), found.group(2)


def test_quantstats_tearsheet_is_written_offline_with_the_strategy_sharpe(tmp_path: Path) -> None:
    font_family = list(matplotlib.rcParams["font.family"])
    sheet = write_tearsheet(STRATEGY, BENCHMARK, tmp_path / "out" / "tearsheet.html", title="LambdaRank top-5")
    assert sheet.renderer == "quantstats" and sheet.reason is None
    page = sheet.path.read_text(encoding="utf-8")
    assert round(HAND_SHARPE, 4) == 5.2809
    assert sharpe_row(page) == ("0.0", "5.28")
    assert "LambdaRank top-5" in page
    assert "<tr><th>Metric</th><th>Equal weight</th><th>Strategy</th></tr>" in page
    assert list(matplotlib.rcParams["font.family"]) == font_family  # quantstats' Arial did not leak out


def test_metrics_of_the_tearsheet_are_the_hand_values() -> None:
    table = tearsheet_metrics(STRATEGY, BENCHMARK)
    assert table.loc["Sharpe", "Strategy"] == pytest.approx(HAND_SHARPE, rel=1e-12)
    assert table.loc["Sharpe", "Benchmark"] == 0.0
    assert table.loc["Cumulative Return", "Strategy"] == pytest.approx(1.02**125 * 0.99**125 - 1, rel=1e-12)
    assert table.loc["Max Drawdown", "Strategy"] == pytest.approx(-0.01, rel=1e-12)  # each -1% day after a peak
    assert table.loc["Best Day", "Strategy"] == 0.02 and table.loc["Worst Day", "Benchmark"] == -0.01
    assert table.loc["Volatility (ann.)", "Strategy"] == pytest.approx(0.015 * math.sqrt(250 / 249 * 252))


def test_metrics_agree_with_quantstats_on_a_random_series() -> None:
    import quantstats as qs

    rng = np.random.default_rng(3)
    r = pd.Series(rng.normal(0.0005, 0.015, 300), index=pd.bdate_range("2022-01-03", periods=300))
    table = tearsheet_metrics(r, r * 0.5)
    assert table.loc["Sharpe", "Strategy"] == pytest.approx(qs.stats.sharpe(r), rel=1e-10)
    assert table.loc["Sortino", "Strategy"] == pytest.approx(qs.stats.sortino(r), rel=1e-10)
    assert table.loc["CAGR", "Strategy"] == pytest.approx(qs.stats.cagr(r), rel=1e-10)
    assert table.loc["Max Drawdown", "Strategy"] == pytest.approx(qs.stats.max_drawdown(r), rel=1e-10)
    assert table.loc["Volatility (ann.)", "Strategy"] == pytest.approx(qs.stats.volatility(r), rel=1e-10)


def test_quantstats_failure_on_all_zero_returns_falls_back_with_a_warning(tmp_path: Path, caplog) -> None:
    # A strategy that never traded: quantstats' R^2 regression raises inside quantstats.
    flat = pd.Series(0.0, index=DATES)
    with caplog.at_level(logging.WARNING, logger="backtest.reports.tearsheet"):
        sheet = write_tearsheet(flat, BENCHMARK, tmp_path / "t.html")
    assert sheet.renderer == "fallback"
    assert sheet.reason is not None and sheet.reason.startswith("ValueError")
    assert "quantstats could not render the tearsheet" in caplog.text
    page = sheet.path.read_text(encoding="utf-8")
    assert "Reduced report: quantstats failed" in page
    assert sharpe_row(page) == ("0.0", "-")  # zero volatility: no Sharpe


def test_fallback_keeps_the_same_metrics_when_a_quantstats_statistic_breaks(tmp_path: Path, monkeypatch) -> None:
    import quantstats

    def broken(*args, **kwargs):
        raise TypeError("Cannot compare dtypes datetime64[us] and datetime64[ns]")  # as a pandas upgrade would

    monkeypatch.setattr(quantstats.stats, "r_squared", broken)
    sheet = write_tearsheet(STRATEGY, BENCHMARK, tmp_path / "t.html", title="fallback")
    assert sheet.renderer == "fallback"
    assert sheet.reason == "TypeError: Cannot compare dtypes datetime64[us] and datetime64[ns]"
    page = sheet.path.read_text(encoding="utf-8")
    assert sharpe_row(page) == ("0.0", "5.28")
    assert "<tr><td>Max Drawdown</td><td>-2.22%</td><td>-1.0%</td></tr>" in page
    assert "<tr><th>Metric</th><th>Equal weight</th><th>Strategy</th></tr>" in page  # quantstats' layout
    assert "<tr><td>2023</td><td>-1.24%</td><td>238.39%</td></tr>" in page


def test_errors_raised_outside_quantstats_are_not_swallowed(tmp_path: Path, monkeypatch) -> None:
    import quantstats

    def ours(*args, **kwargs):
        raise TypeError("a bug of ours")

    monkeypatch.setattr(quantstats.reports, "html", ours)
    with pytest.raises(TypeError, match="a bug of ours"):
        write_tearsheet(STRATEGY, BENCHMARK, tmp_path / "t.html")
    assert not (tmp_path / "t.html").exists()


def test_benchmark_on_other_dates_is_refused_with_the_dates() -> None:
    with pytest.raises(DataContractError, match=r"only in returns: 1 \(2023-12-15\)"):
        check_daily_returns(STRATEGY, BENCHMARK.iloc[:-1])


@pytest.mark.parametrize(
    ("series", "message"),
    [
        (STRATEGY.where(STRATEGY.index != DATES[3]), "1 NaN"),
        (STRATEGY.reset_index(drop=True), "DatetimeIndex"),
        (STRATEGY.iloc[::-1], "not sorted"),
        (STRATEGY.iloc[:0], "empty"),
        (STRATEGY.to_frame(), "must be a pandas Series"),
    ],
)
def test_invalid_returns_are_refused(series, message: str) -> None:
    with pytest.raises(DataContractError, match=message):
        check_daily_returns(series, None)


def test_timezone_aware_dates_become_naive_local_dates() -> None:
    aware = STRATEGY.tz_localize("Asia/Shanghai")
    returns, benchmark = check_daily_returns(aware, BENCHMARK.tz_localize("Asia/Shanghai"))
    assert returns.index.tz is None and returns.index.equals(DATES)
    assert benchmark is not None and benchmark.name == "Benchmark"


def test_metric_format_follows_quantstats() -> None:
    assert format_metric("Sharpe", 5.280909) == "5.28"
    assert format_metric("Sharpe", 0.1008) == "0.1"
    assert format_metric("Cumulative Return", 2.383926) == "238.39%"
    assert format_metric("Sortino", float("nan")) == "-"


# --------------------------------------------------------------------------------------------------
# The robustness block and the rolling charts

EVIDENCE = RunEvidence(
    metrics={
        "sharpe": 1.2345,
        "ann_return": 0.2468,
        "sharpe_ex_best_month": 0.8765,
        "ann_return_ex_best_month": 0.1357,
        "sharpe_ex_best_3_months": 0.4321,
        "ann_return_ex_best_3_months": 0.0642,
        "sharpe_ci_low": -0.314,
        "sharpe_ci_high": 2.718,
        "psr": 0.9123,
        "dsr": 0.5432,
        "rank_ic_mean": 0.03125,
        "icir": 0.456,
        "ndcg": 0.61234,
        "ndcg_at_10": 0.1,
    },  # the key of old runs is not read
    leak_guard="passed",
    feature_audit="passed",
    not_comparable=(),
    ndcg_depth=5,
    run_name="lambdarank-all",
    run_id="0123abcd",
)
ROBUSTNESS_ROWS = [
    "<tr><td>full test period</td><td>1.23</td><td>24.68%</td></tr>",
    "<tr><td>without the best month</td><td>0.88</td><td>13.57%</td></tr>",
    "<tr><td>without the best 3 months</td><td>0.43</td><td>6.42%</td></tr>",
    "<tr><td>Sharpe 95% interval (block bootstrap)</td><td>[-0.31, 2.72]</td></tr>",
    "<tr><td>PSR (P[Sharpe &gt; 0])</td><td>0.912</td></tr>",
    "<tr><td>DSR (deflated for the study's trials)</td><td>0.543</td></tr>",
    "<tr><td>rank IC (mean daily)</td><td>+0.0312</td></tr>",
    "<tr><td>ICIR</td><td>+0.456</td></tr>",
    "<tr><td>NDCG@5</td><td>0.6123</td></tr>",
    "<tr><td>leak guard</td><td class='pass'>passed</td></tr>",
    "<tr><td>feature audit</td><td class='pass'>passed</td></tr>",
    "<tr><td>comparable</td><td class='pass'>yes</td></tr>",
]
ROLLING = ('id="rolling_beta"', 'id="rolling_vol"', 'id="rolling_sharpe"', 'id="rolling_sortino"')


def _series(n_days: int) -> tuple[pd.Series, pd.Series]:
    dates = pd.bdate_range("2023-01-02", periods=n_days, name="date")
    rng = np.random.default_rng(n_days)
    strategy = pd.Series(rng.normal(0.001, 0.012, n_days), index=dates)
    return strategy, pd.Series(rng.normal(0.0003, 0.01, n_days), index=dates)


def test_short_tearsheet_opens_with_the_robustness_block_and_has_no_empty_rolling_charts(tmp_path: Path) -> None:
    strategy, benchmark = _series(60)
    sheet = write_tearsheet(strategy, benchmark, tmp_path / "t.html", title="lambdarank-all", evidence=EVIDENCE)
    assert sheet.renderer == "quantstats"
    page = sheet.path.read_text(encoding="utf-8")
    assert "<title>lambdarank-all: test 2023-01-02..2023-03-24</title>" in page
    assert re.search(r"<h1>lambdarank-all: test 2023-01-02\.\.2023-03-24", page)
    block = page.index("<section id='robustness'>")
    assert block < page.index('<div id="left">') < page.index("Key Performance Metrics")
    assert page.index("<svg") > block  # no quantstats figure before the block
    assert "Robustness: run lambdarank-all (MLflow 0123abcd)" in page
    for row in ROBUSTNESS_ROWS:
        assert block < page.index(row) < page.index('<div id="left">'), row
    # 60 days < two 6-month windows: the rolling charts would be empty axes
    assert rolling_min_days() == 252
    assert not any(marker in page for marker in ROLLING)
    assert "the test period has 60 trading days, fewer than the 252" in page


def test_two_year_tearsheet_keeps_quantstats_rolling_charts(tmp_path: Path) -> None:
    strategy, benchmark = _series(504)
    page = write_tearsheet(strategy, benchmark, tmp_path / "t.html", evidence=EVIDENCE).path.read_text()
    assert all(marker in page for marker in ROLLING)
    assert "rolling beta / volatility" not in page
    assert page.index("<section id='robustness'>") < page.index('id="rolling_sharpe"')


def test_fallback_tearsheet_has_the_same_block_and_a_not_comparable_run_says_so() -> None:
    reasons = not_comparable_reasons("disabled", "passed", tradable_days=240, test_days=240)
    failed = dataclasses.replace(EVIDENCE, leak_guard="disabled", not_comparable=reasons)
    page = fallback_html(STRATEGY, BENCHMARK, "lambdarank-LEAK-DEMO", evidence=failed)
    assert "<title>lambdarank-LEAK-DEMO: test 2023-01-02..2023-12-15</title>" in page
    block = page.index("<section id='robustness'>")
    assert block < page.index("Key Performance Metrics")
    for row in ROBUSTNESS_ROWS[:9]:
        assert block < page.index(row) < page.index("Key Performance Metrics"), row
    assert "<tr><td>leak guard</td><td class='fail'>disabled</td></tr>" in page
    assert "<tr><td>comparable</td><td class='fail'>NO</td></tr>" in page
    assert "Not comparable: a leakage guard failed or was switched off (leak_guard=disabled, " in page


def test_missing_metrics_show_a_dash_and_no_evidence_says_so() -> None:
    block = robustness_html(
        RunEvidence(metrics={"sharpe": float("nan")}, leak_guard="passed", feature_audit="passed", not_comparable=())
    )
    assert "<tr><td>full test period</td><td>-</td><td>-</td></tr>" in block
    assert "<tr><td>Sharpe 95% interval (block bootstrap)</td><td>[-, -]</td></tr>" in block
    assert "were not given" in robustness_html(None)
    job = dataclasses.replace(
        EVIDENCE, metrics={**{k: v for k, v in EVIDENCE.metrics.items() if k != "dsr"}, "dsr_provisional": 0.25}
    )
    assert "<td>DSR, provisional (the study's DSR comes when the sweep ends)</td><td>0.250</td>" in robustness_html(job)


def test_the_block_shows_the_strategy_against_the_index_from_the_runs_metrics() -> None:
    index_metrics = {
        "index_excess_ann_return": 0.0456,
        "index_beta": 0.8123,
        "index_tracking_error": 0.1789,
        "index_information_ratio": 0.3456,
        "index_ann_return": 0.0712,
        "index_sharpe": 0.5234,
        "index_max_drawdown": -0.2345,
    }
    evidence = dataclasses.replace(
        EVIDENCE, metrics={**EVIDENCE.metrics, **index_metrics}, index="float-cap-weighted index of the universe"
    )
    block = robustness_html(evidence)
    for row in (
        "<tr><td>excess annual return</td><td>+4.56%</td></tr>",
        "<tr><td>beta</td><td>0.81</td></tr>",
        "<tr><td>tracking error (annual)</td><td>17.89%</td></tr>",
        "<tr><td>information ratio</td><td>+0.35</td></tr>",
        "<tr><td>index annual return</td><td>+7.12%</td></tr>",
        "<tr><td>index Sharpe</td><td>+0.52</td></tr>",
        "<tr><td>index max drawdown</td><td>-23.45%</td></tr>",
    ):
        assert row in block, row
    assert "Index: float-cap-weighted index of the universe, on the strategy's return days." in block
    assert "Against the index" not in robustness_html(EVIDENCE)  # a run without an index has no such table
    page = fallback_html(STRATEGY, BENCHMARK, "lambdarank-all", evidence=evidence)
    assert "<tr><td>beta</td><td>0.81</td></tr>" in page
