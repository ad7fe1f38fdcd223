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
        return cls(len(day), members, mday, slot, n_days, int(counts.max()) if len(counts) else 0)

    def _take(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_rows,):
            raise ValueError(f"expected {self.n_rows} values aligned with the rows, got shape {v.shape}")
        v = v[self.members]
        return v, ~np.isnan(v)

    def _scatter(self, member_values: np.ndarray) -> np.ndarray:
        out = np.full(self.n_rows, np.nan)
        out[self.members] = member_values
        return out

    def rank_pct(self, values: np.ndarray) -> np.ndarray:
        """Percentile rank among the day's eligible, non-NaN values (ties averaged), NaN elsewhere.

        Values are ranked at float32 precision (the precision features are stored with).
        """
        v, ok = self._take(values)
        pad = np.full((self.n_days, self.width), np.nan, dtype=np.float32)
        pad[self.day, self.slot] = v
        pad += np.float32(0.0)  # -0.0 -> +0.0 so that equal values tie
        # Sort (order-preserving bits of the value, slot) packed in one uint64 per cell: a SIMD sort of
        # integers is many times faster than argsort, and the low half carries the permutation.
        bits = pad.view(np.uint32)
        key = np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))
        key[np.isnan(pad)] = np.uint32(0xFFFFFFFF)  # NaN last
        packed = (key.astype(np.uint64) << np.uint64(32)) | np.arange(self.width, dtype=np.uint64)
        packed.sort(axis=1)
        order = (packed & np.uint64(0xFFFFFFFF)).astype(np.intp)
        srt = packed >> np.uint64(32)
        n_valid = np.count_nonzero(~np.isnan(pad), axis=1)
        new_group = np.ones(srt.shape, dtype=bool)
        new_group[:, 1:] = srt[:, 1:] != srt[:, :-1]
        flat_new = new_group.ravel()
        group = np.cumsum(flat_new) - 1
        position = np.tile(np.arange(1, self.width + 1, dtype=np.float64), self.n_days)
        starts = np.flatnonzero(flat_new)
        ends = np.append(starts[1:], flat_new.size) - 1
        mid_rank = (position[starts] + position[ends]) / 2.0  # average rank of each run of ties
        with np.errstate(invalid="ignore", divide="ignore"):
            pct_sorted = mid_rank[group].reshape(srt.shape) / n_valid[:, None]
        pct = np.empty_like(pct_sorted)
        np.put_along_axis(pct, order, pct_sorted, axis=1)
        out = pct[self.day, self.slot]
        out[~ok] = np.nan
        return self._scatter(out)

    def zscore(self, values: np.ndarray) -> np.ndarray:
        """(x - daily mean) / daily population std over the eligible non-NaN values, NaN elsewhere."""
        v, ok = self._take(values)
        return self._scatter(_grouped_zscore(v, ok, self.day, self.n_days))

    def industry_neutral(self, values: np.ndarray, industry: np.ndarray) -> np.ndarray:
        """Z-score of the value minus its (day, industry) mean over eligible stocks.

        ``industry`` : int array aligned with the rows, -1 where unknown (such rows get NaN).
        """
        v, ok = self._take(values)
        ind = np.asarray(industry)[self.members]
        ok &= ind >= 0
        resid = np.full(v.shape, np.nan)
        if ok.any():
            _, g = np.unique(ind[ok], return_inverse=True)
            key = self.day[ok] * (int(g.max()) + 1) + g
            n = np.bincount(key)
            s = np.bincount(key, v[ok])
            resid[ok] = v[ok] - (s / np.maximum(n, 1))[key]
        return self._scatter(_grouped_zscore(resid, ok, self.day, self.n_days))


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
