"""Daily cross-sectional ranks and the ridge regression on them: the linear ranker's machinery, shared by
the engine's ``linear`` baseline (:mod:`backtest.baselines`) and the ``linear`` model
(:mod:`models.linear`), so both fit the same regression on the same ranks.

Each feature's and the label's daily percentile rank, centred at 0 (a missing value at the median),
then ``(R'R / n + alpha / 12 I) beta = R'y / n`` over a fold's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from backtest.features.build import FeatureMatrix
from backtest.features.cross_section import DailyCrossSection

#: Ridge penalty of the linear baseline, relative to the mean variance of the centred rank columns
#: (1/12): the solved system is ``(R'R / n + alpha * 1/12 * I) beta = R'y / n``.
RIDGE_ALPHA = 0.1


def day_numbers(dates: np.ndarray) -> np.ndarray:
    """Each row's day number, 0 for the first row's day (rows sorted by date), int64."""
    if not len(dates):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(dates[1:] != dates[:-1])]).astype(np.int64)


def daily_section(day: np.ndarray) -> DailyCrossSection:
    """The cross-section of each day of rows numbered by ``day`` (sorted, 0-based), every row eligible."""
    n_days = int(day[-1]) + 1 if len(day) else 0
    return DailyCrossSection.of(day, np.ones(len(day), dtype=bool), n_days)


def centred_ranks(block: np.ndarray, section: DailyCrossSection) -> np.ndarray:
    """Each column's percentile rank within its day (``section``), centred at 0, a missing value at the
    median (0); float32, rows x columns. The ranks of a day read that day's rows only."""
    X = np.empty(block.shape, dtype=np.float32)
    for j in range(block.shape[1]):
        X[:, j] = np.nan_to_num(section.rank_pct(block[:, j]) - 0.5, nan=0.0)
    return X


@dataclass(frozen=True, eq=False)
class RankedPanel:
    """Each feature's and the label's cross-sectional percentile rank per day, centred at 0, on the
    feature matrix rows ``start:stop`` (whole days; :meth:`rank`).

    ``X`` is float32 (rows x features) aligned with those rows, NaN replaced by 0 (the median); ``y``
    the label's centred rank, NaN where the label is unknown; ``day`` each row's day index (0 = the
    day of row ``start``). Ranking reads no label but ``y``'s own day, and no row of another day, so
    the ranks of a day are the same whatever rows around it are ranked with.
    """

    X: np.ndarray
    y: np.ndarray
    day: np.ndarray
    dates: np.ndarray
    names: tuple[str, ...]
    start: int = 0

    @classmethod
    def of(cls, matrix: FeatureMatrix, fwd_return: pd.Series, start: int = 0) -> RankedPanel:
        """Rank the rows ``start:`` of ``matrix`` (``start``: the first row of a day)."""
        fwd = fwd_return.reindex(matrix.index).to_numpy(dtype=np.float64)
        return cls.rank(
            matrix.values, fwd, matrix.index.get_level_values(0).values, tuple(matrix.names), start, len(fwd)
        )

    @classmethod
    def rank(
        cls, values: np.ndarray, fwd: np.ndarray, dates: np.ndarray, names: tuple[str, ...], start: int, stop: int
    ) -> RankedPanel:
        """Rank ``values[start:stop]`` (features) and ``fwd[start:stop]`` (the label, aligned) by day."""
        for edge in (start, stop):
            if 0 < edge < len(dates) and dates[edge - 1] == dates[edge]:
                raise ValueError(f"RankedPanel: row {edge} is not the first row of its day {dates[edge]}")
        dates = dates[start:stop]
        day = day_numbers(dates)
        section = daily_section(day)
        X = centred_ranks(values[start:stop], section)
        y = section.rank_pct(fwd[start:stop]) - 0.5
        return cls(X=X, y=y, day=day, dates=dates, names=names, start=start)

    def daily_rank_ic(self) -> np.ndarray:
        """Per day and feature, the Pearson correlation of the centred ranks over the day's labelled rows
        (days x features, float64; NaN on a day without labels or with a constant side): the features'
        daily rank IC."""
        n_days = int(self.day[-1]) + 1 if len(self.day) else 0
        out = np.full((n_days, self.X.shape[1]), np.nan)
        known = np.flatnonzero(np.isfinite(self.y))
        if not len(known):
            return out
        day = self.day[known]
        starts = np.flatnonzero(np.r_[True, day[1:] != day[:-1]])
        count = np.diff(np.r_[starts, len(day)]).astype(np.float64)
        y = self.y[known]
        y = y - (np.add.reduceat(y, starts) / count)[np.repeat(np.arange(len(starts)), count.astype(int))]
        syy = np.add.reduceat(y * y, starts)
        owner = np.repeat(np.arange(len(starts)), count.astype(int))
        for lo in range(0, self.X.shape[1], 8):  # 8 columns at a time: the float64 temporaries stay small
            block = self.X[known, lo : lo + 8].astype(np.float64)
            block -= (np.add.reduceat(block, starts, axis=0) / count[:, None])[owner]
            sxy = np.add.reduceat(block * y[:, None], starts, axis=0)
            sxx = np.add.reduceat(block * block, starts, axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[day[starts], lo : lo + 8] = sxy / np.sqrt(sxx * syy[:, None])
        return out


def fit_ridge(X: np.ndarray, y: np.ndarray, alpha: float = RIDGE_ALPHA) -> np.ndarray:
    """Ridge coefficients of ``y`` on the centred rank columns ``X`` (rows with a known ``y``)."""
    gram = RidgeGram(X, y)
    return gram.solve(np.flatnonzero(np.isfinite(y)), alpha)


class RidgeGram:
    """``X'X`` and ``X'y`` of a set of rows, updated from one fold's rows to the next.

    Consecutive folds of a sliding window share most of their rows: the sums of the rows that entered
    are added and those of the rows that left subtracted (float64), which costs a few hundred rows'
    products instead of the whole window's. A set that shares fewer than half its rows with the last
    one is summed afresh.
    """

    #: rows summed at a time
    CHUNK = 16_384

    def __init__(self, X: Any, y: np.ndarray) -> None:  # an array, or rows gathered on demand (RankedDays)
        self.X, self.y = X, y
        self.rows = np.empty(0, dtype=np.int64)
        self.xx = np.zeros((X.shape[1], X.shape[1]))
        self.xy = np.zeros(X.shape[1])

    def _sums(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xx, xy = np.zeros_like(self.xx), np.zeros_like(self.xy)
        for lo in range(0, len(rows), self.CHUNK):  # a chunk at a time: a window's float64 copy is large
            part = rows[lo : lo + self.CHUNK]
            x = self.X[part].astype(np.float64)
            xx += x.T @ x
            xy += x.T @ self.y[part].astype(np.float64)
        return xx, xy

    def solve(self, rows: np.ndarray, alpha: float = RIDGE_ALPHA) -> np.ndarray:
        """Ridge coefficients on ``rows`` (sorted positions whose ``y`` is known)."""
        added = np.setdiff1d(rows, self.rows, assume_unique=True)
        removed = np.setdiff1d(self.rows, rows, assume_unique=True)
        if len(added) + len(removed) < len(rows) // 2:
            for part, sign in ((added, 1.0), (removed, -1.0)):
                if len(part):
                    xx, xy = self._sums(part)
                    self.xx += sign * xx
                    self.xy += sign * xy
        else:
            self.xx, self.xy = self._sums(rows)
        self.rows = rows
        n = max(len(rows), 1)
        system = self.xx / n
        system[np.diag_indices_from(system)] += alpha / 12.0
        return np.linalg.solve(system, self.xy / n)
