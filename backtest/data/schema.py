"""The canonical panel: the one data contract every module reads.

::

    panel : DataFrame indexed by (date, code), sorted by date then code, unique
            date  datetime64[ns] trading day (on the exchange calendar)
            code  str            e.g. "600000.SH" (Tushare ts_code style)

    column           dtype    unit / meaning                                      required
    ---------------  -------  --------------------------------------------------  --------
    close            float64  raw close price, CNY                                 yes
    open high low    float64  raw prices, CNY; low <= open, close <= high          no
    volume           float64  shares traded                                        no
    amount           float64  turnover, CNY                                        no
    adj_factor       float64  cumulative (backward) adjustment factor; adjusted    no
                              price = raw price * adj_factor (point in time)
    up_limit         float64  limit-up price of the day, CNY                       no
    down_limit       float64  limit-down price of the day, CNY                     no
    total_mv         float64  total market cap, CNY                                no
    float_mv         float64  free-float market cap, CNY                           no
    industry         str      industry name (e.g. Shenwan level 1)                 no
    in_universe      bool     point-in-time index member on this day               no
    is_suspended     bool     no trading on this day (prices carry the last close) no
    buy_sm_amount .. float64  money flow by order size (sm, md, lg, elg), CNY      no
    sell_elg_amount
    net_mf_amount    float64  net money inflow, CNY                                no

Prices are raw (unadjusted) so that price limits can be compared with fills; features and labels use
``adjusted_price`` (raw * ``adj_factor``), which never changes the past when a new corporate action
arrives. A panel with any subset of the optional columns is valid; a panel with only ``close`` loads.
Rows of suspended days may carry NaN prices only when ``is_suspended`` is True.
"""

from __future__ import annotations

INDEX_NAMES: tuple[str, str] = ("date", "code")

PRICE_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close")
REQUIRED_COLUMNS: tuple[str, ...] = ("close",)

MONEYFLOW_COLUMNS: tuple[str, ...] = (
    "buy_sm_amount",
    "sell_sm_amount",
    "buy_md_amount",
    "sell_md_amount",
    "buy_lg_amount",
    "sell_lg_amount",
    "buy_elg_amount",
    "sell_elg_amount",
    "net_mf_amount",
)

#: Non-negative numeric columns (amounts, sizes). Prices must additionally be strictly positive.
NONNEGATIVE_COLUMNS: tuple[str, ...] = (
    "volume",
    "amount",
    "total_mv",
    "float_mv",
    *MONEYFLOW_COLUMNS[:-1],
)
POSITIVE_COLUMNS: tuple[str, ...] = (*PRICE_COLUMNS, "adj_factor", "up_limit", "down_limit")
#: ``net_mf_amount`` is signed.
SIGNED_COLUMNS: tuple[str, ...] = ("net_mf_amount",)

NUMERIC_COLUMNS: tuple[str, ...] = (*POSITIVE_COLUMNS, *NONNEGATIVE_COLUMNS, *SIGNED_COLUMNS)
BOOL_COLUMNS: tuple[str, ...] = ("in_universe", "is_suspended")
TEXT_COLUMNS: tuple[str, ...] = ("industry",)

KNOWN_COLUMNS: tuple[str, ...] = (*NUMERIC_COLUMNS, *BOOL_COLUMNS, *TEXT_COLUMNS)
