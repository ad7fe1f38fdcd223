"""Validation of the canonical panel: one function, run before any expensive work.

``canonicalize`` turns a long table read from a file (columns ``date``, ``code`` and data columns) into
the canonical panel and validates it; ``validate_panel`` checks a panel that is already indexed. Both
raise :class:`~backtest.errors.DataContractError` with the problem, where it is (codes, dates, rows) and
how to fix it. Neither modifies its input.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from backtest.data.schema import (
    BOOL_COLUMNS,
    INDEX_NAMES,
    KNOWN_COLUMNS,
    NONNEGATIVE_COLUMNS,
    NUMERIC_COLUMNS,
    POSITIVE_COLUMNS,
    PRICE_COLUMNS,
    REQUIRED_COLUMNS,
    TEXT_COLUMNS,
)
from backtest.errors import DataContractError, preview

log = logging.getLogger(__name__)

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def _fail(source: str, problem: str, where: str, fix: str) -> DataContractError:
    return DataContractError(f"{source}: {problem}\n  where: {where}\n  fix: {fix}")


def _rows_where(frame: pd.DataFrame, mask: np.ndarray, limit: int = 5) -> str:
    """'(date, code)' pairs of the first rows where ``mask`` holds, for messages."""
    idx = frame.index[np.asarray(mask)]
    pairs = [f"({d:%Y-%m-%d}, {c})" if isinstance(d, pd.Timestamp) else f"({d}, {c})" for d, c in idx[:limit]]
    more = int(np.asarray(mask).sum()) - len(pairs)
    return ", ".join(pairs) + (f" (and {more} more rows)" if more > 0 else "")


def canonicalize(frame: pd.DataFrame, source: str = "panel", calendar: pd.DatetimeIndex | None = None) -> pd.DataFrame:
    """Turn a long table into the canonical (date, code) panel, then validate it.

    Parameters
    ----------
    frame : DataFrame with columns ``date`` and ``code`` (or index levels of those names) and any
        subset of the schema's data columns. Unknown columns are kept as they are.
    source : name of the input (a file path) used in error messages.
    calendar : the exchange's trading days; when given, every date must be one of them.

    Returns
    -------
    panel : DataFrame indexed by (date, code), dtypes as in ``backtest.data.schema``.
    """
    if frame.shape[0] == 0:
        raise _fail(
            source,
            "the input is empty (no rows)",
            "whole file",
            "export the panel again; it needs at least one (date, code) row with a close price",
        )
    if isinstance(frame.index, pd.MultiIndex) or frame.index.name in INDEX_NAMES:
        frame = frame.reset_index()
    missing_keys = [k for k in INDEX_NAMES if k not in frame.columns]
    if missing_keys:
        raise _fail(
            source,
            f"missing key column(s) {missing_keys}",
            f"columns present: {preview(frame.columns, 12)}",
            "name the trading-day column 'date' and the stock column 'code' (a long panel, one row per "
            "stock and day); for Tushare exports use the Tushare importer (data=tushare)",
        )
    out = pd.DataFrame(index=frame.index)
    dates = (
        pd.to_datetime(frame["date"].astype("string"), errors="coerce", format="mixed")
        if frame["date"].dtype.kind not in "Mm"
        else frame["date"]
    )
    bad = dates.isna().to_numpy()
    if bad.any():
        raw = frame.loc[bad, "date"].astype("string").fillna("<empty>")
        raise _fail(
            source,
            f"{int(bad.sum())} unparseable or empty date(s)",
            f"data row(s) {preview(np.flatnonzero(bad) + 1)}: values {preview(raw.unique())}",
            "write dates as YYYY-MM-DD (or YYYYMMDD) and drop rows without a date",
        )
    out["date"] = dates.astype("datetime64[ns]").to_numpy()
    codes = frame["code"].astype("string")
    if codes.isna().any() or (codes.str.strip() == "").any():
        rows = np.flatnonzero((codes.isna() | (codes.str.strip() == "")).to_numpy())
        raise _fail(source, "empty stock code(s)", f"data row(s) {preview(rows + 1)}", "every row needs a stock code")
    out["code"] = codes.astype(object).to_numpy()
    for col in frame.columns:
        if col in INDEX_NAMES:
            continue
        values = frame[col]
        if col in NUMERIC_COLUMNS and values.dtype.kind in "fiub":
            out[col] = values.astype("float64").to_numpy()
        elif col in NUMERIC_COLUMNS:
            num = pd.to_numeric(values, errors="coerce")
            bad = (num.isna() & values.notna() & (values.astype("string").str.strip() != "")).to_numpy()
            if bad.any():
                raise _fail(
                    source,
                    f"text in numeric column '{col}'",
                    f"data row(s) {preview(np.flatnonzero(bad) + 1)}: "
                    f"values {preview(values[bad].astype('string').unique())}",
                    f"'{col}' must hold numbers only (use an empty cell for a missing value)",
                )
            out[col] = num.astype("float64").to_numpy()
        elif col in BOOL_COLUMNS:
            out[col] = _to_bool(values, col, source)
        elif col in TEXT_COLUMNS:
            out[col] = values.astype("string").astype("category") if values.notna().any() else values
        else:
            out[col] = values.to_numpy()
    unknown = [c for c in frame.columns if c not in KNOWN_COLUMNS and c not in INDEX_NAMES]
    if unknown:
        log.info(
            "%s: keeping %d column(s) outside the schema as they are: %s", source, len(unknown), preview(unknown, 8)
        )
    panel = out.set_index(list(INDEX_NAMES))
    return validate_panel(panel, source=source, calendar=calendar)


def _to_bool(values: pd.Series, col: str, source: str) -> np.ndarray:
    if values.dtype == bool:
        return values.to_numpy()
    text = values.astype("string").str.strip().str.lower().fillna("")
    ok = text.isin(_TRUE | _FALSE)
    if not ok.all():
        bad = np.flatnonzero(~ok.to_numpy())
        raise _fail(
            source,
            f"column '{col}' must be boolean",
            f"data row(s) {preview(bad + 1)}: values {preview(values.iloc[bad].astype('string').unique())}",
            "use true/false or 1/0",
        )
    return text.isin(_TRUE).to_numpy()


def validate_panel(
    panel: pd.DataFrame, source: str = "panel", calendar: pd.DatetimeIndex | Sequence | None = None
) -> pd.DataFrame:
    """Check a panel against the data contract; return it unchanged when it complies.

    Checks, in order: (date, code) index; not empty; required columns; numeric dtypes; no infinite
    numbers; unique and sorted keys; dates on the calendar (weekdays, and the given trading days); prices
    positive, NaN only on suspended rows; ``low <= open, close <= high``; non-negative volumes and
    amounts; a non-empty universe. A panel of one stock passes (a label or a feature of one stock is
    well defined); :func:`validate_cross_section` refuses it where stocks are ranked.

    Raises
    ------
    DataContractError naming the first problem found, where it is and how to fix it.
    """
    if not isinstance(panel.index, pd.MultiIndex) or list(panel.index.names) != list(INDEX_NAMES):
        raise _fail(
            source,
            f"the panel must be indexed by (date, code); got index names {list(panel.index.names)}",
            "index",
            "build it with DataFrame.set_index(['date', 'code']) from a long table, or load it with "
            "backtest.data.loaders.read_panel",
        )
    if len(panel) == 0:
        raise _fail(source, "the panel is empty (no rows)", "whole panel", "load a panel with at least one row")
    missing = [c for c in REQUIRED_COLUMNS if c not in panel.columns]
    if missing:
        raise _fail(
            source,
            f"missing required column(s) {missing}",
            f"columns present: {preview(panel.columns, 12)}",
            "a panel needs at least a 'close' column (raw close price); rename your price column to 'close'",
        )
    dates = panel.index.get_level_values(0)
    if dates.dtype.kind != "M":
        raise _fail(
            source,
            f"the date level must hold datetimes, got dtype {dates.dtype}",
            "index level 'date'",
            "convert it with pandas.to_datetime",
        )
    for col in panel.columns.intersection(NUMERIC_COLUMNS):
        if panel[col].dtype.kind not in "fiu":
            raise _fail(
                source,
                f"numeric column '{col}' has dtype {panel[col].dtype}",
                f"column '{col}'",
                "convert it with pandas.to_numeric; text values are not allowed",
            )
    for col in panel.columns.intersection(NUMERIC_COLUMNS):
        infinite = np.isinf(panel[col].to_numpy(dtype="float64"))
        if infinite.any():
            raise _fail(
                source,
                f"{int(infinite.sum())} infinite value(s) in '{col}' (expected finite numbers)",
                _rows_where(panel, infinite),
                f"'{col}' must be finite: an inf usually comes from a division by zero in the export (an "
                "adjustment factor or a unit conversion); correct those rows, or leave the cell empty on "
                "a suspended row",
            )

    dup = panel.index.duplicated(keep=False)
    if dup.any():
        raise _fail(
            source,
            f"{int(dup.sum())} rows share a (date, code) key",
            _rows_where(panel, dup),
            "keep one row per stock and day (e.g. drop_duplicates(['date', 'code'], keep='last') after "
            "checking which one is right)",
        )
    if not panel.index.is_monotonic_increasing:
        d = dates.to_numpy()
        c = panel.index.get_level_values(1).to_numpy()
        back = np.flatnonzero((d[1:] < d[:-1]) | ((d[1:] == d[:-1]) & (c[1:] < c[:-1])))
        i = int(back[0]) + 1
        raise _fail(
            source,
            "rows are not sorted by (date, code)",
            f"row {i} ({pd.Timestamp(d[i]):%Y-%m-%d}, {c[i]}) comes after "
            f"({pd.Timestamp(d[i - 1]):%Y-%m-%d}, {c[i - 1]}); {len(back)} such place(s)",
            "sort the panel: panel.sort_index() or sort the file by date then code",
        )

    weekend = dates.dayofweek >= 5
    if weekend.any():
        raise _fail(
            source,
            f"{int(weekend.sum())} rows fall on a weekend, off any exchange calendar",
            _rows_where(panel, weekend),
            "check the date column (time zone shifts, wrong format?) and drop non-trading days",
        )
    if calendar is not None:
        off = ~dates.isin(pd.DatetimeIndex(calendar))
        if off.any():
            raise _fail(
                source,
                f"{int(off.sum())} rows fall on days that are not on the trading calendar",
                f"dates {preview(pd.DatetimeIndex(dates[off].unique()).strftime('%Y-%m-%d'))}",
                "drop rows dated on exchange holidays, or pass the right trading calendar",
            )

    suspended = (
        panel["is_suspended"].to_numpy(dtype=bool) if "is_suspended" in panel.columns else np.zeros(len(panel), bool)
    )
    for col in panel.columns.intersection(POSITIVE_COLUMNS):
        v = panel[col].to_numpy(dtype="float64")
        nan = np.isnan(v)
        if col in PRICE_COLUMNS and (nan & ~suspended).any():
            bad = nan & ~suspended
            raise _fail(
                source,
                f"{int(bad.sum())} missing (NaN) '{col}' price(s) on trading rows",
                _rows_where(panel, bad),
                "drop rows of days a stock did not trade, or set is_suspended=true "
                "on them (a suspended row may carry NaN prices)",
            )
        nonpos = ~nan & (v <= 0)
        if nonpos.any():
            raise _fail(
                source,
                f"{int(nonpos.sum())} zero or negative value(s) in '{col}'",
                _rows_where(panel, nonpos),
                f"'{col}' must be > 0; check the export (a 0 often means 'no trade': drop the row or mark it "
                "suspended with NaN prices)",
            )
    present = [c for c in PRICE_COLUMNS if c in panel.columns]
    if "high" in present and "low" in present:
        hi, lo = panel["high"].to_numpy(), panel["low"].to_numpy()
        with np.errstate(invalid="ignore"):
            bad = hi < lo
            for col in ("open", "close"):
                if col in present:
                    v = panel[col].to_numpy()
                    bad = bad | (v > hi * (1 + 1e-9)) | (v < lo * (1 - 1e-9))
        if bad.any():
            raise _fail(
                source,
                f"{int(bad.sum())} bar(s) violate low <= open, close <= high",
                _rows_where(panel, bad),
                "check the high/low columns (swapped? adjusted differently from open/close?)",
            )
    for col in panel.columns.intersection(NONNEGATIVE_COLUMNS):
        with np.errstate(invalid="ignore"):
            neg = panel[col].to_numpy(dtype="float64") < 0
        if neg.any():
            raise _fail(
                source,
                f"{int(neg.sum())} negative value(s) in '{col}'",
                _rows_where(panel, neg),
                f"'{col}' is a size or an amount and must be >= 0",
            )
    if "in_universe" in panel.columns:
        if panel["in_universe"].dtype != bool:
            raise _fail(
                source,
                f"'in_universe' must be boolean, got {panel['in_universe'].dtype}",
                "column 'in_universe'",
                "use true/false",
            )
        if not panel["in_universe"].any():
            raise _fail(
                source,
                "the universe is empty: no row has in_universe = true",
                "column 'in_universe'",
                "check the membership source (index weights, membership file); drop the column to use all stocks",
            )
    return panel


def validate_cross_section(panel: pd.DataFrame, source: str = "panel", min_stocks: int = 2) -> pd.DataFrame:
    """Refuse a panel with fewer than ``min_stocks`` stocks: a cross-sectional ranking needs two or more.

    A one-stock panel passes :func:`validate_panel` but cannot be ranked: every day's cross-section is
    one name, the rank IC and the drift report are undefined, and the top-k book is the benchmark. The
    loaders call this after :func:`validate_panel`, before any expensive work.

    Raises
    ------
    DataContractError naming the number of stocks found and their codes.
    """
    codes = panel.index.get_level_values(1).unique()
    if len(codes) < min_stocks:
        raise _fail(
            source,
            f"a cross-sectional ranking needs at least {min_stocks} stocks; the panel has {len(codes)}",
            f"codes {preview(codes)}",
            "load a panel of a universe (one row per stock and day for every stock of the index), not "
            "a single stock's history",
        )
    return panel


def validate_membership(membership: pd.DataFrame, codes: pd.Index, source: str = "membership") -> None:
    """Check index-membership rows (columns ``date``, ``code``) against the panel's codes.

    Raises DataContractError for codes the panel does not know: a member without prices would silently
    leave the universe short (survivorship), so it is refused rather than dropped.
    """
    if len(membership) == 0:
        raise _fail(
            source,
            "the membership table is empty",
            "whole table",
            "export index constituents (date, code) for the period, or drop the membership input",
        )
    unknown = pd.Index(membership["code"].astype(str).unique()).difference(pd.Index(codes))
    if len(unknown):
        raise _fail(
            source,
            f"{len(unknown)} member code(s) have no rows in the panel",
            f"codes {preview(unknown)}",
            "add those stocks' bars (delisted stocks too: they must stay in the data until their last day) "
            "or check the code format (e.g. 600000.SH)",
        )
