"""Forward-return labels, the day each becomes known (``label_end``), and their cross-sectional form.

Timing, on the panel's own trading calendar (trading days, never calendar days)::

    day t                 features up to the close; the model decides after the close
    day t + entry_offset  buy at ``price_field`` (default: the open of t+1)
    day t + exit_offset   sell at ``price_field`` (default: the open of t+5); from this day on the
                          label is known, so ``label_end(t, code) = trading day t + exit_offset``

    fwd_return(t, code) = P[t + exit_offset, code] / P[t + entry_offset, code] - 1

where ``P`` is the backward-adjusted price (:func:`backtest.data.panel.adjusted_price`). The purge of
:mod:`backtest.splits` is derived from ``label_end``; ``Labels.horizon_days`` (= ``exit_offset``) is the
number of trading days a label reaches past its sample date, and ``LabelSpec.holding_days``
(= ``exit_offset - entry_offset``) the number of days the position is held: the daily returns the label
spans, the window an oracle of the label must look over.

Which samples get a label (the suspension rule)
-----------------------------------------------
The rule is :mod:`backtest.data.tradability`'s, the one the portfolio and the features use. A sample
``(t, code)`` is *eligible* when the panel has a row for it and, if the panel has an ``in_universe``
column, the stock is a member on day ``t`` (point in time). An eligible sample is labelled only if the
stock *trades* on both the entry day and the exit day: it has a panel row that day, the row is not
suspended (``is_suspended`` True, or ``volume`` zero, with or without the flag), and the adjusted label
price is finite and positive. Suspensions strictly between entry and exit do not exclude the sample:
the position is held through them and both prices exist. Everything else is excluded, never filled:

- ``end_of_data``: ``t + exit_offset`` lies beyond the last trading day of the panel;
- ``not_trading_at_entry``: not listed yet, delisted, suspended or priceless on the entry day;
- ``not_trading_at_exit``: delisted before, suspended or priceless on the exit day.

Price limits are not a label matter: a stock that opens at limit-up still has a forward return; the
portfolio decides that it cannot be bought.

Cross-sectional processing (per day, over that day's labelled samples)
--------------------------------------------------------------------
Let ``n`` be the number of labelled samples of the day, ``r`` the rank of a sample's ``fwd_return``
among them (1 = lowest; tied returns share their average rank) and the percentile

    pct = (r - 1) / (n - 1)        in [0, 1]; 0 = worst, 1 = best; a lone sample (n = 1) gets 0.5

- ``"raw"``: ``fwd_return`` itself (float64).
- ``"rank"``: ``pct`` (float64).
- ``"bins"``: ``min(floor(n_bins * pct), n_bins - 1)`` (int64), i.e. bin ``b`` holds
  ``b / n_bins <= pct < (b + 1) / n_bins`` and the top bin also holds ``pct = 1``. With 10 bins: 0 for
  pct in [0, 0.1), ..., 8 for [0.8, 0.9), 9 for [0.9, 1]. With n = 300 every bin holds 30 stocks.
- ``"three_class"``: 0 if ``pct < 0.3``, 2 if ``pct > 0.7``, else 1 (int64): the bottom 30%, the middle
  40% (both edges included) and the top 30%. The rule is symmetric: reversing the order swaps 0 and 2.
  With n = 10: 3 / 4 / 3 stocks; with n = 300: 90 / 120 / 90.

Ties are deterministic: tied returns get the same average rank, hence the same percentile, bin and
class, whatever the order of the codes. The edges are evaluated in exact integer arithmetic on
``2 * (r - 1)`` (an integer, since an average rank is a whole or half number), so a percentile that sits
exactly on an edge is never moved across it by rounding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from backtest.data import tradability
from backtest.data.panel import WideGrid, adjusted_price
from backtest.data.schema import INDEX_NAMES, PRICE_COLUMNS
from backtest.data.validate import validate_panel
from backtest.errors import ConfigError, DataContractError, InsufficientHistoryError, preview

log = logging.getLogger(__name__)

PROCESSINGS: tuple[str, ...] = ("raw", "rank", "bins", "three_class")

#: Reasons a sample loses its label, in the order they are tested.
EXCLUSION_REASONS: tuple[str, ...] = ("end_of_data", "not_trading_at_entry", "not_trading_at_exit")

#: Three-class edges, as the integer fractions (numerator, denominator) of the percentile.
_THREE_CLASS_LOW = (3, 10)
_THREE_CLASS_HIGH = (7, 10)


@dataclass(frozen=True)
class LabelSpec:
    """What a label is: which price, from which day to which day, and how each day is processed.

    Parameters
    ----------
    price_field : str
        Panel price column bought and sold (default ``"open"``), adjusted with ``adj_factor``. A panel
        without ``open`` falls back to ``close`` with a warning (the effective spec is kept in
        :class:`Labels`); any other missing field is an error.
    entry_offset : int
        Trading days after the sample date at which the position is bought (>= 1: the decision is made
        after the close of t, so t itself cannot be traded).
    exit_offset : int
        Trading days after the sample date at which it is sold; ``label_end`` is that day and the
        label horizon (hence the purge) is ``exit_offset`` trading days. Must exceed ``entry_offset``.
    processing : {"raw", "rank", "bins", "three_class"}
        Cross-sectional processing per day (see the module docstring for the exact edges).
    n_bins : int
        Number of relevance bins for ``processing="bins"`` (labels 0 .. n_bins - 1, higher = better).

    Warnings
    --------
    ``exit_offset`` is the horizon the purge is derived from: any training code must take the purge
    from the resulting ``Labels.label_end``, never from a separately typed gap.
    """

    price_field: str = "open"
    entry_offset: int = 1
    exit_offset: int = 5
    processing: str = "bins"
    n_bins: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.price_field, str) or not self.price_field:
            raise ConfigError(
                f"label.price_field must be a panel price column such as 'open' or 'close'; got {self.price_field!r}."
            )
        for name in ("entry_offset", "exit_offset", "n_bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ConfigError(f"label.{name} must be an integer; got {value!r} ({type(value).__name__}).")
        if self.entry_offset < 1:
            raise ConfigError(
                f"label.entry_offset must be >= 1 (decisions are made after the close of t, so the "
                f"earliest trade is on t+1); got {self.entry_offset}. Set label.entry_offset=1."
            )
        if self.exit_offset <= self.entry_offset:
            raise ConfigError(
                f"label.exit_offset must be greater than label.entry_offset; got entry_offset="
                f"{self.entry_offset}, exit_offset={self.exit_offset}. The default is 1 -> 5 "
                f"(next open to the open of t+5)."
            )
        if self.processing not in PROCESSINGS:
            raise ConfigError(f"label.processing must be one of {', '.join(PROCESSINGS)}; got {self.processing!r}.")
        if self.n_bins < 2:
            raise ConfigError(f"label.n_bins must be >= 2; got {self.n_bins}.")

    @property
    def horizon_days(self) -> int:
        """Trading days from the sample date to ``label_end`` (= ``exit_offset``)."""
        return int(self.exit_offset)

    @property
    def holding_days(self) -> int:
        """Trading days the label's position is held, from entry to exit (``exit_offset - entry_offset``):
        the number of daily returns the label spans.

        >>> LabelSpec().holding_days, LabelSpec(entry_offset=2, exit_offset=10).holding_days
        (4, 8)
        """
        return int(self.exit_offset - self.entry_offset)


@dataclass(frozen=True, eq=False)
class Labels:
    """Labels of the eligible samples that have a complete label window.

    All three series share one index: a (date, code) MultiIndex, sorted by date then code, unique,
    holding only labelled samples (excluded samples are absent, not NaN).

    Attributes
    ----------
    fwd_return : Series of float64, the forward return from entry to exit price.
    label_end : Series of datetime64, the trading day ``exit_offset`` days after each sample's date:
        the day its label becomes known.
    target : Series, the cross-sectionally processed label (float64 for raw / rank, int64 for bins /
        three_class).
    spec : LabelSpec, the effective spec (after a close fallback, if any).
    excluded : mapping reason -> number of eligible samples excluded for that reason
        (see ``EXCLUSION_REASONS``).
    """

    fwd_return: pd.Series
    label_end: pd.Series
    target: pd.Series
    spec: LabelSpec
    excluded: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        index = self.fwd_return.index
        for name in ("label_end", "target"):
            if not getattr(self, name).index.equals(index):
                raise DataContractError(
                    f"Labels.{name} must share the index of Labels.fwd_return (the labelled (date, code) "
                    f"samples); the indexes differ. Build Labels with make_labels()."
                )

    @property
    def horizon_days(self) -> int:
        """Trading days from a sample's date to its ``label_end``; the purge is derived from it."""
        return self.spec.horizon_days

    @property
    def holding_days(self) -> int:
        """Trading days the position of a label is held (:attr:`LabelSpec.holding_days`)."""
        return self.spec.holding_days

    @property
    def ic_lags(self) -> int:
        """Newey-West lags of a daily IC series: consecutive days' labels overlap for ``horizon_days - 1``
        days, so their ICs are correlated that far (the rank IC's s.e. and the study's paired differences)."""
        return newey_west_lags(self.spec.horizon_days)

    @property
    def index(self) -> pd.MultiIndex:
        """The (date, code) index of the labelled samples."""
        return self.fwd_return.index

    def __len__(self) -> int:
        return len(self.fwd_return)


