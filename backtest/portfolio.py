"""Top-k portfolio simulation: from daily scores to net daily returns, positions and trades.

One plain function, :func:`simulate`, turns model scores into the returns a researcher could have
earned: it picks the top ``k`` eligible stocks on each rebalance day, trades them at the next open
under China A-share rules (suspensions, price limits, commission, stamp duty, slippage), marks the
book open-to-open on adjusted prices, and runs an equal-weight benchmark of every eligible stock
through exactly the same machinery.

Timing (see docs/design.md, "Timing convention")
-------------------------------------------
- Scores of day ``t`` are decided after the close of ``t``; the trades they cause execute at the open
  of ``t+1`` (the next trading day of the panel), at the raw open price.
- Rebalancing happens every ``rebalance_every`` score dates: on the 1st, (n+1)th, (2n+1)th, ... date
  that carries scores. Scores on the other dates are ignored.
- The return booked on day ``d`` is the open-to-open return of the book held from the open of ``d`` to
  the open of ``d+1``::

      r[d] = V(open d+1) / V(open d, before trading) - 1

  so the first return of a rebalance executed at the open of ``t+1`` is dated ``t+1`` and equals the
  holdings' ``open(t+2) / open(t+1) - 1`` (weighted, net of the costs paid at the open of ``t+1``).
  Example, one stock bought at the open of Tue 2024-01-02 (decided after Mon's close), opens at 10.0
  on Tue, 11.0 on Wed, 9.9 on Thu, no costs: ``r[Tue] = 11/10 - 1 = 0.10``,
  ``r[Wed] = 9.9/11 - 1 = -0.10``. The return of day ``d`` is known at the open of ``d+1``.
- Prices are marked with ``adjusted_price(panel, "open")`` (raw open times ``adj_factor``), so
  dividends and splits do not create fake returns. A holding that cannot trade on a day (suspended,
  no row, no price) carries its last mark: a return of 0 until it trades again.
- A panel without ``open`` is traded and marked at ``close`` instead (logged once): trades execute at
  the close of ``t+1`` and the returns run close(t+1) to close(t+2).

Tradability on the execution day ``e = t+1``
--------------------------------------------
The rule is :mod:`backtest.data.tradability`'s, the same one the labels and the features use;
eligibility is point-in-time membership on the decision day ``t``.

- Not trading on ``e`` (no row on ``e`` while the stock still has later rows, ``is_suspended``, a zero
  ``volume`` with or without the flag, or no finite positive fill or mark): cannot trade at all; a
  holding keeps its weight ("frozen").
- Opens at limit-up: cannot be bought. A ranked stock that cannot be bought is skipped and the next
  ranked eligible stock takes its place. A stock already held that is still in the top ``k`` is kept
  (it is not replaced because it cannot be topped up); its weight cannot grow.
- Opens at limit-down: cannot be sold. A holding that should be sold or reduced keeps its weight.
  Names kept this way outside the new top ``k`` do not count towards ``k``: the top ``k`` share the
  rest of the book.
- Limit prices are compared with the raw fill price: ``up_limit`` / ``down_limit`` when the panel has
  them (per cell), else the board rule of :func:`backtest.data.tradability.limit_prices` (10% main
  boards; 20% STAR, and ChiNext from 2020-08-24 on; on the previous raw close, ex-rights). A fill
  within half a tick (0.005 CNY) of the limit counts as at the limit. A stock without a previous close
  (listing day) is never at a limit.
- Delisted (no rows on or after ``e``): a holding is sold at its last mark at the next rebalance,
  with normal costs; it earns 0 in between.

Weights
-------
The ``k`` picks get ``equal`` weights or ``softmax(score / temperature)`` weights; with
``max_weight`` every pick is capped and the excess is redistributed to the uncapped picks in
proportion to their weights, repeatedly (water-filling). If every pick is capped the remainder stays
in cash (e.g. 5 names capped at 15% hold 25% cash). Weights that cannot move (frozen, kept at a
limit) are taken as they are and the others share the rest of the book. Between rebalances the
weights drift with prices (buy and hold).

Costs (fractions of traded value, all configurable)
---------------------------------------------------
``commission`` on buys and sells (default 0.025%, broker minimum ignored), ``stamp_duty`` on sells
only (default 0.05%, the rate since 2023-08-28; use 0.001 for earlier periods), ``slippage`` on buys
and sells (default 0.1%). A rebalance is self-financing: the new targets are scaled so that
``targets + costs`` equal the value freed for trading; the scale is solved exactly (fixed point).
For example building a book from cash costs ``c = (commission + slippage) * F'`` with
``F' = 1 / (1 + commission + slippage)`` invested. The cost is part of the first day's return.

Turnover of a rebalance is ``sum(|post-trade value - pre-trade value|) / 2`` in fractions of the
pre-trade book (one-way: replacing a full book is 1.0; building it from cash is 0.5).
``PortfolioResult.annual_turnover`` is the sum over rebalances times ``PERIODS_PER_YEAR (252) / number of return days``.

Benchmark
---------
An equal-weight book of all eligible stocks (in the universe on ``t`` and with a finite score),
rebalanced on the same dates under the same tradability rules, costs and accounting. The index benchmark
(the float-cap-weighted universe, or a supplied series) is :mod:`backtest.benchmark`'s, on the same
return days and the same holding returns (:func:`holding_returns`).

Days the book is not what the strategy chose
---------------------------------------------
``PortfolioResult.blocked_days`` flags each return day on which the book differs from the picks: the
day belongs to a holding period whose rebalance had a blocked name (a ranked pick not bought, a holding
not sold or reduced; see ``blocked``), or a holding does not trade that day, so that its mark is stale
(suspended, no row, delisted). ``days_blocked`` counts them and ``rebalances_blocked`` counts the
rebalances with a blocked name; the engine reports both as metrics. A high count means the returns
are partly those of a book nobody could hold.

Days the book could trade
-------------------------
``PortfolioResult.tradable_days`` flags each return day on which at least ``top_k`` index members trade
(:func:`backtest.data.tradability.trading`): a day on which the top-k book could be bought and marked.
``days_tradable`` counts them; a run whose test period has too few of them is not comparable
(:func:`backtest.leakage.not_comparable_reasons`, :data:`backtest.leakage.MIN_TRADABLE_SHARE`): its
Sharpe, PSR and DSR would count days on which nothing could trade as observations.

Before any work (:func:`check_universe`)
----------------------------------------
A test period the top-k book cannot trade in is refused: fewer than 2 members on the median test day
(nothing to rank), ``top_k`` at least the median number of members per test day (the strategy would
hold the whole universe, the benchmark), or no test day on which a member trades (the returns would be
stale marks). The median, not the minimum: a few thin days (a data gap, a reconstitution) should not
refuse a study whose universe is normally large; on those days the book holds what there is, and the
number of days with fewer members than ``top_k`` is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid, adjusted_price
from backtest.data.tradability import Tradability, carry_forward, eligible, trading
from backtest.errors import ConfigError, DataContractError, preview
from backtest.statistics import PERIODS_PER_YEAR

logger = logging.getLogger(__name__)

#: Stocks bought on each rebalance by default (``conf/portfolio/equal.yaml`` holds the same value, and a test
#: keeps them equal). It is also the depth of the headline NDCG (the param ``ndcg_depth``), and the models'
#: default NDCG depth: every other default of that depth derives from this one.
DEFAULT_TOP_K = 5

_EPS = 1e-12


@dataclass(frozen=True)
class PortfolioSpec:
    """How scores become a portfolio.

    Parameters
    ----------
    top_k : int
        Number of stocks bought on each rebalance (default :data:`DEFAULT_TOP_K`); also the depth of the
        run's NDCG (the param ``ndcg_depth``).
    rebalance_every : int
        Rebalance on every ``rebalance_every``-th date that carries scores (default 5: weekly on daily
        scores).
    weighting : {"equal", "softmax"}
        Equal weights, or ``softmax(score / temperature)`` over the picks.
    temperature : float
        Softmax temperature, in score units (> 0). Larger is closer to equal weight.
    max_weight : float or None
        Cap per name as a fraction of the book (0 < cap <= 1); excess is redistributed to the uncapped
        picks, and what cannot be placed stays in cash.
    commission : float
        Commission per side as a fraction of traded value (default 0.00025).
    stamp_duty : float
        Stamp duty on sells as a fraction of traded value (default 0.0005, the rate since 2023-08-28).
    slippage : float
        Slippage per side as a fraction of traded value (default 0.001).
    """

    top_k: int = DEFAULT_TOP_K
    rebalance_every: int = 5
    weighting: Literal["equal", "softmax"] = "equal"
    temperature: float = 1.0
    max_weight: float | None = None
    commission: float = 0.00025
    stamp_duty: float = 0.0005
    slippage: float = 0.001

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.top_k, (int, np.integer)) or isinstance(self.top_k, bool) or self.top_k < 1:
            problems.append(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if (
            not isinstance(self.rebalance_every, (int, np.integer))
            or isinstance(self.rebalance_every, bool)
            or self.rebalance_every < 1
        ):
            problems.append(f"rebalance_every must be an integer >= 1, got {self.rebalance_every!r}")
        if self.weighting not in ("equal", "softmax"):
            problems.append(f"weighting must be 'equal' or 'softmax', got {self.weighting!r}")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            problems.append(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if self.max_weight is not None and not (0 < self.max_weight <= 1):
            problems.append(f"max_weight must be in (0, 1] or null, got {self.max_weight!r}")
        for name in ("commission", "stamp_duty", "slippage"):
            value = getattr(self, name)
            if not (np.isfinite(value) and 0 <= value < 0.1):
                problems.append(f"{name} must be a fraction of traded value in [0, 0.1), got {value!r}")
        if problems:
            raise ConfigError("Invalid portfolio spec (conf/portfolio): " + "; ".join(problems) + ". Fix these keys.")


@dataclass(frozen=True)
class PortfolioResult:
    """What :func:`simulate` returns.

    Attributes
    ----------
    returns : Series indexed by date
        Net daily open-to-open returns of the strategy (see the module docstring for the dating).
    benchmark_returns : Series indexed by date
        The same for the equal-weight benchmark; same index as ``returns``.
    positions : DataFrame, columns ``date, code, weight``
        Strategy weights at the open of each return day, after that day's trades, as fractions of
        the book; cash is ``1 - sum(weight)`` of the day.
    trades : DataFrame, columns ``date, decision_date, code, side, weight_before, weight_after,
        traded, cost``
        Strategy trades at the open of ``date``: weights before (pre-trade book) and after (post-trade
        book), ``traded`` = |value change| as a fraction of the pre-trade book, ``cost`` likewise.
    blocked : DataFrame, columns ``date, decision_date, code, reason``
        Strategy names that could not be traded as wished: ``limit_up`` / ``suspended`` (ranked high
        enough but not bought), ``limit_down`` / ``suspended`` (held, could not be sold or reduced).
    turnover : Series indexed by decision date
        One-way strategy turnover of each rebalance.
    rebalance_dates : DatetimeIndex
        Decision dates ``t`` of the rebalances that were executed.
    periods : DataFrame indexed by ``decision_date``
        One row per rebalance: ``execution_date``, ``end_date`` (last return day of the period),
        ``n_days``, ``strategy`` and ``benchmark`` (compounded net returns of the period),
        ``excess``, ``turnover``, ``cost``, ``benchmark_turnover``, ``benchmark_cost``,
        ``n_holdings``.
    blocked_days : bool Series indexed by date (same index as ``returns``)
        True on a return day of a period whose rebalance had a blocked name, or on which a holding does
        not trade (its mark is stale). ``days_blocked`` and ``rebalances_blocked`` count them.
    tradable_days : bool Series indexed by date (same index as ``returns``)
        True on a return day on which at least ``top_k`` index members trade: the top-k book could be
        bought and marked. ``days_tradable`` counts them.
    spec : PortfolioSpec
    dropped_rebalances : tuple of Timestamp
        Decision dates whose rebalance was dropped: the panel ends before a full open-to-open return after
        their execution day (the last decision of a test period that runs to the end of the data).
    """

    returns: pd.Series
    benchmark_returns: pd.Series
    positions: pd.DataFrame
    trades: pd.DataFrame
    blocked: pd.DataFrame
    turnover: pd.Series
    rebalance_dates: pd.DatetimeIndex
    periods: pd.DataFrame
    blocked_days: pd.Series
    tradable_days: pd.Series
    spec: PortfolioSpec = field(repr=False)
    dropped_rebalances: tuple[pd.Timestamp, ...] = ()

    @property
    def days_blocked(self) -> int:
        """Return days on which the book is not what the strategy chose (see ``blocked_days``)."""
        return int(self.blocked_days.sum())

    @property
    def days_tradable(self) -> int:
        """Return days on which at least ``top_k`` index members trade (see ``tradable_days``)."""
        return int(self.tradable_days.sum())

    @property
    def rebalances_blocked(self) -> int:
        """Rebalances with at least one blocked name (a pick not bought, a holding not sold)."""
        return int(self.blocked["decision_date"].nunique())

    @property
    def annual_turnover(self) -> float:
        """Average one-way turnover per year: ``sum(turnover) * 252 / len(returns)``."""
        if len(self.returns) == 0:
            return float("nan")
        return float(self.turnover.sum() * PERIODS_PER_YEAR / len(self.returns))


def allocate(scores: np.ndarray, spec: PortfolioSpec, budget: float = 1.0) -> np.ndarray:
    """Weights of the picks under ``spec`` (equal or softmax, then the per-name cap).

    Parameters
    ----------
    scores : 1-d float array, shape (n_picks,)
        Scores of the picks (only used by softmax).
    spec : PortfolioSpec
    budget : float
        Fraction of the book to distribute (1.0 = whole book).

    Returns
    -------
    1-d float64 array, shape (n_picks,), summing to ``budget`` unless the cap leaves cash.

    Examples
    --------
    >>> spec = PortfolioSpec(weighting="softmax", temperature=1.0, max_weight=0.5)
    >>> allocate(np.log([6.0, 3.0, 1.0]), spec).round(4).tolist()
    [0.5, 0.375, 0.125]
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = len(scores)
    if n == 0 or budget <= 0:
        return np.zeros(n)
    if spec.weighting == "equal":
        base = np.full(n, 1.0 / n)
    else:
        z = scores / spec.temperature
        z = np.exp(z - z.max())
        base = z / z.sum()
    weights = budget * base
    if spec.max_weight is None:
        return weights
    cap = spec.max_weight
    capped = np.zeros(n, dtype=bool)
    while True:
        over = ~capped & (weights > cap + _EPS)
        if not over.any():
            return weights
        capped |= over
        weights[capped] = cap
        free = ~capped
        remaining = budget - cap * capped.sum()
        if not free.any() or remaining <= 0:
            weights[free] = 0.0
            return weights
        weights[free] = remaining * base[free] / base[free].sum()


