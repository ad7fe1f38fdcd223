"""The training data every model reads: :class:`RankingData`, one query group per trading day.

::

    RankingData  one row per sample (date, code), sorted by date then code; one day = one query group

    field          dtype / shape                                   meaning
    -------------  ----------------------------------------------  -------------------------------------
    X              float32 (n_samples, n_features)                  feature values (NaN allowed: LightGBM
                                                                    treats it as missing)
    dates          datetime64[ns] (n_samples,)                      decision day t of the sample
    codes          str (n_samples,)                                 stock code
    feature_names  tuple of n_features str                          column names of X
    relevance      int64 (n_samples,) >= 0, or float64 (n_samples,)  the training target, the label's
                   or None                                          cross-sectional processing
                                                                    (backtest.labels): int64 relevance
                                                                    levels for ``bins`` / ``three_class``,
                                                                    float64 for ``raw`` / ``rank``; None
                                                                    at predict time
    wide           float32 (n_grid_dates, n_grid_codes, n_features)  the same features on the full
                   or None                                          (date x code) grid, NaN where missing;
                                                                    the source of the transformer's
                                                                    [day, stock, window, feature] view
    date_pos       int64 (n_samples,) or None                       row of each sample in ``wide``
    code_pos       int64 (n_samples,) or None                       column of each sample in ``wide``
    rows, parent   int64 (n_samples,), RankingData; or None          set by ``take``: the position of each
                                                                    sample in ``parent``, the RankingData
                                                                    it was taken from

The whole backtest builds one RankingData (and at most one ``wide`` tensor); every fold's train, valid
and predict sets are ``take``-n from it, so they share ``wide`` and know their rows in it
(:meth:`RankingData.rows_in`), which lets a model reuse work done once on the whole (LightGBM's bins).
A ``take`` of scattered rows (the labelled samples among every eligible row) does not copy ``X``: its
rows are gathered from the parent's when ``X`` is first read, so a model that trains on bins prepared
once (:meth:`RankingData.feature_values` reads rows without the copy) never makes it.

Timing: the features of day t use data up to the close of t; ``relevance`` of a sample is known only on
its ``label_end``. Purging training rows whose label is not yet known is the splitter's job
(``backtest.splits``); nothing here looks at label timing.
"""

from __future__ import annotations

import copy
import uuid
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid
from backtest.errors import DataContractError, preview
from backtest.memory import by_file, read_rows

#: RankingData -> its Dask token (:meth:`RankingData.__dask_tokenize__`), for as long as it lives
_DASK_TOKENS: weakref.WeakKeyDictionary[RankingData, str] = weakref.WeakKeyDictionary()


class _Gather:
    """``source[rows]`` not yet copied: the ``X`` of a RankingData ``take``-n at scattered rows."""

    __slots__ = ("source", "rows")

    def __init__(self, source: np.ndarray, rows: np.ndarray) -> None:
        self.source, self.rows = source, rows

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), self.source.shape[1])

    def __getitem__(self, pick: np.ndarray | slice) -> _Gather:
        return _Gather(self.source, self.rows[pick])

    def copy(self, pick: np.ndarray | slice | None = None) -> np.ndarray:
        rows = self.rows if pick is None else self.rows[pick]
        return read_rows(self.source, rows)  # a file-backed source's pages are not kept (backtest.memory)


class _Codes(np.ndarray):
    """Stock codes (an object array of str) that pickle as their distinct values and each row's position
    among them: the bytes of two arrays instead of one pickled string per row. Shipping a whole market's
    samples to Dask workers (:meth:`RankingData.by_file`), and on from one worker to the next, then costs a
    copy of integers; pickling one str a row (9.5 million at 5,000 members) again at every hop stalled the
    broadcast (benchmarks/README.md, "Scale").
    The codes are factorised once, when made (:meth:`of`); an unpickled array keeps its parts too, so
    passing it on does not factorise it again; a view or a selection of it is factorised when pickled.
    Codes with a missing value (None, NaN) pickle as they are.

    >>> import pickle
    >>> codes = _Codes.of(np.array(["B", "A", "B"], dtype=object))
    >>> again = pickle.loads(pickle.dumps(codes))
    >>> again.tolist(), type(again).__name__, again._parts[1].dtype.name, again[1:].tolist()
    (['B', 'A', 'B'], '_Codes', 'int32', ['A', 'B'])
    >>> pickle.loads(pickle.dumps(_Codes.of(np.array(["B", None, np.nan], dtype=object)))).tolist()
    ['B', None, nan]
    """

    _parts: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def of(codes: np.ndarray) -> np.ndarray:
        """``codes`` pickling as their parts when they are Python objects (str): a read-only copy holding
        them, factorised here once for every later pickle; any other array as it is."""
        codes = np.asarray(codes)
        if codes.dtype != object or codes.ndim != 1:
            return codes
        parts = _factorised(codes)
        return codes.view(_Codes) if parts is None else _codes_from(*parts)

    def __array_finalize__(self, obj: Any) -> None:
        self._parts = None  # a view or a selection: factorised again when pickled

    def __reduce_ex__(self, protocol):  # type: ignore[override]
        parts = self._parts if self._parts is not None else _factorised(np.asarray(self))
        if parts is None:  # a missing value: factorising would not keep it as it is
            return np.asarray(self).__reduce_ex__(protocol)
        return (_codes_from, parts)