def make_labels(panel: pd.DataFrame, spec: LabelSpec | None = None, *, max_excluded_fraction: float = 0.35) -> Labels:
    """Forward returns, ``label_end`` and the processed target of every eligible sample.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), sorted and unique
        The canonical panel (``backtest.data.schema``). Uses ``spec.price_field`` (with ``adj_factor``
        when present) and, when present, ``in_universe``, ``is_suspended`` and ``volume``.
    spec : LabelSpec, optional
        Defaults to ``LabelSpec()``: open(t+1) -> open(t+5), 10 relevance bins.
    max_excluded_fraction : float
        Upper bound on the fraction of eligible samples that have a full window on the calendar but
        lose their label because the stock does not trade at entry or exit. Above it the data is
        almost certainly broken (prices missing, suspension flags inverted) and a
        ``DataContractError`` is raised instead of training on what is left.

    Returns
    -------
    Labels
        Series indexed by the labelled (date, code) samples, sorted.

    Raises
    ------
    DataContractError
        The panel breaks the data contract (``backtest.data.validate.validate_panel``), the price
        column is missing, no sample is eligible, or too many samples are excluded.
    InsufficientHistoryError
        The panel has no more than ``exit_offset`` trading days.

    Examples
    --------
    >>> dates = pd.DatetimeIndex(["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"], name="date")
    >>> opens = [10.0, 20.0, 11.0, 20.0, 12.0, 19.0, 13.0, 18.0]
    >>> panel = pd.DataFrame(
    ...     {"open": opens, "close": opens},
    ...     index=pd.MultiIndex.from_product([dates, ["A", "B"]], names=["date", "code"]),
    ... )
    >>> labels = make_labels(panel, LabelSpec(exit_offset=3, processing="rank"))
    >>> pd.DataFrame({"fwd_return": labels.fwd_return.round(4), "label_end": labels.label_end,
    ...               "target": labels.target})  # doctest: +NORMALIZE_WHITESPACE
                     fwd_return  label_end  target
    date       code
    2024-01-02 A         0.1818 2024-01-05     1.0
               B        -0.1000 2024-01-05     0.0
    """
    spec = LabelSpec() if spec is None else spec
    if not 0.0 <= max_excluded_fraction <= 1.0:
        raise ConfigError(f"max_excluded_fraction must lie in [0, 1]; got {max_excluded_fraction}.")
    validate_panel(panel, source="make_labels")
    spec = _resolve_price_field(panel, spec)

    grid = WideGrid.of(panel)
    n_dates = len(grid.dates)
    if n_dates <= spec.exit_offset:
        raise InsufficientHistoryError(
            f"Labels with exit_offset={spec.exit_offset} need at least {spec.exit_offset + 1} trading days; "
            f"the panel has {n_dates} ({_span(grid.dates)}). Load more history or lower label.exit_offset."
        )

    market = _LabelMarket.of(panel, spec, grid)
    if not market.eligible.any():
        raise DataContractError(
            f"No eligible sample to label: in_universe is False on every row of the panel "
            f"({len(panel)} rows, {_span(grid.dates)}). Check the membership data."
        )
    window = market.window(spec.exit_offset)
    excluded = {reason: int(mask.sum()) for reason, mask in window.excluded.items()}
    _check_exclusion(window.excluded, window.windowed, max_excluded_fraction, grid)
    fwd, keep = window.fwd_return, window.keep
    target = cross_sectional_target(fwd, spec.processing, spec.n_bins)

    rows, cols = np.nonzero(keep)  # row-major: sorted by date, then code
    index = pd.MultiIndex.from_arrays([grid.dates[rows], grid.codes[cols]], names=list(INDEX_NAMES))
    labels = Labels(
        fwd_return=pd.Series(fwd[rows, cols], index=index, name="fwd_return", dtype=np.float64),
        label_end=pd.Series(grid.dates[rows + spec.exit_offset], index=index, name="label_end"),
        target=pd.Series(target[rows, cols], index=index, name="target"),
        spec=spec,
        excluded=excluded,
    )
    log.info(
        "labels: %d samples (%s, %s -> %s of t+%d -> t+%d, %s); excluded %s",
        len(labels),
        _span(grid.dates),
        spec.price_field,
        spec.price_field,
        spec.entry_offset,
        spec.exit_offset,
        spec.processing,
        ", ".join(f"{k}={v}" for k, v in excluded.items()),
    )
    return labels


