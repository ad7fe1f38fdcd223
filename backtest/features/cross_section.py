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
    #: flat position of each eligible row in the (day x slot) padded matrix used for ranking
    cell: np.ndarray
    #: per padded cell: the flat index where its day's row starts, the sort key of an empty cell
    #: (sorts last, points at a spare output slot), and its 1-based position in the day's row
    row_start: np.ndarray
    empty_key: np.ndarray
    position: np.ndarray
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
        row_start = np.repeat(np.arange(n_days, dtype=np.intp) * width, width)
        empty_key = np.full(n_days * width, (0xFFFFFFFF << 32) | len(members), dtype=np.uint64)
        position = np.tile(np.arange(1, width + 1, dtype=np.float64), (n_days, 1))  # 1-based, per day row
        busy = np.flatnonzero(counts)
        return cls(len(day), members, mday, slot, n_days, width, mday * width + slot, row_start, empty_key,
                   position, busy, starts[busy], counts[busy])

    def _take(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_rows,):
            raise ValueError(f"expected {self.n_rows} values aligned with the rows, got shape {v.shape}")
        if len(self.members) != self.n_rows:
            v = v[self.members]
        return v, ~np.isnan(v)

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
        v, ok = self._take(values)
        n_days, width = self.n_days, self.width
        if not n_days * width:
            return self._scatter(np.full(len(v), np.nan))
        n_valid = np.zeros(n_days)
        n_valid[self.busy_days] = np.add.reduceat(ok.astype(np.float64), self.busy_starts)
        # Sort keys: (order-preserving bits of the float32 value, row number) packed in one uint64, so
        # that a SIMD integer sort of each day replaces an argsort; NaN values and empty cells sort last.
        bits = v.astype(np.float32)
        bits += np.float32(0.0)  # -0.0 -> +0.0 so that equal values tie
        bits = bits.view(np.uint32)
        flip = bits >> np.uint32(31)
        np.negative(flip, out=flip)  # 0xFFFFFFFF for negative values, 0 otherwise
        flip |= np.uint32(0x80000000)
        bits ^= flip  # negative: all bits flipped; positive: sign bit set
        bits[~ok] = np.uint32(0xFFFFFFFF)
        key = bits.astype(np.uint64)
        key <<= np.uint64(32)
        key |= np.arange(len(v), dtype=np.uint64)
        packed = self.empty_key.copy()
        packed[self.cell] = key
        packed.reshape(n_days, width).sort(axis=1)
        srt = packed >> np.uint64(32)
        # 1-based position in the sorted day = rank; equal keys (ties) share the average of their positions
        with np.errstate(invalid="ignore", divide="ignore"):
            pct_sorted = self.position / n_valid[:, None]
            tie = np.empty(srt.shape, dtype=bool)
            tie[0] = False
            np.equal(srt[1:], srt[:-1], out=tie[1:])
            tie[::width] = False  # a day starts afresh
            tie &= srt != np.uint64(0xFFFFFFFF)  # NaNs and empty cells are not ranked
            if tie.any():  # fix only the days that have ties (few for continuous features)
                days = np.unique(np.flatnonzero(tie) // width)
                pct_sorted[days] = _average_positions(srt.reshape(n_days, width)[days]) / n_valid[days, None]
        out = np.empty(len(v) + 1)  # the last slot absorbs the empty cells
        packed &= np.uint64(0xFFFFFFFF)
        out[packed.astype(np.intp)] = pct_sorted.ravel()
        out = out[:-1]
        out[~ok] = np.nan
        return self._scatter(out)

    def zscore(self, values: np.ndarray) -> np.ndarray:
        """(x - daily mean) / daily population std over the eligible non-NaN values, NaN elsewhere."""
        v, ok = self._take(values)
        if not len(self.busy_days):
            return self._scatter(np.full(len(v), np.nan))
        all_ok = bool(ok.all())
        x = v if all_ok else np.where(ok, v, 0.0)
        # each day's eligible values are contiguous (code order): segment sums, no other stock involved
        n = self.busy_counts.astype(np.float64) if all_ok else np.add.reduceat(ok.astype(np.float64), self.busy_starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.add.reduceat(x, self.busy_starts) / n
            dev = v - np.repeat(mean, self.busy_counts)
            sq = dev * dev
            if not all_ok:
                sq[~ok] = 0.0
            std = np.sqrt(np.add.reduceat(sq, self.busy_starts) / n)
            bad = (n < 2) | (std <= 1e-12 * np.maximum(np.abs(mean), 1e-300))
            std[bad] = np.nan
            z = dev / np.repeat(std, self.busy_counts)
        return self._scatter(z)

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


def _average_positions(keys: np.ndarray) -> np.ndarray:
    """1-based positions of sorted rows of keys, with equal keys given the average of their positions."""
    k, width = keys.shape
    flat = keys.ravel()
    new_run = np.ones(flat.shape, dtype=bool)
    new_run[1:] = flat[1:] != flat[:-1]
    new_run[::width] = True
    starts = np.flatnonzero(new_run)
    ends = np.append(starts[1:], flat.size) - 1
    row_start = (starts // width) * width
    mid = (starts + ends - 2 * row_start + 2) / 2.0
    return mid[np.cumsum(new_run) - 1].reshape(k, width)


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
