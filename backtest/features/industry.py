"""Industry indicators: the industry label and returns relative to the stock's industry peers.

``industry_id`` is a stable hash of the industry name (``backtest.features.inputs.industry_id``), a label
rather than a quantity: it gets no cross-sectional transforms or time aggregates. Peers are the day's
eligible stocks (index members when the panel has ``in_universe``) of the same industry, point in time.

The ``all`` feature set leaves these out (industry enters in ``with_industry``): in the research log the
base runs had industry for 4.7% of stocks, and filling it in was a separate experiment (which hurt).
"""

from __future__ import annotations

import numpy as np

from backtest.features.cross_section import peer_mean
from backtest.features.indicator import Compute, Indicator
from backtest.features.inputs import MarketData
from backtest.features.rolling import lag


def industry_label(m: MarketData) -> np.ndarray:
    """The stable integer id of the row's industry (NaN where unknown)."""
    ids = m.industry
    return np.where(ids >= 0, ids.astype(np.float64), np.nan)


def _relative_return(n: int) -> Compute:
    def relative_return(m: MarketData) -> np.ndarray:
        ret = m.close / lag(m.close, n) - 1.0
        return ret - peer_mean(ret, m.industry, m.eligible)

    return relative_return


INDICATORS: tuple[Indicator, ...] = (
    Indicator(
        "industry_id",
        industry_label,
        ("industry",),
        0,
        "industry",
        "stable integer id of the industry name (a label)",
        cross_sectional=False,
    ),
    *(
        Indicator(
            f"ind_rel_ret_{n}",
            _relative_return(n),
            ("close", "industry"),
            n,
            "industry",
            f"{n}-day return minus the mean {n}-day return of the day's eligible industry peers",
        )
        for n in (5, 20)
    ),
)
