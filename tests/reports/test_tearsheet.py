"""Tearsheet: quantstats offline on pandas 3, and the reduced fallback when quantstats breaks."""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from backtest.errors import DataContractError
from backtest.reports.returns import check_daily_returns
from backtest.reports.tearsheet import format_metric, tearsheet_metrics, write_tearsheet

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