#: Horizons of the forward returns a run stores beside its predictions (``data/forward_returns.parquet``) and
#: of its signal page's IC decay, counted as the label's ``exit_offset`` is: trading days from the decision day
#: to the exit open, the day the return becomes known. With the entry at the open of t+1, horizon 2 is the
#: shortest (one day held: open(t+1) to open(t+2)); horizon 1 would be an empty window. The run's own label
#: horizon is always added (:func:`forward_horizons`).
FORWARD_HORIZONS: tuple[int, ...] = (2, 5, 10, 20)


def forward_return_column(horizon: int) -> str:
    """The column of the forward return at ``horizon`` (trading days from the decision day to the exit).

    >>> forward_return_column(5)
    'fwd_ret_5d'
    """
    return f"fwd_ret_{int(horizon)}d"


def newey_west_lags(horizon: int) -> int:
    """Newey-West lags of a daily IC (or spread) series against returns of ``horizon`` days: consecutive
    days' windows overlap for ``horizon - 1`` days, so their values are correlated that far.

    >>> newey_west_lags(5)
    4
    """
    return int(horizon) - 1


def forward_horizons(spec: LabelSpec, horizons: tuple[int, ...] = FORWARD_HORIZONS) -> tuple[int, ...]:
    """``horizons`` with the label's own (``spec.exit_offset``), sorted, without those that would hold
    nothing (at or before the entry day).

    >>> forward_horizons(LabelSpec()), forward_horizons(LabelSpec(entry_offset=2, exit_offset=8))
    ((2, 5, 10, 20), (5, 8, 10, 20))
    """
    return tuple(sorted({int(h) for h in horizons if h > spec.entry_offset} | {spec.exit_offset}))


