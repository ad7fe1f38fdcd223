"""Money-flow indicators from order-size buckets (Tushare ``moneyflow``): who is buying.

Buckets by order size: small (sm), medium (md), large (lg), extra-large (elg); each day ``buy_*`` and
``sell_*`` amounts in CNY. "Main force" is large + extra-large. All rates are divided by the day's
``amount``; suspended days are missing (see ``backtest.features.inputs``). The three the research log
found useful (``mf_main_net_rate``, ``mf_small_net_rate``, ``mf_elg_share``) get 5- and 20-day averages
by default (``..._ma5``, ``..._ma20``).
"""

from __future__ import annotations

import numpy as np

from backtest.features.indicator import Indicator
from backtest.features.inputs import MarketData, activity_min_periods
from backtest.features.rolling import rolling_sum


def main_net_inflow(m: MarketData) -> np.ndarray:
    """Main-force net inflow in CNY: buy_lg + buy_elg - sell_lg - sell_elg."""
    a = m.activity
    return m.derived(
        "main_net_inflow",
        lambda: a("buy_lg_amount") + a("buy_elg_amount") - a("sell_lg_amount") - a("sell_elg_amount"),
    )


def mf_main_net_rate(m: MarketData) -> np.ndarray:
    """Main-force net inflow rate: (buy_lg + buy_elg - sell_lg - sell_elg) / amount."""
    return main_net_inflow(m) / m.activity("amount")


def mf_small_net_rate(m: MarketData) -> np.ndarray:
    """Small-order net inflow rate: (buy_sm - sell_sm) / amount."""
    return (m.activity("buy_sm_amount") - m.activity("sell_sm_amount")) / m.activity("amount")


def mf_md_net_rate(m: MarketData) -> np.ndarray:
    """Medium-order net inflow rate: (buy_md - sell_md) / amount."""
    return (m.activity("buy_md_amount") - m.activity("sell_md_amount")) / m.activity("amount")


def mf_elg_share(m: MarketData) -> np.ndarray:
    """Extra-large-order share of the traded value: (buy_elg + sell_elg) / (2 * amount)."""
    return (m.activity("buy_elg_amount") + m.activity("sell_elg_amount")) / (2.0 * m.activity("amount"))


def mf_net_rate(m: MarketData) -> np.ndarray:
    """Reported net money inflow rate: net_mf_amount / amount."""
    return m.activity("net_mf_amount") / m.activity("amount")


def mf_main_net_5d(m: MarketData) -> np.ndarray:
    """Amount-weighted 5-day main-force net inflow rate: sum of net inflow / sum of amount (traded days)."""
    need = activity_min_periods(5)
    return rolling_sum(main_net_inflow(m), 5, need) / rolling_sum(m.activity("amount"), 5, need)


_MAIN = ("buy_lg_amount", "buy_elg_amount", "sell_lg_amount", "sell_elg_amount", "amount")

INDICATORS: tuple[Indicator, ...] = (
    Indicator(
        "mf_main_net_rate",
        mf_main_net_rate,
        _MAIN,
        0,
        "moneyflow",
        "main-force (large + extra-large) net inflow / amount",
        aggregate=True,
    ),
    Indicator(
        "mf_small_net_rate",
        mf_small_net_rate,
        ("buy_sm_amount", "sell_sm_amount", "amount"),
        0,
        "moneyflow",
        "small-order net inflow / amount",
        aggregate=True,
    ),
    Indicator(
        "mf_elg_share",
        mf_elg_share,
        ("buy_elg_amount", "sell_elg_amount", "amount"),
        0,
        "moneyflow",
        "extra-large-order share of the traded value",
        aggregate=True,
    ),
    Indicator(
        "mf_md_net_rate",
        mf_md_net_rate,
        ("buy_md_amount", "sell_md_amount", "amount"),
        0,
        "moneyflow",
        "medium-order net inflow / amount",
    ),
    Indicator(
        "mf_net_rate",
        mf_net_rate,
        ("net_mf_amount", "amount"),
        0,
        "moneyflow",
        "reported net money inflow / amount",
        aggregate=True,
    ),
    Indicator("mf_main_net_5d", mf_main_net_5d, _MAIN, 4, "moneyflow", "5-day main-force net inflow / 5-day amount"),
)
