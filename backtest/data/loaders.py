"""Loaders: files in, validated canonical panel out. The only data module that reads files."""

from __future__ import annotations

import codecs
import gzip
import logging
import stat
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data.membership import membership_from_snapshots
from backtest.data.validate import canonicalize, validate_cross_section, validate_membership
from backtest.errors import ConfigError, DataContractError, preview

log = logging.getLogger(__name__)

_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".gz": "csv", ".txt": "csv"}


def read_table(path: str | Path, what: str = "panel", encoding: str = "utf-8") -> pd.DataFrame:
    """Read a CSV or parquet table, turning I/O and parse failures into DataContractError.

    ``encoding`` is the text encoding of a CSV (``data.encoding``; parquet has none). A CSV that is not
    valid text in it is refused with the encoding its bytes do decode as (Chinese Windows exports are
    often GBK / GB18030).
    """
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ConfigError(
            f"data.encoding: unknown text encoding {encoding!r}\n  fix: data.encoding=utf-8 (or "
            "gb18030 for GBK exports, latin-1, ...: a name Python's codecs know)"
        ) from None
    path = Path(path).expanduser()
    if path.is_dir():
        tables = sorted(p.name for p in path.iterdir() if p.suffix.lower() in _FORMATS)
        inside = f"; table files in it: {preview(tables)}" if tables else "; it holds no .csv or .parquet file"
        raise DataContractError(
            f"{what} path is a directory, expected a file: {path}{inside}\n  fix: pass the file itself, e.g. "
            f"data.path={path / (tables[0] if tables else 'panel.parquet')} (a folder of Tushare exports loads "
            f"with data=tushare data.directory={path})"
        )
    if not path.is_file():
        found = not_a_file(path)
        if found != "not found":
            raise DataContractError(
                f"{what} path {path} {found}\n  fix: data.path=/abs/path/panel.parquet, a regular .parquet or "
                ".csv file (write a stream into a file first)"
            )
        raise DataContractError(
            f"{what} file not found: {path}\n  fix: pass an existing file, e.g. data.path=/abs/path/panel.parquet "
            "(relative paths resolve against the directory you run from)"
        )
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataContractError(
            f"{path}: unknown file type '{path.suffix}'\n  fix: use .parquet or .csv (optionally .csv.gz)"
        )
    try:
        if fmt == "parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path, dtype={"code": str, "ts_code": str, "con_code": str}, encoding=encoding)
    except pd.errors.EmptyDataError:
        raise DataContractError(f"{path}: the file is empty\n  fix: export the {what} again") from None
    except UnicodeDecodeError as exc:
        raise _encoding_error(path, encoding, exc) from None
    except (pd.errors.ParserError, OSError, ValueError) as exc:
        raise DataContractError(
            f"{path}: cannot be read as {fmt} ({exc})\n  fix: check the file is a complete {fmt} export"
        ) from None


def not_a_file(path: Path) -> str:
    """What ``path`` is when it is not a regular file, as the end of a sentence ("is a directory", "is a FIFO
    (named pipe), not a regular file", "not found"); it is never opened (a FIFO would wait for a writer).

    >>> not_a_file(Path("/dev/null"))
    'is a character device, not a regular file'
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return "not found"
    kinds = (
        (stat.S_ISDIR, "is a directory"),
        (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
        (stat.S_ISCHR, "is a character device, not a regular file"),
        (stat.S_ISBLK, "is a block device, not a regular file"),
        (stat.S_ISSOCK, "is a socket, not a regular file"),
    )
    return next((kind for test, kind in kinds if test(mode)), "is not a regular file")


def _encoding_error(path: Path, encoding: str, exc: UnicodeDecodeError) -> DataContractError:
    """The file is not ``encoding`` text: say so, and name an encoding its first bytes decode as."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            sample = handle.read(1 << 16)
    except OSError:
        sample = b""
    guess = None
    for candidate in ("utf-8", "gb18030", "big5"):
        if codecs.lookup(candidate).name == codecs.lookup(encoding).name:
            continue
        try:
            codecs.getincrementaldecoder(candidate)().decode(sample, final=False)
        except UnicodeDecodeError:
            continue
        guess = candidate
        break
    received = f"byte 0x{exc.object[exc.start]:02x} at position {exc.start} is not {encoding}"
    if guess == "gb18030":
        found = "its bytes decode as GB18030 (GBK), the usual encoding of Chinese Windows exports"
    elif guess:
        found = f"its bytes decode as {guess}"
    else:
        found = "its encoding is none of utf-8, gb18030, big5"
    return DataContractError(
        f"{path}: the file is not valid {encoding} text ({received}); {found}\n"
        f"  fix: data.encoding={guess or '<the file encoding>'} (the CSV's text encoding), or re-save the file as "
        "UTF-8"
    )


