"""The index benchmark beside equal weight: the float-cap-weighted index of the point-in-time universe,
computed from the panel, or an index series supplied as a file (``data.benchmark_path``).

::

    panel --index_returns(panel, alignment)------------------> IndexReturns (the universe, cap-weighted)
    file  --SuppliedIndex.read--> --supplied_index_returns---> IndexReturns (the file's levels or returns)
          either one --benchmark_index(panel, dates)---------> on the strategy's return days (the engine)

The equal-weight benchmark of :func:`backtest.portfolio.simulate` stays the default comparison (``excess_ann_return``,
``win_rate_vs_ew``): it is the book the strategy could have held instead, rebalanced on the strategy's
dates under the same trading rules and costs. The index is the market a client compares with: rebalanced
every day, at no cost. Its metrics are the ``index_*`` keys of :func:`backtest.metrics.headline_metrics`.

Alignment (the one rule of this module)
---------------------------------------
An index return is dated as ``PortfolioResult.returns`` dates the strategy's: the return dated ``d`` is held
from the fill of ``d`` to the fill of the next trading day of the panel, the fill being the open (the close
on a panel without ``open``, as :func:`backtest.portfolio.fill_field` decides). So the strategy, equal
weight and the index are compared on the same daily periods, and excess return, beta and tracking error
pair returns of the same hours. ``index_returns(panel, alignment="close")`` gives the close-to-close
index, dated by the close it starts at.

The cap-weighted index (:func:`index_returns`)
----------------------------------------------
::

    r[d] = sum_i w_i * h_i[d],   w_i = cap_i(f) / sum_j cap_j(f)   over the members i, j of day f

- ``f``, the formation day, is the last close before the period starts: ``d - 1`` for open-to-open returns
  (the previous trading day's caps and members: nothing after the close of ``d - 1`` is used for a book
  held from the open of ``d``, the strategy's own timing), ``d`` for close-to-close ones (the period starts
  at that close). Membership is ``in_universe`` of ``f`` (every row without the column), as the strategy's
  eligibility is that of its decision day.
- ``cap`` is ``float_mv``, else ``total_mv`` on a row without a positive ``float_mv``, carried forward over
  the days a stock has none (a suspension without a ``daily_basic`` row); a member without any cap is left
  out, and a day on which no member has one is weighted equally. A panel without ``float_mv`` is weighted
  by ``total_mv``, one with neither equally (a daily rebalanced equal-weight index of the members); either
  fallback is logged as a warning and named in ``IndexReturns.source``.
- ``h_i[d]`` is the portfolio's own holding return (:func:`backtest.portfolio.holding_returns`): adjusted
  fill to adjusted fill, so dividends are reinvested (a total-return index, as the equal-weight book); a
  suspended member carries its last mark (0 until it trades again, then the gap), as the equal-weight book
  holds a name it cannot trade; a member that delists earns 0 after its last row.
- A name that leaves the universe on ``f + 1`` is out of the next day's weights (the equal-weight book holds
  it until its next rebalance); a name that joins counts from the period after its first member day.
- A day without any member (a broken panel) returns 0, as a book in cash, with a warning.

A supplied series (:func:`supplied_index_returns`)
--------------------------------------------------
The file (:func:`backtest.data.loaders.read_index_series`) gives levels at the ``open`` or the ``close`` of
each date, or each date's close-to-close ``return`` (compounded into close levels). The period of the
return dated ``d`` runs from the level known at the fill of ``d`` to the level known at the fill of the next
trading day, the level known at a moment being the last one taken at or before it:

- open levels, open fill: ``open(next) / open(d) - 1``, the strategy's very period;
- close levels (or returns), open fill: ``close(d) / close(d - 1) - 1``, the file's return of date ``d``:
  the trading session of ``d``, which the strategy's period ``open(d) .. open(d + 1)`` holds but for the
  overnight moves at either end (half an overlap at worst: the index's beta is then understated);
- close levels (or returns), close fill: ``close(next) / close(d) - 1``, the strategy's very period.

When a file has several columns the one at the fill is taken (``open`` for an open fill; else ``close``,
else ``return``). Levels are read on the panel's trading days only (a date the panel does not trade is
skipped, and the next return spans it); a trading day the backtest's returns need whose level is missing
refuses the run before any model is fit (:func:`benchmark_index` on :func:`backtest.portfolio.return_days`,
called by :func:`backtest.engine.plan_backtest`).

Examples
--------
Three stocks, four days, float caps of 100, 300 and 600 (weights 0.1, 0.3, 0.6), open-to-open returns
dated by their first open: day 1 a +10%, c -5%; day 2 b +10% (none on day 0: it has no previous close):

>>> dates = pd.bdate_range("2024-01-01", periods=4, name="date")
>>> panel = pd.DataFrame(
...     {"open": [10, 20, 30, 10, 20, 30, 11, 20, 28.5, 11, 22, 28.5],
...      "close": [10.0] * 12, "float_mv": [100, 300, 600] * 4},
...     index=pd.MultiIndex.from_product([dates, ["a", "b", "c"]], names=["date", "code"]),
... ).astype(float)
>>> index_returns(panel).returns.round(6).tolist()  # 0.1 * 10% + 0.6 * -5%, then 0.3 * 10%
[-0.02, 0.03]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from backtest import metrics
from backtest.data.panel import WideGrid
from backtest.data.tradability import carry_forward, eligible
from backtest.errors import DataContractError, preview
from backtest.portfolio import fill_field, holding_returns

logger = logging.getLogger(__name__)

Alignment = Literal["open", "close"]

#: What ``IndexReturns.source`` names: the cap the panel index is weighted by, or a supplied file.
INDEX_SOURCES: tuple[str, ...] = ("float_mv", "total_mv", "equal", "file")

#: Column of a supplied series taken for each fill, in order of preference (the one at the fill first).
_SUPPLIED_COLUMNS: dict[str, tuple[str, ...]] = {
    "open": ("open", "close", "return"),
    "close": ("close", "return", "open"),
}


@dataclass(frozen=True)
class IndexReturns:
    """Daily returns of an index benchmark and what they are.

    Attributes
    ----------
    returns : Series indexed by date, named ``index``: the return dated ``d`` is held from the fill of ``d``
        to the fill of the next trading day (see the module docstring, "Alignment").
    source : one of :data:`INDEX_SOURCES`: ``float_mv`` / ``total_mv`` / ``equal`` (the panel's universe,
        weighted by that), ``file`` (a supplied series).
    description : one line for the log, the summary and the tearsheet.
    """

    returns: pd.Series
    source: str
    description: str

    def on(self, dates: pd.DatetimeIndex) -> IndexReturns:
        """The same index on exactly ``dates`` (the strategy's return days).

        Raises
        ------
        DataContractError : a date of ``dates`` has no index return.
        """
        dates = pd.DatetimeIndex(dates, name="date")
        values = self.returns.reindex(dates)
        missing = dates[values.isna().to_numpy()]
        if len(missing):
            have = self.returns.dropna().index
            span = f"{have[0]:%Y-%m-%d} .. {have[-1]:%Y-%m-%d}" if len(have) else "no day"
            raise DataContractError(
                f"the benchmark index ({self.description}) has no return on {len(missing)} of the {len(dates)} "
                f"return days of the backtest, e.g. {preview(missing.date, 3)}; it has returns on {span}\n"
                "  fix: give the index on every return day of the strategy (backtest.test_start / "
                "backtest.test_end inside the index's dates)"
            )
        return IndexReturns(values.rename("index"), self.source, self.description)


@dataclass(frozen=True)
class SuppliedIndex:
    """An index series read from a file (``data.benchmark_path``).

    Attributes
    ----------
    path : the file.
    table : DataFrame indexed by date with columns among ``open``, ``close`` (levels) and ``return``
        (:func:`backtest.data.loaders.read_index_series`).
    """

    path: Path
    table: pd.DataFrame

    @classmethod
    def read(cls, path: str | Path, encoding: str = "utf-8") -> SuppliedIndex:
        """Read and check the file (:func:`backtest.data.loaders.read_index_series`; DataContractError)."""
        from backtest.data.loaders import read_index_series

        return cls(Path(path), read_index_series(path, encoding))

    def column_for(self, fill: Alignment) -> str:
        """The column the returns come from for a book filled at ``fill`` (the one at the fill first)."""
        return next(c for c in _SUPPLIED_COLUMNS[fill] if c in self.table.columns and self.table[c].notna().any())


# --------------------------------------------------------------------------------------------------
# The cap-weighted index of the panel's universe


def index_returns(panel: pd.DataFrame, alignment: Alignment = "open") -> IndexReturns:
    """The float-cap-weighted index of the point-in-time universe of ``panel`` (module docstring).

    Parameters
    ----------
    panel : DataFrame indexed by (date, code)
        The canonical panel; uses ``alignment``'s price column (with ``adj_factor``, ``is_suspended``,
        ``volume`` when present, as the portfolio marks), ``in_universe``, ``float_mv`` / ``total_mv``.
    alignment : ``"open"`` (open to open, the strategy's periods on a panel with ``open``) or ``"close"``.

    Returns
    -------
    IndexReturns : one return per trading day that has a formation day and a next day (open: the second to
        the second-to-last day; close: the first to the second-to-last), and the cap it is weighted by.

    Raises
    ------
    DataContractError : ``panel`` is not indexed by (date, code), or has no ``alignment`` column.
    """
    if alignment not in ("open", "close"):
        raise DataContractError(f"index_returns: alignment must be 'open' or 'close', received {alignment!r}")
    if not isinstance(panel, pd.DataFrame) or panel.index.nlevels != 2:
        raise DataContractError("index_returns expects the panel as a DataFrame indexed by (date, code)")
    if alignment not in panel.columns:
        raise DataContractError(
            f"index_returns(alignment={alignment!r}) needs a {alignment!r} column; the panel has "
            f"{preview(panel.columns, 10)}\n  fix: alignment='{fill_field(panel)}'"
        )
    grid = WideGrid.of(panel)
    held = holding_returns(panel, grid, alignment)  # (T, N), the return of row d: fill d -> fill d+1
    lag = 1 if alignment == "open" else 0  # the formation row of return row d is d - lag
    rows = np.arange(lag, len(grid.dates) - 1)
    member = eligible(panel, grid)[rows - lag]  # (days, N)
    caps, source = market_caps(panel, grid)
    if source == "equal":
        logger.warning(
            "the panel has neither float_mv nor total_mv: the index benchmark weights the universe's members "
            "equally, rebalanced daily"
        )
    elif source == "total_mv":
        logger.warning("the panel has no float_mv: the index benchmark is weighted by total_mv")
    if caps is None:
        weights = member.astype(np.float64)
    else:
        cap = np.where(member, caps[rows - lag], np.nan)
        has_cap = np.isfinite(cap) & (cap > 0)
        weights = np.where(has_cap, cap, 0.0)
        uncapped = member.any(axis=1) & ~has_cap.any(axis=1)
        weights[uncapped] = member[uncapped]
        left_out = int((member & ~has_cap).sum() - member[uncapped].sum())
        if left_out or uncapped.any():
            logger.info(
                "index: %d member-days without a cap were left out, %d days without any cap weighted equally",
                left_out,
                int(uncapped.sum()),
            )
    total = weights.sum(axis=1)
    empty = total <= 0
    if empty.any():
        logger.warning(
            "index: %d days without any member return 0, e.g. %s",
            int(empty.sum()),
            preview(grid.dates[rows[empty]].date, 3),
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(empty, 0.0, (weights * held[rows]).sum(axis=1) / np.where(empty, 1.0, total))
    returns = pd.Series(values, index=pd.DatetimeIndex(grid.dates[rows], name="date"), name="index")
    return IndexReturns(returns, source, _DESCRIPTIONS[source])


_DESCRIPTIONS = {
    "float_mv": "float-cap-weighted index of the universe",
    "total_mv": "total-cap-weighted index of the universe (the panel has no float_mv)",
    "equal": "daily equal-weight index of the universe (the panel has no float_mv or total_mv)",
}


def market_caps(panel: pd.DataFrame, grid: WideGrid) -> tuple[np.ndarray | None, str]:
    """(T, N) market caps on ``grid``: ``float_mv``, else ``total_mv`` per cell, carried forward; and which
    column led (``float_mv`` / ``total_mv``), or ``(None, "equal")`` without either column. The index
    benchmark's weights and the size exposure of a run's book (its ``market_cap``) both read them."""
    have = [c for c in ("float_mv", "total_mv") if c in panel.columns and panel[c].notna().any()]
    if not have:
        return None, "equal"
    caps = np.full(grid.shape, np.nan)
    for column in reversed(have):  # float_mv written last wins where it is positive
        cap = grid.to_wide(panel[column].to_numpy(np.float64), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            usable = np.isfinite(cap) & (cap > 0)
        caps[usable] = cap[usable]
    return carry_forward(caps), have[0]


# --------------------------------------------------------------------------------------------------
# A supplied series


def supplied_index_returns(supplied: SuppliedIndex, calendar: pd.DatetimeIndex, fill: Alignment) -> IndexReturns:
    """The returns of a supplied index series on the panel's trading days, for books filled at ``fill``.

    Parameters
    ----------
    supplied : the series read from ``data.benchmark_path``.
    calendar : the panel's trading days (sorted).
    fill : the strategy's fill (:func:`backtest.portfolio.fill_field`).

    Returns
    -------
    IndexReturns indexed by ``calendar`` but its last day; NaN where a level the return needs is missing
    (module docstring, "A supplied series").

    Examples
    --------
    >>> days = pd.bdate_range("2024-01-01", periods=4, name="date")
    >>> closes = SuppliedIndex(Path("csi300.csv"), pd.DataFrame({"close": [100.0, 110.0, 99.0, 99.0]}, index=days))
    >>> supplied_index_returns(closes, days, "open").returns.round(4).tolist()  # the session of each day
    [nan, 0.1, -0.1]
    >>> supplied_index_returns(closes, days, "close").returns.round(4).tolist()  # close(d) -> close(d + 1)
    [0.1, -0.1, 0.0]
    """
    calendar = pd.DatetimeIndex(calendar, name="date")
    column = supplied.column_for(fill)
    levels, at = _levels(supplied.table[column].dropna(), column, calendar)
    known = levels.reindex(calendar)  # the level at the ``at`` moment of each trading day
    if at == "close" and fill == "open":
        known = known.shift(1)  # at the open of d the last level taken is the close of the day before
    returns = (known.shift(-1) / known - 1.0).iloc[:-1].rename("index")
    kind = "returns" if column == "return" else f"{column} levels"
    return IndexReturns(returns, "file", f"{supplied.path.name}, {kind}")


def _levels(values: pd.Series, column: str, calendar: pd.DatetimeIndex) -> tuple[pd.Series, Alignment]:
    """Levels and the moment of the day they are taken at; a return column compounded into close levels, with
    the level 1 on the trading day before its first return."""
    if column != "return":
        return values, column  # type: ignore[return-value]
    levels = (1.0 + values).cumprod()
    before = calendar[calendar < levels.index[0]]
    if len(before):
        levels = pd.concat([pd.Series([1.0], index=before[-1:]), levels])
    return levels, "close"


def benchmark_index(
    panel: pd.DataFrame, dates: pd.DatetimeIndex, supplied: SuppliedIndex | None = None
) -> IndexReturns:
    """The index the strategy's returns are compared with, on exactly ``dates``: the ``supplied`` series, or
    the float-cap-weighted index of the panel's universe, aligned on the strategy's fill.

    Parameters
    ----------
    panel : the canonical panel the strategy is simulated on.
    dates : the strategy's return days (``PortfolioResult.returns.index``, or
        :func:`backtest.portfolio.return_days` before the backtest runs).
    supplied : the series of ``data.benchmark_path``, or None.

    Raises
    ------
    DataContractError : the supplied series has no level for a trading day that a return of ``dates`` needs
        (its dates do not cover the backtest's period, or it has a gap inside it).
    """
    dates = pd.DatetimeIndex(dates, name="date")
    fill = fill_field(panel)
    if supplied is None:
        index = index_returns(panel, alignment=fill)
        logger.info("index benchmark: %s, %s to %s", index.description, fill, fill)
        return index.on(dates)
    calendar = pd.DatetimeIndex(panel.index.get_level_values(0).unique()).sort_values()
    index = supplied_index_returns(supplied, calendar, fill)
    missing = dates[index.returns.reindex(dates).isna().to_numpy()]
    if len(missing):
        raise DataContractError(_uncovered(supplied, calendar, dates, missing, fill))
    logger.info("index benchmark: %s (%s)", index.description, supplied.path)
    return index.on(dates)


def _uncovered(
    supplied: SuppliedIndex,
    calendar: pd.DatetimeIndex,
    dates: pd.DatetimeIndex,
    missing: pd.DatetimeIndex,
    fill: Alignment,
) -> str:
    """The refusal of a supplied series that misses days the backtest needs: what it has, what is needed."""
    column = supplied.column_for(fill)
    have = supplied.table[column].dropna().index
    first, last = calendar.get_loc(dates[0]), calendar.get_loc(dates[-1])
    # the trading days whose values the returns on ``dates`` read (see supplied_index_returns)
    from_close = column != "open" and fill == "open"
    lo, hi = (first - 1, last) if from_close else (first, last + 1)
    if column == "return":
        lo += 1  # the return of a day is the move to its close level: the first base level is not read
    lo, hi = max(lo, 0), min(hi, len(calendar) - 1)
    what = "a return" if column == "return" else f"a {column} level"
    span = f"{have[0]:%Y-%m-%d} .. {have[-1]:%Y-%m-%d}" if len(have) else "no date"
    return (
        f"data.benchmark_path: {supplied.path} does not cover the backtest: its "
        f"{column} values run {span}, and {len(missing)} of the {len(dates)} return days of the backtest "
        f"({dates[0]:%Y-%m-%d} .. {dates[-1]:%Y-%m-%d}, {fill} to {fill}) have no index return, e.g. "
        f"{preview(missing.date, 3)}\n  fix: give {what} on every trading day from {calendar[lo]:%Y-%m-%d} to "
        f"{calendar[hi]:%Y-%m-%d}, or move backtest.test_start / backtest.test_end inside the series, or "
        "data.benchmark_path=null for the float-cap-weighted index of the panel's universe"
    )


# --------------------------------------------------------------------------------------------------
# The stylized facts of an index


#: A day counts as a review when at least this many names enter the universe together, and at least 1%
#: of its seats (3 of the CSI 300's): a delisted member's replacement enters alone, but in an index of
#: thousands several members can delist on one day.
REVIEW_MIN_ENTRANTS = 3
#: A large day: an index move larger than this, either way.
LARGE_DAY = 0.05


def stylized_facts(panel: pd.DataFrame) -> dict[str, float]:
    """The stylized facts of the panel's cap-weighted index (close to close) and of its reviews.

    Returns
    -------
    dict : ``annual_volatility``, ``excess_kurtosis`` (of daily returns), ``abs_autocorr_1``, ``_5``, ``_20``
        (the autocorrelation of the absolute daily return at 1, 5 and 20 days: volatility memory),
        ``max_drawdown``, ``large_day_share`` (the share of days moving more than :data:`LARGE_DAY`),
        ``reviews`` (days on which :data:`REVIEW_MIN_ENTRANTS` or more names, and 1% of the most members of a
        day or more, enter ``in_universe``) and the names entering at each: ``review_changes_mean``, ``_min``,
        ``_max`` (NaN without a review).

    >>> from backtest.data.synthetic import SyntheticMarketConfig, generate_market
    >>> facts = stylized_facts(generate_market(SyntheticMarketConfig(n_stocks=60, n_members=30, end="2019-12-31")))
    >>> sorted(facts) == sorted(STYLIZED_FACTS)
    True
    """
    returns = index_returns(panel, alignment="close").returns
    moves = returns.abs()
    member = panel["in_universe"].unstack(fill_value=False).astype(bool).to_numpy()
    entered = (member[1:] & ~member[:-1]).sum(axis=1)
    seats = int(member.sum(axis=1).max()) if member.size else 0
    changes = entered[entered >= max(REVIEW_MIN_ENTRANTS, seats // 100)]
    has = len(changes) > 0
    return {
        "annual_volatility": metrics.ann_vol(returns),
        "excess_kurtosis": float(returns.kurt()),
        "abs_autocorr_1": float(moves.autocorr(1)),
        "abs_autocorr_5": float(moves.autocorr(5)),
        "abs_autocorr_20": float(moves.autocorr(20)),
        "max_drawdown": metrics.max_drawdown(returns),
        "large_day_share": float((moves > LARGE_DAY).mean()),
        "reviews": float(len(changes)),
        "review_changes_mean": float(changes.mean()) if has else float("nan"),
        "review_changes_min": float(changes.min()) if has else float("nan"),
        "review_changes_max": float(changes.max()) if has else float("nan"),
    }


#: The keys of :func:`stylized_facts`, in order.
STYLIZED_FACTS: tuple[str, ...] = (
    "annual_volatility",
    "excess_kurtosis",
    "abs_autocorr_1",
    "abs_autocorr_5",
    "abs_autocorr_20",
    "max_drawdown",
    "large_day_share",
    "reviews",
    "review_changes_mean",
    "review_changes_min",
    "review_changes_max",
)
