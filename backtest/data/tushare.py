"""Tushare Pro exports in, the canonical panel out.

A Tushare export is a directory with one file per Tushare Pro API, in Tushare's own field names and
units (``backtest.data.tushare_download`` writes exactly this layout). Each file is found by its stem
with the extension ``.parquet``, ``.csv`` or ``.csv.gz``; pass ``files`` to use other names. Only
``daily`` is required: every other file adds its columns when present.

::

    key           Tushare API        fields read (others are ignored)            unit in the file -> panel
    ------------  -----------------  ------------------------------------------  ---------------------------------
    daily         daily              ts_code trade_date open high low close      prices CNY, as they are
                                     vol amount                                  vol: lots of 100 shares -> volume
                                                                                 (shares); amount: 1,000 CNY -> CNY
    adj_factor    adj_factor         ts_code trade_date adj_factor               backward factor, as it is
    moneyflow     moneyflow          ts_code trade_date buy_sm_amount ..         10,000 CNY -> CNY (the *_vol
                                     sell_elg_amount net_mf_amount               fields, in lots, are not used)
    daily_basic   daily_basic        ts_code trade_date total_mv circ_mv         10,000 CNY -> CNY: total_mv,
                                     (total_share, to check units)               float_mv (= circ_mv)
    stk_limit     stk_limit          ts_code trade_date up_limit down_limit      CNY -> up_limit, down_limit
    index_weight  index_weight       index_code con_code trade_date              point-in-time in_universe
    industry      index_member_all,  ts_code (or con_code); industry (or         industry (point in time when
                  index_member,      l1_name, industry_name, index_name);        dated)
                  stock_basic        optional in_date, out_date
    trade_cal     trade_cal          cal_date is_open                            the exchange's trading days

Dates may be Tushare's ``YYYYMMDD`` (text or integer) or ISO ``YYYY-MM-DD``; rows may come in any order.

Adjustment. ``adj_factor`` is Tushare's cumulative backward factor: ``raw * adj_factor`` is the
backward-adjusted price. It only multiplies each day by the factor known that day, so a later dividend
or split never rewrites earlier adjusted prices: point in time. (Forward adjustment, ``raw *
adj_factor / latest adj_factor``, changes the whole history at every corporate action and must not be
used for features.) A missing factor is carried forward from the stock's previous day, never backwards.

Suspensions. Tushare's ``daily`` has no row on a day a stock does not trade. With
``suspended_rows="last_close"`` (the default) the importer adds a row, ``is_suspended = True``, for every
trading day (from ``trade_cal``, else the days present in ``daily``) between a stock's first and last
bar without a bar. Such a row carries the last close in open, high, low and close, as the schema
prescribes and as the synthetic market does (close-to-close returns are 0 while nothing trades), with
volume, amount and money flow 0 and market caps carried from the last bar. When the adjustment factor
changes during the suspension the carried close is ex-rights adjusted (``last close * last factor /
factor``), so the adjusted price stays flat and the whole corporate action lands on no trading day.
``"nan"`` adds the same rows with NaN prices; ``"absent"`` adds none (no ``is_suspended`` column: the
portfolio layer then reads a missing row between two bars as a suspension). Days before a stock's first
bar (not listed yet) and after its last bar (delisted, or the export ends) get no rows.

Point in time. Index membership comes from the ``index_weight`` snapshots of one index (``index_code``,
default CSI 300 ``399300.SZ``) through ``membership_from_snapshots``: a stock is a member from the
snapshot that lists it until the next snapshot that does not. An industry file with ``in_date`` /
``out_date`` is applied by date (a row counts from ``in_date`` through ``out_date``, a later row wins on
a shared day); an undated one (``stock_basic``) is one classification as of the export, applied to
every day, which is logged as a mild look-ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd

from backtest.data import tradability
from backtest.data.loaders import read_calendar, read_table
from backtest.data.membership import membership_from_snapshots
from backtest.data.schema import INDEX_NAMES, MONEYFLOW_COLUMNS, PRICE_COLUMNS
from backtest.data.validate import validate_membership, validate_panel
from backtest.errors import ConfigError, DataContractError, preview

log = logging.getLogger(__name__)

#: The files an export may hold, in reading order; ``DEFAULT_FILES[key]`` is the file stem.
FILE_KEYS: tuple[str, ...] = (
    "daily",
    "adj_factor",
    "moneyflow",
    "daily_basic",
    "stk_limit",
    "index_weight",
    "industry",
    "trade_cal",
)
DEFAULT_FILES: Mapping[str, str] = MappingProxyType({key: key for key in FILE_KEYS})
#: Extensions tried, in order, for a file stem.
EXTENSIONS: tuple[str, ...] = (".parquet", ".csv", ".csv.gz")
SUSPENDED_ROWS: tuple[str, ...] = ("last_close", "nan", "absent")
DEFAULT_INDEX_CODE = "399300.SZ"

_KEYS = ("ts_code", "trade_date")


@dataclass(frozen=True)
class _StockDayTable:
    """A per-(stock, day) Tushare API: which fields it must have and how they map to panel columns."""

    required: tuple[str, ...]
    fields: Mapping[str, tuple[str, float]]  # Tushare field -> (panel column, multiplier to the panel's unit)
    any_of: bool = False  # True: at least one of ``required`` is enough
    extra_numeric: tuple[str, ...] = ()  # read as numbers for unit checks, not kept


_TABLES: Mapping[str, _StockDayTable] = MappingProxyType(
    {
        "daily": _StockDayTable(
            required=("close",),
            fields=MappingProxyType(
                {
                    "open": ("open", 1.0),
                    "high": ("high", 1.0),
                    "low": ("low", 1.0),
                    "close": ("close", 1.0),
                    "vol": ("volume", 100.0),
                    "amount": ("amount", 1000.0),
                }
            ),
        ),
        "adj_factor": _StockDayTable(
            required=("adj_factor",),
            fields=MappingProxyType({"adj_factor": ("adj_factor", 1.0)}),
        ),
        "moneyflow": _StockDayTable(
            required=MONEYFLOW_COLUMNS,
            fields=MappingProxyType({c: (c, 10_000.0) for c in MONEYFLOW_COLUMNS}),
        ),
        "daily_basic": _StockDayTable(
            required=("total_mv", "circ_mv"),
            fields=MappingProxyType({"total_mv": ("total_mv", 10_000.0), "circ_mv": ("float_mv", 10_000.0)}),
            any_of=True,
            extra_numeric=("total_share", "float_share"),
        ),
        "stk_limit": _StockDayTable(
            required=("up_limit", "down_limit"),
            fields=MappingProxyType({"up_limit": ("up_limit", 1.0), "down_limit": ("down_limit", 1.0)}),
        ),
    }
)

_COLUMN_ORDER: tuple[str, ...] = (
    *PRICE_COLUMNS,
    "volume",
    "amount",
    "adj_factor",
    "up_limit",
    "down_limit",
    "total_mv",
    "float_mv",
    *MONEYFLOW_COLUMNS,
    "industry",
    "in_universe",
    "is_suspended",
)
_INDUSTRY_CODE_FIELDS = ("ts_code", "con_code")
_INDUSTRY_NAME_FIELDS = ("industry", "l1_name", "industry_name", "index_name")


def import_tushare(
    directory: str | Path,
    index_code: str = DEFAULT_INDEX_CODE,
    files: Mapping[str, str | None] | None = None,
    suspended_rows: str = "last_close",
) -> pd.DataFrame:
    r"""Read a directory of Tushare exports and return the validated canonical panel.

    Parameters
    ----------
    directory : folder holding the files of the module docstring (``daily`` at least).
    index_code : the index whose ``index_weight`` snapshots set ``in_universe`` (e.g. ``399300.SZ`` CSI 300,
        ``000905.SH`` CSI 500). Ignored without an ``index_weight`` file.
    files : optional overrides, file key -> file name (relative to ``directory``) or absolute path;
        ``None`` skips that file. Keys are those of :data:`FILE_KEYS`.
    suspended_rows : ``"last_close"`` (default), ``"nan"`` or ``"absent"``: how days without a bar between a
        stock's first and last bar are represented (module docstring, "Suspensions").

    Returns
    -------
    panel : DataFrame indexed by (date, code), sorted, unique; columns among ``open high low close volume
        amount adj_factor up_limit down_limit total_mv float_mv`` + money flow, ``industry``,
        ``in_universe``, ``is_suspended``, in the units of ``backtest.data.schema`` (shares, CNY).

    Raises
    ------
    DataContractError : a file is missing, unreadable, lacks a column, holds text in a numeric field,
        looks converted to other units, or breaks the panel contract; the message names the file, the
        rows and the fix.
    ConfigError : an unknown file key or ``suspended_rows`` value.

    Examples
    --------
    A ``daily`` file alone: ``vol`` 1,500 lots and ``amount`` 1,500 thousand CNY become shares and CNY.

    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "daily.csv").write_text(
    ...         "ts_code,trade_date,open,high,low,close,vol,amount\n"
    ...         "000001.SZ,20240103,10.0,10.5,9.9,10.0,1500,1500.0\n"
    ...     )
    ...     panel = import_tushare(folder)
    >>> panel[["close", "volume", "amount"]]
                          close    volume     amount
    date       code
    2024-01-03 000001.SZ   10.0  150000.0  1500000.0
    """
    if suspended_rows not in SUSPENDED_ROWS:
        raise ConfigError(
            f"import_tushare: suspended_rows must be one of {list(SUSPENDED_ROWS)}, got "
            f"{suspended_rows!r}\n  fix: use last_close (default), nan or absent"
        )
    paths = tushare_paths(directory, files)
    daily_path = paths["daily"]
    if daily_path is None:
        looked = (
            "files sets daily to null"
            if files and "daily" in files
            else f"looked for {preview([DEFAULT_FILES['daily'] + ext for ext in EXTENSIONS])}"
        )
        raise DataContractError(
            f"{directory}: no Tushare daily file (the only required one)\n  where: {looked}\n  fix: export the "
            "daily API (ts_code, trade_date, open, high, low, close, vol, amount) as daily.csv or daily.parquet, "
            "or point files={'daily': ...} at it"
        )
    calendar = read_calendar(paths["trade_cal"]) if paths["trade_cal"] is not None else None

    bars = _read_stock_days(daily_path, "daily")
    _check_daily_units(bars, str(daily_path))
    days = pd.DatetimeIndex(
        calendar if calendar is not None else np.unique(bars["date"].to_numpy()), name="date"
    ).astype("datetime64[ns]")
    if calendar is not None:
        _check_on_calendar(bars, calendar, str(daily_path), str(paths["trade_cal"]))
    frame = _with_suspension_rows(bars, days, suspended_rows)

    for key in ("adj_factor", "moneyflow", "daily_basic", "stk_limit"):
        path = paths[key]
        if path is None:
            continue
        table = _read_stock_days(path, key)
        if key in _UNIT_CHECKS:
            _UNIT_CHECKS[key](table, bars, str(path))
        frame = _attach(frame, table, key, str(path))
    frame = _fill_gaps(frame, carry_close=suspended_rows == "last_close")
    if "up_limit" in frame.columns:
        _check_limits(frame, str(paths["stk_limit"]))
    if paths["industry"] is not None:
        frame["industry"] = _industry(
            read_table(paths["industry"], "Tushare industry"), frame.index, str(paths["industry"])
        )
    if paths["index_weight"] is not None:
        frame["in_universe"] = _membership(
            read_table(paths["index_weight"], "Tushare index_weight"),
            index_code,
            frame.index,
            str(paths["index_weight"]),
        )

    frame = frame[[c for c in _COLUMN_ORDER if c in frame.columns]]
    panel = validate_panel(_canonical_types(frame), source=str(directory), calendar=calendar)
    log.info(
        "tushare %s: %d rows, %d stocks, %d days (%s .. %s), files %s%s",
        directory,
        len(panel),
        panel.index.get_level_values(1).nunique(),
        panel.index.get_level_values(0).nunique(),
        f"{panel.index[0][0]:%Y-%m-%d}",
        f"{panel.index[-1][0]:%Y-%m-%d}",
        ", ".join(k for k in FILE_KEYS if paths[k] is not None),
        f", {int(panel['is_suspended'].sum())} suspended rows added" if "is_suspended" in panel.columns else "",
    )
    return panel


def tushare_paths(directory: str | Path, files: Mapping[str, str | None] | None = None) -> dict[str, Path | None]:
    """The file of every key of :data:`FILE_KEYS` in ``directory`` (``None`` where there is none).

    A stem found with two extensions (``daily.csv`` and ``daily.parquet``) is refused: one of them is stale.
    An override names a file relative to ``directory`` (or absolute) and must exist.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DataContractError(
            f"Tushare export directory not found: {directory}\n  fix: pass an existing folder, "
            "e.g. data.directory=/abs/path/tushare (download one with "
            "`python -m backtest.data.tushare_download`)"
        )
    files = dict(files or {})
    unknown = sorted(set(files) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(
            f"import_tushare: unknown file key(s) {unknown}; known keys: {list(FILE_KEYS)}\n  fix: "
            "override only those keys, e.g. files={'daily': 'bars.csv', 'moneyflow': None}"
        )
    out: dict[str, Path | None] = {}
    for key in FILE_KEYS:
        if key in files:
            name = files[key]
            if name is None:
                out[key] = None
                continue
            path = Path(name).expanduser()
            path = path if path.is_absolute() else directory / path
            if not path.is_file():
                raise DataContractError(
                    f"{path}: file for Tushare '{key}' not found\n  fix: check files.{key} "
                    f"(relative names resolve against {directory}), or set it to null to skip it"
                )
            out[key] = path
            continue
        found = [directory / f"{DEFAULT_FILES[key]}{ext}" for ext in EXTENSIONS]
        found = [p for p in found if p.is_file()]
        if len(found) > 1:
            raise DataContractError(
                f"{directory}: Tushare '{key}' is there twice ({preview(p.name for p in found)})"
                "\n  fix: delete the stale one, or choose one with files={'" + key + "': ...}"
            )
        out[key] = found[0] if found else None
    return out


# --- reading one per-(stock, day) file --------------------------------------------------------------


def _error(source: str, problem: str, where: str, fix: str) -> DataContractError:
    return DataContractError(f"{source}: {problem}\n  where: {where}\n  fix: {fix}")


def _read_stock_days(path: Path, key: str) -> pd.DataFrame:
    """One per-(stock, day) file as a long frame: ``date``, ``code`` and the panel columns in panel units.

    Raw Tushare fields needed only for unit checks (``extra_numeric``) are kept under their own names.
    """
    spec = _TABLES[key]
    source = str(path)
    table = read_table(path, f"Tushare {key}")
    if len(table) == 0:
        raise _error(source, "the file has no rows", "whole file", f"export the {key} API again for the period")
    missing = [c for c in _KEYS if c not in table.columns]
    if spec.any_of:
        if not any(c in table.columns for c in spec.required):
            missing.append(f"one of {list(spec.required)}")
    else:
        missing += [c for c in spec.required if c not in table.columns]
    if missing:
        raise _error(
            source,
            f"missing column(s) {missing} of the Tushare {key} API",
            f"columns present: {preview(table.columns, 12)}",
            f"export {key} with Tushare's field names ({', '.join([*_KEYS, *spec.required])}); "
            "do not rename or convert the fields",
        )
    out = pd.DataFrame(
        {
            "date": _parse_dates(table["trade_date"], "trade_date", source),
            "code": _parse_codes(table["ts_code"], "ts_code", source),
        }
    )
    for field in [*spec.fields, *spec.extra_numeric]:
        if field not in table.columns:
            continue
        values = _numeric(table[field], field, source, out)
        column, scale = spec.fields.get(field, (field, 1.0))
        out[column] = values * scale if scale != 1.0 else values
    dup = out.duplicated(["date", "code"], keep=False).to_numpy()
    if dup.any():
        raise _error(
            source,
            f"{int(dup.sum())} rows share a (ts_code, trade_date) key",
            _keys_at(out, dup),
            "keep one row per stock and day (the export was probably appended twice)",
        )
    return out


def _parse_dates(values: pd.Series, field: str, source: str, allow_missing: bool = False) -> np.ndarray:
    """Tushare ``YYYYMMDD`` (text or number) or ISO dates -> datetime64[ns]; NaT only where allowed.

    Each distinct value is parsed once (a daily file repeats a few thousand dates over millions of rows).
    """
    if values.dtype.kind == "M":
        parsed = pd.DatetimeIndex(values).astype("datetime64[ns]").to_numpy()
        blank = np.isnat(parsed)
    else:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        text = pd.Series(uniques).astype("string").str.strip().str.replace(r"\.0$", "", regex=True)
        compact = text.str.fullmatch(r"\d{8}").fillna(False).to_numpy(dtype=bool)
        day = pd.Series(pd.NaT, index=text.index, dtype="datetime64[ns]")
        day[compact] = pd.to_datetime(text[compact], format="%Y%m%d", errors="coerce")
        rest = ~compact & (text != "").fillna(False).to_numpy(dtype=bool)
        day[rest] = pd.to_datetime(text[rest], format="ISO8601", errors="coerce")
        day_values = np.append(day.to_numpy(dtype="datetime64[ns]"), np.datetime64("NaT", "ns"))
        parsed = day_values[codes]  # code -1 (a missing value) takes the appended NaT
        blank = np.append((text == "").fillna(True).to_numpy(dtype=bool), True)[codes]
    missing = np.isnat(parsed) & ~(blank if allow_missing else np.zeros(len(parsed), dtype=bool))
    if missing.any():
        shown = values[missing].astype("string").fillna("<empty>").unique()
        raise _error(
            source,
            f"{int(missing.sum())} unparseable or empty date(s) in '{field}'",
            f"rows {preview(np.flatnonzero(missing))}: values {preview(shown)}",
            "Tushare dates are YYYYMMDD (e.g. 20240102); ISO YYYY-MM-DD works too",
        )
    return parsed


def _parse_codes(values: pd.Series, field: str, source: str) -> np.ndarray:
    codes = values.astype("string").str.strip()
    bad = (codes.isna() | (codes == "")).to_numpy(dtype=bool)
    if bad.any():
        raise _error(
            source,
            f"{int(bad.sum())} empty stock code(s) in '{field}'",
            f"rows {preview(np.flatnonzero(bad))}",
            "every row needs a Tushare code such as 600000.SH",
        )
    return codes.astype(object).to_numpy()


def _numeric(values: pd.Series, field: str, source: str, keys: pd.DataFrame) -> np.ndarray:
    if values.dtype.kind in "fiu":
        return values.to_numpy(dtype="float64")
    num = pd.to_numeric(values, errors="coerce")
    blank = values.isna() | (values.astype("string").str.strip() == "").fillna(True)
    bad = (num.isna() & ~blank).to_numpy(dtype=bool)
    if bad.any():
        raise _error(
            source,
            f"text in numeric field '{field}'",
            f"{_keys_at(keys, bad)}: values {preview(values[bad].astype('string').unique())}",
            f"'{field}' must hold numbers only (an empty cell for a missing value)",
        )
    return num.to_numpy(dtype="float64")


def _keys_at(frame: pd.DataFrame, mask: np.ndarray, limit: int = 5) -> str:
    """'(date, code)' of the first rows where ``mask`` holds, for messages."""
    rows = np.flatnonzero(mask)
    pairs = [f"({pd.Timestamp(frame['date'].iloc[i]):%Y-%m-%d}, {frame['code'].iloc[i]})" for i in rows[:limit]]
    more = len(rows) - len(pairs)
    return ", ".join(pairs) + (f" (and {more} more rows)" if more > 0 else "")


# --- unit checks: Tushare's units are easy to convert twice or not at all ------------------------------


def _median_ratio(num: np.ndarray, den: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    r = r[np.isfinite(r) & (r > 0)]
    return float(np.median(r)) if len(r) else float("nan")


def _unit_error(source: str, measured: str, ratio: float, expected: str, fix: str) -> DataContractError:
    return _error(
        source, f"the units look wrong: {measured} is {ratio:.4g} (expected {expected})", "median over all rows", fix
    )


def _check_daily_units(bars: pd.DataFrame, source: str) -> None:
    """The implied average trade price, amount / volume, must be close to the close price."""
    if "volume" not in bars.columns or "amount" not in bars.columns:
        return
    ratio = _median_ratio(bars["amount"].to_numpy() / bars["volume"].to_numpy(), bars["close"].to_numpy())
    if np.isfinite(ratio) and not 0.5 <= ratio <= 2.0:
        raise _unit_error(
            source,
            "(amount x 1000 CNY) / (vol x 100 shares) / close",
            ratio,
            "about 1",
            "Tushare daily has vol in lots (100 shares) and amount in thousands of CNY; pass the raw "
            "export (a panel already in shares and CNY loads with data=parquet or data=csv)",
        )


def _check_moneyflow_units(table: pd.DataFrame, bars: pd.DataFrame, source: str) -> None:
    """All buy orders together trade about the day's turnover."""
    if "amount" not in bars.columns:
        return
    both = table.merge(bars[["date", "code", "amount"]], on=["date", "code"])
    buys = both[[c for c in MONEYFLOW_COLUMNS if c.startswith("buy_")]].sum(axis=1, min_count=1).to_numpy()
    ratio = _median_ratio(buys, both["amount"].to_numpy())
    if np.isfinite(ratio) and not 0.25 <= ratio <= 4.0:
        raise _unit_error(
            source,
            "(sum of buy_*_amount x 10,000 CNY) / (daily amount x 1000 CNY)",
            ratio,
            "about 1",
            "Tushare moneyflow amounts are in 10,000 CNY and daily amount in 1,000 CNY; pass both "
            "raw exports, unconverted",
        )


def _check_daily_basic_units(table: pd.DataFrame, bars: pd.DataFrame, source: str) -> None:
    """total_mv (10k CNY) = total_share (10k shares) x close."""
    if "total_mv" not in table.columns or "total_share" not in table.columns:
        return
    both = table.merge(bars[["date", "code", "close"]], on=["date", "code"])
    ratio = _median_ratio(
        both["total_mv"].to_numpy() / 10_000.0, both["total_share"].to_numpy() * both["close"].to_numpy()
    )
    if np.isfinite(ratio) and not 0.5 <= ratio <= 2.0:
        raise _unit_error(
            source,
            "total_mv / (total_share x close), both in units of 10,000",
            ratio,
            "about 1",
            "pass the raw daily_basic export: total_mv and circ_mv in 10,000 CNY, total_share in 10,000 shares",
        )


def _check_limit_units(table: pd.DataFrame, bars: pd.DataFrame, source: str) -> None:
    both = table.merge(bars[["date", "code", "close"]], on=["date", "code"])
    ratio = _median_ratio(both["up_limit"].to_numpy(), both["close"].to_numpy())
    if np.isfinite(ratio) and not 0.95 <= ratio <= 1.6:
        raise _unit_error(
            source,
            "up_limit / close",
            ratio,
            "about 1.1 (1.2 on ChiNext and STAR)",
            "stk_limit prices are raw CNY like daily's; do not adjust them",
        )
    with np.errstate(invalid="ignore"):
        crossed = (table["up_limit"] < table["down_limit"]).to_numpy()
    if crossed.any():
        raise _error(
            source,
            f"{int(crossed.sum())} row(s) with up_limit < down_limit",
            _keys_at(table, crossed),
            "check the export: the columns may be swapped",
        )


_UNIT_CHECKS = MappingProxyType(
    {
        "moneyflow": _check_moneyflow_units,
        "daily_basic": _check_daily_basic_units,
        "stk_limit": _check_limit_units,
    }
)


def _check_limits(frame: pd.DataFrame, source: str) -> None:
    """Log (not refuse) closes of trading days outside the day's limits by more than half a tick
    (:mod:`backtest.data.tradability`'s rule and tolerance): real exports have a few (listing days)."""
    trading = ~tradability.suspended_rows(frame)
    close = frame["close"].to_numpy()
    tolerance = tradability.LIMIT_TOLERANCE
    with np.errstate(invalid="ignore"):
        out = trading & (
            (close > frame["up_limit"].to_numpy() + tolerance) | (close < frame["down_limit"].to_numpy() - tolerance)
        )
    if out.any():
        log.warning(
            "%s: %d close(s) outside [down_limit, up_limit]: %s",
            source,
            int(out.sum()),
            preview(f"({d:%Y-%m-%d}, {c})" for d, c in frame.index[out]),
        )


def _check_on_calendar(bars: pd.DataFrame, calendar: pd.DatetimeIndex, source: str, cal_source: str) -> None:
    off = ~pd.DatetimeIndex(bars["date"]).isin(calendar)
    if off.any():
        dates = pd.DatetimeIndex(np.unique(bars["date"].to_numpy()[off]))
        raise _error(
            source,
            f"{int(off.sum())} bar(s) on {len(dates)} day(s) that are not open days of {cal_source}",
            f"dates {preview(dates.strftime('%Y-%m-%d'))} (calendar {calendar.min():%Y-%m-%d} .. "
            f"{calendar.max():%Y-%m-%d})",
            "export trade_cal (is_open) for the whole period of daily, or skip it with files={'trade_cal': None}",
        )


# --- assembling the panel ---------------------------------------------------------------------------


def _with_suspension_rows(bars: pd.DataFrame, days: pd.DatetimeIndex, mode: str) -> pd.DataFrame:
    """Bars indexed by (date, code), sorted; plus, unless ``mode == "absent"``, one row with NaN data and
    ``is_suspended = True`` per trading day without a bar between a stock's first and last bar."""
    if mode == "absent":
        return bars.set_index(list(INDEX_NAMES)).sort_index()
    code_pos, codes = pd.factorize(bars["code"], sort=True)
    codes = np.asarray(codes, dtype=object)
    day_pos = days.get_indexer(pd.DatetimeIndex(bars["date"]))
    assert (day_pos >= 0).all(), "bars off the calendar are refused before"
    first = np.full(len(codes), len(days), dtype=np.int64)
    last = np.full(len(codes), -1, dtype=np.int64)
    np.minimum.at(first, code_pos, day_pos)
    np.maximum.at(last, code_pos, day_pos)
    lengths = last - first + 1
    stock = np.repeat(np.arange(len(codes)), lengths)
    day = np.repeat(first, lengths) + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    order = np.lexsort((stock, day))  # by date, then code (codes are sorted)
    stock, day = stock[order], day[order]
    full = pd.MultiIndex.from_arrays([days[day], codes[stock]], names=list(INDEX_NAMES))
    out = bars.set_index(list(INDEX_NAMES)).reindex(full)
    has_bar = np.zeros(len(full), dtype=bool)
    has_bar[full.get_indexer(pd.MultiIndex.from_arrays([bars["date"], bars["code"]]))] = True
    out["is_suspended"] = ~has_bar
    return out


def _canonical_types(frame: pd.DataFrame) -> pd.DataFrame:
    """The dtypes ``backtest.data.validate.canonicalize`` gives (numbers float64, flags bool, industry a
    category of strings, dates datetime64[ns]), set directly: every column here is already parsed, and
    canonicalize's re-parsing of text would cost most of an import."""
    out = frame.reset_index()
    out["date"] = out["date"].astype("datetime64[ns]")
    out["code"] = out["code"].astype(str)
    for col in out.columns.drop(list(INDEX_NAMES)):
        if col == "industry":
            out[col] = out[col].astype("string").astype("category")
        elif col in ("in_universe", "is_suspended"):
            out[col] = out[col].astype(bool)
        else:
            out[col] = out[col].astype("float64")
    return out.set_index(list(INDEX_NAMES))


def _attach(frame: pd.DataFrame, table: pd.DataFrame, key: str, source: str) -> pd.DataFrame:
    """Left-join a per-(stock, day) table onto the panel rows; rows of other stocks or days are dropped."""
    table = table.set_index(list(INDEX_NAMES))
    columns = [column for column, _ in _TABLES[key].fields.values() if column in table.columns]
    matched = table.index.isin(frame.index)
    if not matched.any():
        days = table.index.get_level_values(0)
        raise _error(
            source,
            f"none of its {len(table)} rows matches a (trade_date, ts_code) of daily",
            f"its codes {preview(table.index.get_level_values(1).unique())}, dates "
            f"{days.min():%Y-%m-%d} .. {days.max():%Y-%m-%d}",
            f"export {key} for the same stocks and period as daily (same ts_code format, e.g. 600000.SH)",
        )
    out = frame.join(table[columns], how="left")
    covered = out[columns[0]].notna().to_numpy()
    trading = ~tradability.suspended_rows(out)
    coverage = covered[trading].mean()
    level = logging.WARNING if coverage < 0.9 else logging.INFO
    log.log(
        level,
        "%s: %d of %d rows match a bar or a suspended day of daily (the rest are for other stocks or "
        "days); they cover %.1f%% of the bars",
        source,
        int(matched.sum()),
        len(table),
        100 * coverage,
    )
    return out


def _fill_gaps(frame: pd.DataFrame, carry_close: bool) -> pd.DataFrame:
    """Carry missing adjustment factors forward, and fill the added suspension rows (module docstring,
    "Suspensions")."""
    frame = frame.copy()
    suspended = frame["is_suspended"].to_numpy() if "is_suspended" in frame.columns else np.zeros(len(frame), bool)
    by_code = frame.index.get_level_values(1)
    if "adj_factor" in frame.columns:
        missing = frame["adj_factor"].isna().to_numpy()
        frame["adj_factor"] = frame["adj_factor"].groupby(by_code).ffill()
        filled = missing & frame["adj_factor"].notna().to_numpy()
        if filled.any():
            log.info(
                "adj_factor: %d missing factor(s) carried forward from the stock's previous day", int(filled.sum())
            )
    if not suspended.any():
        return frame
    if carry_close:
        last_close = frame["close"].where(~suspended).groupby(by_code).ffill().to_numpy()
        if "adj_factor" in frame.columns:
            last_factor = frame["adj_factor"].where(~suspended).groupby(by_code).ffill().to_numpy()
            last_close = last_close * last_factor / frame["adj_factor"].to_numpy()
        for col in PRICE_COLUMNS:
            if col in frame.columns:
                frame[col] = np.where(suspended, last_close, frame[col].to_numpy())
    for col in ("volume", "amount", *MONEYFLOW_COLUMNS):
        if col in frame.columns:
            frame[col] = np.where(suspended & frame[col].isna().to_numpy(), 0.0, frame[col].to_numpy())
    for col in ("total_mv", "float_mv"):
        if col in frame.columns:
            carried = frame[col].groupby(by_code).ffill().to_numpy()
            frame[col] = np.where(suspended, carried, frame[col].to_numpy())
    return frame


def _industry(table: pd.DataFrame, index: pd.MultiIndex, source: str) -> pd.Series:
    """Industry per panel row from a classification table, by date when it has ``in_date``."""
    code_field = next((c for c in _INDUSTRY_CODE_FIELDS if c in table.columns), None)
    name_field = next((c for c in _INDUSTRY_NAME_FIELDS if c in table.columns), None)
    if code_field is None or name_field is None:
        raise _error(
            source,
            "an industry file needs a stock code and an industry name column",
            f"columns present: {preview(table.columns, 12)}",
            f"use Tushare's index_member_all (ts_code, l1_name, in_date, out_date) or stock_basic (ts_code, "
            f"industry); accepted code fields {list(_INDUSTRY_CODE_FIELDS)}, name fields "
            f"{list(_INDUSTRY_NAME_FIELDS)}",
        )
    if len(table) == 0:
        raise _error(source, "the industry file has no rows", "whole file", "export it again, or skip it")
    cls = pd.DataFrame(
        {
            "code": pd.Series(_parse_codes(table[code_field], code_field, source), dtype=str),
            "industry": table[name_field].astype("string").str.strip().to_numpy(),
        }
    )
    rows = pd.DataFrame({"date": index.get_level_values(0), "code": pd.Series(index.get_level_values(1), dtype=str)})
    rows["date"] = rows["date"].astype("datetime64[ns]")
    if "in_date" in table.columns:
        cls["in_date"] = _parse_dates(table["in_date"], "in_date", source)
        cls["out_date"] = (
            _parse_dates(table["out_date"], "out_date", source, allow_missing=True)
            if "out_date" in table.columns
            else np.datetime64("NaT", "ns")
        )
        dup = cls.duplicated(["code", "in_date"], keep=False).to_numpy()
        if dup.any():
            raise _error(
                source,
                f"{int(dup.sum())} rows give one stock two industries from the same in_date",
                f"codes {preview(cls.loc[dup, 'code'].unique())}",
                "keep one classification per stock and in_date (one level, e.g. Shenwan L1)",
            )
        cls = cls.sort_values("in_date", kind="stable")
        found = pd.merge_asof(
            rows.reset_index(names="row"), cls, left_on="date", right_on="in_date", by="code", direction="backward"
        )
        ended = (found["out_date"].notna() & (found["out_date"] < found["date"])).to_numpy()
        values = found["industry"].mask(ended)
    else:
        cls = cls.drop_duplicates()
        dup = cls["code"].duplicated(keep=False).to_numpy()
        if dup.any():
            raise _error(
                source,
                f"{int(dup.sum())} rows give stocks more than one industry and no in_date",
                f"codes {preview(cls.loc[dup, 'code'].unique())}",
                "export one industry per stock, or add in_date / out_date columns (index_member_all)",
            )
        log.warning(
            "%s: undated industry classification (as of the export) applied to every day; a stock "
            "reclassified during the period gets its later industry on earlier days too",
            source,
        )
        values = rows["code"].map(cls.set_index("code")["industry"])
    values = pd.Series(values.to_numpy(), index=index, name="industry")
    unclassified = index.get_level_values(1)[values.isna().to_numpy()].unique()
    if len(unclassified):
        log.info(
            "%s: %d stock(s) without an industry on some days: %s", source, len(unclassified), preview(unclassified)
        )
    return values


def _membership(table: pd.DataFrame, index_code: str, index: pd.MultiIndex, source: str) -> np.ndarray:
    """Point-in-time ``in_universe`` from the index_weight snapshots of ``index_code``."""
    missing = [c for c in ("index_code", "con_code", "trade_date") if c not in table.columns]
    if missing:
        raise _error(
            source,
            f"missing column(s) {missing} of the Tushare index_weight API",
            f"columns present: {preview(table.columns, 12)}",
            "export index_weight with its own field names (index_code, con_code, trade_date, weight)",
        )
    codes = table["index_code"].astype("string").str.strip()
    mine = (codes == index_code).fillna(False).to_numpy(dtype=bool)
    if not mine.any():
        raise _error(
            source,
            f"no constituents of index {index_code}",
            f"index codes in the file: {preview(codes.dropna().unique())}",
            "pass index_code= one of those (e.g. data.index_code="
            "000905.SH), or export index_weight for the index you want",
        )
    table = table[mine]
    snapshots = pd.DataFrame(
        {
            "date": _parse_dates(table["trade_date"], "trade_date", source),
            "code": _parse_codes(table["con_code"], "con_code", source),
        }
    )
    first, last = index.get_level_values(0)[0], index.get_level_values(0)[-1]
    snap_dates = np.unique(snapshots["date"].to_numpy())
    start = snap_dates[snap_dates <= np.datetime64(first)]
    keep = (snapshots["date"] <= last) & (snapshots["date"] >= (start[-1] if len(start) else first))
    if not keep.any():
        raise _error(
            source,
            f"the first snapshot of {index_code} ({pd.Timestamp(snap_dates[0]):%Y-%m-%d}) comes "
            f"after the last day of daily ({last:%Y-%m-%d})",
            "trade_date",
            "export index_weight for the period of daily (and the month before it)",
        )
    dropped = int((~keep).sum())
    if dropped:
        log.info(
            "%s: %d constituent row(s) of snapshots superseded before %s or dated after %s are not used",
            source,
            dropped,
            f"{first:%Y-%m-%d}",
            f"{last:%Y-%m-%d}",
        )
    snapshots = snapshots[keep.to_numpy()]
    validate_membership(snapshots, index.get_level_values(1).unique(), source=f"{source} ({index_code})")
    return membership_from_snapshots(snapshots, index)


# --- the inverse: a canonical panel as Tushare tables -------------------------------------------------


def panel_to_tushare(panel: pd.DataFrame, index_code: str = DEFAULT_INDEX_CODE) -> dict[str, pd.DataFrame]:
    """A canonical panel as the Tushare API tables that :func:`import_tushare` reads, in Tushare's units.

    The inverse of the importer, used to test it on synthetic markets and to benchmark it. Rows of days
    without trading (:func:`backtest.data.tradability.suspended_rows`: ``is_suspended``, or no volume) get
    no ``daily``, ``moneyflow`` or ``daily_basic`` row, as in Tushare, but keep their ``adj_factor`` and
    ``stk_limit`` rows. ``index_weight`` holds one snapshot (equal weights) on the
    first day and on every day the member set changes; ``industry`` one dated row (``in_date``,
    ``out_date``) per run of days with the same industry; ``trade_cal`` the panel's days.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), canonical (see ``backtest.data.schema``).
    index_code : the ``index_code`` written into ``index_weight``.

    Returns
    -------
    dict file key (:data:`FILE_KEYS`) -> DataFrame with Tushare's field names; dates as ``YYYYMMDD`` text.
    """
    dates = panel.index.get_level_values(0)
    codes = np.asarray(panel.index.get_level_values(1), dtype=object)
    keys = pd.DataFrame({"ts_code": codes, "trade_date": dates.strftime("%Y%m%d")})
    trading = ~tradability.suspended_rows(panel)  # a day without trading has no bar in Tushare
    out: dict[str, pd.DataFrame] = {}

    daily = keys.copy()
    for col in ("open", "high", "low", "close"):
        if col in panel.columns:
            daily[col] = panel[col].to_numpy()
    close = panel["close"].to_numpy(dtype="float64")
    factor = panel["adj_factor"].to_numpy(dtype="float64") if "adj_factor" in panel.columns else np.ones(len(panel))
    prev = pd.Series(close * factor, index=panel.index).groupby(level=1).shift(1).to_numpy() / factor
    daily["pre_close"] = np.round(prev, 2)
    daily["change"] = np.round(close - daily["pre_close"].to_numpy(), 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        daily["pct_chg"] = np.round((close / daily["pre_close"].to_numpy() - 1) * 100, 4)
    if "volume" in panel.columns:
        daily["vol"] = panel["volume"].to_numpy() / 100.0
    if "amount" in panel.columns:
        daily["amount"] = panel["amount"].to_numpy() / 1000.0
    out["daily"] = daily[trading].reset_index(drop=True)
    if "adj_factor" in panel.columns:
        out["adj_factor"] = keys.assign(adj_factor=factor)
    if set(MONEYFLOW_COLUMNS) <= set(panel.columns):
        flow = keys.assign(**{c: panel[c].to_numpy() / 10_000.0 for c in MONEYFLOW_COLUMNS})
        out["moneyflow"] = flow[trading].reset_index(drop=True)
    mv = {"total_mv": "total_mv", "float_mv": "circ_mv"}
    if set(mv) & set(panel.columns):
        basic = keys.assign(close=close)
        for col, field in mv.items():
            if col in panel.columns:
                basic[field] = panel[col].to_numpy() / 10_000.0
        if "total_mv" in panel.columns:
            basic["total_share"] = basic["total_mv"] / close
        out["daily_basic"] = basic[trading].reset_index(drop=True)
    if {"up_limit", "down_limit"} <= set(panel.columns):
        limits = keys.assign(up_limit=panel["up_limit"].to_numpy(), down_limit=panel["down_limit"].to_numpy())
        out["stk_limit"] = limits[limits[["up_limit", "down_limit"]].notna().all(axis=1).to_numpy()].reset_index(
            drop=True
        )
    if "in_universe" in panel.columns:
        out["index_weight"] = _snapshots(panel["in_universe"], index_code)
    if "industry" in panel.columns:
        out["industry"] = _industry_runs(panel["industry"])
    days = pd.DatetimeIndex(dates.unique())
    out["trade_cal"] = pd.DataFrame({"exchange": "SSE", "cal_date": days.strftime("%Y%m%d"), "is_open": 1})
    return out


def _snapshots(in_universe: pd.Series, index_code: str) -> pd.DataFrame:
    members = in_universe[in_universe.astype(bool).to_numpy()]
    per_day = members.index.to_frame(index=False).groupby("date")["code"].agg(frozenset)
    days = pd.DatetimeIndex(in_universe.index.get_level_values(0).unique())
    per_day = per_day.reindex(days, fill_value=frozenset())
    changed = [i for i in range(len(per_day)) if i == 0 or per_day.iloc[i] != per_day.iloc[i - 1]]
    rows = [
        (index_code, code, f"{per_day.index[i]:%Y%m%d}", 100.0 / len(per_day.iloc[i]))
        for i in changed
        for code in sorted(per_day.iloc[i])
    ]
    return pd.DataFrame(rows, columns=["index_code", "con_code", "trade_date", "weight"])


def _industry_runs(industry: pd.Series) -> pd.DataFrame:
    frame = industry.dropna().astype(str).reset_index().sort_values(["code", "date"], kind="stable")
    new_run = (frame["industry"] != frame["industry"].shift()) | (frame["code"] != frame["code"].shift())
    runs = frame.groupby(new_run.cumsum().to_numpy()).agg(
        ts_code=("code", "first"), industry=("industry", "first"), in_date=("date", "first"), last=("date", "last")
    )
    is_last = runs["ts_code"] != runs["ts_code"].shift(-1)
    return pd.DataFrame(
        {
            "ts_code": runs["ts_code"].to_numpy(),
            "industry": runs["industry"].to_numpy(),
            "in_date": runs["in_date"].dt.strftime("%Y%m%d").to_numpy(),
            "out_date": np.where(is_last, "", runs["last"].dt.strftime("%Y%m%d")),
        }
    )
