"""Cross-sectional transforms: each trading day, compare a stock with the other eligible stocks.

The eligible universe of a day is the point-in-time index (``in_universe`` True on that day) when the
panel has ``in_universe``, else every stock with a row. Non-members get NaN and never influence a
member's value; a member whose own value is NaN is left out of that day's statistics.

::

    rank percentile  x_cs_rank = rank(x among the day's eligible values) / count, ties averaged
                     (pandas ``groupby(date).rank(pct=True)``), in (0, 1]
    z-score          x_cs_z    = (x - mean) / std over the day's eligible values (population std);
                     NaN on days with fewer than 2 values or zero dispersion
    industry-neutral x_ind_neu = z-score of (x - mean of the day's eligible stocks of the same industry)

Implementation rule (for the exact feature audit): every daily statistic is an order-fixed sum over the
day's eligible values in code order (``np.bincount``), so stocks that are absent on a day cannot change
the result even by a rounding error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backtest.features.rolling import kernel


@dataclass(frozen=True)
class DailyCrossSection:
    """The eligible rows of a (date, code)-sorted set of rows, grouped by day.

    Attributes
    ----------
    n_rows : number of rows the transforms take and return (e.g. the feature matrix rows).
    members : int array, positions (into the rows) of the eligible rows, ascending.
    day : int array aligned with ``members``: the day index of each eligible row (non-decreasing).
    slot : int array aligned with ``members``: the position of the row among its day's eligible rows.
    n_days, width : number of days, and the largest number of eligible rows on one day.
    """

    n_rows: int
    members: np.ndarray
    day: np.ndarray
    slot: np.ndarray
    n_days: int
    width: int
    #: flat position of each eligible row in the (day x slot) padded matrix used for ranking
    cell: np.ndarray
    #: days with at least one eligible row, the index of their first eligible row, and their counts
    busy_days: np.ndarray
    busy_starts: np.ndarray
    busy_counts: np.ndarray

    @classmethod
    def of(cls, day: np.ndarray, eligible: np.ndarray, n_days: int) -> DailyCrossSection:
        """Build from each row's day index (sorted) and eligibility flag."""
        day = np.asarray(day)
        if len(day) > 1 and np.any(np.diff(day) < 0):
            raise ValueError("DailyCrossSection: rows must be sorted by day")
        members = np.flatnonzero(eligible)
        mday = day[members].astype(np.int64)
        counts = np.bincount(mday, minlength=n_days)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        slot = np.arange(len(members)) - starts[mday]
        width = int(counts.max()) if len(counts) else 0
        busy = np.flatnonzero(counts)
        return cls(len(day), members, mday, slot, n_days, width, mday * width + slot, busy, starts[busy], counts[busy])

    def _take(self, values: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        """The eligible rows' values as a contiguous array of ``dtype`` (``values`` itself when it is one)."""
        v = np.asarray(values)
        if v.shape != (self.n_rows,):
            raise ValueError(f"expected {self.n_rows} values aligned with the rows, got shape {v.shape}")
        return np.ascontiguousarray(v[self.members] if len(self.members) != self.n_rows else v, dtype=dtype)

    def _scatter(self, member_values: np.ndarray) -> np.ndarray:
        if len(self.members) == self.n_rows:  # every row is eligible
            return member_values
        out = np.full(self.n_rows, np.nan)
        out[self.members] = member_values
        return out

    def rank_pct(self, values: np.ndarray) -> np.ndarray:
        """Percentile rank among the day's eligible, non-NaN values (ties averaged), NaN elsewhere.

        Values are ranked at float32 precision (the precision features are stored with).
        """
        value32 = self._take(values, np.float32)
        if not self.n_days * self.width:
            return self._scatter(np.full(len(value32), np.nan))
        # One uint64 key per cell of the (day x slot) matrix: the order-preserving bits of the float32
        # value above the row number, so that numpy's SIMD integer sort of each day replaces an argsort;
        # NaN values and empty cells sort last.
        keys = _rank_keys(value32.view(np.uint32), self.cell, self.n_days * self.width)
        keys.reshape(self.n_days, self.width).sort(axis=1)
        return self._scatter(_ranks_of_sorted(keys.reshape(self.n_days, self.width), len(value32)))

    def zscore(self, values: np.ndarray) -> np.ndarray:
        """(x - daily mean) / daily population std over the eligible non-NaN values, NaN elsewhere."""
        v = self._take(values)
        if not len(self.busy_days):
            return self._scatter(np.full(len(v), np.nan))
        # each day's eligible values are contiguous (code order): segment sums, no other stock involved
        return self._scatter(_zscore_kernel(v, self.busy_starts, self.busy_counts))

    def industry_neutral(self, values: np.ndarray, industry: np.ndarray) -> np.ndarray:
        """Z-score of the value minus its (day, industry) mean over eligible stocks.

        ``industry`` : int array aligned with the rows, -1 where unknown (such rows get NaN).
        """
        v = self._take(values)
        ind = np.asarray(industry)[self.members]
        ok = ~np.isnan(v) & (ind >= 0)
        resid = np.full(v.shape, np.nan)
        if ok.any():
            _, g = np.unique(ind[ok], return_inverse=True)
            key = self.day[ok] * (int(g.max()) + 1) + g
            n = np.bincount(key)
            s = np.bincount(key, v[ok])
            resid[ok] = v[ok] - (s / np.maximum(n, 1))[key]
        return self._scatter(_grouped_zscore(resid, ok, self.day, self.n_days))


_NAN_KEY = np.uint32(0xFFFFFFFF)  # the key of a NaN value (the high half of an empty cell's key too)


@kernel
def _rank_keys(bits: np.ndarray, cell: np.ndarray, n_cells: int) -> np.ndarray:
    """The sort keys of the padded (day x slot) matrix from the float32 bits of the eligible values."""
    keys = np.full(n_cells, (np.uint64(_NAN_KEY) << np.uint64(32)) | np.uint64(len(bits)))
    for i in range(len(bits)):  # branch-free, so that the loop vectorises
        b = bits[i]
        nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        b = np.uint32(0) if b == np.uint32(0x80000000) else b  # -0.0 ties with +0.0
        # negative values: all bits flipped; positive ones: the sign bit set
        b ^= (np.uint32(0) - (b >> np.uint32(31))) | np.uint32(0x80000000)
        b = _NAN_KEY if nan else b
        keys[cell[i]] = (np.uint64(b) << np.uint64(32)) | np.uint64(i)
    return keys


@kernel
def _ranks_of_sorted(keys: np.ndarray, n: int) -> np.ndarray:
    """Percentile ranks of ``n`` values from their keys sorted within each day row; equal keys share the
    average of their 1-based positions, NaN values get NaN."""
    out = np.empty(n + 1)  # the last slot absorbs the empty cells
    n_days, width = keys.shape
    for d in range(n_days):
        row = keys[d]
        valid = 0
        while valid < width and (row[valid] >> np.uint64(32)) != _NAN_KEY:
            valid += 1
        p = 0
        while p < valid:  # positions p..q hold equal values
            q = p
            while q + 1 < valid and (row[q + 1] >> np.uint64(32)) == (row[p] >> np.uint64(32)):
                q += 1
            pct = ((p + q + 2) / 2.0) / valid
            for r in range(p, q + 1):
                out[row[r] & np.uint64(0xFFFFFFFF)] = pct
            p = q + 1
        for r in range(valid, width):
            out[row[r] & np.uint64(0xFFFFFFFF)] = np.nan
    return out[:n]


def _grouped_zscore(v: np.ndarray, ok: np.ndarray, day: np.ndarray, n_days: int) -> np.ndarray:
    out = np.full(v.shape, np.nan)
    d, x = day[ok], v[ok]
    n = np.bincount(d, minlength=n_days).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(d, x, minlength=n_days) / n
        dev = x - mean[d]
        std = np.sqrt(np.bincount(d, dev * dev, minlength=n_days) / n)
        z = dev / std[d]
    z[(n[d] < 2) | (std[d] <= 1e-12 * np.maximum(np.abs(mean[d]), 1e-300))] = np.nan
    out[ok] = z
    return out


@kernel
def _zscore_kernel(v: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Daily z-scores of the contiguous day segments of ``v``; each sum runs over the day in code order."""
    z = np.empty(len(v))
    for d in range(len(starts)):
        a, c = starts[d], counts[d]
        n, total = 0, 0.0
        for i in range(a, a + c):
            if not np.isnan(v[i]):
                n += 1
                total += v[i]
        mean = total / n
        squares = 0.0
        for i in range(a, a + c):
            if not np.isnan(v[i]):
                squares += (v[i] - mean) * (v[i] - mean)
        std = np.sqrt(squares / n)
        if n < 2 or std <= 1e-12 * max(abs(mean), 1e-300):
            std = np.nan
        for i in range(a, a + c):
            z[i] = (v[i] - mean) / std
    return z


def peer_mean(values: np.ndarray, groups: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Each cell's (day, group) mean over member cells with a value; wide (date x code) in and out.

    Parameters
    ----------
    values : float (date x code).
    groups : int (date x code), the group id of each cell (an industry), -1 where unknown.
    members : bool (date x code), the cells that form the peer groups (the day's eligible universe).

    Returns
    -------
    float (date x code): the peer mean for every cell whose group has at least one member with a
    value that day; NaN elsewhere (non-members get their group's member mean too).
    """
    n_days, _ = values.shape
    has_group = groups >= 0
    ok = members & has_group & ~np.isnan(values)
    out = np.full(values.shape, np.nan)
    if not ok.any():
        return out
    uniq = np.unique(groups[has_group])
    g = np.searchsorted(uniq, groups)  # compact ids; meaningless where groups < 0 (masked below)
    day = np.broadcast_to(np.arange(n_days)[:, None], values.shape)
    key = day * len(uniq) + np.minimum(g, len(uniq) - 1)
    n = np.bincount(key[ok], minlength=n_days * len(uniq))
    s = np.bincount(key[ok], values[ok], minlength=n_days * len(uniq))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s / n
    out[has_group] = mean[key[has_group]]
    return out
