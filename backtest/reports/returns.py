"""Daily return series as the reports read them: validation, wealth and drawdown.

::

    returns   : Series indexed by date (DatetimeIndex, sorted, unique, tz-naive), float, one value per
                trading day of the test period: the strategy's simple return of that day after costs,
                0.0 on a day without positions (never NaN).
    benchmark : Series with exactly the same index: the equal-weight universe's daily return.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from backtest.errors import DataContractError, preview

logger = logging.getLogger(__name__)


def check_daily_returns(
    returns: pd.Series, benchmark: pd.Series | None = None, where: str = "report"
) -> tuple[pd.Series, pd.Series | None]:
    """Validate daily strategy (and benchmark) returns; return float64 copies with a naive index.

    Parameters
    ----------
    returns : Series indexed by date, see the module docstring.
    benchmark : Series on the same dates, or None.
    where : name of the calling report, for error messages.

    Returns
    -------
    (returns, benchmark) : float64 Series named ``Strategy`` / ``Benchmark``, index named ``date``;
        a timezone-aware index is converted to naive local dates.

    Raises
    ------
    DataContractError : not a Series, index not dates, unsorted or duplicated dates, empty, NaN or
        infinite values, or a benchmark whose dates differ from the strategy's.
    """
    out_returns = _check_series(returns, "returns", where).rename("Strategy")
    if benchmark is None:
        return out_returns, None
    out_benchmark = _check_series(benchmark, "benchmark", where).rename("Benchmark")
    if not out_returns.index.equals(out_benchmark.index):
        only_strategy = out_returns.index.difference(out_benchmark.index)
        only_benchmark = out_benchmark.index.difference(out_returns.index)
        raise DataContractError(
            f"{where}: the benchmark must cover exactly the strategy's dates. Dates only in returns: "
            f"{len(only_strategy)} ({preview(only_strategy.date)}); only in benchmark: {len(only_benchmark)} "
            f"({preview(only_benchmark.date)}). Fix: compute both on the same test calendar, or "
            "benchmark.reindex(returns.index) before calling."
        )
    return out_returns, out_benchmark


def _check_series(series: pd.Series, name: str, where: str) -> pd.Series:
    if not isinstance(series, pd.Series):
        raise DataContractError(
            f"{where}: {name} must be a pandas Series indexed by date, received {type(series).__name__}."
        )
    if not isinstance(series.index, pd.DatetimeIndex):
        raise DataContractError(
            f"{where}: {name} must be indexed by a DatetimeIndex, received {type(series.index).__name__} "
            f"(first labels: {preview(series.index[:3])}). Fix: series.index = pd.to_datetime(series.index)."
        )
    if len(series) == 0:
        raise DataContractError(f"{where}: {name} is empty; expected one return per trading day of the test period.")
    index = series.index
    if index.tz is not None:
        logger.info("%s: %s index is in %s; using naive local dates", where, name, index.tz)
        index = index.tz_localize(None)
    if index.has_duplicates:
        raise DataContractError(
            f"{where}: {name} has duplicated dates: {preview(index[index.duplicated()].date)}. "
            "Expected one return per day. Fix: aggregate per date first."
        )
    if not index.is_monotonic_increasing:
        raise DataContractError(f"{where}: {name} dates are not sorted. Fix: series.sort_index().")
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise DataContractError(
            f"{where}: {name} has {int(bad.sum())} NaN / infinite / non-numeric values, first on "
            f"{preview(index[bad].date)}. Expected a finite return every day. Fix: a day without "
            "positions returns 0.0, fill it so before reporting."
        )
    return pd.Series(values, index=index.rename("date"), name=name)


def wealth_curve(returns: pd.Series) -> pd.Series:
    """Compounded wealth of 1.0 invested before the first day: ``prod(1 + r)`` up to each date.

    >>> wealth_curve(pd.Series([0.1, -0.5], index=pd.to_datetime(["2024-01-02", "2024-01-03"]))).tolist()
    [1.1, 0.55]
    """
    return (1.0 + returns).cumprod()


def drawdown_curve(returns: pd.Series) -> pd.Series:
    """Drawdown of each date from the running peak of wealth, the initial 1.0 included (<= 0).

    A loss on the first day is a drawdown from the starting capital.

    >>> drawdown_curve(pd.Series([-0.1, 0.2, -0.25], index=pd.bdate_range("2024-01-01", periods=3))).round(4).tolist()
    [-0.1, 0.0, -0.25]
    """
    wealth = wealth_curve(returns)
    peak = np.maximum(wealth.cummax(), 1.0)
    return wealth / peak - 1.0
