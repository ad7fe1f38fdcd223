"""Oscillators: RSI, KDJ, MACD, CCI, Williams %R, DMI/ADX, TRIX, PSY, AR/BR, MFI.

Conventions follow the usual A-share charting formulas; the recursive ones use
``ewm(adjust=False)`` smoothing (``SMA(X, N, 1)`` in Tongdaxin notation is ``alpha = 1/N``). MACD values are
divided by the close so that they compare across stocks of different price levels.
"""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Compute, Indicator
from backtest.features.inputs import MarketData, activity_min_periods
from backtest.features.momentum import exponential_average
from backtest.features.rolling import (
    ewm_mean,
    ewm_span_alpha,
    lag,
    rolling_mad,
    rolling_max,
    rolling_mean,
    rolling_min,
    rolling_sum,
)


def _rsi(n: int) -> Compute:
    def rsi(m: MarketData) -> np.ndarray:
        delta = m.close - lag(m.close, 1)
        gain = ewm_mean(np.maximum(delta, 0.0), 1.0 / n, min_periods=n)  # np.maximum keeps a NaN a NaN
        loss = ewm_mean(np.maximum(-delta, 0.0), 1.0 / n, min_periods=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return 100.0 * gain / (gain + loss)

    return rsi


def _kdj_lines(m: MarketData) -> np.ndarray:
    def make() -> np.ndarray:
        low = rolling_min(m.low, 9)
        high = rolling_max(m.high, 9)
        rng = high - low
        with np.errstate(invalid="ignore", divide="ignore"):
            rsv = 100.0 * (m.close - low) / rng
        rsv = np.where(rng > 0, rsv, np.where(np.isnan(rng), np.nan, 50.0))  # flat 9-day range: neutral 50
        k = ewm_mean(rsv, 1.0 / 3.0)
        d = ewm_mean(k, 1.0 / 3.0)
        return np.stack([k, d, 3.0 * k - 2.0 * d])

    return m.derived("kdj", make)


def _kdj(part: int) -> Compute:
    def kdj(m: MarketData) -> np.ndarray:
        return _kdj_lines(m)[part]

    return kdj


def _macd_lines(m: MarketData) -> np.ndarray:
    def make() -> np.ndarray:
        dif = exponential_average(m, 12) - exponential_average(m, 26)
        dea = ewm_mean(dif, ewm_span_alpha(9), min_periods=9)
        return np.stack([dif, dea, 2.0 * (dif - dea)]) / m.close

    return m.derived("macd", make)


def _macd(part: int) -> Compute:
    def macd(m: MarketData) -> np.ndarray:
        return _macd_lines(m)[part]

    return macd


def cci_14(m: MarketData) -> np.ndarray:
    """Commodity channel index: (TP - MA(TP, 14)) / (0.015 * mean absolute deviation), TP = (H + L + C) / 3."""
    tp = (m.high + m.low + m.close) / 3.0
    mad = rolling_mad(tp, 14)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (tp - rolling_mean(tp, 14)) / (0.015 * mad)
    out[mad <= 0] = np.nan
    return out


def wr_14(m: MarketData) -> np.ndarray:
    """Williams %R: -100 * (14-day high - close) / (14-day high - 14-day low), in [-100, 0]."""
    high = rolling_max(m.high, 14)
    low = rolling_min(m.low, 14)
    rng = high - low
    with np.errstate(invalid="ignore", divide="ignore"):
        out = -100.0 * (high - m.close) / rng
    out[rng <= 0] = np.nan
    return out


def _dmi_lines(m: MarketData) -> np.ndarray:
    def make() -> np.ndarray:
        alpha = 1.0 / 14.0
        up = m.high - lag(m.high, 1)
        down = lag(m.low, 1) - m.low
        nan = np.isnan(up) | np.isnan(down)
        plus_dm = np.where(nan, np.nan, np.where((up > down) & (up > 0), up, 0.0))
        minus_dm = np.where(nan, np.nan, np.where((down > up) & (down > 0), down, 0.0))
        prev = lag(m.close, 1)
        tr = np.fmax(m.high - m.low, np.fmax(np.abs(m.high - prev), np.abs(m.low - prev)))
        tr = np.where(nan, np.nan, tr)
        atr = ewm_mean(tr, alpha, min_periods=14)
        with np.errstate(invalid="ignore", divide="ignore"):
            pdi = 100.0 * ewm_mean(plus_dm, alpha, min_periods=14) / atr
            mdi = 100.0 * ewm_mean(minus_dm, alpha, min_periods=14) / atr
            dx = 100.0 * np.abs(pdi - mdi) / (pdi + mdi)
        adx = ewm_mean(dx, alpha, min_periods=14)
        return np.stack([adx, pdi, mdi])

    return m.derived("dmi", make)


def _dmi(part: int) -> Compute:
    def dmi(m: MarketData) -> np.ndarray:
        return _dmi_lines(m)[part]

    return dmi


def trix_12(m: MarketData) -> np.ndarray:
    """TRIX: 100 * one-day change of the triple EMA (span 12) of close."""
    alpha = ewm_span_alpha(12)
    e3 = ewm_mean(ewm_mean(exponential_average(m, 12), alpha, min_periods=12), alpha, min_periods=12)
    return 100.0 * (e3 / lag(e3, 1) - 1.0)


def psy_12(m: MarketData) -> np.ndarray:
    """Psychological line: share of the last 12 days that closed up."""
    up = np.where(np.isnan(m.ret), np.nan, (m.ret > 0).astype(np.float64))
    return rolling_mean(up, 12)


def ar_26(m: MarketData) -> np.ndarray:
    """AR sentiment: sum(high - open) / sum(open - low) over 26 days."""
    return rolling_sum(m.high - m.open, 26) / rolling_sum(m.open - m.low, 26)


def br_26(m: MarketData) -> np.ndarray:
    """BR sentiment: sum(max(high - prev close, 0)) / sum(max(prev close - low, 0)) over 26 days."""
    prev = lag(m.close, 1)
    return rolling_sum(np.maximum(m.high - prev, 0.0), 26) / rolling_sum(np.maximum(prev - m.low, 0.0), 26)


def mfi_14(m: MarketData) -> np.ndarray:
    """Money flow index: 100 * up-day money flow / total money flow over 14 days (traded days only),
    money flow = typical price * volume."""
    tp = (m.high + m.low + m.close) / 3.0
    flow = tp * m.activity("volume")
    prev = lag(tp, 1)
    pos = np.where(np.isnan(flow) | np.isnan(prev), np.nan, np.where(tp > prev, flow, 0.0))
    neg = np.where(np.isnan(flow) | np.isnan(prev), np.nan, np.where(tp < prev, flow, 0.0))
    need = activity_min_periods(14)
    pos_sum = rolling_sum(pos, 14, need)
    return 100.0 * pos_sum / (pos_sum + rolling_sum(neg, 14, need))


_HLC = ("high", "low", "close")


def _osc(name: str, fn: Compute, inputs: tuple[str, ...], lookback: int, description: str) -> Indicator:
    return Indicator(name, fn, inputs, lookback, "oscillator", description)


INDICATORS: tuple[Indicator, ...] = (
    *(
        _osc(f"rsi_{n}", _rsi(n), ("close",), n, f"RSI over {n} days: 100 * SMA(gain, {n}, 1) / SMA(|change|, {n}, 1)")
        for n in (6, 14, 24)
    ),
    _osc("kdj_k", _kdj(0), _HLC, 8, "KDJ K: SMA(RSV, 3, 1), RSV = 100 * (C - LLV(L, 9)) / (HHV(H, 9) - LLV(L, 9))"),
    _osc("kdj_d", _kdj(1), _HLC, 8, "KDJ D: SMA(K, 3, 1)"),
    _osc("kdj_j", _kdj(2), _HLC, 8, "KDJ J: 3K - 2D"),
    _osc("macd_dif", _macd(0), ("close",), 25, "MACD DIF / close: (EMA12 - EMA26) / close"),
    _osc("macd_dea", _macd(1), ("close",), 33, "MACD DEA / close: EMA(DIF, 9) / close"),
    _osc("macd_hist", _macd(2), ("close",), 33, "MACD histogram / close: 2 * (DIF - DEA) / close"),
    _osc("cci_14", cci_14, _HLC, 13, "commodity channel index over 14 days"),
    _osc("wr_14", wr_14, _HLC, 13, "Williams %R over 14 days, in [-100, 0]"),
    _osc("adx_14", _dmi(0), _HLC, 27, "average directional index (Wilder, 14): trend strength"),
    _osc("plus_di_14", _dmi(1), _HLC, 14, "+DI (Wilder, 14): upward directional movement over true range"),
    _osc("minus_di_14", _dmi(2), _HLC, 14, "-DI (Wilder, 14): downward directional movement over true range"),
    _osc("trix_12", trix_12, ("close",), 34, "TRIX: 100 * daily change of the triple EMA(12) of close"),
    _osc("psy_12", psy_12, ("close",), 12, "share of up days among the last 12"),
    _osc("ar_26", ar_26, ("open", "high", "low"), 25, "AR: sum(H - O) / sum(O - L) over 26 days"),
    _osc("br_26", br_26, _HLC, 26, "BR: sum(max(H - prev C, 0)) / sum(max(prev C - L, 0)) over 26 days"),
    _osc("mfi_14", mfi_14, (*_HLC, "volume"), 14, "money flow index over 14 days (volume-weighted RSI)"),
)
