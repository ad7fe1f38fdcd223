"""The Shanghai Stock Exchange's trading calendar, for the synthetic market and for data without one.

Trading days come from ``exchange-calendars`` (calendar ``XSHG``: weekdays minus the mainland exchange
holidays, recorded from 1990-12 through the end of the year its release covers). Days outside what it
records fall back to weekdays minus New Year, a week from 1 February and 1-7 October: close enough for
a simulation, not for trading. Real panels keep their own calendar (the dates they hold, a
``calendar_path`` file, Tushare's ``trade_cal``, Qlib's ``calendars/day.txt``).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

EXCHANGE = "XSHG"
# Outside the recorded years: (first closed day, last closed day) of each year, inclusive.
_FALLBACK_CLOSURES = [("01-01", "01-01"), ("02-01", "02-07"), ("10-01", "10-07")]


@functools.cache
def _recorded() -> tuple[pd.DatetimeIndex, pd.Timestamp, pd.Timestamp]:
    """Every recorded XSHG session, and the first and last day the record covers."""
    from exchange_calendars.exchange_calendar_xshg import XSHGExchangeCalendar

    first, last = XSHGExchangeCalendar.bound_min(), XSHGExchangeCalendar.bound_max()
    sessions = XSHGExchangeCalendar(start=first, end=last).sessions
    days = pd.DatetimeIndex(sessions.tz_localize(None) if sessions.tz is not None else sessions)
    return days.astype("datetime64[ns]"), pd.Timestamp(first), pd.Timestamp(last)


def _fallback(days: pd.DatetimeIndex) -> pd.DatetimeIndex:
    closed = np.zeros(len(days), dtype=bool)
    for year in sorted(set(days.year)):
        for first, last in _FALLBACK_CLOSURES:
            closed |= (days >= pd.Timestamp(f"{year}-{first}")) & (days <= pd.Timestamp(f"{year}-{last}"))
    return days[~closed]


def exchange_calendar(start: str | pd.Timestamp, end: str | pd.Timestamp) -> pd.DatetimeIndex:
    """Trading days from ``start`` to ``end`` inclusive (see the module docstring for the source).

    >>> exchange_calendar("2024-09-27", "2024-10-09").strftime("%m-%d").tolist()
    ['09-27', '09-30', '10-08', '10-09']
    >>> exchange_calendar("2018-12-28", "2019-01-03").strftime("%m-%d").tolist()
    ['12-28', '01-02', '01-03']
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    recorded, first, last = _recorded()
    weekdays = pd.bdate_range(start, end).astype("datetime64[ns]")
    inside = (weekdays >= first) & (weekdays <= last)
    days = recorded[(recorded >= max(start, first)) & (recorded <= min(end, last))]
    out = days.union(_fallback(weekdays[~inside])) if (~inside).any() else days
    return pd.DatetimeIndex(out, name="date")


def recorded_span() -> tuple[pd.Timestamp, pd.Timestamp]:
    """The first and last day for which :func:`exchange_calendar` follows the exchange's record."""
    _, first, last = _recorded()
    return first, last
