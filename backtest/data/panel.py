"""Conversions between the long (date, code) panel and wide (date x code) matrices.

Wide matrices are the working form inside feature and label code: ``values[i, j]`` is the value of day
``dates[i]`` for stock ``codes[j]``; a stock that has no row on a day (not listed yet, delisted) is NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class WideGrid:
    """The (date x code) grid of a panel and where the panel's rows sit on it.

    Attributes
    ----------
    dates : DatetimeIndex, the sorted trading days (rows).
    codes : Index of str, the sorted stock codes (columns).
    row_pos, col_pos : int arrays of length ``len(panel)``: the grid cell of each panel row.
    """

    dates: pd.DatetimeIndex
    codes: pd.Index
    row_pos: np.ndarray
    col_pos: np.ndarray

    @classmethod
    def of(cls, panel: pd.DataFrame) -> WideGrid:
        dates_level = panel.index.get_level_values(0)
        codes_level = panel.index.get_level_values(1)
        row_pos, dates = pd.factorize(dates_level, sort=True)
        col_pos, codes = pd.factorize(codes_level, sort=True)
        return cls(pd.DatetimeIndex(dates, name="date"), pd.Index(codes, name="code"), row_pos, col_pos)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.dates), len(self.codes)

    def present(self) -> np.ndarray:
        """Boolean (date x code) matrix: True where the panel has a row."""
        out = np.zeros(self.shape, dtype=bool)
        out[self.row_pos, self.col_pos] = True
        return out

    def to_wide(self, values: np.ndarray | pd.Series, dtype=np.float32, fill=np.nan) -> np.ndarray:
        """Scatter a column of the panel (aligned with its rows) onto the grid."""
        out = np.full(self.shape, fill, dtype=dtype)
        out[self.row_pos, self.col_pos] = np.asarray(values, dtype=dtype)
        return out

    def to_long(self, wide: np.ndarray) -> np.ndarray:
        """Gather a (date x code) matrix back to the panel's row order."""
        return wide[self.row_pos, self.col_pos]

    def at(self, wide: np.ndarray, index: pd.MultiIndex) -> np.ndarray:
        """The values of a (date x code) float matrix at the (date, code) keys of ``index``, NaN for a key
        off the grid.

        >>> grid = WideGrid.of(pd.DataFrame(index=pd.MultiIndex.from_product(
        ...     [pd.to_datetime(["2024-01-02", "2024-01-03"]), ["A", "B"]])))
        >>> keys = pd.MultiIndex.from_tuples([(pd.Timestamp("2024-01-03"), "A"), (pd.Timestamp("2024-01-04"), "A")])
        >>> grid.at(np.array([[1.0, 2.0], [3.0, 4.0]]), keys).tolist()
        [3.0, nan]
        """
        rows = self.dates.get_indexer(index.get_level_values(0))
        cols = self.codes.get_indexer(index.get_level_values(1))
        found = (rows >= 0) & (cols >= 0)
        out = np.full(len(index), np.nan)
        out[found] = wide[rows[found], cols[found]]
        return out


def adjusted_price(panel: pd.DataFrame, field: str = "close") -> pd.Series:
    """Backward-adjusted price ``field * adj_factor`` (raw when the panel has no ``adj_factor``).

    Backward adjustment only multiplies by factors known on each day, so it never rewrites the past
    when a later corporate action arrives; forward adjustment to the latest factor would.
    """
    price = panel[field].astype("float64")
    if "adj_factor" in panel.columns:
        price = price * panel["adj_factor"].astype("float64")
    return price
