"""The HTML tearsheet of a backtest: quantstats, with a small self-made fallback.

quantstats 0.0.86 renders the full report offline when the benchmark is a Series (a ticker string would
download one). Its traps, handled here:

- importing it sets ``rcParams["font.family"] = "Arial"`` for the whole process and its plots ask for
  Arial by name: the import and the call run inside ``matplotlib.rc_context`` (rcParams restored after)
  with the ``matplotlib.font_manager`` logger at ERROR (no ``findfont`` flood), and the Agg backend;
- a timezone-aware index fails inside it (``Cannot compare dtypes datetime64[us, tz] and datetime64``):
  the index is made naive first (:func:`backtest.reports.returns.check_daily_returns`);
- some of its statistics break on inputs it did not expect (all-zero returns make its R^2 regression
  raise) and it has broken on pandas upgrades before: such an error, raised inside quantstats, is
  caught, logged as a warning, and a smaller report with the same headline metrics is written instead,
  so a run never fails for its tearsheet. Errors of ours (bad input, unwritable path) still raise.
- ``match_dates=False``: the report covers exactly the test period given (quantstats would otherwise
  drop leading days where either series is 0).
"""

from __future__ import annotations

import contextlib
import html
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import matplotlib
import numpy as np
import pandas as pd

from backtest import metrics
from backtest.reports.returns import check_daily_returns

logger = logging.getLogger(__name__)

#: Error types quantstats raises when it meets data or a pandas version it does not handle. Caught
#: only when raised from inside the quantstats package.
QUANTSTATS_BREAKAGE: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    ZeroDivisionError,
    NotImplementedError,
)


@dataclass(frozen=True)
class Tearsheet:
    """Where the tearsheet was written and which renderer made it.

    Attributes
    ----------
    path : the HTML file.
    renderer : ``quantstats`` or ``fallback``.
    reason : why quantstats was not used (``"ValueError: ..."``), None when it was.
    """

    path: Path
    renderer: Literal["quantstats", "fallback"]
    reason: str | None = None


def write_tearsheet(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    title: str = "Strategy tearsheet",
    periods_per_year: int = metrics.PERIODS_PER_YEAR,
) -> Tearsheet:
    """Write the HTML tearsheet of daily strategy returns against the equal-weight benchmark.

    Parameters
    ----------
    returns : Series indexed by date, the strategy's daily returns (see ``backtest.reports.returns``).
    benchmark : Series on the same dates, the equal-weight benchmark's daily returns.
    path : the HTML file to write (its folder is created).
    title : report title.
    periods_per_year : annualization (``backtest.metrics.PERIODS_PER_YEAR``).

    Returns
    -------
    Tearsheet : the path and which renderer wrote it.

    Raises
    ------
    DataContractError : invalid or misaligned return series.
    """
    strategy, bench = check_daily_returns(returns, benchmark, where="tearsheet")
    assert bench is not None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _quiet_matplotlib():
            import quantstats as qs

            qs.reports.html(
                strategy,
                benchmark=bench,
                output=str(path),
                title=title,
                periods_per_year=periods_per_year,
                match_dates=False,
                benchmark_title="Equal weight",
                strategy_title="Strategy",
            )
        return Tearsheet(path, "quantstats")
    except QUANTSTATS_BREAKAGE as exc:
        if not _raised_inside_quantstats(exc):
            raise
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "quantstats could not render the tearsheet (%s); writing the reduced tearsheet to %s instead",
            reason,
            path,
        )
    path.write_text(fallback_html(strategy, bench, title, periods_per_year, reason), encoding="utf-8")
    return Tearsheet(path, "fallback", reason)


def tearsheet_metrics(
    returns: pd.Series, benchmark: pd.Series, periods_per_year: int = metrics.PERIODS_PER_YEAR
) -> pd.DataFrame:
    """Headline statistics of the tearsheet, from :mod:`backtest.metrics` (which defines them as
    quantstats does: compounded, risk-free rate 0).

    Parameters
    ----------
    returns, benchmark : daily returns on the same dates (validated by the caller).
    periods_per_year : annualization.

    Returns
    -------
    DataFrame indexed by metric name, columns ``Benchmark`` and ``Strategy`` (quantstats' order), float
    values: Cumulative Return, CAGR, Sharpe, Sortino, Volatility (ann.), Max Drawdown, Calmar
    (``CAGR / |Max Drawdown|``), Best Day, Worst Day, and the robustness rows Sharpe ex best month,
    CAGR ex best month, Sharpe ex best 3 months (the same with the best calendar month(s) removed,
    :func:`backtest.metrics.drop_best_months`). The run summary the CLI prints is this table too.
    """
    columns = {"Benchmark": benchmark, "Strategy": returns}
    table = pd.DataFrame({name: _statistics(series, periods_per_year) for name, series in columns.items()})
    table.index.name = "Metric"
    return table