def forward_returns(
    panel: pd.DataFrame, spec: LabelSpec, horizons: tuple[int, ...], index: pd.MultiIndex | None = None
) -> pd.DataFrame:
    """Forward returns of several horizons, each by the label's own rule: the return of ``spec`` with
    ``exit_offset = h`` (same price, entry day and suspension rule; the module docstring), so the column of the
    label's horizon is ``Labels.fwd_return`` exactly.

    Parameters
    ----------
    panel : the canonical panel, indexed by (date, code), sorted and unique (as :func:`make_labels` takes it).
    spec : the label spec; its ``exit_offset`` is replaced by each horizon.
    horizons : exit offsets, each greater than ``spec.entry_offset`` (:func:`forward_horizons`).
    index : the (date, code) rows wanted (e.g. the scored rows); None: every eligible sample.

    Returns
    -------
    DataFrame indexed by ``index`` (or the eligible samples), one float64 column per horizon
    (:func:`forward_return_column`); NaN where that horizon's label would be excluded (beyond the panel's
    end, not trading at entry or exit) or where a row is not a panel row.

    Raises
    ------
    ConfigError : a horizon at or before the entry day.

    Examples
    --------
    >>> dates = pd.DatetimeIndex(["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"], name="date")
    >>> panel = pd.DataFrame({"open": [10.0, 11.0, 12.0, 15.0], "close": [10.0, 11.0, 12.0, 15.0]},
    ...                      index=pd.MultiIndex.from_product([dates, ["A"]], names=["date", "code"]))
    >>> forward_returns(panel, LabelSpec(), (2, 3)).round(4)  # doctest: +NORMALIZE_WHITESPACE
                     fwd_ret_2d  fwd_ret_3d
    date       code
    2024-01-02 A         0.0909      0.3636
    2024-01-03 A         0.2500         NaN
    2024-01-04 A            NaN         NaN
    2024-01-05 A            NaN         NaN
    """
    bad = [h for h in horizons if h <= spec.entry_offset]
    if bad:
        raise ConfigError(
            f"forward return horizons must come after the entry day (t+{spec.entry_offset}); received {bad}. "
            f"Fix: use horizons above {spec.entry_offset} (forward_horizons(spec) drops the others)."
        )
    spec = _resolve_price_field(panel, spec)
    grid = WideGrid.of(panel)
    market = _LabelMarket.of(panel, spec, grid)
    if index is None:
        rows, cols = np.nonzero(market.eligible)
        index = pd.MultiIndex.from_arrays([grid.dates[rows], grid.codes[cols]], names=list(INDEX_NAMES))
    columns = {forward_return_column(h): grid.at(market.window(h).fwd_return, index) for h in horizons}
    return pd.DataFrame(columns, index=index)


