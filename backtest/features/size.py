"""Size indicators: log market capitalisation."""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Indicator
from backtest.features.inputs import MarketData


def log_mv(m: MarketData) -> np.ndarray:
    """Natural log of total market value (CNY)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(m.level("total_mv"))


def log_float_mv(m: MarketData) -> np.ndarray:
    """Natural log of free-float market value (CNY)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(m.level("float_mv"))


INDICATORS: tuple[Indicator, ...] = (
    Indicator("log_mv", log_mv, ("total_mv",), 0, "size", "log total market value"),
    Indicator("log_float_mv", log_float_mv, ("float_mv",), 0, "size", "log free-float market value"),
)