def read_calendar(path: str | Path, encoding: str = "utf-8") -> pd.DatetimeIndex:
    """A trading calendar file: one column of dates (named ``date``, ``cal_date`` or the first column).

    Tushare ``trade_cal`` exports are understood: rows with ``is_open == 0`` are dropped.
    """
    table = read_table(path, "calendar", encoding)
    if "is_open" in table.columns:
        table = table[table["is_open"].astype(int) == 1]
    col = next((c for c in ("date", "cal_date", "trade_date") if c in table.columns), table.columns[0])
    days = pd.to_datetime(table[col].astype(str), errors="coerce", format="mixed")
    if days.isna().any():
        raise DataContractError(
            f"{path}: unparseable dates in calendar column '{col}'\n  fix: one date per row, YYYY-MM-DD or YYYYMMDD"
        )
    return pd.DatetimeIndex(days.sort_values().unique(), name="date")


def read_panel(
    path: str | Path,
    membership_path: str | Path | None = None,
    calendar_path: str | Path | None = None,
    encoding: str = "utf-8",
) -> pd.DataFrame:
    """Read a long panel (parquet or CSV) and return the validated canonical panel.

    Parameters
    ----------
    path : file with columns ``date``, ``code`` and any subset of the schema's columns (only ``close`` is
        required).
    membership_path : optional constituent snapshots (columns ``date``, ``code``); sets ``in_universe``
        point in time (see ``membership_from_snapshots``).
    calendar_path : optional trading calendar; every panel date must be on it.
    encoding : text encoding of the CSV files (``data.encoding``; e.g. ``gb18030`` for GBK exports).

    Raises
    ------
    DataContractError : a file is missing, a directory, unreadable, not ``encoding`` text, breaks the
        panel contract, or holds fewer than 2 stocks (nothing to rank).
    """
    calendar = read_calendar(calendar_path, encoding) if calendar_path else None
    panel = canonicalize(read_table(path, encoding=encoding), source=str(path), calendar=calendar)
    validate_cross_section(panel, source=str(path))
    if membership_path:
        snapshots = read_table(membership_path, "membership", encoding)
        for need in ("date", "code"):
            if need not in snapshots.columns:
                raise DataContractError(
                    f"{membership_path}: missing column '{need}'\n  fix: a membership file has "
                    "one row per constituent per snapshot, columns date and code"
                )
        validate_membership(snapshots, panel.index.get_level_values(1).unique(), source=str(membership_path))
        if "in_universe" in panel.columns:
            log.info("%s: in_universe from %s replaces the panel's own column", path, membership_path)
        panel = panel.assign(in_universe=membership_from_snapshots(snapshots, panel.index))
    return panel


#: Columns an index series file may give (``data.benchmark_path``): levels at the open or the close of each
#: date, or the simple return of each date (close of the previous trading day to the close of the date).
INDEX_SERIES_COLUMNS: tuple[str, ...] = ("open", "close", "return")


