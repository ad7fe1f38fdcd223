"""Indicator values: exact small numbers, agreement with plain pandas formulas, suspensions, gaps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from backtest.features import FeatureSetSpec, build_features

RAW_ONLY = dict(exclude=(), cs_rank=False, cs_z=False, aggregate=())


def close_panel(closes: dict[str, list[float]]) -> pd.DataFrame:
    """A close-only panel from per-stock close lists (all of the same length)."""
    n = len(next(iter(closes.values())))
    dates = pd.bdate_range("2022-01-03", periods=n)
    frames = [
        pd.DataFrame({"close": values}, index=pd.MultiIndex.from_product([dates, [code]], names=["date", "code"]))
        for code, values in closes.items()
    ]
    return pd.concat(frames).sort_index()


def raw_features(panel: pd.DataFrame, names: list[str] | None = None) -> pd.DataFrame:
    spec = FeatureSetSpec(name="test", indicators=tuple(names) if names else None, **RAW_ONLY)
    return build_features(panel, spec, data_fingerprint="test", rows="all").to_frame()


def test_returns_and_ratios_on_a_hand_series():
    frame = raw_features(
        close_panel({"A.SH": [1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]}),
        ["ret_1d", "ret_5d", "ma_ratio_5", "roc_12", "price_pos_20", "psy_12", "rsi_6"],
    )
    a = frame.xs("A.SH", level="code")
    assert np.isnan(a["ret_1d"].iloc[0]) and a["ret_1d"].iloc[1] == 1.0 and a["ret_1d"].iloc[3] == np.float32(4 / 3 - 1)
    assert a["ret_5d"].isna().sum() == 5 and a["ret_5d"].iloc[5] == 5.0  # 6 / 1 - 1
    assert a["ma_ratio_5"].iloc[4] == np.float32(5 / 3 - 1)  # 5 / mean(1..5) - 1
    assert a["ma_ratio_5"].iloc[13] == np.float32(14 / 12 - 1)  # 14 / mean(10..14) - 1
    assert a["roc_12"].iloc[12] == np.float32(100 * (13 / 1 - 1)) and a["roc_12"].iloc[13] == np.float32(600.0)
    assert a["price_pos_20"].isna().all()  # 14 days < 20-day window
    assert a["psy_12"].iloc[12] == 1.0 and np.isnan(a["psy_12"].iloc[11])
    assert a["rsi_6"].iloc[6] == 100.0  # only gains


def test_volatility_and_bollinger_on_a_hand_series():
    closes = [10.0, 11.0, 10.0, 11.0, 10.0, 11.0]  # returns +0.1, -1/11, +0.1, -1/11, +0.1
    frame = raw_features(close_panel({"A.SH": closes}), ["vol_5d"]).xs("A.SH", level="code")
    r = np.array([0.1, -1 / 11, 0.1, -1 / 11, 0.1])
    assert frame["vol_5d"].iloc[5] == pytest.approx(np.std(r, ddof=1), rel=1e-6)
    assert frame["vol_5d"].iloc[:5].isna().all()


def test_flat_prices_give_zero_volatility_and_undefined_band_position():
    frame = raw_features(close_panel({"A.SH": [5.0] * 30}), ["vol_20d", "boll_pctb", "boll_width", "price_pos_20"])
    a = frame.xs("A.SH", level="code").iloc[-1]
    assert a["vol_20d"] == 0.0 and a["boll_width"] == 0.0
    assert np.isnan(a["boll_pctb"]) and np.isnan(a["price_pos_20"])


@pytest.fixture(scope="module")
def stock0(panel):
    """Raw features and the panel rows of stock 600000.SH (listed all along, never suspended)."""
    frame = raw_features(panel).xs("600000.SH", level="code")
    rows = panel.xs("600000.SH", level="code")
    return frame, rows


def _ewm(s: pd.Series, **kw) -> pd.Series:
    return s.ewm(adjust=False, **kw).mean()


def test_rsi_macd_kdj_match_pandas_formulas(stock0):
    frame, p = stock0
    c = p["close"]
    delta = c.diff()
    for n in (6, 14, 24):
        up = _ewm(delta.clip(lower=0), alpha=1 / n, min_periods=n)
        down = _ewm(-delta.clip(upper=0), alpha=1 / n, min_periods=n)
        np.testing.assert_allclose(frame[f"rsi_{n}"], 100 * up / (up + down), rtol=2e-6)
    dif = _ewm(c, span=12, min_periods=12) - _ewm(c, span=26, min_periods=26)
    dea = _ewm(dif, span=9, min_periods=9)
    np.testing.assert_allclose(frame["macd_dif"], dif / c, rtol=2e-6)
    np.testing.assert_allclose(frame["macd_dea"], dea / c, rtol=2e-6)
    np.testing.assert_allclose(frame["macd_hist"], 2 * (dif - dea) / c, rtol=2e-5, atol=1e-9)
    low9, high9 = p["low"].rolling(9).min(), p["high"].rolling(9).max()
    rsv = 100 * (c - low9) / (high9 - low9)
    k = _ewm(rsv, alpha=1 / 3)
    d = _ewm(k, alpha=1 / 3)
    np.testing.assert_allclose(frame["kdj_k"], k, rtol=2e-6)
    np.testing.assert_allclose(frame["kdj_d"], d, rtol=2e-6)
    np.testing.assert_allclose(frame["kdj_j"], 3 * k - 2 * d, rtol=2e-5)


def test_volatility_range_and_channel_indicators_match_pandas(stock0):
    frame, p = stock0
    c, h, lo = p["close"], p["high"], p["low"]
    ret = c.pct_change()
    for n in (5, 10, 20):
        np.testing.assert_allclose(frame[f"vol_{n}d"], ret.rolling(n).std(), rtol=2e-6)
    mid, sd = c.rolling(20).mean(), c.rolling(20).std()
    np.testing.assert_allclose(frame["boll_pctb"], (c - (mid - 2 * sd)) / (4 * sd), rtol=2e-5)
    np.testing.assert_allclose(frame["boll_width"], 4 * sd / mid, rtol=2e-6)
    prev = c.shift(1)
    tr = pd.concat([h, prev], axis=1).max(axis=1, skipna=False) - pd.concat([lo, prev], axis=1).min(
        axis=1, skipna=False
    )
    np.testing.assert_allclose(frame["atr_pct"], tr.rolling(14).mean() / c, rtol=2e-6)
    tp = (h + lo + c) / 3
    mad = tp.rolling(14).apply(lambda w: np.abs(w - w.mean()).mean(), raw=True)
    np.testing.assert_allclose(frame["cci_14"], (tp - tp.rolling(14).mean()) / (0.015 * mad), rtol=2e-5)
    hh, ll = h.rolling(14).max(), lo.rolling(14).min()
    np.testing.assert_allclose(frame["wr_14"], -100 * (hh - c) / (hh - ll), rtol=2e-6)
    np.testing.assert_allclose(frame["roc_12"], 100 * (c / c.shift(12) - 1), rtol=2e-6)
    np.testing.assert_allclose(frame["ret_skew_20"], ret.rolling(20).skew(), rtol=2e-5, atol=1e-6)


def test_activity_and_money_flow_match_their_definitions(stock0):
    frame, p = stock0
    np.testing.assert_allclose(frame["turnover"], p["amount"] / p["float_mv"], rtol=2e-6)
    # activity averages need half of their window: 3 of 5 days
    np.testing.assert_allclose(
        frame["volume_ratio_5"], p["volume"] / p["volume"].rolling(5, min_periods=3).mean(), rtol=2e-6
    )
    main = p["buy_lg_amount"] + p["buy_elg_amount"] - p["sell_lg_amount"] - p["sell_elg_amount"]
    np.testing.assert_allclose(frame["mf_main_net_rate"], main / p["amount"], rtol=2e-6)
    np.testing.assert_allclose(
        frame["mf_small_net_rate"], (p["buy_sm_amount"] - p["sell_sm_amount"]) / p["amount"], rtol=2e-6
    )
    np.testing.assert_allclose(
        frame["mf_elg_share"], (p["buy_elg_amount"] + p["sell_elg_amount"]) / (2 * p["amount"]), rtol=2e-6
    )
    np.testing.assert_allclose(frame["log_mv"], np.log(p["total_mv"]), rtol=1e-6)


def test_suspended_days_have_flat_prices_and_missing_activity(panel):
    frame = raw_features(panel, ["ret_1d", "hl_range", "volume_ratio_5", "mf_main_net_rate", "turnover"])
    s = frame.xs("600006.SH", level="code")
    p = panel.xs("600006.SH", level="code")
    dates = p.index
    suspended = p["is_suspended"].to_numpy()
    assert suspended.sum() == 7
    assert (s.loc[suspended, "ret_1d"] == 0.0).all() and (s.loc[suspended, "hl_range"] == 0.0).all()
    for name in ("volume_ratio_5", "mf_main_net_rate", "turnover"):
        assert s.loc[suspended, name].isna().all(), name
    resume = int(np.flatnonzero(suspended)[-1]) + 1
    # the resumption day's return covers the whole suspension: close / last traded close - 1
    last_traded = p["close"].iloc[int(np.flatnonzero(suspended)[0]) - 1]
    assert s["ret_1d"].iloc[resume] == np.float32(p["close"].iloc[resume] / last_traded - 1)
    # volume averages run over traded days and need at least 3 of the last 5
    vol = p["volume"].where(~p["is_suspended"]).to_numpy()
    assert np.isnan(s["volume_ratio_5"].iloc[resume])  # 1 traded day in the window
    assert np.isnan(s["volume_ratio_5"].iloc[resume + 1])  # 2
    expected = vol[resume + 2] / np.mean(vol[resume : resume + 3])  # 3 traded days, suspended ones skipped
    assert s["volume_ratio_5"].iloc[resume + 2] == pytest.approx(expected, rel=1e-6)
    assert dates[resume] > dates[0]


def test_adjustment_factor_keeps_returns_continuous(panel):
    frame = raw_features(panel, ["ret_1d"]).xs("600008.SH", level="code")
    p = panel.xs("600008.SH", level="code")
    adjusted = p["close"] * p["adj_factor"]
    np.testing.assert_allclose(frame["ret_1d"], adjusted.pct_change(), rtol=2e-6)
    assert abs(frame["ret_1d"].iloc[50]) < 0.2  # the raw close halved that day


def test_missing_stock_does_not_poison_others(panel):
    """Stock 1 lists late and stock 2 delists early; removing them changes no other stock's value
    (except industry-relative returns, whose peer means legitimately lose two peers)."""
    spec = FeatureSetSpec(name="test", **RAW_ONLY)
    full = build_features(panel, spec, data_fingerprint="a", rows="all").to_frame()
    others = panel.drop(index=["600001.SH", "600002.SH"], level="code")
    alone = build_features(others, spec, data_fingerprint="b", rows="all").to_frame()
    own = [c for c in full.columns if not c.startswith("ind_rel_ret")]
    np.testing.assert_array_equal(full.loc[alone.index, own].to_numpy(), alone[own].to_numpy())
    first = full.xs("600001.SH", level="code")
    assert first.index[0] == panel.index.get_level_values(0).unique()[30]
    assert np.isnan(first["ret_1d"].iloc[0]) and not np.isnan(first["ret_1d"].iloc[1])
    # a stock's NaN never spreads to its industry peers
    has_ret = full["ret_5d"].notna() & panel["industry"].reindex(full.index).notna()
    member_industry = panel.loc[full.index].groupby(["date", "industry"])["in_universe"].transform("any")
    assert full.loc[has_ret & member_industry, "ind_rel_ret_5"].notna().all()
