"""What can be traded on a day: the one tradability rule that labels, features and the portfolio share.

Every question "does this stock trade today, can it be bought, can it be sold, may it be picked" is
answered here, once, on the (date x code) grid of :class:`backtest.data.panel.WideGrid`. All masks are
boolean numpy matrices of shape ``grid.shape`` = (n_dates, n_codes); a cell without a panel row is False.

Suspended days (:func:`suspended`)
----------------------------------
A row is a day *without trading* when

- ``is_suspended`` is True (when the panel has the column; a missing flag counts as False), or
- ``volume`` is zero or negative (when the panel has the column), whether or not ``is_suspended``
  exists and whatever it says. A NaN volume is no evidence either way.

Why both signals, each sufficient on its own: a day on which no share changed hands could not have
filled an order, and its prices are quotes nobody traded at (a carried close, a vendor's fill-in). A
user's CSV often has no suspension flag at all, and vendors' flags miss halts that the bars show (and
the other way round), so neither signal is trusted to veto the other. The two mistakes are not equally
bad: calling a real trading day suspended costs a few samples and a skipped buy, whereas calling a
suspended day a trading day fills orders and labels at prices that never traded and flatters the
backtest, the failure this project exists to prevent. So the rule errs on the side of "not trading".

A stock *trades* on a day (:func:`trading`) when it has a panel row, the row is not suspended, and,
for a caller that trades at a price, that price is finite and positive (a row of a suspended day may
carry NaN prices; a zero price is a broken bar, never a fill). Labels pass their (adjusted) label
price; the portfolio passes its fill and its mark.

Price limits (:func:`limit_prices`, :func:`limit_locked`)
-------------------------------------------------------
A stock whose fill price on the execution day sits at its limit-up price cannot be bought; one at its
limit-down price cannot be sold (the order book is locked on one side). A fill within half a tick
(:data:`LIMIT_TOLERANCE`, 0.005 CNY) of the limit counts as at the limit. The limit prices are

- the panel's ``up_limit`` / ``down_limit`` where the panel has them (per cell: they win over the
  board rule wherever they are finite);
- else the board rule ``round(ref * (1 +/- L), 2)``, halves up to the fen (:func:`board_limit_price`),
  with ``ref`` the previous raw close (ex-rights: times ``adj_factor(prev) / adj_factor(today)`` when
  the panel has ``adj_factor``) and ``L`` from :func:`limit_fraction`: 20% on STAR (``688``) and on
  ChiNext (``300`` / ``301``) from :data:`CHINEXT_20PCT_FROM` (2020-08-24) on, 10% on the main boards
  and on ChiNext before that. ST stocks (5%) and the Beijing exchange (30%) are not modelled; pass
  ``up_limit`` / ``down_limit`` for them. A stock without a previous close (its listing day) is never
  at a limit.

Eligibility (:func:`eligible`)
------------------------------
A stock may be picked (and labelled) on decision day ``t`` only if it is an index member on ``t``
itself: ``in_universe`` on that day's row (point in time; a missing value counts as not a member).
A panel without ``in_universe`` makes every row eligible.

Timing: eligibility is read on the decision day ``t``; trading and the limits on the execution day
``t+1`` (or the label's entry and exit days). This module answers per day; the callers shift.

Examples
--------
>>> dates = pd.bdate_range("2024-01-08", periods=3, name="date")
>>> panel = pd.DataFrame(
...     {"open": [10.0, 10.0, 10.0, 10.0, 11.0, 10.0], "close": [10.0] * 6,
...      "volume": [100.0, 100.0, 100.0, 0.0, 100.0, 100.0]},  # rows: day by day, 600000.SH first
...     index=pd.MultiIndex.from_product([dates, ["600000.SH", "688001.SH"]], names=["date", "code"]),
... )
>>> grid = WideGrid.of(panel)
>>> trading(panel, grid).astype(int)  # 688001.SH has no volume on the second day
array([[1, 1],
       [1, 0],
       [1, 1]])
>>> at_up, _ = limit_locked(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
>>> at_up.astype(int)  # 600000.SH opens at 11.00 = 10.00 * 1.10 on the third day
array([[0, 0],
       [0, 0],
       [1, 0]])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid

#: ChiNext (300/301) moved from a 10% to a 20% daily price limit on this date (registration reform).
CHINEXT_20PCT_FROM = pd.Timestamp("2020-08-24")
#: Daily price limit of the main boards (Shanghai 60x, Shenzhen 000-003), as a fraction of ``ref``.
MAIN_BOARD_LIMIT = 0.10
#: Daily price limit of STAR and of ChiNext after its reform.
GROWTH_BOARD_LIMIT = 0.20
#: Code prefixes of the boards with their own limit rule.
STAR_PREFIXES: tuple[str, ...] = ("688",)
CHINEXT_PREFIXES: tuple[str, ...] = ("300", "301")
#: Half an A-share price tick (CNY): a fill this close to a limit price counts as at the limit, and a
#: loader's close this far beyond one is still within it (``backtest.data.tushare``).
LIMIT_TOLERANCE = 0.005


# --------------------------------------------------------------------------------------------------
# Boards and limits


def board_of(codes: pd.Index | np.ndarray | list[str]) -> np.ndarray:
    """The board of each code: ``"star"`` (688), ``"chinext"`` (300 / 301) or ``"main"``.

    Examples
    --------
    >>> board_of(["600000.SH", "000001.SZ", "300750.SZ", "301001.SZ", "688001.SH"]).tolist()
    ['main', 'main', 'chinext', 'chinext', 'star']
    """
    codes = pd.Index(np.asarray(codes, dtype=object)).astype(str)
    star = np.asarray(codes.str.startswith(STAR_PREFIXES), dtype=bool)
    chinext = np.asarray(codes.str.startswith(CHINEXT_PREFIXES), dtype=bool)
    return np.where(star, "star", np.where(chinext, "chinext", "main"))


def limit_fraction(dates: pd.DatetimeIndex, codes: pd.Index | np.ndarray | list[str]) -> np.ndarray:
    """The board's daily price limit ``L`` per (date, code), float64 of shape (n_dates, n_codes).

    Examples
    --------
    >>> dates = pd.DatetimeIndex(["2020-08-21", "2020-08-24"])
    >>> limit_fraction(dates, ["600000.SH", "300001.SZ", "688001.SH"])
    array([[0.1, 0.1, 0.2],
           [0.1, 0.2, 0.2]])
    """
    board = board_of(codes)
    after = np.asarray(pd.DatetimeIndex(dates) >= CHINEXT_20PCT_FROM)[:, None]
    growth = (board == "star")[None, :] | ((board == "chinext")[None, :] & after)
    return np.where(growth, GROWTH_BOARD_LIMIT, MAIN_BOARD_LIMIT)


def limit_prices(panel: pd.DataFrame, grid: WideGrid) -> tuple[np.ndarray, np.ndarray]:
    """Limit-up and limit-down prices (raw CNY), each float64 of shape ``grid.shape``.

    The panel's ``up_limit`` / ``down_limit`` win wherever they are finite; the other cells get the
    board rule on the previous raw close (see the module docstring). NaN where neither exists (a
    stock's first row without limit columns).
    """
    up = np.full(grid.shape, np.nan)
    down = np.full(grid.shape, np.nan)
    for name, out in (("up_limit", up), ("down_limit", down)):
        if name in panel.columns:
            out[:] = grid.to_wide(panel[name].to_numpy(np.float64), dtype=np.float64)
    if (np.isfinite(up) & np.isfinite(down)).all():
        return up, down
    close = carry_forward(grid.to_wide(panel["close"].to_numpy(np.float64), dtype=np.float64))
    ref = np.full(grid.shape, np.nan)
    ref[1:] = close[:-1]
    if "adj_factor" in panel.columns:
        # Ex-rights reference price: previous close * adj(prev) / adj(today) under backward adjustment.
        adj = carry_forward(grid.to_wide(panel["adj_factor"].to_numpy(np.float64), dtype=np.float64))
        ratio = np.full(grid.shape, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio[1:] = adj[:-1] / adj[1:]
        ref = np.where(np.isfinite(ratio), ref * ratio, ref)
    board = limit_fraction(grid.dates, grid.codes)
    with np.errstate(invalid="ignore"):
        up = np.where(np.isfinite(up), up, board_limit_price(ref, board, +1))
        down = np.where(np.isfinite(down), down, board_limit_price(ref, board, -1))
    return up, down


def board_limit_price(ref: np.ndarray, fraction: np.ndarray, side: int) -> np.ndarray:
    """``ref * (1 + side * fraction)`` rounded to the fen, halves up, as the exchanges publish it.

    Computed in whole fen (``ref`` rounded to 0.01 CNY first, the limit in whole percent), so that a
    half fen is never lost to binary floating point (1.15 * 1.1 = 1.265 is 1.27, where
    ``round(1.15 * 1.1, 2)`` in floats gives 1.26).

    Examples
    --------
    >>> board_limit_price(np.array([1.15, 10.05, 7.77]), np.array([0.1, 0.2, 0.1]), +1)
    array([ 1.27, 12.06,  8.55])
    >>> board_limit_price(np.array([1.15, 10.05]), np.array([0.1, 0.1]), -1)
    array([1.04, 9.05])
    """
    ref_fen = np.rint(np.asarray(ref, dtype=np.float64) * 100)
    percent = np.rint(np.asarray(fraction, dtype=np.float64) * 100)
    return np.floor((ref_fen * (100 + side * percent) + 50) / 100) / 100


def limit_locked(panel: pd.DataFrame, grid: WideGrid, fill: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether the raw ``fill`` price (T, N) sits at the limit-up / limit-down price, within half a tick.

    Returns
    -------
    at_limit_up, at_limit_down : bool (T, N). At limit-up a stock cannot be bought; at limit-down it
        cannot be sold. False where the fill or the limit is unknown.
    """
    up, down = limit_prices(panel, grid)
    with np.errstate(invalid="ignore"):
        return fill >= up - LIMIT_TOLERANCE, fill <= down + LIMIT_TOLERANCE


# --------------------------------------------------------------------------------------------------
# Suspensions, trading, eligibility


def suspended(panel: pd.DataFrame, grid: WideGrid) -> np.ndarray:
    """bool (T, N): rows of days without trading (``is_suspended`` True, or ``volume <= 0``).

    False where the panel has no row (whether that is a suspension, a listing gap or a delisting is
    the caller's question; :func:`trading` is False there).
    """
    return grid.to_wide(suspended_rows(panel), dtype=bool, fill=False)


def suspended_rows(panel: pd.DataFrame) -> np.ndarray:
    """bool (n_rows,): the rule of :func:`suspended`, row by row in the panel's own order, for a caller
    that works on a frame's rows rather than on the grid (a loader checking what it reads). The frame
    needs neither a sorted (date, code) index nor either column.

    Examples
    --------
    >>> rows = pd.DataFrame({"volume": [100.0, 0.0, np.nan, 100.0], "is_suspended": [False, False, False, True]})
    >>> suspended_rows(rows).tolist()
    [False, True, False, True]
    """
    flag = np.zeros(len(panel), dtype=bool)
    if "is_suspended" in panel.columns:
        flag |= _as_bool(panel["is_suspended"])
    if "volume" in panel.columns:
        with np.errstate(invalid="ignore"):
            flag |= panel["volume"].to_numpy(np.float64) <= 0  # NaN volume is no evidence
    return flag


def trading(panel: pd.DataFrame, grid: WideGrid, *prices: np.ndarray) -> np.ndarray:
    """bool (T, N): the stock trades that day (a panel row, not :func:`suspended`).

    Parameters
    ----------
    prices : float (T, N) matrices, optional
        Prices the caller trades or marks at (e.g. the adjusted open); each must also be finite and
        positive on the day.
    """
    out = grid.present() & ~suspended(panel, grid)
    for price in prices:
        with np.errstate(invalid="ignore"):
            out &= np.isfinite(price) & (price > 0)
    return out


def eligible(panel: pd.DataFrame, grid: WideGrid) -> np.ndarray:
    """bool (T, N): point-in-time members (``in_universe`` on the day's row; every row without it)."""
    if "in_universe" not in panel.columns:
        return grid.present()
    return grid.to_wide(_as_bool(panel["in_universe"]), dtype=bool, fill=False)


@dataclass(frozen=True, eq=False)
class Tradability:
    """The execution-day rule of a panel at one fill price: who trades, who is locked at a limit.

    Attributes (bool, shape ``grid.shape``)
    ---------------------------------------
    trading : a panel row, not suspended, fill (and marks) finite and positive.
    at_limit_up, at_limit_down : the raw fill price sits at the limit (:func:`limit_locked`).
    eligible : point-in-time member on the day (read it on the decision day).
    """

    trading: np.ndarray
    at_limit_up: np.ndarray
    at_limit_down: np.ndarray
    eligible: np.ndarray

    @classmethod
    def of(cls, panel: pd.DataFrame, grid: WideGrid, fill: np.ndarray, *marks: np.ndarray) -> Tradability:
        """The rule for orders filled at the raw ``fill`` price (T, N), also needing every ``marks`` price."""
        at_up, at_down = limit_locked(panel, grid, fill)
        return cls(trading(panel, grid, fill, *marks), at_up, at_down, eligible(panel, grid))

    @cached_property
    def can_buy(self) -> np.ndarray:
        """bool (T, N): trading and not at limit-up."""
        return self.trading & ~self.at_limit_up

    @cached_property
    def can_sell(self) -> np.ndarray:
        """bool (T, N): trading and not at limit-down."""
        return self.trading & ~self.at_limit_down


# --------------------------------------------------------------------------------------------------
# Prices over days without trading


def carry_forward(wide: np.ndarray) -> np.ndarray:
    """The last finite value of each column carried down the rows (dates) of a (T, N) matrix.

    How a price survives days without trading: ``carry_forward(np.where(trading, price, np.nan))`` is
    the price of the last day the stock traded. Cells before a column's first finite value stay NaN.

    Examples
    --------
    >>> carry_forward(np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, np.nan], [3.0, 4.0]]))
    array([[nan,  1.],
           [ 2.,  1.],
           [ 2.,  1.],
           [ 3.,  4.]])
    """
    valid = np.isfinite(wide)
    idx = np.where(valid, np.arange(wide.shape[0])[:, None], 0)
    np.maximum.accumulate(idx, axis=0, out=idx)
    out = wide[idx, np.arange(wide.shape[1])[None, :]]
    out[~np.maximum.accumulate(valid, axis=0)] = np.nan
    return out


# --------------------------------------------------------------------------------------------------
# Pieces


def _as_bool(column: pd.Series) -> np.ndarray:
    """A boolean flag column as a numpy bool array; missing values count as False."""
    return column.fillna(False).astype(bool).to_numpy()
