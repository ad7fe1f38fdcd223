"""An exchange-like trading calendar (Shanghai / Shenzhen style) for the synthetic market.

Weekdays minus the mainland exchange holiday closures of 2018-2025 (New Year, Spring Festival, Qingming,
Labour Day, Dragon Boat, Mid-Autumn, National Day). Years outside that table close on weekends, New Year,
a week from 1 February and 1-7 October; close enough for simulation, not for trading real data: real
panels bring their own calendar (the dates they contain, or the exchange's ``trade_cal``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# (first closed day, last closed day), inclusive.
_CLOSURES: dict[int, list[tuple[str, str]]] = {
    2018: [
        ("01-01", "01-01"),
        ("02-15", "02-21"),
        ("04-05", "04-06"),
        ("04-30", "05-01"),
        ("06-18", "06-18"),
        ("09-24", "09-24"),
        ("10-01", "10-05"),
    ],
    2019: [
        ("01-01", "01-01"),
        ("02-04", "02-08"),
        ("04-05", "04-05"),
        ("05-01", "05-03"),
        ("06-07", "06-07"),
        ("09-13", "09-13"),
        ("10-01", "10-07"),
    ],
    2020: [
        ("01-01", "01-01"),
        ("01-24", "01-31"),
        ("04-06", "04-06"),
        ("05-01", "05-05"),
        ("06-25", "06-26"),
        ("10-01", "10-08"),
    ],
    2021: [
        ("01-01", "01-01"),
        ("02-11", "02-17"),
        ("04-05", "04-05"),
        ("05-03", "05-05"),
        ("06-14", "06-14"),
        ("09-20", "09-21"),
        ("10-01", "10-07"),
    ],
    2022: [
        ("01-03", "01-03"),
        ("01-31", "02-04"),
        ("04-04", "04-05"),
        ("05-02", "05-04"),
        ("06-03", "06-03"),
        ("09-12", "09-12"),
        ("10-03", "10-07"),
    ],
    2023: [
        ("01-02", "01-02"),
        ("01-23", "01-27"),
        ("04-05", "04-05"),
        ("05-01", "05-03"),
        ("06-22", "06-23"),
        ("09-29", "09-29"),
        ("10-02", "10-06"),
    ],
    2024: [
        ("01-01", "01-01"),
        ("02-09", "02-16"),
        ("04-04", "04-05"),
        ("05-01", "05-03"),
        ("06-10", "06-10"),
        ("09-16", "09-17"),
        ("10-01", "10-07"),
    ],
    2025: [
        ("01-01", "01-01"),
        ("01-28", "02-04"),
        ("04-04", "04-04"),
        ("05-01", "05-05"),
        ("06-02", "06-02"),
        ("10-01", "10-08"),
    ],
}
_DEFAULT_CLOSURES = [("01-01", "01-01"), ("02-01", "02-07"), ("10-01", "10-07")]


def exchange_calendar(start: str | pd.Timestamp, end: str | pd.Timestamp) -> pd.DatetimeIndex:
    """Trading days from ``start`` to ``end`` inclusive.

    >>> exchange_calendar("2024-09-27", "2024-10-09").strftime("%m-%d").tolist()
    ['09-27', '09-30', '10-08', '10-09']
    """
    days = pd.bdate_range(pd.Timestamp(start), pd.Timestamp(end))
    closed = np.zeros(len(days), dtype=bool)
    for year in range(days.year.min() if len(days) else 0, (days.year.max() + 1) if len(days) else 0):
        for first, last in _CLOSURES.get(year, _DEFAULT_CLOSURES):
            closed |= (days >= pd.Timestamp(f"{year}-{first}")) & (days <= pd.Timestamp(f"{year}-{last}"))
    return pd.DatetimeIndex(days[~closed], name="date")
