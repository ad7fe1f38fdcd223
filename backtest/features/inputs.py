"""The wide (date x code) inputs of the indicators, derived from the panel during a build.

Suspended days and gaps
-----------------------
A suspended day (``is_suspended`` True, or ``volume`` zero with or without the flag: the rule of
:func:`backtest.data.tradability.suspended`, the one labels and the portfolio use) is treated as a day
without trading:

- Prices: the bar is flat at the last traded close (open = high = low = close = that close), whatever the
  row carries. Return windows therefore stay aligned with trading days: a suspended day has a zero
  return, and the move over the suspension is realised on the day trading resumes. The same holds for
  a stock's missing rows between its first and last row (gaps): prices are carried forward.
- Activity (volume, amount, turnover, money flow): a suspended day is a missing observation (NaN), not a
  zero. Activity features are NaN on the suspended day itself, and activity averages run over the
  traded days of their window (see each indicator's ``min_periods``).

Prices are backward adjusted with ``adjusted_price`` (raw * ``adj_factor``), which never rewrites the
past. Industry names become stable integer ids (a hash of the name), so that an id never depends on which
other industries appear in the panel (a factorised id would change when the panel is cut or extended).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pandas as pd

from backtest.data import tradability
from backtest.data.panel import WideGrid, adjusted_price
from backtest.data.schema import MONEYFLOW_COLUMNS
from backtest.features.rolling import forward_fill, lag

_ACTIVITY_COLUMNS = frozenset({"volume", "amount", *MONEYFLOW_COLUMNS})
_PRICE_FIELDS = ("open", "high", "low", "close")
_LEVEL_COLUMNS = frozenset({"total_mv", "float_mv", "up_limit", "down_limit"})

#: Intermediates a MarketData keeps (the most recently used). The indicators run in plan order and
#: rarely reach back past the last 16 intermediates, so a few are derived twice (to the same bits) and a
#: build of ``features=all`` holds about a third of what keeping every one would.
MEMO_ENTRIES = 16


def industry_id(name: str) -> int:
    """Stable integer id of an industry name: the low 24 bits of its CRC-32 (exact in float32)."""
    return zlib.crc32(name.encode("utf-8")) & 0xFFFFFF


class MarketData:
    """Wide float64 inputs of one panel for the indicators, computed on first use and kept for one build.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), the canonical panel (``backtest.data.schema``).
    grid : the panel's ``WideGrid``.

    Every matrix is shaped ``grid.shape`` = (n_dates, n_codes); cells without a panel row are NaN (False
    for masks). The object memoises the intermediates that several indicators share (returns, moving
    averages), the :data:`MEMO_ENTRIES` most recently used of them: create one per build and drop it
    afterwards.
    """

    def __init__(self, panel: pd.DataFrame, grid: WideGrid) -> None:
        self._panel = panel
        self.grid = grid
        self.columns = frozenset(panel.columns)
        #: flat (row-major) cell of each panel row; increasing for a (date, code)-sorted panel
        self.cells = grid.row_pos.astype(np.int64) * grid.shape[1] + grid.col_pos
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()

    def to_wide(self, values: np.ndarray | pd.Series, dtype: type = np.float64, fill: object = np.nan) -> np.ndarray:
        """Scatter a column aligned with the panel rows onto the (date x code) grid."""
        out = np.full(self.grid.shape, fill, dtype=dtype)
        out.ravel()[self.cells] = np.asarray(values, dtype=dtype)
        return out

    def to_long(self, wide: np.ndarray) -> np.ndarray:
        """Gather a (date x code) matrix back to the panel's rows."""
        return np.ravel(wide).take(self.cells)

    # -- masks -----------------------------------------------------------------------------------------
    @property
    def present(self) -> np.ndarray:
        """bool (date x code): the panel has a row."""
        return self.derived(
            "present", lambda: self.to_wide(np.ones(len(self.cells), dtype=bool), dtype=bool, fill=False)
        )

    @property
    def suspended(self) -> np.ndarray:
        """bool (date x code): a row without trading (:func:`backtest.data.tradability.suspended`)."""
        return self.derived("suspended", lambda: tradability.suspended(self._panel, self.grid))

    @property
    def traded(self) -> np.ndarray:
        """bool (date x code): a row with trading (present and not suspended)."""
        return self.derived("traded", lambda: self.present & ~self.suspended)

    @property
    def eligible(self) -> np.ndarray:
        """bool (date x code): in the day's universe (:func:`backtest.data.tradability.eligible`)."""
        return self.derived("eligible", lambda: tradability.eligible(self._panel, self.grid))

    # -- prices ----------------------------------------------------------------------------------------
    @property
    def close(self) -> np.ndarray:
        """Adjusted close, carried forward over suspended days and gaps (NaN before the first trade)."""

        def make() -> np.ndarray:
            wide = self.to_wide(adjusted_price(self._panel, "close").to_numpy(), dtype=np.float64)
            wide[~self.traded] = np.nan
            return forward_fill(wide)

        return self.derived("close", make)

    @property
    def open(self) -> np.ndarray:
        """Adjusted open; a flat bar at the carried close on days without trading."""
        return self._bar_price("open")

    @property
    def high(self) -> np.ndarray:
        """Adjusted high; a flat bar at the carried close on days without trading."""
        return self._bar_price("high")

    @property
    def low(self) -> np.ndarray:
        """Adjusted low; a flat bar at the carried close on days without trading."""
        return self._bar_price("low")

    def _bar_price(self, field: str) -> np.ndarray:
        def make() -> np.ndarray:
            wide = self.to_wide(adjusted_price(self._panel, field).to_numpy(), dtype=np.float64)
            close = self.close
            return np.where(self.traded & ~np.isnan(wide), wide, close)

        return self.derived(field, make)

    @property
    def raw_close(self) -> np.ndarray:
        """Unadjusted close on traded days (NaN otherwise), for comparisons with raw VWAP or limits."""

        def make() -> np.ndarray:
            wide = self.to_wide(self._panel["close"].to_numpy(dtype=np.float64), dtype=np.float64)
            wide[~self.traded] = np.nan
            return wide

        return self.derived("raw_close", make)

    @property
    def ret(self) -> np.ndarray:
        """Daily simple return of the adjusted close, ``close[t] / close[t-1] - 1`` (0 on suspended days)."""
        return self.derived("ret", lambda: self.close / lag(self.close, 1) - 1.0)

    # -- activity and levels ---------------------------------------------------------------------------
    def activity(self, column: str) -> np.ndarray:
        """A trading-activity column (volume, amount, money flow) with suspended days as NaN."""
        if column not in _ACTIVITY_COLUMNS:
            raise KeyError(f"{column!r} is not an activity column; known: {sorted(_ACTIVITY_COLUMNS)}")

        def make() -> np.ndarray:
            wide = self.to_wide(self._panel[column].to_numpy(dtype=np.float64), dtype=np.float64)
            wide[~self.traded] = np.nan
            return wide

        return self.derived(f"activity:{column}", make)

    def level(self, column: str) -> np.ndarray:
        """A level column (``total_mv``, ``float_mv``, limits) as reported on each row."""
        if column not in _LEVEL_COLUMNS:
            raise KeyError(f"{column!r} is not a level column; known: {sorted(_LEVEL_COLUMNS)}")

        def make() -> np.ndarray:
            return self.to_wide(self._panel[column].to_numpy(dtype=np.float64), dtype=np.float64)

        return self.derived(f"level:{column}", make)

    @property
    def industry(self) -> np.ndarray:
        """int64 (date x code): stable industry id of each row (``industry_id``), -1 where unknown."""

        def make() -> np.ndarray:
            col = self._panel["industry"]
            if isinstance(col.dtype, pd.CategoricalDtype):
                codes, names = col.cat.codes.to_numpy(), col.cat.categories
            else:
                codes, names = pd.factorize(col, use_na_sentinel=True)
            table = np.array([industry_id(str(n)) for n in names] + [-1], dtype=np.int64)
            ids = table[np.where(codes < 0, len(names), codes)]
            return self.to_wide(ids, dtype=np.int64, fill=-1)

        return self.derived("industry", make)

    # -- memo ------------------------------------------------------------------------------------------
    def derived(self, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        """``make()``, kept under ``key`` while it is among the :data:`MEMO_ENTRIES` most recently used
        intermediates (one shared by indicators); computed again, to the same bits, after that.

        The returned array is shared: callers must not modify it in place.
        """
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        value = make()  # may derive (and evict) others
        value.flags.writeable = False
        self._memo[key] = value
        while len(self._memo) > MEMO_ENTRIES:
            self._memo.popitem(last=False)
        return value


def activity_min_periods(window: int) -> int:
    """Traded days an activity average needs among the last ``window`` rows: at least half of them."""
    return (window + 1) // 2
