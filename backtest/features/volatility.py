"""Volatility and range indicators: return volatility, ATR, Bollinger bands, daily ranges, tails.

The six the research log removed as noise (``vol_5d``, ``vol_10d``, ``vol_20d``, ``boll_pctb``,
``boll_width``, ``atr_pct``) live here; the ``no_volatility`` feature set excludes exactly those and
everything derived from them.
"""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Compute, Indicator
from backtest.features.inputs import MarketData
from backtest.features.momentum import moving_average
from backtest.features.rolling import lag, rolling_max, rolling_mean, rolling_min, rolling_skew, rolling_std


def _vol(n: int) -> Compute:
    def vol(m: MarketData) -> np.ndarray:
        return rolling_std(m.ret, n, two_pass=False)  # daily returns are centered near 0: one pass is exact enough

    return vol


def true_range(m: MarketData) -> np.ndarray:
    """max(high, previous close) - min(low, previous close); the gap over a suspension counts."""
    prev = lag(m.close, 1)
    return np.maximum(m.high, prev) - np.minimum(m.low, prev)


def atr_pct(m: MarketData) -> np.ndarray:
    """Average true range over 14 days (simple mean) divided by the close."""
    return rolling_mean(true_range(m), 14) / m.close


def _bollinger(m: MarketData) -> np.ndarray:
    def make() -> np.ndarray:
        mid = moving_average(m, 20)
        sd = rolling_std(m.close, 20, mean=mid)
        flat = sd <= 1e-12 * mid
        with np.errstate(invalid="ignore", divide="ignore"):
            pctb = (m.close - (mid - 2.0 * sd)) / (4.0 * sd)
        width = 4.0 * sd / mid
        pctb[flat] = np.nan  # a flat band has no position ...
        width[flat] = 0.0  # ... and no width
        return np.stack([pctb, width])

    return m.derived("bollinger", make)


def boll_pctb(m: MarketData) -> np.ndarray:
    """Bollinger %b: (close - lower) / (upper - lower), bands = MA20 +- 2 std (ddof 1); NaN if flat."""
    return _bollinger(m)[0]


def boll_width(m: MarketData) -> np.ndarray:
    """Bollinger band width: (upper - lower) / MA20 = 4 std / MA20."""
    return _bollinger(m)[1]


def hl_range(m: MarketData) -> np.ndarray:
    """Daily range: (high - low) / close (0 on a suspended day's flat bar)."""
    return (m.high - m.low) / m.close


def upper_shadow(m: MarketData) -> np.ndarray:
    """Upper shadow of the candle: (high - max(open, close)) / close."""
    return (m.high - np.maximum(m.open, m.close)) / m.close


def lower_shadow(m: MarketData) -> np.ndarray:
    """Lower shadow of the candle: (min(open, close) - low) / close."""
    return (np.minimum(m.open, m.close) - m.low) / m.close


def ret_skew_20(m: MarketData) -> np.ndarray:
    """Sample skewness (bias corrected) of daily returns over 20 days."""
    return rolling_skew(m.ret, 20)


def max_ret_20(m: MarketData) -> np.ndarray:
    """Largest daily return over 20 days (lottery-like demand)."""
    return rolling_max(m.ret, 20)


def min_ret_20(m: MarketData) -> np.ndarray:
    """Smallest daily return over 20 days (crash exposure)."""
    return rolling_min(m.ret, 20)


_HLC = ("high", "low", "close")
_OHLC = ("open", "high", "low", "close")


def _v(name: str, fn: Compute, inputs: tuple[str, ...], lookback: int, description: str, **flags: bool) -> Indicator:
    return Indicator(name, fn, inputs, lookback, "volatility", description, **flags)


INDICATORS: tuple[Indicator, ...] = (
    *(
        _v(f"vol_{n}d", _vol(n), ("close",), n, f"standard deviation (ddof 1) of daily returns over {n} days")
        for n in (5, 10, 20)
    ),
    _v("atr_pct", atr_pct, _HLC, 14, "14-day average true range / close", aggregate=True),
    _v("boll_pctb", boll_pctb, ("close",), 19, "Bollinger %b (20 days, 2 std)", aggregate=True),
    _v("boll_width", boll_width, ("close",), 19, "Bollinger band width (20 days, 2 std) / MA20"),
    _v("hl_range", hl_range, _HLC, 0, "daily high-low range / close", aggregate=True),
    _v("upper_shadow", upper_shadow, _OHLC, 0, "upper candle shadow / close"),
    _v("lower_shadow", lower_shadow, _OHLC, 0, "lower candle shadow / close"),
    _v("ret_skew_20", ret_skew_20, ("close",), 20, "skewness of daily returns over 20 days"),
    _v("max_ret_20", max_ret_20, ("close",), 20, "largest daily return over 20 days"),
    _v("min_ret_20", min_ret_20, ("close",), 20, "smallest daily return over 20 days"),
)