@dataclass(frozen=True)
class _Window:
    """One label window (entry to ``exit_offset``) on the (date x code) grid: which samples keep a label,
    which are excluded and why, and the forward returns (NaN outside ``keep``)."""

    fwd_return: np.ndarray
    keep: np.ndarray
    windowed: np.ndarray
    excluded: dict[str, np.ndarray]


@dataclass(frozen=True)
class _LabelMarket:
    """What every label window of one spec reads: the adjusted price, who trades and who is eligible,
    (date x code)."""

    spec: LabelSpec
    price: np.ndarray
    trading: np.ndarray
    eligible: np.ndarray

    @classmethod
    def of(cls, panel: pd.DataFrame, spec: LabelSpec, grid: WideGrid) -> _LabelMarket:
        price = grid.to_wide(adjusted_price(panel, spec.price_field), dtype=np.float64)
        return cls(spec, price, tradability.trading(panel, grid, price), tradability.eligible(panel, grid))

    def window(self, exit_offset: int) -> _Window:
        """The label window from ``spec.entry_offset`` to ``exit_offset`` (the module docstring's rule)."""
        n_dates = self.price.shape[0]
        has_window = np.zeros(n_dates, dtype=bool)
        has_window[: max(n_dates - exit_offset, 0)] = True
        entry_ok = _lead(self.trading, self.spec.entry_offset, fill=False)
        exit_ok = _lead(self.trading, exit_offset, fill=False)
        windowed = self.eligible & has_window[:, None]
        excluded = {
            "end_of_data": self.eligible & ~has_window[:, None],
            "not_trading_at_entry": windowed & ~entry_ok,
            "not_trading_at_exit": windowed & entry_ok & ~exit_ok,
        }
        keep = windowed & entry_ok & exit_ok
        entry_price = _lead(self.price, self.spec.entry_offset, fill=np.nan)
        exit_price = _lead(self.price, exit_offset, fill=np.nan)
        fwd = np.where(keep, exit_price / np.where(keep, entry_price, 1.0) - 1.0, np.nan)
        return _Window(fwd, keep, windowed, excluded)