def _statistics(r: pd.Series, periods_per_year: int) -> dict[str, float]:
    cagr = metrics.ann_return(r, periods_per_year)
    max_drawdown = metrics.max_drawdown(r)
    return {
        "Cumulative Return": metrics.cum_return(r),
        "CAGR": cagr,
        "Sharpe": metrics.sharpe(r, periods_per_year),
        "Sortino": metrics.sortino(r, periods_per_year),
        "Volatility (ann.)": metrics.ann_vol(r, periods_per_year),
        "Max Drawdown": max_drawdown,
        "Calmar": cagr / abs(max_drawdown) if max_drawdown < 0 else float("nan"),
        "Best Day": float(r.max()),
        "Worst Day": float(r.min()),
        "Sharpe ex best month": metrics.sharpe(metrics.drop_best_months(r, 1), periods_per_year),
        "CAGR ex best month": metrics.ann_return(metrics.drop_best_months(r, 1), periods_per_year),
        "Sharpe ex best 3 months": metrics.sharpe(metrics.drop_best_months(r, 3), periods_per_year),
    }


#: Rows of :func:`tearsheet_metrics` that are fractions (shown as percents).
PERCENT_ROWS = (
    "Cumulative Return", "CAGR", "Volatility (ann.)", "Max Drawdown", "Best Day", "Worst Day", "CAGR ex best month",
)


def format_metric(name: str, value: float) -> str:
    """Format a tearsheet value as quantstats prints it: percents and ratios rounded to 2 decimals.

    >>> format_metric("CAGR", 0.12345), format_metric("Max Drawdown", -0.01), format_metric("Sharpe", 0.1008)
    ('12.35%', '-1.0%', '0.1')
    """
    if not np.isfinite(value):
        return "-"
    if name in PERCENT_ROWS:
        return f"{round(float(value) * 100, 2)}%"
    return str(round(float(value), 2))


def fallback_html(
    returns: pd.Series,
    benchmark: pd.Series,
    title: str,
    periods_per_year: int = metrics.PERIODS_PER_YEAR,
    reason: str | None = None,
) -> str:
    """A self-contained HTML page with :func:`tearsheet_metrics` and the returns of each year.

    Rows read ``<tr><td>Sharpe</td><td>benchmark</td><td>strategy</td></tr>`` like quantstats' table.
    """
    table = tearsheet_metrics(returns, benchmark, periods_per_year)
    metric_rows = "\n".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(f"<td>{format_metric(name, row[col])}</td>" for col in ("Benchmark", "Strategy"))
        + "</tr>"
        for name, row in table.iterrows()
    )
    yearly = metrics.per_year_table(returns, benchmark)
    year_rows = "\n".join(
        f"<tr><td>{year}</td><td>{row['benchmark_return'] * 100:.2f}%</td><td>{row['return'] * 100:.2f}%</td></tr>"
        for year, row in yearly.iterrows()
    )
    note = (
        f"<p class='note'>Reduced report: quantstats failed ({html.escape(reason)}).</p>" if reason else ""
    )
    first, last = returns.index[0].date(), returns.index[-1].date()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:4px 12px;text-align:right}}td:first-child{{text-align:left}}
.note{{color:#a60}}</style></head>
<body><h1>{html.escape(title)}</h1><p>{first} - {last}, {len(returns)} trading days, benchmark: equal weight</p>
{note}
<h3>Key Performance Metrics</h3>
<table><thead><tr><th>Metric</th><th>Equal weight</th><th>Strategy</th></tr></thead><tbody>
{metric_rows}
</tbody></table>
<h3>Returns by Year</h3>
<table><thead><tr><th>Year</th><th>Equal weight</th><th>Strategy</th></tr></thead><tbody>
{year_rows}
</tbody></table></body></html>
"""


@contextlib.contextmanager
def _quiet_matplotlib() -> Iterator[None]:
    """Agg backend, rcParams restored afterwards, no font-manager noise, no quantstats warnings."""
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    font_logger = logging.getLogger("matplotlib.font_manager")
    level = font_logger.level
    font_logger.setLevel(logging.ERROR)
    import matplotlib.pyplot as plt

    open_figures = set(plt.get_fignums())
    try:
        with matplotlib.rc_context(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(quantstats|seaborn)(\..*)?$")
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"pandas(\..*)?$")
            yield
    finally:
        for number in set(plt.get_fignums()) - open_figures:  # figures left open by a failed plot
            plt.close(number)
        font_logger.setLevel(level)


def _raised_inside_quantstats(exc: BaseException) -> bool:
    """True when a frame of the exception's traceback is in the quantstats package."""
    import quantstats

    package_dir = str(Path(quantstats.__file__).resolve().parent)
    tb = exc.__traceback__
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(package_dir):
            return True
        tb = tb.tb_next
    return False
