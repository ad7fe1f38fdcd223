"""A synthetic A-share market: the embedded default data set.

It is built so that the research questions the framework exists for behave as on real A-share data:
label leakage pays off, volatility features are noise, money flow carries a weak real signal, and an
industry bet that worked in one regime fails in the next. Same seed, same bytes.

Return process (daily log return of stock i on day t, before price limits)::

    r[t, i] = beta[i] * market[t]                      market factor: two-speed stochastic volatility,
            + industry[t, g(i)]                        rare jumps, bull/bear regimes (deeper, more
                                                       volatile bears)
            + size_loading[i] * size[t]                small-minus-big factor
            + mf_strength * sigma[i] * flow[t-1, i]    planted: informed flow, seen in money-flow data
            + drift[t, i]                              planted: slow, unobservable, persists for weeks
            + transient[t, i] - transient[t-1, i]      planted: short-term reversal
            + sigma[t, i] * eps[t, i]                  fat-tailed (Student t, 4 dof) noise

    industry[t, g] = industry_regime_strength * tilt[g] * regime[t] + industry noise
                                                       planted: industry effect that flips with regime

Closes are clipped to the daily price limit (the board rule of ``backtest.data.tradability``: +-10%,
+-20% on ChiNext from 2020-08-24 and on STAR); the clipped part carries over to the next day, and a day
that would close far beyond the limit opens and stays at it. Suspended stocks keep their last close
and accumulate the return they miss (their volume is 0 and ``is_suspended`` is True). Stocks list and
delist during the period (delisting stocks decline beforehand), and index membership is reviewed each
June and December as the CSI 300's is (a liquidity screen, trailing market cap, at most 10% replaced), so
it is point in time and turns over about as often.

The index of the members, cap-weighted, is calibrated to the real CSI 300's stylized facts of 2018-2025
(volatility, fat tails, volatility memory, drawdown, large days, review turnover):
:func:`backtest.benchmark.stylized_facts` measures them, and ``tests/data/test_synthetic.py`` holds the
real values with their source and the bands the default market must fall in.

Observable money flow: the main-force (large + extra-large order) net inflow rate is
``flow_loading * flow + noise + a little same-day return``; smoothing it over a week recovers the flow.
Volatility varies by stock and over time but never enters expected returns.

The measured strengths of the planted effects are in benchmarks/README.md (bench_synthetic.py) and are checked
by ``tests/data/test_synthetic.py``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from backtest.data import tradability
from backtest.data.calendar import exchange_calendar, recorded_span
from backtest.data.panel import WideGrid
from backtest.data.schema import MONEYFLOW_COLUMNS, PRICE_COLUMNS
from backtest.errors import ConfigError

log = logging.getLogger(__name__)

INDUSTRIES: tuple[str, ...] = (
    "agriculture",
    "basic_chemicals",
    "steel",
    "nonferrous_metals",
    "electronics",
    "household_appliances",
    "food_beverage",
    "textiles_apparel",
    "light_manufacturing",
    "pharmaceuticals",
    "utilities",
    "transportation",
    "real_estate",
    "retail",
    "social_services",
    "banks",
    "non_bank_financials",
    "conglomerates",
    "building_materials",
    "building_decoration",
    "power_equipment",
    "machinery",
    "defense",
    "autos",
    "computers",
    "media",
    "telecom",
    "coal",
    "petroleum",
    "environmental",
    "beauty_care",
)

STAR_OPENS = pd.Timestamp("2019-07-22")

#: The most stocks a market may have: ChiNext's codes (300001-301999) and STAR's (688001-688998) hold
#: their boards' shares of it (12% and 6%) with room to spare.
MAX_STOCKS = 12_000


@dataclass(frozen=True)
class SyntheticMarketConfig:
    """Parameters of the synthetic market. Strength parameters are in daily-return units."""

    seed: int = 42
    start: str = "2018-01-01"
    end: str = "2025-12-31"
    n_stocks: int = 460
    n_members: int = 300
    n_industries: int = 30
    #: informed flow's effect on the next day's return, in units of the stock's daily volatility
    mf_strength: float = 0.065
    #: persistence (AR(1) coefficient) of the informed flow
    flow_persistence: float = 0.8
    #: transient price deviation, as a fraction of daily volatility, and its persistence
    reversal_strength: float = 0.8
    reversal_persistence: float = 0.75
    #: stationary daily standard deviation of the slow drift, and its half-life in trading days
    drift_vol: float = 0.001
    drift_half_life: float = 25.0
    #: daily expected industry return per unit of industry tilt, with the sign of the regime
    industry_regime_strength: float = 0.0005
    #: average length of a bull or bear regime, trading days
    regime_mean_days: int = 240

    def __post_init__(self) -> None:
        if not 0 < self.n_stocks <= MAX_STOCKS:
            raise ConfigError(
                f"synthetic market: n_stocks must be between 1 and {MAX_STOCKS:,} (the growth boards' code "
                f"ranges hold their share of that many), got {self.n_stocks}. Fix: data.n_stocks={MAX_STOCKS} or fewer."
            )
        if self.n_members >= self.n_stocks:
            raise ConfigError(
                f"synthetic market: n_members ({self.n_members}) must be smaller than n_stocks "
                f"({self.n_stocks}); the index draws its members from a larger pool. Fix: lower "
                "data.n_members or raise data.n_stocks."
            )
        if not 1 <= self.n_industries <= len(INDUSTRIES):
            raise ConfigError(
                f"synthetic market: n_industries must be between 1 and {len(INDUSTRIES)}, got {self.n_industries}."
            )
        if pd.Timestamp(self.end) <= pd.Timestamp(self.start) + pd.Timedelta(days=90):
            raise ConfigError(
                f"synthetic market: the period {self.start} .. {self.end} is shorter than 90 days; use a longer one."
            )


@dataclass(frozen=True)
class MarketTruth:
    """The latent state behind a synthetic panel, for tests and documentation; never a model input.

    Wide arrays are (date x code) aligned with ``dates`` and ``codes``.
    """

    dates: pd.DatetimeIndex
    codes: pd.Index
    regime: np.ndarray  # +1 bull, -1 bear, per date
    drift: np.ndarray  # slow stock-specific drift, daily log return
    flow: np.ndarray  # informed flow (unit variance)
    industry_tilt: dict[str, float] = field(default_factory=dict)
    #: the parts of the expected return that the data reveal (see :func:`observable_expected_return`):
    #: the transient price deviation (date x code), the informed flow's daily return per unit of flow
    #: (per code), the regime part of each industry's daily return (date x industry), each code's
    #: industry, and the AR(1) persistence of the flow and of the transient deviation
    transient: np.ndarray | None = None
    flow_scale: np.ndarray | None = None
    industry_drift: np.ndarray | None = None
    industry_of: np.ndarray | None = None
    flow_persistence: float = 0.0
    reversal_persistence: float = 0.0


@dataclass(frozen=True)
class SyntheticMarket:
    """A generated market: the panel a backtest reads and the planted truth behind it (never a model input)."""

    panel: pd.DataFrame
    truth: MarketTruth


def generate_market(config: SyntheticMarketConfig | None = None) -> pd.DataFrame:
    """The canonical panel of a synthetic market (see the module docstring).

    Parameters
    ----------
    config : SyntheticMarketConfig, default the project default (460 stocks, 300 members, 2018-2025).

    Returns
    -------
    panel : DataFrame indexed by (date, code), every column of ``backtest.data.schema``.
    """
    return simulate_market(config or SyntheticMarketConfig()).panel


def simulate_market(config: SyntheticMarketConfig) -> SyntheticMarket:
    """Simulate the market and return the panel with its latent truth.

    Memory: the work is done on wide (date x code) float64 matrices, each the size of one panel column
    plus the days a stock is not listed. A column is gathered into the panel's rows as soon as it is
    final (:class:`_PanelColumns`) and every intermediate is dropped when its last use is done, so that
    about a dozen wide matrices are held at once besides the panel and the truth (benchmarks/README.md,
    bench_synthetic.py, measures it up to the ``data=synthetic_all`` market).
    """
    cfg = config
    rng = np.random.default_rng(np.random.PCG64(cfg.seed))
    dates = exchange_calendar(cfg.start, cfg.end)
    first, last = recorded_span()
    if pd.Timestamp(cfg.start) < first or pd.Timestamp(cfg.end) > last:
        log.warning(
            "synthetic market: %s .. %s passes the exchange calendar's record (%s .. %s); days outside it "
            "are weekdays minus approximate holidays",
            cfg.start,
            cfg.end,
            first.date(),
            last.date(),
        )
    T, N = len(dates), cfg.n_stocks

    codes = _draw_codes(rng, N)
    limit_pct = tradability.limit_fraction(dates, codes)  # the board rule every module uses

    # --- stock attributes ----------------------------------------------------------------------------
    weights = rng.dirichlet(np.full(cfg.n_industries, 3.0))
    industry_idx = rng.choice(cfg.n_industries, size=N, p=weights)
    industry_names = np.array(INDUSTRIES[: cfg.n_industries])
    tilt = rng.standard_normal(cfg.n_industries)
    tilt = (tilt - tilt.mean()) / tilt.std()

    growth = tradability.board_of(codes) != "main"
    sigma = np.exp(rng.normal(np.log(0.017), 0.3, N)) * np.where(growth, 1.25, 1.0)
    beta = rng.normal(1.0, 0.1, N).clip(0.6, 1.4)
    total_shares = np.exp(rng.normal(np.log(2.5e9), 0.8, N)).round(-4)
    float_frac = rng.uniform(0.3, 1.0, N)
    price0 = np.exp(rng.normal(np.log(14.0), 0.7, N)).clip(2.5, 400)
    log_mv0 = np.log(total_shares * price0)
    size_loading = -(log_mv0 - log_mv0.mean()) / log_mv0.std()

    alive, list_idx, delist_idx = _draw_lifetimes(rng, dates, codes)
    suspended = _draw_suspensions(rng, T, N, list_idx, delist_idx) & alive

    # --- factors ------------------------------------------------------------------------------------
    regime = _draw_regimes(rng, T, cfg.regime_mean_days)
    market, market_vol = _draw_market(rng, regime)
    ind_noise = 0.007 * rng.standard_t(5, (T, cfg.n_industries)) / np.sqrt(5 / 3)
    industry = cfg.industry_regime_strength * tilt[None, :] * regime[:, None] + ind_noise
    size = rng.normal(0.0, 0.003, T)

    # --- planted effects ----------------------------------------------------------------------------
    flow = _ar1(rng.standard_normal((T, N)), cfg.flow_persistence)
    phi_d = 0.5 ** (1.0 / cfg.drift_half_life)
    drift = cfg.drift_vol * _ar1(rng.standard_normal((T, N)), phi_d)
    # Stocks on their way to delisting bleed for their last 120 trading days.
    for j in np.flatnonzero(delist_idx < T):
        lo = max(0, delist_idx[j] - 120)
        drift[lo : delist_idx[j] + 1, j] -= 0.003
    transient = cfg.reversal_strength * sigma[None, :] * _ar1(rng.standard_normal((T, N)), cfg.reversal_persistence)

    r = _daily_returns(
        rng,
        cfg,
        beta,
        market,
        market_vol,
        industry[:, industry_idx],
        size_loading,
        size,
        sigma,
        flow,
        drift,
        transient,
    )

    # --- prices with limits, suspensions and carry-over --------------------------------------------
    close, ref, limit_hit_far = _price_path(r, price0, limit_pct, suspended)
    del r
    alive, delist_idx = _delist_penny_stocks(close, alive, delist_idx)
    suspended &= alive
    columns = _PanelColumns(alive)
    vwap = _bars(rng, columns, close, ref, limit_hit_far, suspended, limit_pct, sigma)
    del limit_pct, limit_hit_far

    # --- trading activity and money flow ------------------------------------------------------------
    amount = _volume_and_amount(rng, columns, close, ref, vwap, suspended, sigma, total_shares * float_frac)
    del vwap
    day_ret = np.log(close / ref) / sigma[None, :]
    del ref
    main_net = 0.035 * (0.6 * flow + rng.standard_normal((T, N))) + 0.01 * day_ret
    del day_ret
    small_net = -0.6 * main_net + 0.02 * rng.standard_normal((T, N))
    for name, values in _split_money_flow(rng, amount, main_net, small_net, log_mv0):
        columns.put(name, values)
    del main_net, small_net, values

    total_mv = close * total_shares[None, :]
    columns.put("close", close)
    del close
    columns.put("float_mv", total_mv * float_frac[None, :])
    in_universe = _index_membership(dates, total_mv, amount, alive, suspended, list_idx, cfg.n_members)
    columns.put("total_mv", total_mv)
    columns.put("amount", amount)
    del total_mv, amount

    rows, cols = np.divmod(columns.cells, N)  # row-major: sorted by date, then code
    panel = columns.frame(
        pd.MultiIndex(
            levels=[pd.DatetimeIndex(dates.astype("datetime64[ns]"), name="date"), pd.Index(codes, name="code")],
            codes=[rows, cols],
            names=["date", "code"],
        )
    )
    panel["industry"] = pd.Categorical.from_codes(industry_idx[cols], categories=industry_names)
    panel["in_universe"] = in_universe.ravel()[columns.cells]
    panel["is_suspended"] = suspended.ravel()[columns.cells]

    truth = MarketTruth(
        dates=pd.DatetimeIndex(dates, name="date"),
        codes=pd.Index(codes, name="code"),
        regime=regime,
        drift=drift,
        flow=flow,
        industry_tilt=dict(zip(industry_names.tolist(), tilt.tolist())),
        transient=transient,
        flow_scale=cfg.mf_strength * sigma,
        industry_drift=cfg.industry_regime_strength * tilt[None, :] * regime[:, None],
        industry_of=industry_idx,
        flow_persistence=cfg.flow_persistence,
        reversal_persistence=cfg.reversal_persistence,
    )
    log.info("synthetic market: %d days x %d stocks, %d rows", T, N, len(panel))
    return SyntheticMarket(panel=panel, truth=truth)


#: the panel's number columns, in their order (then ``industry``, ``in_universe``, ``is_suspended``)
_NUMBER_COLUMNS: tuple[str, ...] = (
    *PRICE_COLUMNS,
    *("volume", "amount", "up_limit", "down_limit", "total_mv", "float_mv"),
    *MONEYFLOW_COLUMNS,
)


class _PanelColumns:
    """The panel's number columns, filled one at a time from wide (date x code) matrices.

    ``alive`` (date x code) marks the cells that are panel rows; ``cells`` holds their flat positions,
    row-major (by date, then code). The columns share one float64 block, so that the finished frame is
    made without copying them.
    """

    def __init__(self, alive: np.ndarray) -> None:
        self.cells = np.flatnonzero(alive)
        self.block = np.empty((len(_NUMBER_COLUMNS), len(self.cells)), dtype=np.float64)
        self.filled: set[str] = set()

    def put(self, name: str, wide: np.ndarray) -> None:
        """Gather the panel rows of ``wide`` into column ``name``."""
        np.take(np.ravel(wide), self.cells, out=self.block[_NUMBER_COLUMNS.index(name)])
        self.filled.add(name)

    def frame(self, index: pd.MultiIndex) -> pd.DataFrame:
        """The columns as a DataFrame on ``index`` (one row per cell); every column must be filled."""
        assert self.filled == set(_NUMBER_COLUMNS), sorted(set(_NUMBER_COLUMNS) - self.filled)
        return pd.DataFrame(self.block.T, index=index, columns=list(_NUMBER_COLUMNS), copy=False)


def _daily_returns(
    rng: np.random.Generator,
    cfg: SyntheticMarketConfig,
    beta: np.ndarray,
    market: np.ndarray,
    market_vol: np.ndarray,
    industry: np.ndarray,
    size_loading: np.ndarray,
    size: np.ndarray,
    sigma: np.ndarray,
    flow: np.ndarray,
    drift: np.ndarray,
    transient: np.ndarray,
) -> np.ndarray:
    """The daily log returns before price limits (the module docstring's sum), summed in place.

    ``industry`` is each stock's industry return (date x code); the others are the factors, loadings
    and planted states of :func:`simulate_market`.
    """
    T, N = flow.shape
    vol_state = np.exp(_ar1(rng.standard_normal((T, N)), 0.98) * 0.25)  # slow per-stock vol regimes
    vol_mult = np.sqrt(market_vol / market_vol.mean())[:, None] * vol_state
    del vol_state
    eps = rng.standard_t(4, (T, N)) / np.sqrt(2.0)
    r = beta[None, :] * market[:, None]
    r += industry
    r += size_loading[None, :] * size[:, None]
    r += cfg.mf_strength * sigma[None, :] * np.vstack([np.zeros((1, N)), flow[:-1]])
    r += drift
    r += np.diff(transient, axis=0, prepend=0.0)
    scale = sigma[None, :] * vol_mult
    del vol_mult
    r += scale * eps
    del eps
    # Convexity: offset the market-wide volatility drag so that prices do not drift down on average. The
    # offset is the same for every stock, so a stock's median return, and with it the cross-sectional rank
    # of its return, does not depend on its volatility (volatile stocks still have a slightly higher mean
    # simple return, 0.5 * variance).
    r += 0.5 * (market.var() + (scale**2).mean(axis=1, keepdims=True))
    return r


def _bars(
    rng: np.random.Generator,
    columns: _PanelColumns,
    close: np.ndarray,
    ref: np.ndarray,
    locked: np.ndarray,
    suspended: np.ndarray,
    limit_pct: np.ndarray,
    sigma: np.ndarray,
) -> np.ndarray:
    """Open, high, low and the price limits around ``close`` (into ``columns``); returns the day's VWAP.

    ``ref`` is the previous close, ``locked`` a day that opens and stays at its limit.
    """
    T, N = close.shape
    up_limit = tradability.board_limit_price(ref, limit_pct, +1)
    down_limit = tradability.board_limit_price(ref, limit_pct, -1)
    gap = 0.3 * np.log(close / ref) + rng.normal(0.0, 0.3, (T, N)) * sigma[None, :]
    open_ = np.clip(_round2(ref * np.exp(gap)), down_limit, up_limit)
    del gap
    flat = locked | suspended  # a suspended day carries the last close as its whole bar
    open_ = np.where(flat, close, open_)  # locked limit: opens and stays there
    wick = np.abs(rng.normal(0.0, 0.5, (2, T, N))) * sigma[None, None, :]
    high = np.clip(_round2(np.maximum(open_, close) * np.exp(wick[0])), None, up_limit)
    low = np.clip(_round2(np.minimum(open_, close) * np.exp(-wick[1])), down_limit, None)
    del wick
    columns.put("up_limit", up_limit)
    columns.put("down_limit", down_limit)
    del up_limit, down_limit
    high = np.where(flat, close, np.maximum(high, np.maximum(open_, close)))
    low = np.where(flat, close, np.minimum(low, np.minimum(open_, close)))
    vwap = (open_ + high + low + 2 * close) / 5
    for name, values in (("open", open_), ("high", high), ("low", low)):
        columns.put(name, values)
    return vwap


def _volume_and_amount(
    rng: np.random.Generator,
    columns: _PanelColumns,
    close: np.ndarray,
    ref: np.ndarray,
    vwap: np.ndarray,
    suspended: np.ndarray,
    sigma: np.ndarray,
    float_shares: np.ndarray,
) -> np.ndarray:
    """Volume (into ``columns``) from a turnover that rises with the size of the day's move; returns the
    amount traded (0 on suspended days)."""
    T, N = close.shape
    base_turnover = np.exp(rng.normal(np.log(0.012), 0.5, N))
    abs_move = np.abs(np.log(close / ref)) / sigma[None, :]
    turnover = base_turnover[None, :] * np.exp(0.35 * abs_move + 0.3 * _ar1(rng.standard_normal((T, N)), 0.9))
    del abs_move
    volume = np.round(turnover * float_shares[None, :], -2)
    del turnover
    amount = np.round(volume * vwap, 0)
    columns.put("volume", np.where(suspended, 0.0, volume))
    return np.where(suspended, 0.0, amount)


# --- pieces ----------------------------------------------------------------------------------------


def _round2(x: np.ndarray) -> np.ndarray:
    return np.round(x, 2)


def _ar1(innovations: np.ndarray, phi: float) -> np.ndarray:
    """Stationary unit-variance AR(1) along axis 0, started from its stationary distribution."""
    scale = np.sqrt(1.0 - phi * phi)
    x = lfilter([scale], [1.0, -phi], innovations, axis=0)
    # Remove the start-up transient: the first value should have unit variance, not ``scale``.
    decay = phi ** np.arange(len(innovations)).reshape((-1,) + (1,) * (innovations.ndim - 1))
    return x + innovations[0] * (1.0 - scale) * decay


def _draw_codes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Tushare-style codes over the main boards, ChiNext (300/301) and STAR (688)."""
    boards = rng.choice(4, size=n, p=[0.52, 0.30, 0.12, 0.06])
    prefixes = {0: (600000, ".SH"), 1: (1, ".SZ"), 2: (300001, ".SZ"), 3: (688001, ".SH")}
    codes = []
    for b in range(4):
        base, suffix = prefixes[b]
        k = int((boards == b).sum())
        span = {0: 3999, 1: 2999, 2: 1999, 3: 998}[b]  # 600000-603998, 000001-002999, 300001-301999, 688001-688998
        # A main board with more stocks than its range runs on (604xxx, 003xxx: still main board codes);
        # the growth boards' ranges hold their share of MAX_STOCKS.
        numbers = base + np.sort(rng.choice(max(span, k), size=k, replace=False))
        codes += [f"{num:06d}{suffix}" for num in numbers]
    return np.array(sorted(codes), dtype=object)


def _draw_lifetimes(
    rng: np.random.Generator, dates: pd.DatetimeIndex, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Listing and delisting days; ``alive[t, i]`` is True from listing through the last trading day."""
    T, N = len(dates), len(codes)
    list_idx = np.zeros(N, dtype=int)
    late = rng.random(N) < 0.18
    list_idx[late] = rng.integers(20, T - 120, late.sum())
    star_first = int(np.searchsorted(dates, STAR_OPENS))
    is_star = tradability.board_of(codes) == "star"  # STAR opened in July 2019
    list_idx[is_star] = np.maximum(list_idx[is_star], star_first + rng.integers(0, 250, is_star.sum()))
    delist_idx = np.full(N, T, dtype=int)
    leaving = (rng.random(N) < 0.08) & (list_idx < T - 400)
    delist_idx[leaving] = list_idx[leaving] + rng.integers(300, T, leaving.sum())
    delist_idx = np.minimum(delist_idx, T)  # T means "still listed at the end"
    t = np.arange(T)[:, None]
    alive = (t >= list_idx[None, :]) & (t < delist_idx[None, :])
    return alive, list_idx, delist_idx


def _draw_suspensions(
    rng: np.random.Generator, T: int, N: int, list_idx: np.ndarray, delist_idx: np.ndarray
) -> np.ndarray:
    """Suspension spells: about one every two years per stock, mostly a few days, some for months."""
    out = np.zeros((T, N), dtype=bool)
    n_spells = rng.poisson(0.5 * T / 244, N)
    for j in range(N):
        lo, hi = list_idx[j] + 5, min(delist_idx[j], T) - 5
        if hi <= lo:
            continue
        for start in rng.integers(lo, hi, n_spells[j]):
            length = rng.geometric(0.3) if rng.random() < 0.9 else rng.integers(20, 80)
            out[start : min(start + length, hi), j] = True
    return out


def _draw_regimes(rng: np.random.Generator, T: int, mean_days: int) -> np.ndarray:
    """Alternating bull (+1) / bear (-1) regimes with gamma-distributed lengths."""
    regime = np.empty(T)
    state, t = 1.0, 0
    while t < T:
        length = max(60, int(rng.gamma(4.0, mean_days / 4.0)))
        regime[t : t + length] = state
        state, t = -state, t + length
    return regime


#: market volatility: a slow and a fast log-volatility component (stationary s.d., AR(1) coefficient)
_VOL_SLOW = (0.38, 0.995)
_VOL_FAST = (0.30, 0.85)
_VOL_BASE = 0.0100  # daily volatility with both components at zero, bull regime
_VOL_BEAR = 1.35  # volatility multiple in a bear regime (phased in over a few weeks)
_SHOCK_DOF = 8
_JUMPS = (1 / 250, 0.03, 0.02)  # market jumps: daily probability, least size, mean excess size
_DRIFT = (0.0005, -0.0012)  # daily market drift in bull and bear regimes


def _draw_market(rng: np.random.Generator, regime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Market log returns and their daily volatility.

    Log-volatility is the sum of two AR(1) components, one with a half-life of about half a year and
    one of a week, so that volatility clusters over both horizons (the long memory of real index
    volatility); the offset keeps the mean variance at ``_VOL_BASE ** 2`` outside bear regimes, where it
    rises. Shocks are Student t, plus rare jumps of 3% and more (the index's crash and rally days). The
    drift follows the regime.
    """
    T = len(regime)
    (sd_slow, phi_slow), (sd_fast, phi_fast) = _VOL_SLOW, _VOL_FAST
    log_vol = sd_slow * _ar1(rng.standard_normal(T), phi_slow) + sd_fast * _ar1(rng.standard_normal(T), phi_fast)
    bear = lfilter([0.05], [1.0, -0.95], (regime < 0).astype(float))
    vol = _VOL_BASE * np.exp(log_vol + np.log(_VOL_BEAR) * bear - (sd_slow**2 + sd_fast**2))
    z = rng.standard_t(_SHOCK_DOF, T) / np.sqrt(_SHOCK_DOF / (_SHOCK_DOF - 2))
    rate, size, scale = _JUMPS
    intensity = rate * vol**2 / np.mean(vol**2)  # jumps come in volatile times, as crashes and rallies do
    jumps = (rng.random(T) < intensity) * rng.choice([-1.0, 1.0], T) * (size + rng.exponential(scale, T))
    drift = np.where(regime > 0, _DRIFT[0], _DRIFT[1])
    return drift + vol * z + jumps, vol


def _price_path(
    r: np.ndarray, price0: np.ndarray, limit_pct: np.ndarray, suspended: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closes under price limits and suspensions, day by day.

    Returns (close, reference price, locked-limit flag). The reference price is the previous close; the
    part of a move cut off by the limit, and the moves missed while suspended, carry to the next
    trading day.
    """
    T, N = r.shape
    close = np.empty((T, N))
    ref = np.empty((T, N))
    locked = np.zeros((T, N), dtype=bool)
    prev = _round2(price0)
    carry = np.zeros(N)
    for t in range(T):
        ref[t] = prev
        want = r[t] + carry
        target = prev * np.exp(want)
        up = tradability.board_limit_price(prev, limit_pct[t], +1)
        dn = tradability.board_limit_price(prev, limit_pct[t], -1)
        c = np.clip(_round2(target), dn, up)
        hit = (c >= up) | (c <= dn)
        c = np.where(suspended[t], prev, c)
        carry = np.where(suspended[t], want, np.where(hit, np.log(target / c), 0.0))
        carry = np.clip(carry, -0.5, 0.5)
        locked[t] = hit & ~suspended[t] & (np.abs(np.log(target / c)) > 0.02)
        close[t] = c
        prev = c
    return close, ref, locked


def _delist_penny_stocks(
    close: np.ndarray, alive: np.ndarray, delist_idx: np.ndarray, days: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """The exchange's face-value rule: a stock that closes below 1 CNY for ``days`` consecutive trading
    days is delisted after the last of them."""
    below = (close < 1.0) & alive
    run = np.zeros(close.shape[1], dtype=int)
    delist_idx = delist_idx.copy()
    for t in range(close.shape[0]):
        run = np.where(below[t], run + 1, 0)
        hit = (run == days) & (delist_idx > t + 1)
        delist_idx[hit] = t + 1
    t = np.arange(close.shape[0])[:, None]
    return alive & (t < delist_idx[None, :]), delist_idx


def _split_money_flow(
    rng: np.random.Generator, amount: np.ndarray, main_net: np.ndarray, small_net: np.ndarray, log_mv: np.ndarray
) -> Iterator[tuple[str, np.ndarray]]:
    """Buy and sell amounts by order size (sm < 40k, md, lg, elg >= 1m CNY) from net inflow rates, one
    ``(column, values)`` at a time (the columns of ``MONEYFLOW_COLUMNS``, the net inflow last)."""
    T, N = amount.shape
    big = (log_mv - log_mv.mean()) / log_mv.std()
    elg = np.clip(0.14 + 0.03 * big[None, :] + 0.02 * rng.standard_normal((T, N)), 0.03, 0.4)
    lg = np.clip(0.20 + 0.02 * rng.standard_normal((T, N)), 0.08, 0.35)
    md = np.clip(0.28 + 0.02 * rng.standard_normal((T, N)), 0.15, 0.4)
    shares = {"sm": 1.0 - elg - lg - md, "md": md, "lg": lg, "elg": elg}
    del elg, lg, md
    md_net = -(main_net + small_net) + 0.005 * rng.standard_normal((T, N))
    net_rates = {
        "elg": lambda: 0.6 * main_net,
        "lg": lambda: 0.4 * main_net,
        "sm": lambda: small_net,
        "md": lambda: md_net,
    }
    net_total = np.zeros((T, N))
    for size_name in ("sm", "md", "lg", "elg"):
        gross = 2.0 * amount * shares.pop(size_name)  # every trade has a buyer and a seller
        net = np.clip(net_rates[size_name]() * amount, -0.9 * gross, 0.9 * gross)
        buy, sell = np.round((gross + net) / 2, 0), np.round((gross - net) / 2, 0)
        del gross, net
        net_total += buy - sell
        yield f"buy_{size_name}_amount", buy
        yield f"sell_{size_name}_amount", sell
        del buy, sell
    yield "net_mf_amount", net_total


#: the review's buffer, as a fraction of the index size: non-members ranked within (1 - b) * n enter,
#: members ranked within (1 + b) * n stay; and the most names one review may replace, as a fraction
_REVIEW_BUFFER = 0.0
_LIQUIDITY_SCREEN = 0.2
_REVIEW_MAX_CHANGE = 0.10


def _index_membership(
    dates: pd.DatetimeIndex,
    total_mv: np.ndarray,
    amount: np.ndarray,
    alive: np.ndarray,
    suspended: np.ndarray,
    list_idx: np.ndarray,
    n_members: int,
) -> np.ndarray:
    """Point-in-time membership, reviewed semiannually (effective the first trading day after the
    second Friday of June and December) as the CSI 300's rule reviews it: stocks listed for 60 trading
    days and trading that day form the sample; the least traded ``_LIQUIDITY_SCREEN`` of it (trailing
    120-day average amount) is set aside; the rest rank by trailing 120-day average market cap.
    Non-members ranked within ``(1 - b) * n`` enter, members ranked within ``(1 + b) * n`` stay, the
    best-ranked of the rest fill the index, and one review replaces at most ``_REVIEW_MAX_CHANGE`` of it.
    The CSI screen drops half of a sample of thousands and buffers 20% of the index; this pool is 1.5
    times the index, so both are narrower here (``_LIQUIDITY_SCREEN``, ``_REVIEW_BUFFER``). A member
    that delists is replaced the next day from the reserve list: the last review's ranking, then
    today's trailing market cap.
    """
    T, N = total_mv.shape
    avg_mv, avg_amount = _trailing_mean(total_mv, alive, 120), _trailing_mean(amount, alive, 120)
    seasoned = (np.arange(T)[:, None] - list_idx[None, :]) >= 60

    review_days = _review_days(dates)
    member = np.zeros(N, dtype=bool)
    out = np.zeros((T, N), dtype=bool)
    score = np.zeros(N)
    for t in range(T):
        candidates = alive[t] & (seasoned[t] | (t == 0)) & ~suspended[t]
        if t == 0 or t in review_days:
            screen = np.quantile(avg_amount[t][candidates], _LIQUIDITY_SCREEN) if t and candidates.any() else 0
            score = np.where(candidates & (avg_amount[t] >= screen), avg_mv[t], -np.inf)
            order = np.argsort(-score, kind="stable")
            order = order[np.isfinite(score[order])]
            rank = np.full(N, N)
            rank[order] = np.arange(len(order))
            member = rank < n_members if t == 0 else _review(member & alive[t], rank, order, n_members)
        gone = member & ~alive[t]
        if gone.any():
            member &= alive[t]
            # The reserve list: the last review's ranking, then today's trailing market cap.
            eligible = candidates & ~member
            by_rank = np.lexsort((-np.where(eligible, avg_mv[t], -np.inf), -np.where(eligible, score, -np.inf)))
            member[by_rank[eligible[by_rank]][: gone.sum()]] = True
        out[t] = member
    return out


def _trailing_mean(x: np.ndarray, alive: np.ndarray, window: int) -> np.ndarray:
    """Mean over each stock's last ``window`` trading days alive (up to and including the day)."""
    T, N = x.shape
    csum = np.cumsum(np.where(alive, x, 0.0), axis=0)
    count = np.cumsum(alive, axis=0)
    lag_sum = np.vstack([np.zeros((window, N)), csum[:-window]])
    lag_cnt = np.vstack([np.zeros((window, N), dtype=int), count[:-window]])
    return (csum - lag_sum) / np.maximum(count - lag_cnt, 1)


def _review(member: np.ndarray, rank: np.ndarray, order: np.ndarray, n: int) -> np.ndarray:
    """One review of the index (see :func:`_index_membership`): ``member`` holds the members still
    listed, ``order`` the ranked sample, best first, ``rank`` each stock's place in it (unranked: N)."""
    enter_rank, stay_rank = int((1 - _REVIEW_BUFFER) * n), int((1 + _REVIEW_BUFFER) * n)
    top = order[rank[order] < enter_rank]  # the top names belong to the index
    staying = order[member[order] & (rank[order] >= enter_rank) & (rank[order] < stay_rank)]
    rest = order[rank[order] >= enter_rank]
    rest = rest[~np.isin(rest, staying)]
    unranked = np.flatnonzero(member & (rank == len(member)))  # e.g. suspended on the review day
    priority = np.concatenate([top, staying, rest, unranked]).astype(int)
    new = np.zeros_like(member)
    new[priority[:n]] = True
    added = np.flatnonzero(new & ~member)
    cap = int(_REVIEW_MAX_CHANGE * n)
    if len(added) > cap:  # the best-ranked replacements first; the others wait for the next review
        new[added[np.argsort(rank[added], kind="stable")][cap:]] = False
        dropped = np.flatnonzero(member & ~new)
        new[dropped[np.argsort(rank[dropped], kind="stable")][: n - new.sum()]] = True
    return new


def _review_days(dates: pd.DatetimeIndex) -> set[int]:
    """Positions of the first trading day after the second Friday of each June and December."""
    out: set[int] = set()
    for year in sorted(set(dates.year)):
        for month in (6, 12):
            fridays = pd.date_range(f"{year}-{month:02d}-01", periods=31, freq="D")
            fridays = fridays[(fridays.month == month) & (fridays.weekday == 4)]
            if len(fridays) < 2:
                continue
            pos = int(np.searchsorted(dates, fridays[1], side="right"))
            if 0 < pos < len(dates):
                out.add(pos)
    return out


# --- measured strengths of the planted effects ---------------------------------------------------------


def daily_rank_ic(signal: np.ndarray, target: np.ndarray, eligible: np.ndarray, min_stocks: int = 20) -> np.ndarray:
    """Spearman correlation across stocks, one per day, of two (date x code) matrices.

    Only cells that are eligible and finite in both matrices count; days with fewer than ``min_stocks``
    such cells give NaN.
    """
    ok = eligible & np.isfinite(signal) & np.isfinite(target)
    a = pd.DataFrame(np.where(ok, signal, np.nan)).rank(axis=1).to_numpy(copy=True)
    b = pd.DataFrame(np.where(ok, target, np.nan)).rank(axis=1).to_numpy(copy=True)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # days with no eligible stock
        a -= np.nanmean(a, axis=1, keepdims=True)
        b -= np.nanmean(b, axis=1, keepdims=True)
    num = np.nansum(a * b, axis=1)
    den = np.sqrt(np.nansum(a * a, axis=1) * np.nansum(b * b, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        ic = num / den
    ic[ok.sum(axis=1) < min_stocks] = np.nan
    return ic


class LabelWindow(Protocol):
    """The days of a label (:class:`backtest.labels.LabelSpec` is one): bought at the open of
    ``t + entry_offset``, sold at the open of ``t + exit_offset``."""

    entry_offset: int
    exit_offset: int


def planted_effect_strengths(market: SyntheticMarket, label: LabelWindow) -> pd.DataFrame:
    """Measure each planted effect as a daily rank IC against the open-to-open return of ``label``'s
    window (``backtest.labels.LabelSpec()``: the default label, T+1 to T+5 open).

    Returns a DataFrame with one row per effect: the mean daily rank IC over index members, its
    standard error (days are overlapping, so the error is scaled by sqrt(h), h = ``exit_offset``) and
    the number of days.
    """
    horizon = label.exit_offset
    p = market.panel
    wide = {
        c: p[c].unstack("code").reindex(index=market.truth.dates.astype("datetime64[ns]"), columns=market.truth.codes)
        for c in (
            "open",
            "close",
            "amount",
            "buy_lg_amount",
            "buy_elg_amount",
            "sell_lg_amount",
            "sell_elg_amount",
            "in_universe",
        )
    }
    open_ = wide["open"].to_numpy()
    close = wide["close"].to_numpy()
    grid = WideGrid.of(p)  # the labels' trading rule; a day without a row is a day without trading
    trading = pd.DataFrame(tradability.trading(p, grid), index=grid.dates, columns=grid.codes)
    trading = trading.reindex(index=wide["open"].index, columns=wide["open"].columns, fill_value=False)
    not_trading = ~trading.to_numpy(dtype=bool)
    member = wide["in_universe"].fillna(False).to_numpy(dtype=bool)
    entry, exit_ = _shift(open_, -label.entry_offset), _shift(open_, -horizon)
    tradable = ~_shift(not_trading.astype(float), -label.entry_offset, fill=1).astype(bool) & ~_shift(
        not_trading.astype(float), -horizon, fill=1
    ).astype(bool)
    label = np.where(tradable, exit_ / entry - 1.0, np.nan)

    amount = wide["amount"].to_numpy()
    main = (
        wide["buy_lg_amount"] + wide["buy_elg_amount"] - wide["sell_lg_amount"] - wide["sell_elg_amount"]
    ).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        main_rate = np.where(amount > 0, main / amount, np.nan)
    mf_ma5 = pd.DataFrame(main_rate).rolling(5, min_periods=3).mean().to_numpy()
    ret5 = close / _shift(close, 5) - 1.0
    logret = pd.DataFrame(np.log(close)).diff()
    vol20 = logret.rolling(20, min_periods=15).std().to_numpy()

    truth = market.truth
    tilt = np.array([truth.industry_tilt[str(x)] for x in p["industry"].cat.categories])
    ind_codes = p["industry"].cat.codes.groupby(level="code").first().reindex(truth.codes).to_numpy()
    tilt_wide = np.broadcast_to(tilt[ind_codes][None, :], label.shape)
    bull, bear = truth.regime > 0, truth.regime < 0

    def row(name: str, signal: np.ndarray, days: np.ndarray | None = None) -> dict[str, float]:
        ic = daily_rank_ic(signal, label, member)
        if days is not None:
            ic = ic[days]
        ic = ic[np.isfinite(ic)]
        return {
            "effect": name,
            "rank_ic": ic.mean(),
            "std_err": ic.std(ddof=1) / np.sqrt(len(ic)) * np.sqrt(horizon),
            "days": len(ic),
        }

    rows = [
        row("money flow: main-force net inflow rate, 5-day mean", mf_ma5),
        row("reversal: past 5-day return", ret5),
        row("volatility: 20-day realized volatility", vol20),
        row("slow drift (unobservable truth)", truth.drift),
        row("industry tilt in bull regimes", tilt_wide, bull),
        row("industry tilt in bear regimes", tilt_wide, bear),
        row("label overlap: previous day's label (what a leaky fit sees)", _shift(label, 1)),
    ]
    return pd.DataFrame(rows).set_index("effect")


def _shift(x: np.ndarray, k: int, fill: float = np.nan) -> np.ndarray:
    """Row shift of a (date x code) matrix: ``out[t] = x[t - k]`` (``k < 0`` looks ahead)."""
    out = np.full_like(x, fill, dtype=float)
    if k > 0:
        out[k:] = x[:-k]
    elif k < 0:
        out[:k] = x[-k:]
    else:
        out[:] = x
    return out


def observable_expected_return(truth: MarketTruth, days: int) -> np.ndarray:
    """Expected log return over the ``days`` daily returns after each date (date x code), from the
    planted components that the data reveal, given the latent states on that date.

    With ``phi`` the AR(1) persistence of each state, the return of day ``s`` holds
    ``flow_scale * flow[s-1]``, ``transient[s] - transient[s-1]`` and the industry's regime part, so over
    days ``t+1 .. t+days``::

        E = flow_scale * flow[t] * (1 - phi_f**days) / (1 - phi_f)      informed flow (seen in money flow)
          + transient[t] * (phi_r**days - 1)                             reversal (seen in past returns)
          + industry_drift[t, g] * days                                  industry x regime

    The slow drift (unobservable by construction), the market, size and noise terms are left out: the
    first is what no feature can see, the others are common to a day or unpredictable. This is an
    upper bound for a model, not a model: the states are the generator's, which features only estimate
    (the money flow carries them with noise, the regime must be inferred).
    """
    states = (truth.transient, truth.flow_scale, truth.industry_drift, truth.industry_of)
    if any(state is None for state in states):
        raise ConfigError("the synthetic market's truth lacks its observable states; make it with simulate_market")
    phi_f, phi_r = truth.flow_persistence, truth.reversal_persistence
    flow_sum = (1.0 - phi_f**days) / (1.0 - phi_f)
    return (
        truth.flow_scale[None, :] * truth.flow * flow_sum
        + truth.transient * (phi_r**days - 1.0)
        + truth.industry_drift[:, truth.industry_of] * days
    )


def oracle_scores(market: SyntheticMarket, holding_days: int) -> pd.Series:
    """:func:`observable_expected_return` over ``holding_days`` on every row of the market's panel, indexed
    by (date, code): the oracle that ranks by the planted observable components (``oracle_rank_ic``).

    Pass the label's own window, :attr:`backtest.labels.LabelSpec.holding_days` (the daily returns the
    label spans: 4 for open(t+1) -> open(t+5)), so the oracle looks as far ahead as the label does."""
    wide = observable_expected_return(market.truth, holding_days)
    index = market.panel.index
    rows = market.truth.dates.get_indexer(index.get_level_values(0))
    cols = market.truth.codes.get_indexer(index.get_level_values(1))
    return pd.Series(wide[rows, cols], index=index, name="oracle")


def synthetic_market(**params: object) -> SyntheticMarket:
    """The synthetic market (panel and truth) from keyword parameters (the ``data=synthetic`` config
    group): the panel is the data, the truth gives the oracle of a run on it."""
    names = set(SyntheticMarketConfig.__dataclass_fields__)
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(f"data=synthetic: unknown parameter(s) {unknown}; known: {sorted(names)}")
    return simulate_market(SyntheticMarketConfig(**params))  # type: ignore[arg-type]
