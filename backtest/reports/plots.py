"""Charts of a backtest as PNG files, and the one house style every chart in ``reports/`` is drawn in.

Figures are built with :class:`matplotlib.figure.Figure` directly (Agg canvas, no pyplot): nothing
global is touched, nothing stays open, and the font is pinned to DejaVu Sans (bundled with matplotlib)
so that an rcParams change by another library (quantstats sets Arial) cannot flood the log. Every chart
starts from :func:`new_figure` (line and bar charts in :data:`CHART_STYLE`, heatmaps in
:data:`HEATMAP_STYLE`) and ends with :func:`save_png` (or :func:`png_bytes`, for a page that embeds it);
the study report's charts (:mod:`backtest.reports.study`), the drift heatmaps
(:mod:`backtest.reports.drift_charts`) and the signal and portfolio pages do too.

- :func:`plot_equity_curve`, :func:`plot_drawdown`: a run's wealth and drawdown against equal weight;
- :func:`plot_fold_metric`: one per-fold metric as bars (the ``fold_rank_ic.png`` that MLflow's
  compare-runs page shows side by side; tracking logs the file, it does not draw it).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

import matplotlib
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter, StrMethodFormatter

from backtest.errors import ConfigError
from backtest.reports.returns import check_daily_returns, drawdown_curve, wealth_curve

#: The font of every chart: bundled with matplotlib, so it is found everywhere without a lookup.
FONT_FAMILY = "DejaVu Sans"
#: Line and bar charts: a light grid.
CHART_STYLE: Mapping[str, object] = MappingProxyType({"font.family": FONT_FAMILY, "axes.grid": True, "grid.alpha": 0.3})
#: Heatmaps: no grid over the cells, small type for many rows.
HEATMAP_STYLE: Mapping[str, object] = MappingProxyType({"font.family": FONT_FAMILY, "font.size": 8})
#: Resolution of every chart.
DPI = 100
STRATEGY_COLOR = "#1f4e9c"
BENCHMARK_COLOR = "#8c8c8c"
#: Bars below zero (a negative rank IC, an underweight).
NEGATIVE_COLOR = "#c0392b"


@contextmanager
def new_figure(
    figsize: tuple[float, float], *, dpi: int = DPI, style: Mapping[str, object] = CHART_STYLE
) -> Iterator[Figure]:
    """A figure on its own Agg canvas, drawn inside ``style`` (rcParams restored on exit).

    Draw and save inside the ``with`` block: the style applies to what is drawn there.

    >>> with new_figure((4, 3)) as figure:
    ...     figure.add_subplot().get_xgridlines()[0].get_visible(), figure.dpi
    (True, 100)
    """
    with matplotlib.rc_context(dict(style)):
        figure = Figure(figsize=figsize, dpi=dpi)
        FigureCanvasAgg(figure)
        yield figure


def save_png(figure: Figure, path: Path | str) -> Path:
    """Write ``figure`` as a PNG at ``path`` (its folder is created); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def png_bytes(figure: Figure, *, dated: bool = False) -> bytes:
    """``figure`` laid out (``tight_layout``; with ``dated``, the dates of its x axes slanted) as PNG bytes, for a
    page that embeds its charts (:func:`backtest.reports.tables.embedded_png`)."""
    if dated:
        figure.autofmt_xdate()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def plot_equity_curve(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    log_scale: bool = False,
    title: str = "Equity curve",
    dpi: int = DPI,
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
    with new_figure((10, 5), dpi=dpi) as figure:
        axes = figure.add_subplot()
        axes.plot(wealth_curve(strategy), color=STRATEGY_COLOR, linewidth=1.4, label="Strategy")
        axes.plot(wealth_curve(bench), color=BENCHMARK_COLOR, linewidth=1.2, label="Equal weight")
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
        return save_png(figure, path)


def plot_drawdown(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    title: str = "Drawdown",
    dpi: int = DPI,
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
    with new_figure((10, 4), dpi=dpi) as figure:
        axes = figure.add_subplot()
        axes.fill_between(
            strategy_dd.index, strategy_dd.to_numpy(), 0.0, color=STRATEGY_COLOR, alpha=0.35, label="Strategy"
        )
        axes.plot(drawdown_curve(bench), color=BENCHMARK_COLOR, linewidth=1.0, label="Equal weight")
        axes.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        axes.set_ylabel("Drawdown")
        axes.set_title(f"{title} (strategy max {strategy_dd.min():.1%})")
        axes.legend(loc="lower left")
        figure.autofmt_xdate()
        figure.tight_layout()
        return save_png(figure, path)


def plot_fold_metric(
    fold_metrics: pd.DataFrame, column: str, path: Path | str, *, title: str | None = None, dpi: int = DPI
) -> Path:
    """A bar chart of one per-fold metric (e.g. ``rank_ic``), fold by fold, with its mean.

    Parameters
    ----------
    fold_metrics : one row per fold, indexed by fold number (or with a ``fold`` column): the result's
        ``fold_metrics`` / the ``data/fold_metrics.csv`` artifact.
    column : the metric to draw.
    path : the PNG file to write (its folder is created).
    title : figure title; default ``"<column> per fold"``.

    Returns
    -------
    Path : ``path``.

    Raises
    ------
    ConfigError : ``column`` is not a column of ``fold_metrics``.
    """
    frame = fold_metrics.set_index("fold") if "fold" in fold_metrics.columns else fold_metrics
    if column not in frame.columns:
        raise ConfigError(f"plot_fold_metric: no column {column!r}; columns: {', '.join(map(str, frame.columns))}")
    values = pd.to_numeric(frame[column], errors="coerce")
    folds = [str(fold) for fold in frame.index]
    colors = [STRATEGY_COLOR if value >= 0 else NEGATIVE_COLOR for value in values.fillna(0.0)]
    with new_figure((8, 4), dpi=dpi) as figure:
        axes = figure.add_subplot()
        axes.bar(folds, values.fillna(0.0).to_numpy(), color=colors)
        axes.axhline(0.0, color="black", linewidth=0.6)
        if values.notna().any():
            mean = float(values.mean())
            axes.axhline(mean, color=BENCHMARK_COLOR, linestyle="--", linewidth=1.0, label=f"mean {mean:+.4f}")
            axes.legend(loc="best")
        axes.set_xlabel("fold")
        axes.set_ylabel(column)
        axes.set_title(title or f"{column} per fold")
        figure.tight_layout()
        return save_png(figure, path)
