"""Fuzzed panels, end to end: every awkward panel ends in a valid result or a clear project error.

Hypothesis draws small panels (a handful of stocks on 150-250 trading days) with the awkward cases of
real A-share data: missing values, gaps (missing rows), suspensions (zero volume, with or without the
``is_suspended`` flag, sometimes with NaN prices), listings and delistings, opens locked at the price
limit (with or without ``up_limit`` / ``down_limit`` columns), days on which a single stock has a row,
and universes smaller than ``portfolio.top_k``. Each panel runs through the whole pipeline
(``run_backtest``: audit, features, labels, purged folds, a tiny LambdaRank, the portfolio, the
metrics) on a tiny rolling schedule, and must end in one of two ways:

(a) a result whose invariants hold (:func:`check_result`):
    - the strategy's and the benchmark's daily returns are finite and above -100%;
    - the weights of a day are non-negative and sum to 1, or to less only when the last rebalance
      bought nothing (the documented cash of ``backtest.portfolio``: no pick could be bought, or
      every pick was a holding that could not be topped up), with equal weights and no cap;
    - no position is opened or increased in a stock that does not trade on the execution day or
      opens at limit-up, and none is reduced in a stock at limit-down or not trading (unless it is
      delisted), by the one rule of :mod:`backtest.data.tradability`;
    - every stock bought was an index member with a score on the decision day;
    - every headline metric is finite, or NaN where ``backtest.metrics`` documents it;

(b) a :class:`~backtest.errors.BacktestError` with a message.

Anything else (another exception, a NaN return, a position in a stock that does not trade) fails.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backtest.data.fingerprint import panel_fingerprint
from backtest.data.panel import WideGrid, adjusted_price
from backtest.data.tradability import Tradability, board_limit_price, limit_fraction
from backtest.engine import BacktestResult, EngineOptions, plan_backtest, run_backtest
from backtest.errors import BacktestError, FeatureAuditError, LeakageError
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec
from backtest.metrics import HEADLINE_KEYS
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from models.lambdarank import LambdaRankConfig, LambdaRankRanker

CODES = ("000001.SZ", "300001.SZ", "600000.SH", "600519.SH", "688001.SH", "000002.SZ", "301001.SZ", "601318.SH")

#: A few indicators over every price field and volume (the ``price_only`` set's kind, smaller).
SMALL_SET = FeatureSetSpec(
    name="fuzz",
    indicators=("ret_5d", "ret_20d", "vol_20d", "rsi_14", "open_gap", "kdj_k", "volume_ratio_5"),
    windows=(5,),
)
#: Every indicator computed from the close alone (``conf/features/price_only.yaml``).
PRICE_ONLY = FeatureSetSpec(name="price_only", inputs=("close",), windows=(5,))

TOL = 1e-9

#: Known bug, found by this fuzzer (the portfolio's owner fixes it; see the xfail regression test below):
#: a held name that is kept at an unchanged target is not locked when it cannot be sold (suspended or
#: opening at limit-down), and the self-financing scale then trims it to pay for the other trades. While
#: True, such trims (a sell of < 1% of the book that keeps the name) are tolerated; every other sell of
#: a name that cannot be sold still fails. Set it to False once the regression test passes.
PORTFOLIO_TRIMS_LOCKED_HOLDINGS = True


# --- the panels --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelRecipe:
    """What a fuzzed panel holds; :func:`make_panel` draws its values from ``seed``."""

    seed: int
    n_stocks: int
    n_days: int
    listing: bool  # one stock lists late (no rows before)
    delisting: bool  # one stock delists early (no rows after)
    n_gaps: int  # missing rows inside the stocks' lives
    n_suspensions: int  # zero-volume spells (prices flat at the last close)
    suspension_flag: str  # "absent"; "flagged" (is_suspended on every spell); "partial" (on some spells);
    #                       "flag_only" (flagged spells keep a positive volume, as some vendors write them)
    nan_prices_when_suspended: bool  # flagged suspended rows carry NaN prices
    n_nan_volumes: int  # NaN volumes on trading rows (no evidence either way)
    n_nan_prices: int  # NaN high / low on trading rows (the loaders refuse them)
    n_market_halts: int  # days on which every stock has zero volume
    n_flat_spells: int  # trading spells at an unchanged price
    n_splits: int  # adj_factor doubles while the raw price halves
    penny: bool  # one stock trades near the 0.01 floor, where limits round to the fen
    fields: str  # "ohlcv", "ocv" (open, close, volume), "close_volume", "close_only"
    n_limit_up: int  # opens at the limit-up price
    n_limit_down: int  # opens at the limit-down price
    limit_columns: str  # "absent", "board" (the board rule's prices), "partial" (some NaN cells)
    n_single_stock_days: int  # days on which only one stock has a row
    universe: str  # "absent", "all", "small" (fewer members than top_k), "spells" (joins and leaves)
    top_k: int
    rebalance_every: int
    weighting: str  # "equal", "softmax", "capped" (softmax, max_weight 0.4)
    processing: str
    exit_offset: int  # label horizon (trading days)
    test_days: int
    retrain_every: int
    valid_days: int
    embargo: int
    window: str
    features: str  # "small" or "price_only"
    audit_cutoffs: int

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.__dict__.items())


@st.composite
def recipes(draw: st.DrawFn) -> PanelRecipe:
    return PanelRecipe(
        seed=draw(st.integers(0, 2**16)),
        n_stocks=draw(st.sampled_from((1, 2, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8))),
        n_days=draw(st.integers(150, 250)),
        listing=draw(st.booleans()),
        delisting=draw(st.booleans()),
        n_gaps=draw(st.integers(0, 30)),
        n_suspensions=draw(st.integers(0, 6)),
        suspension_flag=draw(st.sampled_from(("absent", "flagged", "partial", "flag_only"))),
        nan_prices_when_suspended=draw(st.booleans()),
        n_nan_volumes=draw(st.integers(0, 10)),
        n_nan_prices=draw(st.sampled_from((0,) * 9 + (2,))),
        n_market_halts=draw(st.integers(0, 5)),
        n_flat_spells=draw(st.integers(0, 4)),
        n_splits=draw(st.integers(0, 2)),
        penny=draw(st.booleans()),
        fields=draw(st.sampled_from(("ohlcv", "ohlcv", "ocv", "close_volume", "close_only"))),
        n_limit_up=draw(st.integers(0, 25)),
        n_limit_down=draw(st.integers(0, 15)),
        limit_columns=draw(st.sampled_from(("absent", "board", "partial"))),
        n_single_stock_days=draw(st.integers(0, 20)),
        universe=draw(st.sampled_from(("absent", "all", "all", "small", "spells"))),
        top_k=draw(st.sampled_from((1, 1, 2, 2, 3, 5))),
        rebalance_every=draw(st.integers(1, 5)),
        weighting=draw(st.sampled_from(("equal", "softmax", "capped"))),
        processing=draw(st.sampled_from(("bins", "three_class"))),
        exit_offset=draw(st.integers(2, 6)),
        test_days=draw(st.sampled_from((3, 5, 8)) if draw(st.integers(0, 7)) == 0 else st.integers(20, 90)),
        retrain_every=draw(st.integers(5, 30)),
        valid_days=draw(st.integers(0, 8)),
        embargo=draw(st.integers(0, 3)),
        window=draw(st.sampled_from(("sliding", "expanding"))),
        features=draw(st.sampled_from(("small", "price_only"))),
        audit_cutoffs=draw(st.sampled_from((0, 1, 3))),
    )


def make_panel(r: PanelRecipe) -> pd.DataFrame:
    """The canonical panel of ``r`` (sorted, unique (date, code) keys; values from ``r.seed``)."""
    rng = np.random.default_rng(r.seed)
    T, N = r.n_days, r.n_stocks
    dates = pd.bdate_range("2023-01-02", periods=T, name="date")
    codes = np.array(CODES[:N], dtype=object)
    board = limit_fraction(dates, codes)

    # Raw closes on the fen, moves clipped inside the board limit.
    close = np.empty((T, N))
    close[0] = np.round(rng.uniform(5, 50, N), 2)
    if r.penny:
        close[0, int(rng.integers(0, N))] = 0.05
    flat = np.zeros((T, N), dtype=bool)
    for _ in range(r.n_flat_spells):
        t0 = int(rng.integers(1, T - 1))
        flat[t0 : t0 + int(rng.integers(2, 30)), int(rng.integers(0, N))] = True
    for t in range(1, T):
        move = np.clip(rng.normal(0.0005, 0.025, N), -0.9 * board[t], 0.9 * board[t])
        close[t] = np.where(flat[t], close[t - 1], np.maximum(np.round(close[t - 1] * (1 + move), 2), 0.01))
    adj = np.ones((T, N))
    for _ in range(r.n_splits):
        t0, i = int(rng.integers(1, T)), int(rng.integers(0, N))
        adj[t0:, i] *= 2.0
        close[t0:, i] = np.maximum(np.round(close[t0:, i] / 2.0, 2), 0.01)
    prev = np.vstack([close[:1], close[:-1] * adj[:-1] / adj[1:]])  # ex-rights previous close
    open_ = np.maximum(np.round(prev * np.exp(rng.normal(0, 0.01, (T, N))), 2), 0.01)
    up, down = board_limit_price(prev, board, +1), board_limit_price(prev, board, -1)
    open_ = np.where(flat, close, np.maximum(np.clip(open_, down + 0.01, up - 0.01), 0.01))
    for count, limit in ((r.n_limit_up, up), (r.n_limit_down, down)):
        t, i = rng.integers(1, T, count), rng.integers(0, N, count)
        open_[t, i] = limit[t, i]
    high = np.maximum(open_, close) * (1 + rng.uniform(0, 0.01, (T, N)))
    low = np.minimum(open_, close) * (1 - rng.uniform(0, 0.01, (T, N)))
    volume = np.round(rng.lognormal(13, 0.5, (T, N)), -2)

    alive = np.ones((T, N), dtype=bool)
    if r.listing:
        alive[: int(rng.integers(10, T // 2)), int(rng.integers(0, N))] = False
    if r.delisting:
        alive[int(rng.integers(T // 2, T - 5)) :, int(rng.integers(0, N))] = False
    for _ in range(r.n_gaps):
        alive[int(rng.integers(1, T)), int(rng.integers(0, N))] = False
    for _ in range(r.n_single_stock_days):
        keep = int(rng.integers(0, N))
        t = int(rng.integers(1, T))
        alive[t, np.arange(N) != keep] = False

    suspended = np.zeros((T, N), dtype=bool)
    flagged = np.zeros((T, N), dtype=bool)
    halts = rng.integers(1, T, r.n_market_halts)
    suspended[halts] = True
    flagged[halts] = r.suspension_flag in ("flagged", "flag_only")
    for k in range(r.n_suspensions):
        t0, i = int(rng.integers(1, T - 1)), int(rng.integers(0, N))
        span = slice(t0, min(T, t0 + int(rng.integers(1, 15))))
        suspended[span, i] = True
        if r.suspension_flag in ("flagged", "flag_only") or (r.suspension_flag == "partial" and k % 2 == 0):
            flagged[span, i] = True
    for t in range(1, T):  # a suspended row carries the last close, no trade
        s = suspended[t]
        close[t, s] = open_[t, s] = high[t, s] = low[t, s] = close[t - 1, s]
        volume[t, s & ~(flagged[t] & (r.suspension_flag == "flag_only"))] = 0.0
    if r.nan_prices_when_suspended:
        for a in (open_, high, low, close):
            a[flagged] = np.nan
    volume[rng.integers(0, T, r.n_nan_volumes), rng.integers(0, N, r.n_nan_volumes)] = np.nan
    t, i = rng.integers(0, T, r.n_nan_prices), rng.integers(0, N, r.n_nan_prices)
    high[t, i] = low[t, i] = np.nan

    columns = {"open": open_, "high": high, "low": low, "close": close, "volume": volume}
    drop = {
        "ohlcv": (),
        "ocv": ("high", "low"),
        "close_volume": ("open", "high", "low"),
        "close_only": ("open", "high", "low", "volume"),
    }[r.fields]
    for name in drop:
        del columns[name]
    if r.n_splits:
        columns["adj_factor"] = adj
    if r.limit_columns != "absent":
        up_col, down_col = up.copy(), down.copy()
        up_col[0], down_col[0] = np.round(close[0] * 1.1, 2), np.round(close[0] * 0.9, 2)
        if r.limit_columns == "partial":
            holes = rng.random((T, N)) < 0.3
            up_col[holes] = down_col[holes] = np.nan
        columns["up_limit"], columns["down_limit"] = up_col, down_col
    if r.universe != "absent":
        member = np.ones((T, N), dtype=bool)
        if r.universe == "small":
            member[:, max(1, r.top_k - 1) :] = False
        elif r.universe == "spells":  # stocks join and leave the index (reconstitution days)
            for i in rng.choice(N, size=(N + 1) // 2, replace=False):
                for _ in range(int(rng.integers(1, 3))):
                    member[int(rng.integers(0, T)) :, i] ^= True
        columns["in_universe"] = member
    if r.suspension_flag != "absent":
        columns["is_suspended"] = flagged

    rows, cols = np.nonzero(alive)
    frame = pd.DataFrame({k: v[rows, cols] for k, v in columns.items()})
    frame.index = pd.MultiIndex.from_arrays([dates[rows], pd.Index(codes)[cols]], names=["date", "code"])
    return frame.sort_index()


# --- the pipeline ------------------------------------------------------------------------------------


def tiny_ranker(n_bins: int = 10) -> LambdaRankRanker:
    return LambdaRankRanker(
        LambdaRankConfig(
            n_bins=n_bins,
            num_boost_round=8,
            min_data_in_leaf=3,
            num_leaves=4,
            num_threads=1,
            early_stopping_rounds=None,
        )
    )


def portfolio_of(r: PanelRecipe) -> PortfolioSpec:
    capped = r.weighting == "capped"
    return PortfolioSpec(
        top_k=r.top_k,
        rebalance_every=r.rebalance_every,
        weighting="softmax" if capped else r.weighting,
        max_weight=0.4 if capped else None,
    )


def run_pipeline(r: PanelRecipe, panel: pd.DataFrame) -> BacktestResult:
    dates = panel.index.get_level_values(0).unique()
    schedule = RollingSchedule(
        retrain_every=r.retrain_every,
        train_window=40,
        window=r.window,
        valid_days=r.valid_days,
        embargo=r.embargo,
        test_start=dates[max(0, len(dates) - r.test_days)],
    )
    label = LabelSpec(exit_offset=r.exit_offset, processing=r.processing)
    return run_backtest(
        plan_backtest(panel, label=label, schedule=schedule, portfolio=portfolio_of(r)),
        features=SMALL_SET if r.features == "small" else PRICE_ONLY,
        ranker_factory=lambda: tiny_ranker(10 if r.processing == "bins" else 3),
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(audit_cutoffs=r.audit_cutoffs),
        seed=0,
    )


# --- the invariants ----------------------------------------------------------------------------------


def check_result(panel: pd.DataFrame, result: BacktestResult) -> None:
    """Assert the invariants (a) of the module docstring on one backtest result."""
    pf = result.portfolio
    for name, returns in (("strategy", pf.returns), ("benchmark", pf.benchmark_returns)):
        values = returns.to_numpy(np.float64)
        assert np.isfinite(values).all(), f"{name} returns not finite on {list(returns.index[~np.isfinite(values)])}"
        assert (values > -1).all(), f"{name} returns below -100%"
    assert pf.returns.index.equals(pf.benchmark_returns.index)

    scores = result.scores
    assert np.isfinite(scores.to_numpy()).all(), "a score is not finite"
    grid = WideGrid.of(panel)
    fill_field = "open" if "open" in panel.columns else "close"
    fill = grid.to_wide(panel[fill_field].to_numpy(np.float64), dtype=np.float64)
    mark = grid.to_wide(adjusted_price(panel, fill_field).to_numpy(np.float64), dtype=np.float64)
    rule = Tradability.of(panel, grid, fill, mark)
    last_row = np.full(grid.shape[1], -1)
    np.maximum.at(last_row, grid.col_pos, grid.row_pos)
    row_of = {d: i for i, d in enumerate(grid.dates)}
    col_of = {c: j for j, c in enumerate(grid.codes)}
    scored = set(scores.index)

    # Trades: buys only where the stock trades and is not at limit-up on the execution day, and was a
    # member with a score on the decision day; sells only where it trades and is not at limit-down, or
    # is delisted.
    for trade in pf.trades.itertuples(index=False):
        e, j = row_of[trade.date], col_of[trade.code]
        where = f"{trade.side} {trade.code} at the open of {trade.date:%Y-%m-%d}"
        if trade.side == "buy":
            assert rule.can_buy[e, j], f"{where}: the stock does not trade or opens at limit-up"
            t = row_of[trade.decision_date]
            assert rule.eligible[t, j] and (trade.decision_date, trade.code) in scored, (
                f"{where}: not a scored member on the decision day {trade.decision_date:%Y-%m-%d}"
            )
        else:
            delisted = last_row[j] < e
            if PORTFOLIO_TRIMS_LOCKED_HOLDINGS and trade.weight_after > 0 and trade.traded < 0.01:
                continue  # the known trim (test_the_cost_of_a_rebalance_is_not_paid_from_a_suspended_holding)
            assert rule.can_sell[e, j] or delisted, f"{where}: the stock does not trade or opens at limit-down"

    # Weights: non-negative, summing to 1 unless the last rebalance could place no more: it bought
    # nothing (no pick could be bought, or every pick was a holding that could not be topped up), or
    # every name it bought sits at the cap (``max_weight``).
    positions = pf.positions
    assert (positions["weight"] >= -TOL).all(), "a negative weight"
    totals = positions.groupby("date")["weight"].sum().reindex(pf.returns.index, fill_value=0.0)
    weight_of = positions.set_index(["date", "code"])["weight"]
    bought = pf.trades.loc[pf.trades["side"] == "buy"].groupby("date")["code"].agg(list)
    cap = pf.spec.max_weight
    executions = pd.DatetimeIndex(pf.periods["execution_date"])
    for day, total in totals.items():
        assert total <= 1 + 1e-7, f"weights of {day:%Y-%m-%d} sum to {total} > 1"
        if total < 1 - 1e-7:
            executed = executions[executions <= day][-1]
            names = bought.get(executed, [])
            at_cap = cap is not None and all(weight_of[(executed, c)] >= cap * 0.99 for c in names)
            assert not names or at_cap, (
                f"weights of {day:%Y-%m-%d} sum to {total:.6f}: cash although the rebalance of "
                f"{executed:%Y-%m-%d} bought {names} below the cap {cap}"
            )
    # A name enters the book only on an execution day on which it can be bought.
    held: set[str] = set()
    starts = set(executions)
    for day, names in positions.loc[positions["weight"] > TOL].groupby("date")["code"]:
        names = set(names)
        entered = names - held
        if entered:
            assert day in starts, f"{sorted(entered)} entered the book on {day:%Y-%m-%d}, not an execution day"
            for code in entered:
                assert rule.can_buy[row_of[day], col_of[code]], (
                    f"{code} entered the book on {day:%Y-%m-%d}, when it does not trade or opens at limit-up"
                )
        held = names
    # Scores only for the day's index members, on the test period's decision days.
    for day, code in scored:
        assert rule.eligible[row_of[day], col_of[code]], f"a score for {code} on {day:%Y-%m-%d}, not a member"

    check_labels(panel, result, grid)
    check_metrics(result)


def check_labels(panel: pd.DataFrame, result: BacktestResult, grid: WideGrid) -> None:
    """Labels only for members that trade at entry and exit; features without infinities."""
    labels = result.labels
    spec = labels.spec
    price = grid.to_wide(adjusted_price(panel, spec.price_field).to_numpy(np.float64), dtype=np.float64)
    rule = Tradability.of(panel, grid, price)
    rows = grid.dates.get_indexer(labels.index.get_level_values(0))
    cols = grid.codes.get_indexer(labels.index.get_level_values(1))
    assert rule.eligible[rows, cols].all(), "a label for a stock that is not a member on its day"
    for offset, what in ((spec.entry_offset, "entry"), (spec.exit_offset, "exit")):
        ok = rule.trading[rows + offset, cols]
        assert ok.all(), f"a label whose stock does not trade at {what}: {labels.index[~ok][:3].tolist()}"
    assert (labels.label_end.to_numpy() == grid.dates[rows + spec.exit_offset].to_numpy()).all()
    assert np.isfinite(labels.fwd_return.to_numpy()).all()
    values = result.features.values
    assert not np.isinf(values).any(), (
        f"infinite feature values in {sorted({result.feature_names[j] for j in np.nonzero(np.isinf(values))[1]})}"
    )


def check_metrics(result: BacktestResult) -> None:
    """Every metric is finite, or NaN where ``backtest.metrics`` documents it (never +-inf)."""
    m = result.metrics
    assert set(HEADLINE_KEYS) <= set(m)  # ndcg included, whatever the depth (top_k)
    for key, value in m.items():
        assert not np.isinf(value), f"metric {key} is {value}"
    returns = result.portfolio.returns.to_numpy()
    for key in (
        "cum_return",
        "ann_return",
        "max_drawdown",
        "win_rate_vs_ew",
        "win_rate_vs_ew_daily",
        "excess_ann_return",
        "benchmark_ann_return",
        "turnover",
        "n_folds",
    ):
        assert np.isfinite(m[key]), f"metric {key} is NaN on {len(returns)} returns"
    volatile = len(returns) >= 2 and returns.std(ddof=1) > 0
    assert np.isfinite(m["sharpe"]) == volatile, f"sharpe {m['sharpe']} with volatility {volatile}"
    assert np.isfinite(m["ann_vol"]) == (len(returns) >= 2)
    assert np.isfinite(m["sortino"]) == bool((returns < 0).any())
    assert m["max_drawdown"] <= 0


def check_case(r: PanelRecipe) -> str:
    """Run one recipe; return "result" or "error:<class>", or fail the test."""
    panel = make_panel(r)
    try:
        result = run_pipeline(r, panel)
    except (FeatureAuditError, LeakageError) as err:  # the library's features are causal, the purge is on
        raise AssertionError(f"a guard failed on a clean pipeline: {err}\n  panel: {r.describe()}") from err
    except BacktestError as err:
        assert str(err).strip(), f"{type(err).__name__} without a message"
        return f"error:{type(err).__name__}"
    except Exception as err:  # anything else is a bug: say which panel made it
        raise AssertionError(f"{type(err).__name__}: {err}\n  panel: {r.describe()}") from err
    try:
        check_result(panel, result)
    except AssertionError as err:
        raise AssertionError(f"{err}\n  panel: {r.describe()}") from err
    return "result"


@pytest.fixture(autouse=True)
def _quiet_logs(caplog):
    caplog.set_level(logging.ERROR)


FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(recipes())
def test_fuzzed_panel_ends_in_a_valid_result_or_a_project_error(recipe: PanelRecipe) -> None:
    check_case(recipe)


@pytest.mark.slow
@settings(FUZZ, max_examples=600, derandomize=False)
@given(recipes())
def test_fuzzed_panel_ends_in_a_valid_result_or_a_project_error_many(recipe: PanelRecipe) -> None:
    check_case(recipe)


# --- what the fuzzer found, pinned ----------------------------------------------------------------------

CLEAN = PanelRecipe(
    seed=1,
    n_stocks=8,
    n_days=200,
    listing=False,
    delisting=False,
    n_gaps=0,
    n_suspensions=0,
    suspension_flag="absent",
    nan_prices_when_suspended=False,
    n_nan_volumes=0,
    n_nan_prices=0,
    n_market_halts=0,
    n_flat_spells=0,
    n_splits=0,
    penny=False,
    fields="ohlcv",
    n_limit_up=0,
    n_limit_down=0,
    limit_columns="absent",
    n_single_stock_days=0,
    universe="absent",
    top_k=2,
    rebalance_every=1,
    weighting="equal",
    processing="bins",
    exit_offset=5,
    test_days=40,
    retrain_every=20,
    valid_days=5,
    embargo=1,
    window="sliding",
    features="small",
    audit_cutoffs=3,
)


def test_the_clean_recipe_runs_and_holds_the_invariants() -> None:
    assert check_case(CLEAN) == "result"


def test_a_test_period_shorter_than_the_label_horizon_has_nan_ic_not_an_error() -> None:
    """No label of the test period is known yet: IC and NDCG are undefined (NaN, as headline_metrics
    documents); before the fix the metrics raised "scores and labels have no (date, code) key" after the
    whole backtest had run."""
    recipe = PanelRecipe(**{**CLEAN.__dict__, "test_days": 4})
    panel = make_panel(recipe)
    result = run_pipeline(recipe, panel)
    check_result(panel, result)
    assert np.isnan(result.metrics["ic_mean"]) and np.isnan(result.metrics["rank_ic_mean"])
    assert np.isnan(result.metrics["ndcg"])
    assert np.isfinite(result.metrics["cum_return"])


@pytest.mark.xfail(
    strict=True,
    reason="backtest.portfolio._rebalance: the self-financing scale trims a kept "
    "holding that cannot be sold (suspended / limit-down) to pay for the other trades",
)
def test_the_cost_of_a_rebalance_is_not_paid_from_a_suspended_holding() -> None:
    """Three stocks at a constant 10.00; A and B are bought, then B is swapped for C on a day A is
    suspended (zero volume). A keeps its weight (its target equals its holding), so nothing may be sold
    of it; the portfolio sold 0.075% of the book in it to pay the swap's costs."""
    from backtest.portfolio import simulate

    dates = pd.bdate_range("2024-01-08", periods=5, name="date")
    codes = ["600000.SH", "600001.SH", "600002.SH"]
    index = pd.MultiIndex.from_product([dates, codes], names=["date", "code"])
    volume = np.full((5, 3), 1e6)
    volume[2, 0] = 0.0  # A does not trade on the second execution day
    panel = pd.DataFrame({"open": 10.0, "close": 10.0, "volume": volume.ravel()}, index=index)
    scores = pd.Series([3.0, 2.0, 1.0, 3.0, 1.0, 2.0], index=index[:6])
    trades = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1)).trades
    assert trades.loc[(trades["date"] == dates[2]) & (trades["code"] == "600000.SH")].empty
