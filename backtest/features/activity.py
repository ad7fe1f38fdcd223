"""Trading-activity indicators: volume, amount and turnover relative to their averages, liquidity.

Activity on a suspended day is missing, not zero (``backtest.features.inputs``): ratios are NaN on that
day and averages run over the traded days of the window, needing at least half of it.
Turnover is ``amount / float_mv`` (traded value over free-float market value).
"""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Compute, Indicator
from backtest.features.inputs import MarketData, activity_min_periods
from backtest.features.rolling import rolling_corr, rolling_mean, rolling_std


def turnover(m: MarketData) -> np.ndarray:
    """Daily turnover: amount / free-float market value."""
    return m.derived("turnover", lambda: m.activity("amount") / m.level("float_mv"))


def _series(m: MarketData, what: str) -> np.ndarray:
    return turnover(m) if what == "turnover" else m.activity(what)


def _avg(m: MarketData, what: str, n: int) -> np.ndarray:
    return m.derived(f"avg:{what}:{n}", lambda: rolling_mean(_series(m, what), n, activity_min_periods(n)))


def _ratio_to_avg(what: str, n: int) -> Compute:
    def ratio_to_avg(m: MarketData) -> np.ndarray:
        return _series(m, what) / _avg(m, what, n)

    return ratio_to_avg


def volume_ma_ratio_5_20(m: MarketData) -> np.ndarray:
    """5-day over 20-day average volume: is trading picking up."""
    return _avg(m, "volume", 5) / _avg(m, "volume", 20)


def amihud_20(m: MarketData) -> np.ndarray:
    """Amihud illiquidity: mean of |daily return| / amount over 20 days, per billion CNY."""
    return rolling_mean(np.abs(m.ret) / m.activity("amount") * 1e9, 20, activity_min_periods(20))


def vwap_ratio(m: MarketData) -> np.ndarray:
    """Close over the day's volume-weighted average price (amount / volume), minus 1 (raw prices)."""
    return m.raw_close / (m.activity("amount") / m.activity("volume")) - 1.0


def pv_corr_20(m: MarketData) -> np.ndarray:
    """Correlation of daily returns with log volume over the traded days of the last 20."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_volume = np.log(m.activity("volume"))
    return rolling_corr(m.ret, log_volume, 20, activity_min_periods(20))


def volume_cv_20(m: MarketData) -> np.ndarray:
    """Coefficient of variation of daily volume over 20 days: std / mean."""
    need = activity_min_periods(20)
    return rolling_std(m.activity("volume"), 20, need) / _avg(m, "volume", 20)


def _a(name: str, fn: Compute, inputs: tuple[str, ...], lookback: int, description: str, **flags: bool) -> Indicator:
    return Indicator(name, fn, inputs, lookback, "activity", description, **flags)


_TURNOVER = ("amount", "float_mv")

INDICATORS: tuple[Indicator, ...] = (
    *(
        _a(f"volume_ratio_{n}", _ratio_to_avg("volume", n), ("volume",), n - 1, f"volume / its {n}-day average")
        for n in (5, 20)
    ),
    _a("volume_ma_ratio_5_20", volume_ma_ratio_5_20, ("volume",), 19, "5-day / 20-day average volume"),
    *(
        _a(f"amount_ratio_{n}", _ratio_to_avg("amount", n), ("amount",), n - 1, f"amount / its {n}-day average")
        for n in (5, 20)
    ),
    _a("turnover", turnover, _TURNOVER, 0, "amount / free-float market value", aggregate=True),
    *(
        _a(f"turnover_ratio_{n}", _ratio_to_avg("turnover", n), _TURNOVER, n - 1, f"turnover / its {n}-day average")
        for n in (5, 20)
    ),
    _a("amihud_20", amihud_20, ("close", "amount"), 20, "Amihud illiquidity over 20 days"),
    _a("vwap_ratio", vwap_ratio, ("close", "amount", "volume"), 0, "close / (amount / volume) - 1"),
    _a("pv_corr_20", pv_corr_20, ("close", "volume"), 20, "20-day correlation of returns and log volume"),
    _a("volume_cv_20", volume_cv_20, ("volume",), 19, "20-day std / mean of volume"),
)
