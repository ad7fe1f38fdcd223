"""Equity-curve, drawdown and per-fold metric PNGs, the wealth / drawdown series behind them, and the one
chart style."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from backtest.errors import ConfigError
from backtest.reports import write_backtest_reports
from backtest.reports.plots import (
    CHART_STYLE,
    HEATMAP_STYLE,
    new_figure,
    plot_drawdown,
    plot_equity_curve,
    plot_fold_metric,
)
from backtest.reports.returns import drawdown_curve, wealth_curve

DATES = pd.bdate_range("2024-01-01", periods=4)
STRATEGY = pd.Series([-0.1, 0.2, -0.25, 0.5], index=DATES)
BENCHMARK = pd.Series([0.01, 0.0, -0.01, 0.02], index=DATES)


def test_wealth_and_drawdown_exact_values() -> None:
    assert wealth_curve(STRATEGY).to_numpy() == pytest.approx([0.9, 1.08, 0.81, 1.215])
    # The first day's loss is a drawdown from the starting capital 1.0.
    assert drawdown_curve(STRATEGY).to_numpy() == pytest.approx([-0.1, 0.0, -0.25, 0.0])


@pytest.mark.parametrize("log_scale", [False, True])
def test_equity_curve_png(tmp_path: Path, log_scale: bool) -> None:
    path = plot_equity_curve(STRATEGY, BENCHMARK, tmp_path / "plots" / "equity.png", log_scale=log_scale)
    assert path == tmp_path / "plots" / "equity.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.shape == (500, 1000, 4)  # 10 x 5 inches at 100 dpi
    assert np.ptp(image[..., :3]) > 0.5  # something was drawn


def test_log_scale_changes_the_picture(tmp_path: Path) -> None:
    linear = plot_equity_curve(STRATEGY, BENCHMARK, tmp_path / "a.png")
    log = plot_equity_curve(STRATEGY, BENCHMARK, tmp_path / "b.png", log_scale=True)
    assert linear.read_bytes() != log.read_bytes()


def test_drawdown_png(tmp_path: Path) -> None:
    path = plot_drawdown(STRATEGY, BENCHMARK, tmp_path / "drawdown.png", dpi=50)
    assert matplotlib.image.imread(path).shape == (200, 500, 4)


def test_fold_metric_png(tmp_path: Path) -> None:
    fold_metrics = pd.DataFrame({"fold": [0, 1, 2], "rank_ic": [0.02, -0.01, float("nan")]})
    path = plot_fold_metric(fold_metrics, "rank_ic", tmp_path / "charts" / "fold.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(path).shape == (400, 800, 4)  # 8 x 4 inches at 100 dpi
    with pytest.raises(ConfigError, match="no column 'sharpe'"):
        plot_fold_metric(fold_metrics, "sharpe", tmp_path / "x.png")


def test_every_chart_style_pins_the_font_and_restores_rcparams() -> None:
    before = dict(matplotlib.rcParams)
    for style in (CHART_STYLE, HEATMAP_STYLE):
        assert style["font.family"] == "DejaVu Sans"
        with new_figure((2, 2), style=style):
            assert matplotlib.rcParams["font.family"] == ["DejaVu Sans"]
    assert dict(matplotlib.rcParams) == before


def test_plots_leave_no_pyplot_figure_open(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plot_equity_curve(STRATEGY, BENCHMARK, tmp_path / "e.png")
    plot_drawdown(STRATEGY, BENCHMARK, tmp_path / "d.png")
    plot_fold_metric(pd.DataFrame({"rank_ic": [0.1, -0.1]}), "rank_ic", tmp_path / "f.png")
    assert plt.get_fignums() == before


def test_all_reports_into_one_folder(tmp_path: Path) -> None:
    importance = pd.DataFrame({"rsi": [3.0, 1.0], "mf": [1.0, 3.0]}, index=pd.to_datetime(["2023-01-03", "2024-01-02"]))
    written = write_backtest_reports(tmp_path / "reports", STRATEGY, BENCHMARK, importance=importance, tearsheet=False)
    names = sorted(p.relative_to(tmp_path / "reports").as_posix() for p in written)
    assert names == [
        "drawdown.png",
        "drift/drift_report.html",
        "drift/drift_report.md",
        "drift/importance_jumps.csv",
        "drift/importance_rank_changes.csv",
        "drift/importance_rank_heatmap.png",
        "drift/importance_rank_stability.csv",
        "drift/importance_ranks.csv",
        "drift/importance_shares.csv",
        "drift/importance_top_by_period.csv",
        "equity.png",
    ]
    assert all(p.is_file() for p in written)