def read_index_series(path: str | Path, encoding: str = "utf-8") -> pd.DataFrame:
    r"""Read a benchmark index series (``data.benchmark_path``): a CSV or parquet table with a ``date`` (or
    ``trade_date``) column and at least one of ``open`` / ``close`` (index levels at that moment of the
    date) or ``return`` (the simple return of the date, close to close; 0.01 = 1%). Other columns are
    ignored (a Tushare ``index_daily`` export reads as it is, one index per file).

    How the series becomes the benchmark's returns (which column, on which dates) is
    :func:`backtest.benchmark.supplied_index_returns`; this function only reads and checks the file.

    Returns
    -------
    DataFrame indexed by ``date`` (sorted, unique), float64 columns: those of :data:`INDEX_SERIES_COLUMNS`
    the file has, in that order; NaN where the file has no value.

    Raises
    ------
    DataContractError : the file is missing, a directory or unreadable; no date column or dates that do not
        parse; no value column; duplicated dates; a level that is not positive or a return not in (-1, 1).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "csi300.csv").write_text("trade_date,close\n20240103,3300.5\n20240102,3310.0\n")
    ...     read_index_series(Path(tmp, "csi300.csv"))
                 close
    date
    2024-01-02  3310.0
    2024-01-03  3300.5
    """
    path = Path(path).expanduser()
    fix = (
        "  fix: data.benchmark_path=/abs/path/index.csv (a CSV or parquet with date and close, open or return "
        "columns), or data.benchmark_path=null for the float-cap-weighted index of the panel's universe"
    )
    if not path.is_file():
        raise DataContractError(f"data.benchmark_path: the benchmark file {not_a_file(path)}: {path}\n{fix}")
    table = read_table(path, "benchmark", encoding)
    date_col = next((c for c in ("date", "trade_date") if c in table.columns), None)
    values = [c for c in INDEX_SERIES_COLUMNS if c in table.columns]
    if date_col is None or not values:
        missing = "a date (or trade_date) column" if date_col is None else ""
        if not values:
            missing += (" and " if missing else "") + "one of the columns open, close (index levels) or return"
        raise DataContractError(
            f"{path}: the benchmark series needs {missing}; its columns are {preview(table.columns, 10)}\n"
            "  fix: one row per trading day with columns date and close (the index level at the close), or "
            "date and return (the day's simple return, 0.01 = 1%); rename a level column such as price to close"
        )
    dates = pd.to_datetime(table[date_col].astype(str), errors="coerce", format="mixed")
    if dates.isna().any():
        bad = table.loc[dates.isna().to_numpy(), date_col]
        raise DataContractError(
            f"{path}: {int(dates.isna().sum())} dates in column '{date_col}' do not parse, e.g. {preview(bad, 3)}\n"
            "  fix: one date per row, YYYY-MM-DD or YYYYMMDD"
        )
    if dates.duplicated().any():
        dups = sorted(set(dates[dates.duplicated()].dt.date))
        several = (
            f"; it holds {table['ts_code'].nunique()} indexes (ts_code)"
            if "ts_code" in table.columns and table["ts_code"].nunique() > 1
            else ""
        )
        raise DataContractError(
            f"{path}: {len(dups)} dates appear more than once, e.g. {preview(dups, 3)}{several}\n"
            "  fix: one row per date: keep a single index in the file"
        )
    series = pd.DataFrame(
        {c: pd.to_numeric(table[c], errors="coerce").to_numpy("float64") for c in values},
        index=pd.DatetimeIndex(dates, name="date"),
    ).sort_index()
    for column in values:
        v = series[column]
        if column == "return":
            bad = v.notna() & ~((v > -1) & (v < 1))
            expected = "a simple return in (-1, 1) (0.01 = 1%; a percent column divided by 100)"
        else:
            bad = v.notna() & ~(np.isfinite(v) & (v > 0))
            expected = "a positive index level"
        if bad.any():
            raise DataContractError(
                f"{path}: column '{column}' has {int(bad.sum())} values that are not {expected}, e.g. on "
                f"{preview(v.index[bad.to_numpy()].date, 3)}: {preview(v[bad].tolist(), 3)}\n"
                "  fix: correct or drop those rows (a missing day is refused later only if the backtest needs it)"
            )
    if series[values].isna().all(axis=None):
        raise DataContractError(f"{path}: the benchmark series has no numeric value in {', '.join(values)}\n{fix}")
    return series