def _factorised(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct values of ``codes`` and each row's position among them; None when one is missing."""
    positions, distinct = pd.factorize(codes)
    if positions.size and positions.min() < 0:
        return None
    dtype = np.int32 if len(distinct) < 2**31 else np.int64
    return np.asarray(distinct, dtype=object), positions.astype(dtype, copy=False)


def _codes_from(distinct: np.ndarray, positions: np.ndarray) -> _Codes:
    codes = distinct[positions].view(_Codes)
    codes.flags.writeable = False  # the parts stay the values'
    codes._parts = (distinct, positions)
    return codes


class _FeatureValues:
    """``RankingData.X``: stored as given; a :class:`_Gather` is copied into an array when first read."""

    def __get__(self, obj: RankingData | None, owner: type) -> Any:
        if obj is None:
            return self
        x = obj.__dict__["X"]
        if isinstance(x, _Gather):
            x = obj.__dict__["X"] = x.copy()
        return x

    def __set__(self, obj: RankingData, value: Any) -> None:
        obj.__dict__["X"] = value


@dataclass(frozen=True, eq=False)
class RankingData:
    """Samples of a ranking problem, one query group per trading day (see the module docstring).

    Build it with :meth:`from_frame` (from a (date, code) feature frame) or directly from arrays.
    ``X`` is converted to float32; ``relevance`` keeps its kind (integer levels become int64, a
    real-valued target float64); everything else is validated, not repaired: samples must be sorted by
    (date, code) and unique.

    Examples
    --------
    >>> import numpy as np
    >>> d = np.array(["2024-01-02", "2024-01-02", "2024-01-03"], dtype="datetime64[ns]")
    >>> data = RankingData(X=np.zeros((3, 1)), dates=d, codes=np.array(["A", "B", "A"]),
    ...                    feature_names=("f",), relevance=np.array([1, 0, 0]))
    >>> data.group_sizes()
    array([2, 1], dtype=int32)
    >>> data.relevance.dtype, data.with_relevance(np.array([0.012, -0.004, 0.0])).relevance.dtype
    (dtype('int64'), dtype('float64'))
    """

    X: np.ndarray
    dates: np.ndarray
    codes: np.ndarray
    feature_names: tuple[str, ...]
    relevance: np.ndarray | None = None
    wide: np.ndarray | None = field(default=None, repr=False)
    date_pos: np.ndarray | None = field(default=None, repr=False)
    code_pos: np.ndarray | None = field(default=None, repr=False)
    rows: np.ndarray | None = field(default=None, repr=False)
    parent: RankingData | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        X = self.__dict__["X"]
        X = X if isinstance(X, _Gather) else np.asarray(X)
        if len(X.shape) != 2:
            raise DataContractError(
                f"RankingData.X: expected a 2-D (n_samples, n_features) array, received shape {X.shape}. "
                "Pass one row per (date, code) sample."
            )
        if not isinstance(X, _Gather) and X.dtype != np.float32:
            X = X.astype(np.float32)
        object.__setattr__(self, "X", X)
        n = X.shape[0]
        dates = np.asarray(self.dates)
        if not np.issubdtype(dates.dtype, np.datetime64):
            try:
                dates = np.asarray(pd.DatetimeIndex(dates).values)
            except (TypeError, ValueError) as exc:
                raise DataContractError(
                    f"RankingData.dates: expected datetime64 values, received dtype {dates.dtype} "
                    f"({preview(dates[:3])}). Pass the (date, code) index's dates."
                ) from exc
        object.__setattr__(self, "dates", dates.astype("datetime64[ns]", copy=False))
        codes = np.asarray(self.codes)
        object.__setattr__(self, "codes", codes)
        object.__setattr__(self, "feature_names", tuple(str(f) for f in self.feature_names))
        for name, arr in (("dates", self.dates), ("codes", codes)):
            if arr.shape != (n,):
                raise DataContractError(
                    f"RankingData.{name}: expected shape ({n},) (one per row of X), received {arr.shape}."
                )
        if len(self.feature_names) != X.shape[1]:
            raise DataContractError(
                f"RankingData.feature_names: expected {X.shape[1]} names (columns of X), received "
                f"{len(self.feature_names)}: {preview(self.feature_names)}."
            )
        self._check_sorted()
        if self.relevance is not None:
            object.__setattr__(self, "relevance", _as_relevance(self.relevance, n))
        self._check_wide()
        if (self.rows is None) != (self.parent is None):
            raise DataContractError("RankingData: rows and parent go together; use take() to select samples.")
        if self.rows is not None:
            rows = np.asarray(self.rows, dtype=np.int64)
            if rows.shape != (n,):
                raise DataContractError(f"RankingData.rows: expected shape ({n},), received {rows.shape}.")
            object.__setattr__(self, "rows", rows)

    def _check_sorted(self) -> None:
        if len(self.dates) < 2:
            return
        d = self.dates
        later = d[1:] > d[:-1]
        same = d[1:] == d[:-1]
        ordered = later | (same & (self.codes[1:] > self.codes[:-1]))
        if not ordered.all():
            bad = np.flatnonzero(~ordered)[:5] + 1
            raise DataContractError(
                "RankingData: samples must be sorted by (date, code) and unique, so that each day is one "
                f"contiguous query group; rows out of order or duplicated at positions {preview(bad)} "
                f"(e.g. {d[bad[0]]} {self.codes[bad[0]]}). Sort the frame with sort_index() and drop "
                "duplicate (date, code) keys."
            )

    def _check_wide(self) -> None:
        given = [x is not None for x in (self.wide, self.date_pos, self.code_pos)]
        if not any(given):
            return
        if not all(given):
            raise DataContractError(
                "RankingData: wide, date_pos and code_pos go together; received "
                f"wide={'set' if given[0] else 'None'}, date_pos={'set' if given[1] else 'None'}, "
                f"code_pos={'set' if given[2] else 'None'}. Use RankingData.from_frame(..., tensor=...)."
            )
        wide = self.wide
        if wide.ndim != 3 or wide.dtype != np.float32 or wide.shape[2] != self.n_features:
            raise DataContractError(
                "RankingData.wide: expected float32 [date, code, feature] with "
                f"{self.n_features} features, received {wide.dtype} shape {wide.shape}. "
                "Build it with models.windows.feature_tensor()."
            )
        for name, limit in (("date_pos", wide.shape[0]), ("code_pos", wide.shape[1])):
            pos = np.asarray(getattr(self, name), dtype=np.int64)
            if pos.shape != (self.n_samples,) or (pos.size and (pos.min() < 0 or pos.max() >= limit)):
                raise DataContractError(
                    f"RankingData.{name}: expected {self.n_samples} positions in [0, {limit}), received "
                    f"shape {pos.shape}" + (f", range [{pos.min()}, {pos.max()}]" if pos.size else "") + "."
                )
            object.__setattr__(self, name, pos)
        # Spot-check the alignment of X with the tensor on a few rows (cheap; catches a shifted grid).
        probe = np.unique(np.linspace(0, self.n_samples - 1, num=min(self.n_samples, 64)).astype(np.int64))
        a = self.feature_values(probe)
        b = wide[self.date_pos[probe], self.code_pos[probe]]
        if not np.array_equal(a, b, equal_nan=True):
            i = int(probe[np.flatnonzero(~np.all((a == b) | (np.isnan(a) & np.isnan(b)), axis=1))[0]])
            raise DataContractError(
                "RankingData: X and wide disagree: the sample "
                f"{self.dates[i]} {self.codes[i]} (row {i}) sits at wide[{self.date_pos[i]}, "
                f"{self.code_pos[i]}] but its feature values differ. Build both from the same feature frame."
            )

    # ------------------------------------------------------------------ shape and grouping

    @property
    def n_samples(self) -> int:
        return int(self.__dict__["X"].shape[0])

    @property
    def n_features(self) -> int:
        return int(self.__dict__["X"].shape[1])

    def feature_blocks(self, stop: int | None = None) -> list[np.ndarray]:
        """The rows ``X[:stop]`` as views of the contiguous runs of the array they live in, in order (one
        view unless the data was ``take``-n at scattered rows): LightGBM bins such a list without a copy."""
        x = self.__dict__["X"]
        if not isinstance(x, _Gather):
            return [x[:stop]]
        rows = x.rows[:stop]
        if not len(rows):
            return [x.source[:0]]
        cut = np.flatnonzero(np.diff(rows) != 1) + 1
        first, last = rows[np.r_[0, cut]], rows[np.r_[cut - 1, len(rows) - 1]]
        return [x.source[a : b + 1] for a, b in zip(first.tolist(), last.tolist(), strict=True)]

    def row_span(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``X`` as one contiguous view of the array they live in, from the first sample's
        row to the last's, and each sample's row in that view, int64 (n_samples,): a model can score the
        view without gathering the rows (it also scores the rows between them that are not samples)."""
        x = self.__dict__["X"]
        if not isinstance(x, _Gather):
            return x, np.arange(self.n_samples)
        if not len(x.rows):
            return x.source[:0], np.zeros(0, dtype=np.int64)
        first = int(x.rows[0])
        return x.source[first : int(x.rows[-1]) + 1], x.rows - first

    def feature_values(self, rows: np.ndarray | slice) -> np.ndarray:
        """``X[rows]``, float32; for data ``take``-n at scattered rows, without copying the rest of ``X``."""
        x = self.__dict__["X"]
        return x.copy(rows) if isinstance(x, _Gather) else x[rows]

    def day_starts(self) -> np.ndarray:
        """Offsets of the query groups: int64 (n_days + 1,), day g is rows ``[s[g], s[g+1])``."""
        if self.n_samples == 0:
            return np.zeros(1, dtype=np.int64)
        cut = np.flatnonzero(self.dates[1:] != self.dates[:-1]) + 1
        return np.concatenate([[0], cut, [self.n_samples]]).astype(np.int64)

    def group_sizes(self) -> np.ndarray:
        """Number of samples of each day, int32 (n_days,), in date order (LightGBM's ``group``)."""
        return np.diff(self.day_starts()).astype(np.int32)

    @property
    def n_days(self) -> int:
        return len(self.day_starts()) - 1

    def days(self) -> np.ndarray:
        """The distinct dates, datetime64[ns] (n_days,), ascending."""
        return self.dates[self.day_starts()[:-1]]

    def day_index(self) -> np.ndarray:
        """Day number (0..n_days-1) of each sample, int64 (n_samples,)."""
        return np.repeat(np.arange(self.n_days), self.group_sizes())

    def day_slots(self) -> np.ndarray:
        """Position of each sample within its day (0..size-1), int64 (n_samples,)."""
        return np.arange(self.n_samples) - np.repeat(self.day_starts()[:-1], self.group_sizes())

    def day_matrix(self, values: np.ndarray, fill: float | int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Scatter per-sample ``values`` into a padded (n_days, max_stocks) matrix.

        Returns
        -------
        matrix : (n_days, max_stocks) array of ``values``' dtype, ``fill`` in padded slots.
        mask : bool (n_days, max_stocks), True where a sample sits.
        """
        values = np.asarray(values)
        sizes = self.group_sizes()
        width = int(sizes.max()) if sizes.size else 0
        matrix = np.full((len(sizes), width), fill, dtype=values.dtype)
        mask = np.zeros((len(sizes), width), dtype=bool)
        day, slot = self.day_index(), self.day_slots()
        matrix[day, slot] = values
        mask[day, slot] = True
        return matrix, mask

    # ------------------------------------------------------------------ selection

    def take(self, rows: np.ndarray | slice) -> RankingData:
        """The samples at ``rows`` (strictly increasing positions, or a slice), sharing ``wide``.

        The result records ``parent`` = this data and ``rows`` = the positions in it. A contiguous range
        of rows is taken as a view of ``X``; scattered rows are copied out of ``X`` only when the result's
        ``X`` is read.
        """
        if isinstance(rows, slice):
            idx = np.arange(self.n_samples)[rows]
        else:
            idx = np.asarray(rows, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx[0] < 0 or idx[-1] >= self.n_samples)):
            raise DataContractError(
                f"RankingData.take: expected 1-D row positions in [0, {self.n_samples}), received "
                f"shape {idx.shape}" + (f" spanning [{idx.min()}, {idx.max()}]" if idx.size else "") + "."
            )
        if idx.size > 1 and not (np.diff(idx) > 0).all():
            raise DataContractError(
                "RankingData.take: row positions must be strictly increasing so that the result stays "
                "sorted by (date, code); sort and de-duplicate them (np.unique)."
            )
        contiguous = idx.size > 0 and idx[-1] - idx[0] + 1 == idx.size
        pick: np.ndarray | slice = slice(int(idx[0]), int(idx[-1]) + 1) if contiguous else idx

        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[pick]

        x = self.__dict__["X"]
        if isinstance(x, _Gather) or isinstance(pick, slice):
            X = x[pick]
        else:
            X = _Gather(x, idx)
        return RankingData(
            X=X,
            dates=self.dates[pick],
            codes=self.codes[pick],
            feature_names=self.feature_names,
            relevance=sub(self.relevance),
            wide=self.wide,
            date_pos=sub(self.date_pos),
            code_pos=sub(self.code_pos),
            rows=idx,
            parent=self,
        )

    def __dask_tokenize__(self) -> str:
        """Dask's token of this object (the key it is scattered under): one of its own, drawn once, so
        that Dask does not read ``X`` to hash it, which would copy a lazy ``take`` out of its source."""
        return _DASK_TOKENS.setdefault(self, uuid.uuid4().hex)

    def compact(self) -> RankingData:
        """A copy of this data, its lineage's included, whose stock codes pickle as their distinct values
        and positions (:class:`_Codes`): the same values, shipped to another process as integer arrays."""
        shipped = copy.copy(self)
        parent = None if self.parent is None else self.parent.compact()
        shipped.__dict__.update(codes=_Codes.of(self.codes), parent=parent)
        return shipped

    def by_file(self) -> RankingData:
        """A copy of this data whose feature values pickle as a reference to their file when the root of
        its lineage is file-backed (:func:`backtest.memory.by_file`): a process that sees the file reads
        the same values from it instead of receiving their bytes. A ``take``-n data refers to its rows of
        the root's file, even where its own values were already copied out of it (a read of ``X``). Its
        codes pickle compactly (:meth:`compact`), file-backed or not."""
        root = self.root()
        source = by_file(root.__dict__["X"])
        if source is root.__dict__["X"]:  # not file-backed: the values themselves
            return self.compact()
        shipped = copy.copy(self)
        shipped.__dict__["codes"] = _Codes.of(self.codes)
        if self.parent is None:
            shipped.__dict__["X"] = source
        else:
            rows = self.rows_in(root)
            assert rows is not None  # root is in the lineage by construction
            shipped.__dict__.update(X=_Gather(source, rows), parent=self.parent.by_file())
        return shipped

    def root(self) -> RankingData:
        """The RankingData at the top of this one's lineage (itself when it was not ``take``-n)."""
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def rows_in(self, ancestor: RankingData) -> np.ndarray | None:
        """Positions of these samples in ``ancestor`` (this data or one it was ``take``-n from, directly
        or through other takes), int64 (n_samples,); None when ``ancestor`` is not in its lineage."""
        rows = np.arange(self.n_samples)
        node: RankingData | None = self
        while node is not None:
            if node is ancestor:
                return rows
            if node.rows is None:
                return None
            rows = node.rows[rows]
            node = node.parent
        return None

    def between(self, start: object | None = None, end: object | None = None) -> RankingData:
        """The samples with ``start <= date <= end`` (either bound may be None)."""
        keep = np.ones(self.n_samples, dtype=bool)
        if start is not None:
            keep &= self.dates >= np.datetime64(pd.Timestamp(start), "ns")
        if end is not None:
            keep &= self.dates <= np.datetime64(pd.Timestamp(end), "ns")
        return self.take(np.flatnonzero(keep))

    def with_relevance(self, relevance: np.ndarray | None) -> RankingData:
        """The same samples with another training target (None for predict-time data).

        The target keeps its kind: integer relevance levels stay integers (int64), a real-valued target
        (raw returns, percentile ranks) stays float64; a model that cannot learn from it refuses it in
        ``fit``.
        """
        return replace(self, X=self.__dict__["X"], relevance=relevance)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_frame(
        cls,
        features: pd.DataFrame,
        relevance: np.ndarray | pd.Series | None = None,
        *,
        tensor: tuple[np.ndarray, WideGrid] | None = None,
    ) -> RankingData:
        """Build from a feature frame indexed by (date, code), sorted, one column per feature.

        Parameters
        ----------
        features : DataFrame indexed by (date, code), float columns (cast to float32).
        relevance : the training target aligned with ``features``' rows (a Series is aligned on the
            index): integer relevance levels or a real-valued label; or None.
        tensor : ``(wide, grid)`` from :func:`models.windows.feature_tensor`, usually built over more rows than
            ``features`` (e.g. every listed stock, while ``features`` holds only index members) so that
            windows see a stock's history before it joined the universe. Every sample must be on the grid.
        """
        if not isinstance(features.index, pd.MultiIndex) or features.index.nlevels != 2:
            raise DataContractError(
                "RankingData.from_frame: expected a frame indexed by (date, code), received index "
                f"{type(features.index).__name__} with names {list(features.index.names)}."
            )
        dates = np.asarray(pd.DatetimeIndex(features.index.get_level_values(0)).values)
        codes = np.asarray(features.index.get_level_values(1).astype(str))
        if isinstance(relevance, pd.Series):
            relevance = relevance.reindex(features.index).to_numpy()
        wide = date_pos = code_pos = None
        if tensor is not None:
            wide, grid = tensor
            date_pos = grid.dates.get_indexer(pd.DatetimeIndex(dates))
            code_pos = grid.codes.get_indexer(pd.Index(codes))
            off = (date_pos < 0) | (code_pos < 0)
            if off.any():
                bad = np.flatnonzero(off)
                raise DataContractError(
                    f"RankingData.from_frame: {len(bad)} samples are not on the tensor's (date, code) grid, "
                    f"e.g. {preview([f'{dates[i]} {codes[i]}' for i in bad[:3]])}. Build the tensor from a "
                    "frame that contains every sample's row."
                )
        return cls(
            X=features.to_numpy(dtype=np.float32),
            dates=dates,
            codes=codes,
            feature_names=tuple(str(c) for c in features.columns),
            relevance=relevance,
            wide=wide,
            date_pos=date_pos,
            code_pos=code_pos,
        )

    def window_source(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(wide, date_pos, code_pos)`` for :func:`models.windows.window_view`.

        Without a ``wide`` tensor the grid is built from these samples alone (their own dates and codes),
        so a day's window holds only the history that is part of this data: give predict-time data the
        backtest's tensor instead.
        """
        if self.wide is not None:
            assert self.date_pos is not None and self.code_pos is not None
            return self.wide, self.date_pos, self.code_pos
        date_pos, grid_dates = pd.factorize(self.dates, sort=True)
        code_pos, grid_codes = pd.factorize(self.codes, sort=True)
        wide = np.full((len(grid_dates), len(grid_codes), self.n_features), np.nan, dtype=np.float32)
        wide[date_pos, code_pos] = self.X
        return wide, date_pos.astype(np.int64), code_pos.astype(np.int64)


RankingData.X = _FeatureValues()  # type: ignore[assignment]  # the dataclass field, read through a gather


def _as_relevance(relevance: np.ndarray, n: int) -> np.ndarray:
    """The target as int64 (integer levels, >= 0) or float64 (a real-valued label, finite)."""
    rel = np.asarray(relevance)
    if rel.shape != (n,):
        raise DataContractError(f"RankingData.relevance: expected shape ({n},), received {rel.shape}.")
    if rel.dtype.kind == "f":
        bad = ~np.isfinite(rel)
        if bad.any():
            raise DataContractError(
                f"RankingData.relevance: expected a finite target, received {int(bad.sum())} missing values "
                f"(first at row {int(np.flatnonzero(bad)[0])}). Drop samples whose label is unknown (their "
                "label_end is after the data) before building training data."
            )
        return rel.astype(np.float64, copy=False)
    if rel.dtype.kind not in "iub":
        raise DataContractError(
            f"RankingData.relevance: expected integer levels or a real-valued target, received dtype {rel.dtype}."
        )
    rel = rel.astype(np.int64, copy=False)
    if rel.size and rel.min() < 0:
        raise DataContractError(
            f"RankingData.relevance: expected bins >= 0, received {int((rel < 0).sum())} negative values "
            f"(first at row {int(np.flatnonzero(rel < 0)[0])}); -1 in backtest.labels' bins marks an "
            "unknown label: drop those samples from training data."
        )
    return rel
