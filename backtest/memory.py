"""Feature matrices that live in a file: read their rows without keeping the file's pages resident.

A feature matrix in the feature cache is a memory map of its file (:mod:`backtest.features.cache`). Its
values are then held by the OS page cache: shared, written back to the file when dirty, and dropped by
the kernel when memory is short, to be read again from the file. They count in this process's resident
memory only while their pages are mapped in, and a pass over the matrix (binning it, ranking it a block
of days at a time, scoring a fold, writing it) maps in every page it reads. :func:`drop_pages` unmaps
them again once a pass is done with them (``madvise(MADV_DONTNEED)``): the next read of those rows maps
them in from the page cache (or the file), with the same values. So the process holds what it works on,
not the matrix (benchmarks/README.md, "Memory", measures it).

Arrays in process memory (a matrix built without the cache) are never touched: for them dropping would
lose the values, so :func:`drop_pages` does nothing.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "m.npy")
>>> np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
>>> m = np.load(path, mmap_mode="r")
>>> file_backed(m), file_backed(np.asarray(m)[1:]), file_backed(np.ones(3)), file_backed(m[:, :2])
(True, True, False, False)
>>> drop_pages(m); drop_span([m[:1], m[2:]])
>>> read_rows(m, np.array([1, 3])).tolist()
[[3.0, 4.0, 5.0], [9.0, 10.0, 11.0]]
>>> read_columns(m, slice(1, 3)).tolist()
[[1.0, 2.0], [4.0, 5.0], [7.0, 8.0], [10.0, 11.0]]
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
from numpy.lib.array_utils import byte_bounds

#: memory-map modes whose pages are the file's (MAP_SHARED): dropping them keeps every value, written or not
_SHARED_MODES = frozenset({"r", "r+", "w+"})


def _libc_madvise():  # pragma: no cover - platform probe
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (AttributeError, OSError):  # no libc madvise (not Linux or BSD): nothing is dropped
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _libc_madvise()
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def file_backed(values: np.ndarray) -> bool:
    """True when ``values`` are C-contiguous rows of a shared memory map of a file (``np.load(...,
    mmap_mode="r")``, ``np.lib.format.open_memmap``), or a view of one (``np.asarray`` of it included):
    the arrays :func:`drop_pages` works on."""
    return isinstance(values, np.ndarray) and values.flags.c_contiguous and _file_map(values) is not None


def _file_map(values: np.ndarray) -> np.memmap | None:
    """The shared file map whose memory ``values`` view, None when they are not such a view."""
    array = values
    while isinstance(array, np.ndarray):  # a view's memory is its base's
        if isinstance(array, np.memmap) and getattr(array, "_mmap", None) is not None:
            return array if array.mode in _SHARED_MODES else None
        array = array.base
    return None


class _FileRows(np.ndarray):
    """A view of a file-backed matrix that pickles as its file's path, byte offset, dtype and shape, not
    as its bytes, and unpickles as a read-only memory map of the same rows (:func:`by_file`)."""

    _file: tuple[str, int]

    def __reduce__(self):  # type: ignore[override]
        path, offset = self._file
        return (open_rows, (path, offset, self.dtype.str, self.shape))

    def __reduce_ex__(self, protocol):  # type: ignore[override]
        return self.__reduce__()  # ndarray's own __reduce_ex__ would ship the bytes


def by_file(values: np.ndarray) -> np.ndarray:
    """``values``, pickling as a reference to its file when they are file-backed (:func:`file_backed`);
    any other array is returned as it is. For processes that see the same file (workers on this machine,
    or on a shared filesystem: :func:`file_identity`, :func:`sees_file`), which then map the rows from
    the page cache that every process shares instead of each holding a copy of them.

    >>> import pickle, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npy")
    >>> np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    >>> m = np.load(path, mmap_mode="r")
    >>> shipped = pickle.dumps(by_file(np.asarray(m)[1:]))
    >>> len(shipped) < 200, pickle.loads(shipped).tolist()
    (True, [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0], [9.0, 10.0, 11.0]])
    >>> pickle.loads(pickle.dumps(by_file(m[3:]))).tolist()  # a slice of the memory map itself
    [[9.0, 10.0, 11.0]]
    """
    found = _file_map(values) if file_backed(values) else None
    if found is None:
        return values
    view = values.view(_FileRows)
    view._file = (os.path.abspath(found.filename), _file_offset(values, found))
    return view


def _file_offset(values: np.ndarray, found: np.memmap) -> int:
    """The byte of ``found``'s file where ``values`` (a view of its memory) begin. ``np.memmap`` maps the
    file from ``offset`` rounded down to the allocation granularity, and a slice of a memory map keeps its
    parent's ``offset``, so the position is taken from the mapping's own start."""
    mapped_from = int(found.offset) - int(found.offset) % mmap.ALLOCATIONGRANULARITY
    start = np.frombuffer(found._mmap, dtype=np.uint8).ctypes.data
    return mapped_from + values.ctypes.data - start


class _FileMap(np.memmap):
    """A read-only memory map opened by :func:`open_rows`; it pickles as a reference to its file again
    (another process that receives it, a Dask worker passing it to another, sends no bytes)."""

    def __reduce_ex__(self, protocol):  # type: ignore[override]
        shipped = by_file(self)
        if shipped is self:  # not C-contiguous: the values themselves
            return np.array(self).__reduce_ex__(protocol)
        return shipped.__reduce__()


def open_rows(path: str, offset: int, dtype: str, shape: tuple[int, ...]) -> np.memmap:
    """The rows :func:`by_file` refers to: a read-only memory map of ``path`` from byte ``offset``.

    >>> import pickle, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npy")
    >>> np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    >>> m = open_rows(path, 128, "<f4", (4, 3))
    >>> again = pickle.dumps(m[2:])  # a slice of it, passed on
    >>> len(again) < 200, pickle.loads(again).tolist(), file_backed(pickle.loads(again))
    (True, [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]], True)
    """
    return _FileMap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=tuple(shape))


def file_identity(values: np.ndarray) -> tuple[str, int, int] | None:
    """(path, size, modification time in ns) of the file ``values`` map, None when not file-backed."""
    found = _file_map(values) if file_backed(values) else None
    if found is None:
        return None
    path = os.path.abspath(found.filename)
    stat = os.stat(path)
    return path, stat.st_size, stat.st_mtime_ns


def sees_file(path: str, size: int, mtime_ns: int) -> bool:
    """True when this process sees ``path`` with that size and modification time (:func:`file_identity`)."""
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return stat.st_size == size and stat.st_mtime_ns == mtime_ns


def drop_pages(values: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Unmap the resident pages of rows ``start:stop`` of a file-backed matrix (:func:`file_backed`); the
    next read of them maps them in again, with the same values. Pages shared with rows outside the range
    stay. Does nothing for any other array, or where the platform has no ``madvise``."""
    if not file_backed(values) or values.ndim == 0:
        return
    n = len(values)
    start, stop = max(0, start), n if stop is None else min(stop, n)
    if stop > start:
        row = values.strides[0] if values.ndim > 1 else values.itemsize
        _unmap(values.ctypes.data + start * row, values.ctypes.data + stop * row)


