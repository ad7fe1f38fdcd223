"""Loaders: files in, validated canonical panel out. The only data module that reads files."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from backtest.data.membership import membership_from_snapshots
from backtest.data.validate import canonicalize, validate_membership
from backtest.errors import DataContractError

log = logging.getLogger(__name__)

_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".gz": "csv", ".txt": "csv"}


def read_table(path: str | Path, what: str = "panel") -> pd.DataFrame:
    """Read a CSV or parquet table, turning I/O and parse failures into DataContractError."""
    path = Path(path).expanduser()
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
        return pd.read_csv(path, dtype={"code": str, "ts_code": str, "con_code": str})
    except pd.errors.EmptyDataError:
        raise DataContractError(f"{path}: the file is empty\n  fix: export the {what} again") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        raise DataContractError(f"{path}: cannot be read as {fmt} ({exc})\n  fix: check the file is a complete {fmt} "
                                "export") from None


def read_calendar(path: str | Path) -> pd.DatetimeIndex:
    """A trading calendar file: one column of dates (named ``date``, ``cal_date`` or the first column).

    Tushare ``trade_cal`` exports are understood: rows with ``is_open == 0`` are dropped.
    """
    table = read_table(path, "calendar")
    if "is_open" in table.columns:
        table = table[table["is_open"].astype(int) == 1]
    col = next((c for c in ("date", "cal_date", "trade_date") if c in table.columns), table.columns[0])
    days = pd.to_datetime(table[col].astype(str), errors="coerce", format="mixed")
    if days.isna().any():
        raise DataContractError(f"{path}: unparseable dates in calendar column '{col}'\n  fix: one date per row, "
                                "YYYY-MM-DD or YYYYMMDD")
    return pd.DatetimeIndex(days.sort_values().unique(), name="date")


def read_panel(
    path: str | Path,
    membership_path: str | Path | None = None,
    calendar_path: str | Path | None = None,
) -> pd.DataFrame:
    """Read a long panel (parquet or CSV) and return the validated canonical panel.

    Parameters
    ----------
    path : file with columns ``date``, ``code`` and any subset of the schema's columns (only ``close`` is
        required).
    membership_path : optional constituent snapshots (columns ``date``, ``code``); sets ``in_universe``
        point in time (see ``membership_from_snapshots``).
    calendar_path : optional trading calendar; every panel date must be on it.
    """
    calendar = read_calendar(calendar_path) if calendar_path else None
    panel = canonicalize(read_table(path), source=str(path), calendar=calendar)
    if membership_path:
        snapshots = read_table(membership_path, "membership")
        for need in ("date", "code"):
            if need not in snapshots.columns:
                raise DataContractError(f"{membership_path}: missing column '{need}'\n  fix: a membership file has "
                                        "one row per constituent per snapshot, columns date and code")
        validate_membership(snapshots, panel.index.get_level_values(1).unique(), source=str(membership_path))
        if "in_universe" in panel.columns:
            log.info("%s: in_universe from %s replaces the panel's own column", path, membership_path)
        panel = panel.assign(in_universe=membership_from_snapshots(snapshots, panel.index))
    return panel