# --------------------------------------------------------------------------------------------------
# Market data on the (date x code) grid


@dataclass(frozen=True)
class _Market:
    """The panel on the (date x code) grid, as :func:`simulate` needs it. All matrices are (T, N)."""

    grid: WideGrid
    ret: np.ndarray  # open-to-open return of day d (0 where unknown; last row 0)
    rule: Tradability  # who trades at the fill price, who is locked at a limit, who is a member
    last_row: np.ndarray  # (N,) last grid row on which the code has a panel row

    def flags_at(self, row: int) -> dict[str, np.ndarray]:
        """Tradability of every code at the open of ``row``, each of shape (N,)."""
        rule = self.rule
        delisted = self.last_row < row
        return {
            "tradable": rule.trading[row],
            "can_buy": rule.can_buy[row],
            "can_sell": rule.can_sell[row] | delisted,
        }


def fill_field(panel: pd.DataFrame) -> Literal["open", "close"]:
    """The price the books trade and are marked at: ``open``, or ``close`` on a panel without it.

    >>> fill_field(pd.DataFrame(columns=["open", "close"])), fill_field(pd.DataFrame(columns=["close"]))
    ('open', 'close')
    """
    return "open" if "open" in panel.columns else "close"


def holding_returns(panel: pd.DataFrame, grid: WideGrid, field: Literal["open", "close"]) -> np.ndarray:
    """float64 (T, N): the return of holding each stock from its ``field`` price of day ``d`` to that of the
    next day of ``grid``, as :func:`simulate` marks its books.

    Marks are ``adjusted_price(panel, field)``; a day on which the stock does not trade (suspended, no row,
    no finite positive raw or adjusted price) carries its last mark, so its return is 0 until it trades
    again, and the gap is earned on that day's return. The return is 0 where unknown (before the first mark,
    after delisting) and on the last row (no next day).

    Examples
    --------
    >>> dates = pd.bdate_range("2024-01-01", periods=4, name="date")
    >>> panel = pd.DataFrame({"open": [10.0, 11.0, 11.0, 9.9], "volume": [1.0, 1.0, 0.0, 1.0]},
    ...                      index=pd.MultiIndex.from_product([dates, ["600000.SH"]], names=["date", "code"]))
    >>> holding_returns(panel, WideGrid.of(panel), "open").round(4).ravel().tolist()  # suspended on day 3
    [0.1, 0.0, -0.1, 0.0]
    """
    fill = grid.to_wide(panel[field].to_numpy(np.float64), dtype=np.float64)
    mark = grid.to_wide(adjusted_price(panel, field).to_numpy(np.float64), dtype=np.float64)
    return _returns_of_marks(mark, trading(panel, grid, fill, mark))


