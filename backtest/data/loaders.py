"""Loaders: files in, validated canonical panel out. The only data module that reads files."""

from __future__ import annotations

import codecs
import gzip
import logging
from pathlib import Path

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
