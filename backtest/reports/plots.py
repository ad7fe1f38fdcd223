"""Equity-curve and drawdown plots of a backtest, as PNG files.

Figures are built with :class:`matplotlib.figure.Figure` directly (Agg canvas, no pyplot): nothing
global is touched, nothing stays open, and the font is pinned to DejaVu Sans (bundled with matplotlib)
so that an rcParams change by another library (quantstats sets Arial) cannot flood the log.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter, StrMethodFormatter

from backtest.reports.returns import check_daily_returns, drawdown_curve, wealth_curve

_STYLE = {"font.family": "DejaVu Sans", "axes.grid": True, "grid.alpha": 0.3}
_STRATEGY_COLOR = "#1f4e9c"
_BENCHMARK_COLOR = "#8c8c8c"


def plot_equity_curve(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    log_scale: bool = False,
    title: str = "Equity curve",
    dpi: int = 100,
) -> Path:
    """Plot the compounded wealth of the strategy and of the equal-weight benchmark.

    Parameters
    ----------
    returns : Series indexed by date, the strategy's daily returns.
    benchmark : Series on the same dates, the benchmark's daily returns.
    path : the PNG file to write (its folder is created).
    log_scale : logarithmic y axis (equal distances = equal percentage moves).
    title : figure title.
    dpi : resolution.

    Returns
    -------
    Path : ``path``.
    """
    strategy, bench = check_daily_returns(returns, benchmark, where="equity curve plot")
    assert bench is not None
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(10, 5), dpi=dpi)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.plot(wealth_curve(strategy), color=_STRATEGY_COLOR, linewidth=1.4, label="Strategy")
        axes.plot(wealth_curve(bench), color=_BENCHMARK_COLOR, linewidth=1.2, label="Equal weight")
        axes.axhline(1.0, color="black", linewidth=0.6)
        if log_scale:
            axes.set_yscale("log")
            axes.yaxis.set_major_formatter(StrMethodFormatter("{x:.2f}"))
            axes.yaxis.set_minor_formatter(StrMethodFormatter("{x:.2f}"))
        axes.set_ylabel("Wealth (1.0 at start)" + (", log scale" if log_scale else ""))
        axes.set_title(title)
        axes.legend(loc="upper left")
        figure.autofmt_xdate()
        figure.tight_layout()
        return _save(figure, path)


def plot_drawdown(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    title: str = "Drawdown",
    dpi: int = 100,
) -> Path:
    """Plot the drawdown from the running peak (starting capital included) of strategy and benchmark.

    Parameters
    ----------
    returns : Series indexed by date, the strategy's daily returns.
    benchmark : Series on the same dates, the benchmark's daily returns.
    path : the PNG file to write (its folder is created).
    title : figure title; the strategy's maximum drawdown is appended.
    dpi : resolution.

    Returns
    -------
    Path : ``path``.
    """
    strategy, bench = check_daily_returns(returns, benchmark, where="drawdown plot")
    assert bench is not None
    strategy_dd = drawdown_curve(strategy)
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(10, 4), dpi=dpi)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.fill_between(
            strategy_dd.index, strategy_dd.to_numpy(), 0.0, color=_STRATEGY_COLOR, alpha=0.35, label="Strategy"
        )
        axes.plot(drawdown_curve(bench), color=_BENCHMARK_COLOR, linewidth=1.0, label="Equal weight")
        axes.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        axes.set_ylabel("Drawdown")
        axes.set_title(f"{title} (strategy max {strategy_dd.min():.1%})")
        axes.legend(loc="lower left")
        figure.autofmt_xdate()
        figure.tight_layout()
        return _save(figure, path)


def _save(figure: Figure, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