def _returns_of_marks(mark: np.ndarray, tradable: np.ndarray) -> np.ndarray:
    """(T, N) returns from day d to d+1 of ``mark`` carried over the days that are not ``tradable``."""
    mark = carry_forward(np.where(tradable, mark, np.nan))
    ret = np.zeros(mark.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        ret[:-1] = mark[1:] / mark[:-1] - 1.0
    ret[~np.isfinite(ret)] = 0.0
    return ret


def _market_of(panel: pd.DataFrame) -> _Market:
    if not isinstance(panel, pd.DataFrame) or panel.index.nlevels != 2:
        raise DataContractError(
            "simulate() expects the panel as a DataFrame indexed by (date, code); "
            f"received {type(panel).__name__} with {getattr(panel.index, 'nlevels', '?')} index level(s). "
            "Load it with the project's loaders or set_index(['date', 'code'])."
        )
    if "close" not in panel.columns:
        raise DataContractError(
            f"simulate() needs a 'close' column in the panel; columns are {preview(panel.columns, 10)}."
        )
    if not panel.index.is_unique:
        dups = panel.index[panel.index.duplicated()]
        raise DataContractError(
            f"The panel has {len(dups)} duplicate (date, code) rows, e.g. {preview(dups, 3)}; "
            "drop duplicates before simulating."
        )
    field = fill_field(panel)
    grid = WideGrid.of(panel)
    fill = grid.to_wide(panel[field].to_numpy(np.float64), dtype=np.float64)
    mark = grid.to_wide(adjusted_price(panel, field).to_numpy(np.float64), dtype=np.float64)
    rule = Tradability.of(panel, grid, fill, mark)
    ret = _returns_of_marks(mark, rule.trading)
    last_row = np.full(grid.shape[1], -1)
    np.maximum.at(last_row, grid.col_pos, grid.row_pos)
    return _Market(grid, ret, rule, last_row)


def _scores_on_grid(scores: pd.Series, grid: WideGrid) -> np.ndarray:
    if not isinstance(scores, pd.Series) or scores.index.nlevels != 2:
        raise DataContractError(
            "simulate() expects scores as a Series indexed by (date, code); received "
            f"{type(scores).__name__} with {getattr(scores.index, 'nlevels', '?')} index level(s)."
        )
    if scores.index.has_duplicates:
        dups = scores.index[scores.index.duplicated()]
        raise DataContractError(f"scores have duplicate (date, code) keys, e.g. {preview(dups, 3)}.")
    dates = pd.DatetimeIndex(scores.index.get_level_values(0))
    codes = scores.index.get_level_values(1)
    rows = grid.dates.get_indexer(dates)
    cols = grid.codes.get_indexer(codes)
    values = scores.to_numpy(np.float64)
    bad = (rows < 0) | (cols < 0)
    bad[~bad] = ~grid.present()[rows[~bad], cols[~bad]]
    bad &= np.isfinite(values)
    if bad.any():
        raise DataContractError(
            f"{int(bad.sum())} finite scores are for (date, code) keys that are not rows of the panel, e.g. "
            f"{preview(scores.index[bad], 3)}. Score only stocks that have a panel row on the day (drop or "
            "set NaN the scores of stocks not listed yet, delisted or masked)."
        )
    wide = np.full(grid.shape, np.nan)
    keep = (rows >= 0) & (cols >= 0)
    wide[rows[keep], cols[keep]] = values[keep]
    return wide


# --------------------------------------------------------------------------------------------------
# The book: one rebalance, one holding period


@dataclass
class _Book:
    """Mutable state of one simulated book; lives only inside :func:`simulate`."""

    holdings: np.ndarray  # (N,) fraction of the current book per code (pre-trade)
    cash: float = 1.0
    returns: list[np.ndarray] = field(default_factory=list)
    turnover: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    n_holdings: list[int] = field(default_factory=list)
    trades: list[tuple] = field(default_factory=list)
    blocked: list[tuple] = field(default_factory=list)
    positions: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    rebalance_blocked: list[bool] = field(default_factory=list)  # per rebalance: a name was blocked
    blocked_days: list[np.ndarray] = field(default_factory=list)  # per period: (days,) bool


def _rebalance(
    book: _Book,
    market: _Market,
    decision_row: int,
    exec_row: int,
    eligible: np.ndarray,
    score_row: np.ndarray,
    spec: PortfolioSpec,
    top_k: int | None,
    record: bool,
) -> tuple[np.ndarray, float]:
    """Trade ``book`` at the open of ``exec_row``; return post-trade values (N,) and the cost.

    Values are fractions of the pre-trade book; the post-trade book is worth ``1 - cost``.
    """
    holdings = book.holdings
    held = holdings > _EPS
    flags = market.flags_at(exec_row)
    can_buy, can_sell = flags["can_buy"], flags["can_sell"]

    # Rank eligible names by score (ties: code order); walk down skipping names that cannot be
    # bought, except names already held (they can be kept without buying).
    ranked = np.flatnonzero(eligible)
    ranked = ranked[np.lexsort((ranked, -score_row[ranked]))]
    acceptable = can_buy[ranked] | held[ranked]
    picks = ranked[acceptable][:top_k]

    # Held names that leave the book but cannot be sold keep their weight.
    leaving = held.copy()
    leaving[picks] = False
    stuck_out = leaving & ~can_sell
    budget = 1.0 - holdings[stuck_out].sum()

    # Picks whose wished weight cannot be reached (no buy / no sell on the day) keep their weight;
    # the other picks share what is left, until no wish is blocked.
    h_picks = holdings[picks]
    buy_ok, sell_ok = can_buy[picks], can_sell[picks]
    fixed = np.zeros(len(picks), dtype=bool)
    wished = np.zeros(len(picks))
    while True:
        targets = h_picks.copy()
        free = ~fixed
        targets[free] = allocate(score_row[picks[free]], spec, budget - h_picks[fixed].sum())
        clamp = free & (((targets > h_picks + _EPS) & ~buy_ok) | ((targets < h_picks - _EPS) & ~sell_ok))
        if not clamp.any():
            break
        wished[clamp] = targets[clamp]
        fixed |= clamp
    target = np.zeros_like(holdings)
    target[picks] = targets
    locked = stuck_out.copy()
    locked[picks[fixed]] = True

    # Self-financing: the free targets are scaled by s so that their value plus the costs equals the
    # value freed for trading (fixed point; the cost rates are small, so it converges in a few steps).
    free_value = 1.0 - holdings[locked].sum()
    rate = spec.commission + spec.slippage
    movable = ~locked & (held | (target > 0))
    h_m, t_m = holdings[movable], target[movable]
    scale, cost = 1.0, 0.0
    for _ in range(100):
        delta = t_m * scale - h_m
        cost = rate * np.abs(delta).sum() + spec.stamp_duty * np.clip(-delta, 0.0, None).sum()
        new_scale = (free_value - cost) / free_value if free_value > _EPS else 1.0
        converged = abs(new_scale - scale) < 1e-16
        scale = new_scale
        if converged:
            break
    post = np.where(locked, holdings, 0.0)
    post[movable] = t_m * scale
    delta = post - holdings
    cost = rate * np.abs(delta).sum() + spec.stamp_duty * np.clip(-delta, 0.0, None).sum()
    cash = 1.0 - cost - post.sum()
    assert cash > -1e-9, f"negative cash {cash} after a self-financing rebalance"

    traded = np.abs(delta)
    book.turnover.append(0.5 * float(traded.sum()))
    book.costs.append(float(cost))
    book.n_holdings.append(int((post > _EPS).sum()))
    book.cash = cash
    if record:
        wish = target.copy()
        wish[picks[fixed]] = wished[fixed]
        n_blocked = len(book.blocked)
        _record(
            book,
            market,
            decision_row,
            exec_row,
            flags,
            spec,
            ranked,
            acceptable,
            len(picks),
            top_k,
            holdings,
            post,
            wish,
            locked,
            cost,
        )
        book.rebalance_blocked.append(len(book.blocked) > n_blocked)
    return post, float(cost)


def _record(
    book: _Book,
    market: _Market,
    decision_row: int,
    exec_row: int,
    flags: dict[str, np.ndarray],
    spec: PortfolioSpec,
    ranked: np.ndarray,
    acceptable: np.ndarray,
    n_picks: int,
    top_k: int | None,
    before: np.ndarray,
    post: np.ndarray,
    wish: np.ndarray,
    locked: np.ndarray,
    cost: float,
) -> None:
    """Append the trades and blocked names of one rebalance to ``book``."""
    decision_date = market.grid.dates[decision_row]
    exec_date = market.grid.dates[exec_row]
    codes = market.grid.codes
    rate = spec.commission + spec.slippage
    delta = post - before
    for j in np.flatnonzero(np.abs(delta) > _EPS):
        sell = delta[j] < 0
        traded = abs(delta[j])
        item_cost = traded * (rate + (spec.stamp_duty if sell else 0.0))
        book.trades.append(
            (
                exec_date,
                decision_date,
                codes[j],
                "sell" if sell else "buy",
                before[j],
                post[j] / (1.0 - cost),
                traded,
                item_cost,
            )
        )
    # Ranked names passed over because they could not be bought.
    if top_k is not None and n_picks == top_k:
        last = int(np.searchsorted(np.cumsum(acceptable), n_picks))
    else:
        last = len(ranked) - 1
    passed = ranked[: last + 1][~acceptable[: last + 1]]
    for j in passed:
        reason = "limit_up" if flags["tradable"][j] else "suspended"
        book.blocked.append((exec_date, decision_date, codes[j], reason))
    # Held names whose weight could not move as wished.
    for j in np.flatnonzero(locked & (before > _EPS) & (np.abs(wish - before) > _EPS)):
        if not flags["tradable"][j]:
            reason = "suspended"
        elif wish[j] > before[j]:
            reason = "limit_up"
        else:
            reason = "limit_down"
        book.blocked.append((exec_date, decision_date, codes[j], reason))


def _hold(book: _Book, market: _Market, post: np.ndarray, cost: float, start: int, end: int, record: bool) -> float:
    """Buy and hold ``post`` over return days ``start .. end-1``; return the period's compounded return."""
    cols = np.flatnonzero(post > _EPS)
    values = post[cols]
    growth = np.cumprod(1.0 + market.ret[start:end][:, cols], axis=0)  # (days, held)
    value = book.cash + growth @ values  # value at the open of d+1, pre-trade book = 1
    prev = np.concatenate(([1.0], value[:-1]))
    book.returns.append(value / prev - 1.0)
    if record:
        start_growth = np.vstack([np.ones((1, len(cols))), growth[:-1]])
        start_value = np.concatenate(([1.0 - cost], value[:-1]))
        weights = values * start_growth / start_value[:, None]  # (days, held)
        days = np.repeat(np.arange(start, end), len(cols))
        book.positions.append((days, np.tile(cols, end - start), weights.ravel()))
        stale = (~market.rule.trading[start:end][:, cols]).any(axis=1)  # a holding without a fresh mark
        book.blocked_days.append(stale | book.rebalance_blocked[-1])
    holdings = np.zeros_like(post)
    holdings[cols] = values * growth[-1] / value[-1]
    book.holdings = holdings
    book.cash = book.cash / value[-1]
    return float(value[-1] - 1.0)


# --------------------------------------------------------------------------------------------------
# Schedule


def _schedule(
    score_rows: np.ndarray, dates: pd.DatetimeIndex, every: int
) -> tuple[list[tuple[int, int, int]], list[pd.Timestamp]]:
    """(decision row, execution row, end row exclusive) of every executable rebalance, and the decision
    dates of the rebalances dropped because the panel ends before their first return day.

    A period runs from the execution day to the day before the next rebalance's execution day. The last
    period is held as long as a regular one: the missing score dates are extended past the last one
    at the usual spacing (median gap, in trading days). Return days need the next day's open, so a
    period ends at the panel's second-to-last day at the latest.
    """
    n_rows = len(dates)
    gaps = np.diff(score_rows)
    step = int(np.median(gaps)) if len(gaps) else 1
    out, dropped = [], []
    last = len(score_rows) - 1
    for m in range(0, len(score_rows), every):
        decision = int(score_rows[m])
        nxt = m + every
        next_decision = int(score_rows[nxt]) if nxt <= last else int(score_rows[last]) + (nxt - last) * step
        start, end = decision + 1, min(next_decision + 1, n_rows - 1)
        if end <= start:
            dropped.append(pd.Timestamp(dates[decision]))
            continue
        out.append((decision, start, end))
    return out, dropped


def return_days(
    dates: pd.DatetimeIndex, test_period: tuple[pd.Timestamp, pd.Timestamp], spec: PortfolioSpec
) -> pd.DatetimeIndex:
    """The dates :func:`simulate` books returns on when every day of ``test_period`` carries scores: from
    the day after the first decision to the end of the last holding period (the index of
    ``PortfolioResult.returns``; fewer scored days give a subset of it). Known before any model is fit, so
    that what the returns will be compared with (a supplied index) is checked first.

    >>> days = pd.bdate_range("2024-01-01", periods=10)  # rows 0..9
    >>> # decisions on rows 2..5, rebalanced on rows 2 and 4; the last period is held 2 days (rows 5, 6)
    >>> days.get_indexer(return_days(days, (days[2], days[5]), PortfolioSpec(rebalance_every=2))).tolist()
    [3, 4, 5, 6]
    """
    dates = pd.DatetimeIndex(dates)
    first, last = pd.Timestamp(test_period[0]), pd.Timestamp(test_period[1])
    rows = np.flatnonzero((dates >= first) & (dates <= last))
    if len(rows) == 0:
        return pd.DatetimeIndex([], name="date")
    schedule, _ = _schedule(rows, dates, spec.rebalance_every)
    days = np.concatenate([np.arange(start, end) for _, start, end in schedule]) if schedule else []
    return pd.DatetimeIndex(dates[np.asarray(days, dtype=int)], name="date")


# --------------------------------------------------------------------------------------------------
# Before any work


def check_universe(
    panel: pd.DataFrame, spec: PortfolioSpec, test_period: tuple[pd.Timestamp, pd.Timestamp]
) -> dict[str, float]:
    """Refuse a test period that the top-k book cannot trade in; cheap, run it before any work.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code)
        The canonical panel; uses ``in_universe`` (point-in-time members; every row when absent),
        ``is_suspended`` / ``volume`` and the fill price (``open``, else ``close``), as :func:`simulate`.
    spec : PortfolioSpec
    test_period : (first, last) decision date, e.g. ``RollingSchedule.test_period(calendar)``.

    Returns
    -------
    dict : ``median_members``, ``min_members`` (members per test day) and ``tradable_days`` (test days
        on which a member trades), for the log.

    Raises
    ------
    DataContractError
        The test period holds no day of the panel, fewer than 2 members on the median test day
        (nothing to rank), or no day on which a member trades (every member row suspended, zero
        volume or without a price: the returns would be stale marks).
    ConfigError
        ``spec.top_k`` at least the median number of members per test day: the top-k book would be
        the whole universe, i.e. the benchmark.
    """
    first, last = pd.Timestamp(test_period[0]), pd.Timestamp(test_period[1])
    period = f"{first:%Y-%m-%d} .. {last:%Y-%m-%d}"
    grid = WideGrid.of(panel)
    rows = np.flatnonzero((grid.dates >= first) & (grid.dates <= last))
    if len(rows) == 0:
        raise DataContractError(
            f"the test period {period} holds no day of the panel ({grid.dates[0]:%Y-%m-%d} .. "
            f"{grid.dates[-1]:%Y-%m-%d})\n  fix: set backtest.test_start / backtest.test_end inside the data"
        )
    field = fill_field(panel)
    if field == "close":
        logger.warning(
            "panel has no 'open' column: every book trades at the close of t+1 (not the open) and is marked "
            "close to close"
        )
    fill = grid.to_wide(panel[field].to_numpy(np.float64), dtype=np.float64)
    member = eligible(panel, grid)[rows]
    trades = trading(panel, grid, fill)[rows] & member
    per_day = member.sum(axis=1)
    median, least = float(np.median(per_day)), int(per_day.min())
    tradable_days = int(trades.any(axis=1).sum())
    if median < 2:
        raise DataContractError(
            f"a cross-sectional ranking needs at least 2 members per day; the test period {period} has "
            f"{median:g} on the median day (min {least}, max {int(per_day.max())})\n"
            "  fix: load the whole universe (every index member, with in_universe point in time), or move the "
            "test period to where the data has one"
        )
    if spec.top_k >= median:
        raise ConfigError(
            f"portfolio.top_k={spec.top_k} is at least the eligible universe: {median:g} members on the median "
            f"day of the test period {period} (min {least}); the top-k book would hold every member, which is "
            f"the equal-weight benchmark\n  fix: portfolio.top_k={max(1, int(median) // 10)} (expected: below "
            f"{median:g}), or a larger universe"
        )
    if tradable_days == 0:
        raise DataContractError(
            f"no member trades on any day of the test period {period}: all {int(member.sum())} member rows "
            "are suspended, have zero volume or no price; the backtest would earn stale marks\n"
            "  fix: move the test period (backtest.test_start / backtest.test_end) to days with trading, or "
            "check the is_suspended and volume columns of the export"
        )
    thin = int((per_day <= spec.top_k).sum())
    if thin:
        logger.warning(
            "%d of %d test days have at most top_k=%d members: the book holds every member then",
            thin,
            len(rows),
            spec.top_k,
        )
    return {"median_members": median, "min_members": float(least), "tradable_days": float(tradable_days)}


# --------------------------------------------------------------------------------------------------
# Public entry point


def simulate(
    scores: pd.Series, panel: pd.DataFrame, spec: PortfolioSpec | None = None, *, book: str = "model"
) -> PortfolioResult:
    """Simulate the top-k strategy of ``scores`` and its equal-weight benchmark on ``panel``.

    Parameters
    ----------
    scores : Series indexed by (date, code)
        Model scores, higher is better; decided after the close of ``date``. Keys must be rows of
        ``panel``. NaN scores make a stock ineligible that day.
    panel : DataFrame indexed by (date, code)
        The canonical panel (``backtest.data.schema``); uses ``open`` (else ``close``), ``close``,
        and when present ``adj_factor``, ``is_suspended``, ``volume``, ``in_universe``, ``up_limit``,
        ``down_limit``. Rows after the last score date are used to mark the last holding period.
    spec : PortfolioSpec, optional
        Defaults to ``PortfolioSpec()`` (top 5, weekly, equal weight, default costs).
    book : str
        Whose book this is (``model``, ``baseline factor``, ...), named in the log lines.

    Returns
    -------
    PortfolioResult
        Daily net returns of the strategy and the benchmark (same index), positions, trades, blocked
        names, turnover, rebalance dates and the per-period table. See the module docstring for the
        exact timing, tradability, weighting and cost conventions.

    Raises
    ------
    DataContractError
        Panel or scores not indexed by (date, code), duplicate keys, score keys missing from the
        panel, or no rebalance executable within the panel.
    """
    spec = spec or PortfolioSpec()
    market = _market_of(panel)
    grid = market.grid
    score_wide = _scores_on_grid(scores, grid)
    score_rows = np.flatnonzero(np.isfinite(score_wide).any(axis=1))
    if len(score_rows) == 0:
        raise DataContractError("simulate() received no finite scores; nothing to trade.")
    schedule, dropped = _schedule(score_rows, grid.dates, spec.rebalance_every)
    if not schedule:
        raise DataContractError(
            f"No rebalance can be executed: the last score date {grid.dates[score_rows[-1]].date()} "
            f"leaves no open-to-open return before the panel ends on {grid.dates[-1].date()}. "
            "Extend the panel past the scores."
        )
    bench_spec = replace(spec, weighting="equal", max_weight=None)
    n_codes = grid.shape[1]
    strategy = _Book(np.zeros(n_codes))
    benchmark = _Book(np.zeros(n_codes))
    rows = []
    for decision, start, end in schedule:
        eligible = np.isfinite(score_wide[decision]) & market.rule.eligible[decision]
        if not eligible.any():
            logger.warning(
                "%s book: no eligible stock on %s: it and its benchmark go to cash", book, grid.dates[decision].date()
            )
        period = []
        for ledger, ledger_spec, top_k, record in (
            (strategy, spec, spec.top_k, True),
            (benchmark, bench_spec, None, False),
        ):
            post, cost = _rebalance(
                ledger, market, decision, start, eligible, score_wide[decision], ledger_spec, top_k, record
            )
            period.append(_hold(ledger, market, post, cost, start, end, record))
        rows.append(
            (
                grid.dates[decision],
                grid.dates[start],
                grid.dates[end - 1],
                end - start,
                period[0],
                period[1],
                strategy.turnover[-1],
                strategy.costs[-1],
                benchmark.turnover[-1],
                benchmark.costs[-1],
                strategy.n_holdings[-1],
            )
        )
    return _result(strategy, benchmark, rows, schedule, market, spec, book, tuple(dropped))


def _result(
    strategy: _Book,
    benchmark: _Book,
    rows: list[tuple],
    schedule: list[tuple[int, int, int]],
    market: _Market,
    spec: PortfolioSpec,
    book: str,
    dropped: tuple[pd.Timestamp, ...],
) -> PortfolioResult:
    grid = market.grid
    return_days = np.concatenate([np.arange(start, end) for _, start, end in schedule])
    index = pd.DatetimeIndex(grid.dates[return_days], name="date")
    returns = pd.Series(np.concatenate(strategy.returns), index=index, name="strategy")
    bench_returns = pd.Series(np.concatenate(benchmark.returns), index=index, name="benchmark")
    periods = pd.DataFrame(
        rows,
        columns=[
            "decision_date",
            "execution_date",
            "end_date",
            "n_days",
            "strategy",
            "benchmark",
            "turnover",
            "cost",
            "benchmark_turnover",
            "benchmark_cost",
            "n_holdings",
        ],
    ).set_index("decision_date")
    excess = periods["strategy"] - periods["benchmark"]
    periods.insert(periods.columns.get_loc("benchmark") + 1, "excess", excess)
    days, cols, weights = (np.concatenate(parts) for parts in zip(*strategy.positions))
    positions = pd.DataFrame({"date": grid.dates[days], "code": grid.codes[cols], "weight": weights}).sort_values(
        ["date", "code"], ignore_index=True
    )
    trades = pd.DataFrame(
        strategy.trades,
        columns=["date", "decision_date", "code", "side", "weight_before", "weight_after", "traded", "cost"],
    )
    blocked = pd.DataFrame(strategy.blocked, columns=["date", "decision_date", "code", "reason"])
    blocked_days = pd.Series(np.concatenate(strategy.blocked_days), index=index, name="blocked")
    if len(blocked):
        counts = blocked["reason"].value_counts().to_dict()
        logger.info("%s book: blocked trades over %d rebalances: %s", book, len(schedule), counts)
    if blocked_days.any():
        logger.info(
            "%s book: %d of %d return days hold a book other than the one chosen (blocked trades or stale "
            "marks of holdings that do not trade)",
            book,
            int(blocked_days.sum()),
            len(blocked_days),
        )
    trading_members = (market.rule.trading & market.rule.eligible)[return_days].sum(axis=1)
    tradable_days = pd.Series(trading_members >= spec.top_k, index=index, name="tradable")
    turnover = pd.Series(periods["turnover"].to_numpy(), index=periods.index, name="turnover")
    return PortfolioResult(
        returns=returns,
        benchmark_returns=bench_returns,
        positions=positions,
        trades=trades,
        blocked=blocked,
        turnover=turnover,
        rebalance_dates=pd.DatetimeIndex(periods.index, name="decision_date"),
        periods=periods,
        blocked_days=blocked_days,
        tradable_days=tradable_days,
        spec=spec,
        dropped_rebalances=dropped,
    )
