"""Momentum and trend indicators: returns, moving-average ratios, rate of change, trend fits.

All read the adjusted close (and the open for the overnight / intraday split); see
``backtest.features.inputs`` for suspended days.
"""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Compute, Indicator
from backtest.features.inputs import MarketData
from backtest.features.rolling import (
    ewm_mean,
    ewm_span_alpha,
    lag,
    rolling_max,
    rolling_mean,
    rolling_min,
    rolling_trend,
)


def moving_average(m: MarketData, window: int) -> np.ndarray:
    """Simple moving average of the adjusted close over ``window`` days (shared by several indicators)."""
    return m.derived(f"ma:{window}", lambda: rolling_mean(m.close, window))


def exponential_average(m: MarketData, span: int) -> np.ndarray:
    """EMA of the adjusted close, ``ewm(span, adjust=False)``, NaN for the first ``span - 1`` days."""
    return m.derived(f"ema:{span}", lambda: ewm_mean(m.close, ewm_span_alpha(span), min_periods=span))


def _ret(n: int) -> Compute:
    def ret(m: MarketData) -> np.ndarray:
        return m.close / lag(m.close, n) - 1.0

    return ret


def _mom_skip(n: int, skip: int) -> Compute:
    def mom_skip(m: MarketData) -> np.ndarray:
        return lag(m.close, skip) / lag(m.close, n) - 1.0

    return mom_skip


def _ma_ratio(n: int) -> Compute:
    def ma_ratio(m: MarketData) -> np.ndarray:
        return m.close / moving_average(m, n) - 1.0

    return ma_ratio


def _ma_cross(fast: int, slow: int) -> Compute:
    def ma_cross(m: MarketData) -> np.ndarray:
        return moving_average(m, fast) / moving_average(m, slow) - 1.0

    return ma_cross


def _ema_ratio(span: int) -> Compute:
    def ema_ratio(m: MarketData) -> np.ndarray:
        return m.close / exponential_average(m, span) - 1.0

    return ema_ratio


def _roc(n: int) -> Compute:
    def roc(m: MarketData) -> np.ndarray:
        return 100.0 * (m.close / lag(m.close, n) - 1.0)

    return roc


def bbi_ratio(m: MarketData) -> np.ndarray:
    """Close over the bull-bear index (mean of the 3, 6, 12 and 24-day moving averages), minus 1."""
    bbi = sum(moving_average(m, n) for n in (3, 6, 12, 24)) / 4.0
    return m.close / bbi - 1.0


def _trend(window: int, part: int) -> Compute:
    def trend(m: MarketData) -> np.ndarray:
        fit = m.derived(f"trend:{window}", lambda: np.stack(rolling_trend(np.log(m.close), window)))
        return fit[part]

    return trend


def open_gap(m: MarketData) -> np.ndarray:
    """Overnight return: open over the previous close, minus 1."""
    return m.open / lag(m.close, 1) - 1.0


def intraday_ret(m: MarketData) -> np.ndarray:
    """Intraday return: close over open, minus 1."""
    return m.close / m.open - 1.0


def _price_position(window: int) -> Compute:
    def price_position(m: MarketData) -> np.ndarray:
        lo = rolling_min(m.close, window)
        hi = rolling_max(m.close, window)
        rng = hi - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (m.close - lo) / rng
        out[rng <= 0] = np.nan
        return out

    return price_position


def _close(name: str, fn: Compute, lookback: int, description: str, **flags: bool) -> Indicator:
    return Indicator(name, fn, ("close",), lookback, "momentum", description, **flags)


INDICATORS: tuple[Indicator, ...] = (
    *(_close(f"ret_{n}d", _ret(n), n, f"{n}-day return: close[t] / close[t-{n}] - 1") for n in (1, 3, 5, 10, 20, 60)),
    _close("mom_20_5", _mom_skip(20, 5), 20, "20-day momentum without the last week: close[t-5] / close[t-20] - 1"),
    *(
        _close(f"ma_ratio_{n}", _ma_ratio(n), n - 1, f"close / {n}-day moving average of close - 1")
        for n in (5, 10, 20, 60)
    ),
    *(
        _close(f"ma_cross_{f}_{s}", _ma_cross(f, s), s - 1, f"{f}-day over {s}-day moving average of close - 1")
        for f, s in ((5, 20), (10, 60))
    ),
    *(
        _close(f"ema_ratio_{n}", _ema_ratio(n), n - 1, f"close / EMA(close, span {n}, adjust=False) - 1")
        for n in (12, 26)
    ),
    *(_close(f"roc_{n}", _roc(n), n, f"rate of change: 100 * (close[t] / close[t-{n}] - 1)") for n in (12, 24)),
    _close("bbi_ratio", bbi_ratio, 23, "close / BBI - 1, BBI = mean of the 3, 6, 12, 24-day moving averages"),
    _close("trend_slope_20", _trend(20, 0), 19, "least-squares slope of log close on time over 20 days, per day"),
    _close("trend_r2_20", _trend(20, 1), 19, "R^2 of the 20-day log-close linear trend (trend quality)"),
    Indicator(
        "open_gap",
        open_gap,
        ("open", "close"),
        1,
        "momentum",
        "overnight return: open / previous close - 1",
        aggregate=True,
    ),
    Indicator(
        "intraday_ret",
        intraday_ret,
        ("open", "close"),
        0,
        "momentum",
        "intraday return: close / open - 1",
        aggregate=True,
    ),
    *(
        _close(
            f"price_pos_{n}",
            _price_position(n),
            n - 1,
            f"position of close in its {n}-day close range: (close - min) / (max - min); NaN for a flat range",
        )
        for n in (20, 60)
    ),
)
