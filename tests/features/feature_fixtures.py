"""Test data of the feature tests: a small hand-built panel with every awkward case, and five planted
look-ahead features (defined here only, never in the library registry)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from backtest.features import FeatureSetSpec
from backtest.features.inputs import MarketData
from backtest.features.registry import Indicator
from backtest.features.rolling import lag

N_DAYS = 150
#: cutoff day positions used by the causality tests; each sits on one of the panel's awkward cases
CUTOFF_POS = (40, 63, 78, 100, 130)
#: every registered feature with every transform
EVERYTHING = FeatureSetSpec(name="everything", exclude=(), industry_neutral=True)


def make_panel(seed: int = 0, n_stocks: int = 12, n_days: int = N_DAYS) -> pd.DataFrame:
    """A canonical panel with random prices and these cases (day positions):

    - stock 1 lists on day 30; stock 2 delists after day 120 (no rows outside their lives);
    - stock 3 joins the index on day 80; stock 4 leaves it on day 100; stock 9 is never a member;
    - stock 6 is suspended on days 60-66 (spanning cutoff 63), stock 7 on days 76-82 (spanning 78):
      the rows carry the last close, volume, amount and money flow 0, is_suspended True;
    - stock 8's adj_factor doubles on day 50 while its raw price halves;
    - three industries; stock 5's industry is unknown.
    """
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2021-01-04", periods=n_days, name="date")
    codes = [f"{600000 + i}.SH" for i in range(n_stocks)]
    T, N = n_days, n_stocks
    log_ret = rng.normal(0.0005, 0.02, (T, N))
    close = 10.0 * np.exp(np.cumsum(log_ret, axis=0)) * rng.uniform(0.5, 3.0, N)
    adj = np.ones((T, N))
    adj[50:, 8] = 2.0
    close[50:, 8] /= 2.0
    gap = rng.normal(0, 0.005, (T, N))
    open_ = np.vstack([close[:1], close[:-1]]) * np.exp(gap)
    open_[50, 8] /= 2.0
    high = np.maximum(open_, close) * (1 + rng.uniform(0, 0.02, (T, N)))
    low = np.minimum(open_, close) * (1 - rng.uniform(0, 0.02, (T, N)))
    volume = np.round(rng.lognormal(14, 0.4, (T, N)), -2)
    amount = volume * (high + low) / 2
    float_mv = close * rng.uniform(1e8, 1e9, N)
    total_mv = float_mv * 1.5

    suspended = np.zeros((T, N), dtype=bool)
    suspended[60:67, 6] = True
    suspended[76:83, 7] = True
    for t, i in zip(*np.nonzero(suspended)):
        close[t, i] = open_[t, i] = high[t, i] = low[t, i] = close[t - 1, i]
        volume[t, i] = amount[t, i] = 0.0

    shares = rng.dirichlet(np.ones(4), (T, N))  # sm, md, lg, elg shares of buys and of sells
    shares_sell = rng.dirichlet(np.ones(4), (T, N))
    flows = {}
    for k, size in enumerate(("sm", "md", "lg", "elg")):
        flows[f"buy_{size}_amount"] = np.round(amount * shares[..., k])
        flows[f"sell_{size}_amount"] = np.round(amount * shares_sell[..., k])
    flows["net_mf_amount"] = np.round(amount * rng.normal(0, 0.01, (T, N)))

    member = np.ones((T, N), dtype=bool)
    member[:80, 3] = False
    member[100:, 4] = False
    member[:, 9] = False
    alive = np.ones((T, N), dtype=bool)
    alive[:30, 1] = False
    alive[121:, 2] = False
    industries = np.array(["banks", "steel", "media"])[rng.integers(0, 3, N)].astype(object)
    industries[5] = None

    rows, cols = np.nonzero(alive)
    data = {
        "open": open_,
        "high": high,
        "low": low,
        "close": close,
        "volume": volume,
        "amount": amount,
        "adj_factor": adj,
        "total_mv": total_mv,
        "float_mv": float_mv,
        **flows,
    }
    frame = pd.DataFrame({k: v[rows, cols] for k, v in data.items()})
    frame["industry"] = industries[cols]
    frame["in_universe"] = member[rows, cols]
    frame["is_suspended"] = suspended[rows, cols]
    frame.index = pd.MultiIndex.from_arrays([dates[rows], pd.Index(codes)[cols]], names=["date", "code"])
    return frame.sort_index()


# --- planted look-ahead features ---------------------------------------------------------------------


def leak_shift(m: MarketData) -> np.ndarray:
    """Tomorrow's return: ret.shift(-1)."""
    out = np.full_like(m.ret, np.nan)
    out[:-1] = m.ret[1:]
    return out


def leak_centered(m: MarketData) -> np.ndarray:
    """Close over its centered 5-day mean."""
    return m.close / pd.DataFrame(m.close).rolling(5, center=True).mean().to_numpy() - 1.0


def leak_bfill(m: MarketData) -> np.ndarray:
    """Volume with suspended days back-filled from the day trading resumes."""
    return pd.DataFrame(m.activity("volume")).bfill().to_numpy()


def leak_full_sample_z(m: MarketData) -> np.ndarray:
    """5-day return standardised with the mean and std of the whole sample."""
    ret5 = m.close / lag(m.close, 5) - 1.0
    return (ret5 - np.nanmean(ret5)) / np.nanstd(ret5)


def leak_future_members(m: MarketData) -> np.ndarray:
    """5-day return ranked among the stocks that are index members at any time in the sample."""
    ret5 = m.close / lag(m.close, 5) - 1.0
    ever = m.eligible.any(axis=0)
    return pd.DataFrame(np.where(ever[None, :] & m.present, ret5, np.nan)).rank(axis=1, pct=True).to_numpy()


PLANTED: tuple[Indicator, ...] = (
    Indicator("leak_shift", leak_shift, ("close",), 1, "momentum", "planted: shift(-1)"),
    Indicator("leak_centered", leak_centered, ("close",), 4, "momentum", "planted: centered window"),
    Indicator("leak_bfill", leak_bfill, ("volume",), 0, "activity", "planted: back-fill"),
    Indicator("leak_full_sample_z", leak_full_sample_z, ("close",), 5, "momentum", "planted: full-sample z"),
    Indicator(
        "leak_future_members",
        leak_future_members,
        ("close",),
        5,
        "momentum",
        "planted: rank among future members",
        cross_sectional=False,
    ),
)
