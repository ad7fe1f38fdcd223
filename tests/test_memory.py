"""File-backed feature matrices read without keeping their pages (backtest.memory), measured in this
process's resident memory."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from backtest.memory import drop_pages, drop_span, file_backed, read_columns, read_rows

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="resident memory is read from /proc (Linux)")

MIB = 2**20


def _file_pages_mib() -> float:
    """Resident pages of mapped files in this process (RssFile), MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:")) / 1024


@pytest.fixture
def matrix(tmp_path: Path) -> tuple[np.ndarray, np.memmap]:
    """A 64 MiB float32 matrix in memory and the same matrix mapped from its .npy file."""
    values = np.random.default_rng(0).standard_normal((65_536, 256)).astype(np.float32)
    np.save(tmp_path / "values.npy", values)
    return values, np.load(tmp_path / "values.npy", mmap_mode="r")


def test_dropped_pages_leave_the_process_and_come_back_with_the_same_values(matrix) -> None:
    values, mapped = matrix
    before = _file_pages_mib()
    assert mapped.sum(dtype=np.float64) == values.sum(dtype=np.float64)  # every page read
    assert _file_pages_mib() - before > 60
    drop_pages(mapped)
    assert _file_pages_mib() - before < 4
    assert mapped.tobytes() == values.tobytes()  # read again from the page cache
    drop_pages(mapped, 0, len(mapped) // 2)  # the first half only
    assert 28 < _file_pages_mib() - before < 36
    drop_pages(np.asarray(mapped)[len(mapped) // 2 :])  # a plain view of the map (RankingData holds one)
    assert _file_pages_mib() - before < 4


def test_read_rows_copies_the_rows_and_keeps_none_of_their_pages(matrix) -> None:
    values, mapped = matrix
    drop_pages(mapped)
    before = _file_pages_mib()
    rows = np.arange(0, len(values), 3)
    out = read_rows(mapped, rows)
    assert type(out) is np.ndarray and out.tobytes() == values[rows].tobytes()
    assert read_rows(mapped, slice(100, 200)).tobytes() == values[100:200].tobytes()
    assert _file_pages_mib() - before < 4
    assert read_rows(values, rows).tobytes() == values[rows].tobytes()  # an array in memory: plain indexing


def test_arrays_in_memory_and_private_maps_are_never_dropped(matrix, tmp_path: Path) -> None:
    """Dropping an array that is not the file's pages would lose its values: it does nothing."""
    values, _ = matrix
    copy = values.copy()
    drop_pages(copy)
    assert copy.tobytes() == values.tobytes()
    private = np.load(tmp_path / "values.npy", mmap_mode="c")  # copy-on-write: writes live in this process
    private[0, 0] = 7.0
    drop_pages(private)
    assert not file_backed(private) and private[0, 0] == 7.0
    assert not file_backed(values) and not file_backed(np.load(tmp_path / "values.npy", mmap_mode="r")[:, :8])


def test_written_pages_of_a_file_map_are_kept_in_the_file(tmp_path: Path) -> None:
    """A matrix written into its file (the feature cache's build) can drop what it wrote: the writes stay."""
    out = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32, shape=(4096, 256))
    out[:] = 1.5
    drop_pages(out)
    out[10] = 2.5
    drop_pages(out, 0, 2048)
    assert out[10, 0] == 2.5 and out[4000, 255] == 1.5
    del out
    stored = np.load(tmp_path / "w.npy")
    assert stored[10, 3] == 2.5 and stored.sum(dtype=np.float64) == 1.5 * 4095 * 256 + 2.5 * 256


def test_a_few_columns_of_every_row_are_read_without_mapping_the_file_in(matrix) -> None:
    values, mapped = matrix
    drop_pages(mapped)
    before = _file_pages_mib()
    assert read_columns(mapped, slice(10, 58)).tobytes() == values[:, 10:58].tobytes()
    assert read_columns(mapped, [3, 1]).tobytes() == values[:, [3, 1]].tobytes()
    assert _file_pages_mib() - before < 4


def test_the_span_of_runs_of_rows_is_dropped_with_the_rows_between_them(matrix) -> None:
    """The runs of rows a scattered selection lies in: their pages and the ones between them go."""
    _, mapped = matrix
    before = _file_pages_mib()
    mapped.sum(dtype=np.float64)
    runs = [np.asarray(mapped)[a : a + 1000] for a in range(0, len(mapped), 1001)]  # one row left out of each
    drop_span(runs)
    assert _file_pages_mib() - before < 4