def cross_sectional_target(fwd_return: np.ndarray, processing: str, n_bins: int = 10) -> np.ndarray:
    """Process a (date x code) matrix of forward returns day by day (row by row).

    Parameters
    ----------
    fwd_return : ndarray of shape (n_dates, n_codes)
        NaN where a stock has no label that day; each row is one day's cross-section.
    processing : {"raw", "rank", "bins", "three_class"}
        See the module docstring for the exact definitions and edges.
    n_bins : int
        Number of bins for ``"bins"``.

    Returns
    -------
    ndarray of shape (n_dates, n_codes)
        float64 for raw / rank (NaN where no label); int64 for bins / three_class (-1 where no label).

    Examples
    --------
    >>> day = np.array([[0.05, -0.02, 0.01, 0.01, 0.30]])
    >>> cross_sectional_target(day, "rank")
    array([[0.75 , 0.   , 0.375, 0.375, 1.   ]])
    >>> cross_sectional_target(day, "bins")
    array([[7, 0, 3, 3, 9]])
    >>> cross_sectional_target(day, "three_class")
    array([[2, 0, 1, 1, 2]])
    """
    if processing not in PROCESSINGS:
        raise ConfigError(f"processing must be one of {', '.join(PROCESSINGS)}; got {processing!r}.")
    values = np.asarray(fwd_return, dtype=np.float64)
    if processing == "raw":
        return values.copy()
    valid = np.isfinite(values)
    ranks = pd.DataFrame(np.where(valid, values, np.nan)).rank(axis=1, method="average").to_numpy()
    n = valid.sum(axis=1, keepdims=True).astype(np.int64)
    # pct = num / den exactly, with num = 2 (r - 1) and den = 2 (n - 1); a lone sample gets 1 / 2.
    num = np.where(valid, np.rint(2.0 * (np.nan_to_num(ranks, nan=1.0) - 1.0)), 0).astype(np.int64)
    den = np.broadcast_to(2 * (n - 1), num.shape).copy()
    lone = valid & (den == 0)
    num[lone], den[lone] = 1, 2
    den[den == 0] = 1  # rows without any label; masked below
    if processing == "rank":
        return np.where(valid, num / den, np.nan)
    if processing == "bins":
        out = np.minimum((n_bins * num) // den, n_bins - 1)
    else:
        low_num, low_den = _THREE_CLASS_LOW
        high_num, high_den = _THREE_CLASS_HIGH
        out = np.ones(num.shape, dtype=np.int64)
        out[low_den * num < low_num * den] = 0
        out[high_den * num > high_num * den] = 2
    return np.where(valid, out, -1).astype(np.int64)


def _resolve_price_field(panel: pd.DataFrame, spec: LabelSpec) -> LabelSpec:
    if spec.price_field in panel.columns:
        return spec
    if spec.price_field == "open" and "close" in panel.columns:
        log.warning(
            "labels: the panel has no 'open' column; labels use close(t+%d) -> close(t+%d) instead "
            "(the portfolio also trades at the close on such a panel)",
            spec.entry_offset,
            spec.exit_offset,
        )
        return replace(spec, price_field="close")
    raise DataContractError(
        f"The label price field {spec.price_field!r} is not a column of the panel (columns: "
        f"{preview(panel.columns, 12)}). Set label.price_field to one of "
        f"{', '.join(c for c in PRICE_COLUMNS if c in panel.columns) or 'the price columns'}."
    )


def _check_exclusion(masks: dict[str, np.ndarray], windowed: np.ndarray, bound: float, grid: WideGrid) -> None:
    """Fail when the entry/exit rule drops more than ``bound`` of the samples that have a window."""
    base = int(windowed.sum())
    lost_mask = masks["not_trading_at_entry"] | masks["not_trading_at_exit"]
    lost = int(lost_mask.sum())
    if base == 0 or lost <= bound * base:
        return
    rows, cols = np.nonzero(lost_mask)
    examples = [f"({grid.dates[r].date()}, {grid.codes[c]})" for r, c in zip(rows[:5], cols[:5])]
    raise DataContractError(
        f"Labels would drop {lost} of {base} eligible samples ({lost / base:.1%}, more than the bound "
        f"{bound:.0%}) because the stock does not trade on the entry or exit day "
        f"(entry: {int(masks['not_trading_at_entry'].sum())}, exit: {int(masks['not_trading_at_exit'].sum())}); "
        f"e.g. {preview(examples, 5)}. Check the price column, is_suspended and volume; raise "
        f"max_excluded_fraction only if the data really is that sparse."
    )


def _lead(matrix: np.ndarray, k: int, fill: object) -> np.ndarray:
    """Row ``t`` of the result is row ``t + k`` of ``matrix``; the last ``k`` rows are ``fill``."""
    out = np.full(matrix.shape, fill, dtype=matrix.dtype)
    if k < matrix.shape[0]:
        out[: matrix.shape[0] - k] = matrix[k:]
    return out


def _span(dates: pd.DatetimeIndex) -> str:
    return f"{dates[0].date()}..{dates[-1].date()}" if len(dates) else "no dates"