def drop_span(views: list[np.ndarray]) -> None:
    """Unmap the resident pages of the stretch of a file-backed matrix that ``views`` (row ranges of it,
    such as the runs of rows a scattered selection lies in) cover, the rows between them included."""
    if not all(file_backed(v) for v in views) or len({id(_file_map(v)) for v in views}) != 1:
        for v in views:  # not views of one map: each on its own
            drop_pages(v)
        return
    bounds = [byte_bounds(v) for v in views if v.size]
    if bounds:
        _unmap(min(b[0] for b in bounds), max(b[1] for b in bounds))


def _unmap(lo: int, hi: int) -> None:
    """``madvise(MADV_DONTNEED)`` over the whole pages of the addresses ``lo:hi`` of a shared file map."""
    if _MADVISE is None or _DONTNEED is None:
        return
    page = mmap.PAGESIZE
    lo, hi = -(-lo // page) * page, hi // page * page  # the whole pages inside
    if hi > lo:
        _MADVISE(lo, hi - lo, _DONTNEED)


def read_rows(values: np.ndarray, rows: np.ndarray | slice) -> np.ndarray:
    """``values[rows]``; for a file-backed matrix (:func:`file_backed`) an array of its own, with the
    pages of the rows' span dropped afterwards: a pass that reads rows once, without keeping them."""
    if not file_backed(values):
        return values[rows]
    plain = values.view(np.ndarray)
    if isinstance(rows, slice):
        start, stop, _ = rows.indices(len(values))
        out = plain[rows].copy()
    else:
        rows = np.asarray(rows)
        out = plain[rows]  # a gather copies
        if not rows.size:
            return out
        start, stop = int(rows.min()), int(rows.max()) + 1
    drop_pages(values, start, stop)
    return out


def read_columns(values: np.ndarray, columns: slice | list[int] | np.ndarray) -> np.ndarray:
    """``values[:, columns]`` as a C-ordered array of its own. A file-backed matrix is read a chunk of
    rows at a time and each chunk's pages dropped: a few columns of every row would otherwise map in
    every page of the file."""
    n_cols = len(range(values.shape[1])[columns]) if isinstance(columns, slice) else len(columns)
    out = np.empty((len(values), n_cols), dtype=values.dtype)
    for rows in row_chunks(len(values), values.strides[0]):
        out[rows] = values[rows][:, columns]
        drop_pages(values, rows.start, rows.stop)
    return out


def row_chunks(n_rows: int, row_bytes: int, chunk_bytes: int = 64 * 2**20) -> list[slice]:
    """Consecutive row ranges of about ``chunk_bytes`` each that cover ``n_rows`` rows: the unit a pass
    over a large matrix reads (or writes) before it drops the pages.

    >>> row_chunks(10, row_bytes=100, chunk_bytes=400)
    [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
    """
    step = max(1, chunk_bytes // max(row_bytes, 1))
    return [slice(lo, min(lo + step, n_rows)) for lo in range(0, n_rows, step)]
