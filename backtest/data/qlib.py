"""Qlib provider directories in, the canonical panel out, without pyqlib.

A Qlib provider directory (``provider_uri``, e.g. ``~/.qlib/qlib_data/cn_data``, as Qlib's
``scripts/get_data.py qlib_data --region cn`` or ``scripts/dump_bin.py`` write it) holds::

    calendars/day.txt                    one trading day per line, YYYY-MM-DD, sorted
    instruments/<market>.txt             CODE<TAB>start<TAB>end, one line per membership span (a code may
                                         have several); all.txt spans each code's whole history
    features/<code>/<field>.day.bin      little-endian float32: value 0 is the calendar index of the
                                         first day, then one value per consecutive calendar day (NaN
                                         where the stock did not trade); <code> is lower case (sh600000)

``read_qlib`` reads the calendar, the spans of one market (``csi300``, ``csi500``, ``all``, ...) and, for
every stock the market ever held, these fields (others, such as ``change`` or ``vwap``, are ignored)::

    file (features/<code>/)      Qlib's meaning                             panel column
    ---------------------------  -----------------------------------------  -----------------------------
    close open high low .day.bin adjusted price = raw price * factor        close open high low (raw CNY:
                                                                            adjusted / factor, to the fen)
    volume.day.bin               adjusted volume = raw shares / factor      volume (shares: x factor)
    factor.day.bin               adjusted price / raw price                 adj_factor (as it is)
    amount.day.bin or            turnover, CNY (not changed by adjustment)  amount
    money.day.bin

Only ``close`` and ``factor`` are required; ``open high low volume amount`` are read when every stock
has them (``fields`` chooses them explicitly). Codes become the panel's convention: ``SH600000`` ->
``600000.SH``, ``SZ000001`` -> ``000001.SZ``, ``BJ430047`` -> ``430047.BJ``. Index series in the
instrument file (``SH000300``, ``SZ399001``, ``BJ899050``: ``all.txt`` lists them beside the stocks) are
skipped; a code that is not an A-share code (another region's data) is refused.

Adjustment. Qlib stores adjusted prices and volumes with the factor of the same day: ``$close =
raw close * $factor`` and ``$volume = raw volume / $factor`` (Qlib's ``scripts/data_collector/yahoo``:
``factor = adjclose / close``, then every field of a stock divided by its first adjusted close, which
keeps ``$close / $factor`` the raw close). The panel holds raw prices and a backward factor
(``backtest.data.schema``), so the importer divides by the factor, rounds to the fen (float32 storage
and the division leave a relative error of about 1e-7, and A-share quotes are in fen; the rounding
restores them exactly, so fills compare exactly with the board's limit prices) and keeps the factor as
``adj_factor``: ``close * adj_factor`` is Qlib's adjusted close again. Its scale is arbitrary (a
stock's first adjusted close is 1 in Qlib's cn data) but each day's factor only reflects corporate
actions up to that day, so adjusted returns are point in time. A missing factor on a trading day is
carried forward from the stock's previous day; a trading day with no factor on it or before is refused.

Suspensions. Qlib writes NaN on every field on a day a stock did not trade, between its first and last
bar. As in the Tushare importer's ``suspended_rows="last_close"``, such a day becomes a row with
``is_suspended = True``, the last close (ex-rights, ``last close * last factor / factor``) in open,
high, low and close, and volume and amount 0; a bar with zero volume is flagged too. Days before a
stock's first bar or after its last bar in the window have no rows (not listed yet, delisted).

Point in time. ``in_universe`` is True on the days inside one of the stock's spans in
``instruments/<market>.txt`` (both ends included), as Qlib's ``D.instruments(market)`` filters. Every
stock the market ever held is read for its whole history in the window, delisted ones to their last
bar, so that features have their lookback before a stock joins and nothing survives by selection.

What Qlib's data lack, and what happens (the feature sets drop the indicators whose inputs are missing,
with one log line, ``backtest.features.sets.plan_features``)::

    panel column             in Qlib's cn data   here
    -----------------------  ------------------  ---------------------------------------------------------
    is_suspended             no                  derived: NaN bar (or zero volume) on a calendar day
    up_limit, down_limit     no                  omitted; ``backtest.data.tradability`` derives them from
                                                 the board rule (+-10%, +-20% ChiNext / STAR; ST's 5% is
                                                 not modelled) on the previous raw close
    amount                   not in the default  read when amount.day.bin or money.day.bin exists for
                             cn data             every stock, else omitted (amount_ratio_*, amihud_20
                                                 and vwap_ratio are dropped)
    money flow (buy_/sell_   no                  omitted: the mf_* indicators are dropped
    *_amount, net_mf_amount)
    total_mv, float_mv       no                  omitted (no share counts): log_mv, log_float_mv and the
                                                 turnover indicators are dropped
    industry                 no                  omitted: industry_id, ind_rel_ret_* and industry
                                                 neutralisation are dropped

``write_qlib`` is the inverse: a canonical panel as a provider directory in Qlib's format, which Qlib
itself reads (``qlib.init(provider_uri=...)``); the tests and the benchmark use it on the synthetic
market, and it exports a panel for Qlib's own models.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data import tradability
from backtest.data.panel import WideGrid
from backtest.data.validate import validate_cross_section, validate_panel
from backtest.errors import ConfigError, DataContractError, preview

log = logging.getLogger(__name__)

#: The three folders of a provider directory.
LAYOUT: tuple[str, ...] = ("calendars", "instruments", "features")
#: The panel columns read from features/, in panel order; ``close`` is required (``factor`` always is).
FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume", "amount")
#: The file stems tried, in order, for a panel column (Qlib's docs call turnover ``money``).
FIELD_FILES = {"amount": ("amount", "money")}
FREQ = "day"
BIN_SUFFIX = f".{FREQ}.bin"
#: Raw prices are rounded to this many decimals (the fen; module docstring, "Adjustment").
PRICE_DECIMALS = 2
DEFAULT_MARKET = "csi300"

_CODE = re.compile(r"^(SH|SZ|BJ)(\d{6})$")
_INDEX = re.compile(r"^(SH000|SZ399|BJ899)\d{3}$")
_PRICES = ("open", "high", "low", "close")


# --- codes -------------------------------------------------------------------------------------------


def code_from_qlib(codes: Sequence[str] | np.ndarray) -> np.ndarray:
    """Qlib instrument codes as panel codes (``backtest.data.schema``); None where a code is not A-share.

    >>> code_from_qlib(["SH600000", "sz000001", "BJ430047", "AAPL"]).tolist()
    ['600000.SH', '000001.SZ', '430047.BJ', None]
    """
    out = []
    for code in codes:
        match = _CODE.match(str(code).strip().upper())
        out.append(f"{match.group(2)}.{match.group(1)}" if match else None)
    return np.array(out, dtype=object)


def code_to_qlib(codes: Sequence[str] | np.ndarray) -> np.ndarray:
    """Panel codes as Qlib instrument codes (upper case, as in instruments/*.txt).

    >>> code_to_qlib(["600000.SH", "000001.SZ"]).tolist()
    ['SH600000', 'SZ000001']
    """
    return np.array([f"{c[-2:].upper()}{c[:-3]}" for c in map(str, codes)], dtype=object)


# --- reading ------------------------------------------------------------------------------------------


def read_qlib(
    provider_uri: str | Path,
    market: str = DEFAULT_MARKET,
    start: str | pd.Timestamp | None = None,
    end: str | pd.Timestamp | None = None,
    fields: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Read a Qlib provider directory and return the validated canonical panel.

    Parameters
    ----------
    provider_uri : the folder holding ``calendars/``, ``instruments/`` and ``features/`` (Qlib's
        ``provider_uri``, e.g. ``~/.qlib/qlib_data/cn_data``).
    market : the instrument file ``instruments/<market>.txt`` whose spans set ``in_universe`` and whose
        stocks are read (``csi300``, ``csi500``, ``all``, ...).
    start, end : the first and last day read (inclusive; default the whole calendar). Features need
        their lookback before the first test day: keep at least a year before ``backtest.test_start``.
    fields : the panel columns to read among :data:`FIELDS` (``close`` among them); default every one
        that all stocks have. ``factor`` is always read.

    Returns
    -------
    panel : DataFrame indexed by (date, code), sorted, unique; columns among ``open high low close volume
        amount adj_factor in_universe is_suspended`` (raw CNY, shares; module docstring).

    Raises
    ------
    DataContractError : the directory is not a provider directory (the message names the one that looks
        right), the market has no instrument file (the message lists those present), a field is
        missing for some stocks, a ``.bin`` file is corrupt or runs past the calendar, or the panel
        breaks the contract.
    ConfigError : an unknown field, or ``start`` / ``end`` that do not parse or are out of order.

    Examples
    --------
    Two stocks, written in Qlib's format with :func:`write_qlib` and read back:

    >>> import tempfile
    >>> days = pd.DatetimeIndex(["2024-01-02", "2024-01-03"], name="date")
    >>> panel = pd.DataFrame(
    ...     {"close": [10.0, 20.0, 10.5, 21.0], "adj_factor": [2.0, 1.0, 2.0, 1.0], "in_universe": True},
    ...     index=pd.MultiIndex.from_product([days, ["000001.SZ", "600000.SH"]], names=["date", "code"]),
    ... )
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = write_qlib(panel, folder, market="csi300")
    ...     stored = np.fromfile(Path(folder, "features", "sz000001", "close.day.bin"), dtype="<f4")
    ...     back = read_qlib(folder)
    >>> stored.tolist()  # the first calendar index, then the adjusted closes
    [0.0, 20.0, 21.0]
    >>> back[["close", "adj_factor", "in_universe"]]
                          close  adj_factor  in_universe
    date       code
    2024-01-02 000001.SZ   10.0         2.0         True
               600000.SH   20.0         1.0         True
    2024-01-03 000001.SZ   10.5         2.0         True
               600000.SH   21.0         1.0         True
    """
    wanted = _wanted_fields(fields)
    first, last = _window(start, end)
    market = str(market).strip().lower()  # Qlib's file names are lower case
    root = provider_root(provider_uri)
    calendar = _read_calendar(root)
    lo = int(np.searchsorted(calendar, first, side="left")) if first is not None else 0
    hi = int(np.searchsorted(calendar, last, side="right")) if last is not None else len(calendar)
    if lo >= hi:
        raise DataContractError(
            f"{root}: no trading day of calendars/day.txt in the window {_day(first)} .. {_day(last)}\n"
            f"  where: the calendar runs {calendar[0]:%Y-%m-%d} .. {calendar[-1]:%Y-%m-%d}\n"
            "  fix: choose data.start / data.end inside the calendar (or leave them null)"
        )
    spans = _read_spans(root, market, calendar)
    qcodes = np.sort(spans["qlib_code"].unique())
    codes = code_from_qlib(qcodes)
    order = np.argsort(codes)  # the panel's code order (000001.SZ before 600000.SH)
    qcodes, codes = qcodes[order], codes[order]
    stems = _field_stems(root, qcodes, wanted, fields is not None, market)
    days = calendar[lo:hi]
    bins = _read_bins(root, qcodes, stems, lo, hi, len(calendar))
    member = _membership(spans, qcodes, days)
    frame = _assemble(bins, member, days, codes, str(root))
    panel = validate_cross_section(validate_panel(frame, source=str(root), calendar=days), source=str(root))
    log.info(
        "qlib %s (%s): %d rows, %d stocks, %d days (%s .. %s), fields %s",
        root,
        market,
        len(panel),
        len(panel.index.levels[1]),  # every level is used (_assemble)
        len(panel.index.levels[0]),
        f"{panel.index[0][0]:%Y-%m-%d}",
        f"{panel.index[-1][0]:%Y-%m-%d}",
        ", ".join(f"{c} ({stems[c]})" if stems[c] != c else c for c in stems),
    )
    return panel


def provider_root(provider_uri: str | Path) -> Path:
    """The provider directory ``provider_uri``, checked to hold ``calendars/``, ``instruments/`` and
    ``features/``; a path next to the right one (its parent, one of its folders, a stock's folder) is
    refused with the right one named."""
    root = Path(provider_uri).expanduser()
    if not root.exists():
        near = [p for p in _children(root.parent) if _is_provider(p)] if root.parent.is_dir() else []
        hint = f" (provider directories beside it: {preview(str(p) for p in near)})" if near else ""
        raise DataContractError(
            f"Qlib provider directory not found: {root}{hint}\n  fix: point data.provider_uri at the folder "
            f"holding calendars/, instruments/ and features/, e.g. "
            f"{near[0] if near else '~/.qlib/qlib_data/cn_data'}"
        )
    if _is_provider(root):
        return root
    guess = _provider_near(root)
    missing = [name + "/" for name in LAYOUT if not (root / name).is_dir()]
    what = "is a file" if root.is_file() else f"has no {', '.join(missing)}"
    fix = (
        f"data.provider_uri={guess}"
        if guess is not None
        else "point data.provider_uri at the folder holding calendars/day.txt, instruments/<market>.txt and "
        "features/ (Qlib's cn data: python scripts/get_data.py qlib_data --region cn --target_dir DIR)"
    )
    raise DataContractError(
        f"{root}: not a Qlib provider directory: it {what}"
        + (f"; the provider directory looks like {guess}" if guess is not None else "")
        + f"\n  fix: {fix}"
    )


def _is_provider(path: Path) -> bool:
    return all((path / name).is_dir() for name in LAYOUT)


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def _provider_near(path: Path) -> Path | None:
    """The provider directory a user probably meant: above ``path`` (they pointed at calendars/,
    features/ or a stock's folder, or at a file inside) or right below it (they pointed at the parent)."""
    for up in list(path.parents)[:3]:
        if _is_provider(up):
            return up
    if path.is_dir():
        below = [p for p in _children(path) if _is_provider(p)]
        if below:
            return below[0]
    return None


def _day(day: pd.Timestamp | None) -> str:
    return "..." if day is None else f"{day:%Y-%m-%d}"


def _wanted_fields(fields: Sequence[str] | None) -> tuple[str, ...]:
    if fields is None:
        return FIELDS
    if isinstance(fields, str):
        fields = [fields]
    unknown = [f for f in fields if f not in FIELDS]
    if unknown or "close" not in fields:
        problem = f"unknown field(s) {unknown}" if unknown else "close is required"
        raise ConfigError(
            f"read_qlib: {problem}; fields are among {list(FIELDS)}, close among them\n  fix: e.g. "
            "data.fields=[open,high,low,close,volume], or null for every field all stocks have"
        )
    return tuple(f for f in FIELDS if f in fields)


def _window(start: object, end: object) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    out = []
    for name, value in (("start", start), ("end", end)):
        if value is None or (isinstance(value, str) and value.strip() == ""):
            out.append(None)
            continue
        try:
            out.append(pd.Timestamp(str(value)).normalize())
        except ValueError:
            raise ConfigError(
                f"read_qlib: {name}={value!r} is not a date\n  fix: data.{name}=YYYY-MM-DD, or null"
            ) from None
    if out[0] is not None and out[1] is not None and out[0] > out[1]:
        raise ConfigError(
            f"read_qlib: start {out[0]:%Y-%m-%d} is after end {out[1]:%Y-%m-%d}\n  fix: swap them, or leave one null"
        )
    return out[0], out[1]


def _read_calendar(root: Path) -> pd.DatetimeIndex:
    path = root / "calendars" / f"{FREQ}.txt"
    if not path.is_file():
        present = sorted(p.name for p in (root / "calendars").glob("*.txt"))
        raise DataContractError(
            f"{path}: no daily calendar (calendars holds {preview(present) or 'nothing'})\n  fix: this loader "
            "reads daily data: dump it with scripts/dump_bin.py --freq day (the default)"
        )
    lines = [line.strip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise DataContractError(f"{path}: the calendar is empty\n  fix: dump the data again (scripts/dump_bin.py)")
    days = pd.to_datetime(pd.Series(lines), format="ISO8601", errors="coerce")
    bad = np.flatnonzero(days.isna().to_numpy())
    if len(bad):
        raise DataContractError(
            f"{path}: {len(bad)} line(s) are not dates\n  where: lines {preview(bad + 1)}: "
            f"{preview(lines[i] for i in bad)}\n  fix: one day per line, YYYY-MM-DD"
        )
    days = pd.DatetimeIndex(days.dt.normalize(), name="date").astype("datetime64[ns]")
    out_of_order = np.flatnonzero(np.diff(days.asi8) <= 0)
    if len(out_of_order):
        i = int(out_of_order[0]) + 1
        raise DataContractError(
            f"{path}: the calendar is not strictly increasing ({len(out_of_order)} place(s))\n  where: line "
            f"{i + 1} ({lines[i]}) follows line {i} ({lines[i - 1]})\n  fix: the .bin files index this calendar "
            "by line: dump the data again rather than editing day.txt"
        )
    return days


def _read_spans(root: Path, market: str, calendar: pd.DatetimeIndex) -> pd.DataFrame:
    """The membership spans of ``market`` (lower case): ``qlib_code`` (upper case), ``start``, ``end``;
    stocks only."""
    path = root / "instruments" / f"{market}.txt"
    if not path.is_file():
        present = sorted(p.stem for p in (root / "instruments").glob("*.txt"))
        raise DataContractError(
            f"{root / 'instruments'}: no market {market!r} (no {market}.txt)\n  where: markets present: "
            f"{preview(present, 12) or 'none'}\n  fix: data.market="
            + (present[0] if present else "all")
            + " (one of those), or dump the market's instrument file"
        )
    try:
        table = pd.read_csv(path, sep="\t", header=None, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataContractError(
            f"{path}: cannot be read as CODE<TAB>start<TAB>end lines ({exc})\n  fix: dump the instruments again"
        ) from None
    if table.empty:
        raise DataContractError(f"{path}: the market lists no instruments\n  fix: dump the instrument file again")
    if table.shape[1] < 3:
        raise DataContractError(
            f"{path}: expected three tab-separated columns (CODE, start, end), found {table.shape[1]}\n"
            f"  where: line 1: {'  '.join(table.iloc[0].astype(str))}\n  fix: Qlib's instrument files are "
            "SH600000<TAB>2008-01-02<TAB>2020-09-25, one span per line"
        )
    spans = pd.DataFrame({"qlib_code": table[0].str.strip().str.upper()})
    for i, col in ((1, "start"), (2, "end")):
        spans[col] = pd.to_datetime(table[i].str.strip(), format="ISO8601", errors="coerce").dt.normalize()
    bad = np.flatnonzero((spans["start"].isna() | spans["end"].isna() | (spans["end"] < spans["start"])).to_numpy())
    if len(bad):
        raise DataContractError(
            f"{path}: {len(bad)} line(s) without a valid span (dates YYYY-MM-DD, start <= end)\n  where: lines "
            f"{preview(bad + 1)}: {preview(table.iloc[bad, 0])}\n  fix: correct or dump the instrument file again"
        )
    index = spans["qlib_code"].str.match(_INDEX).to_numpy(dtype=bool)
    if index.any():
        log.info(
            "%s: %d index series skipped (not stocks): %s",
            path,
            spans.loc[index, "qlib_code"].nunique(),
            preview(spans.loc[index, "qlib_code"].unique()),
        )
        spans = spans[~index]
    listed = spans["qlib_code"].unique()
    foreign = listed[pd.isna(code_from_qlib(listed))]
    if len(foreign):
        raise DataContractError(
            f"{path}: {len(foreign)} code(s) are not A-share codes (SH, SZ or BJ and six digits)\n  where: "
            f"{preview(foreign)}\n  fix: this loader reads Qlib's China data (region cn, e.g. SH600000); "
            "use a provider directory of A-shares"
        )
    if spans.empty:
        raise DataContractError(
            f"{path}: the market lists index series only, no stocks\n  fix: choose a market of stocks, "
            "e.g. data.market=csi300 or all"
        )
    if spans["end"].max() < calendar[0] or spans["start"].min() > calendar[-1]:
        raise DataContractError(
            f"{path}: no span overlaps the calendar\n  where: spans {spans['start'].min():%Y-%m-%d} .. "
            f"{spans['end'].max():%Y-%m-%d}, calendar {calendar[0]:%Y-%m-%d} .. {calendar[-1]:%Y-%m-%d}\n"
            "  fix: the instrument file belongs to another dump: dump them together"
        )
    return spans.reset_index(drop=True)


def _field_stems(
    root: Path, qcodes: np.ndarray, wanted: tuple[str, ...], explicit: bool, market: str
) -> dict[str, str]:
    """Panel column -> the file stem read for it (every stock has it); ``factor`` included. Refuses a
    required field (close, factor, or one named in ``fields``) that some stocks lack, and an optional
    one that only some stocks have (a column half missing would break the panel rather than drop out)."""
    features = root / "features"
    listed: list[frozenset[str]] = []
    no_folder = []
    for code in qcodes:
        try:
            listed.append(frozenset(os.listdir(features / code.lower())))
        except OSError:
            no_folder.append(code)
            listed.append(frozenset())
    if no_folder:
        raise DataContractError(
            f"{features}: {len(no_folder)} of the {len(qcodes)} stocks of instruments/{market}.txt have no "
            f"folder\n  where: {preview(c.lower() for c in no_folder)}\n  fix: dump their data too: a member "
            "without data would leave the universe short (survivorship)"
        )
    out: dict[str, str] = {}
    for column in (*wanted, "factor"):
        candidates = FIELD_FILES.get(column, (column,))
        have = {stem: np.array([stem + BIN_SUFFIX in names for names in listed]) for stem in candidates}
        full = [stem for stem in candidates if have[stem].all()]
        if full:
            out[column] = full[0]
            continue
        lacking = ~np.logical_or.reduce([have[s] for s in candidates])
        required = column in ("close", "factor") or explicit
        if not required and lacking.all():
            log.info("%s: no %s file: the panel has no '%s' column", features, " / ".join(candidates), column)
            continue
        files = " or ".join(s + BIN_SUFFIX for s in candidates)
        if column == "factor":
            fix = (
                "dump the factor (scripts/dump_bin.py --include_fields ...,factor); if the prices are raw "
                "(unadjusted), dump a factor of 1.0"
            )
        elif required and column == "close":
            fix = "dump close for every stock: it is the one price the panel needs"
        else:
            keep = [c for c in wanted if c != column and c in FIELDS]
            fix = (
                f"dump {column} for those stocks, or leave it out: data.fields=[{','.join(keep)}]"
                if required
                else f"dump {column} for those stocks, or read without it: data.fields=[{','.join(keep)}]"
            )
        raise DataContractError(
            f"{features}: field '{column}' ({files}) is missing for {int(lacking.sum())} of the {len(qcodes)} "
            f"stocks of instruments/{market}.txt\n  where: {preview(qcodes[lacking].astype(str))}\n  fix: {fix}"
        )
    return out


def _read_bins(
    root: Path, qcodes: np.ndarray, stems: dict[str, str], lo: int, hi: int, n_calendar: int
) -> dict[str, np.ndarray]:
    """Panel column -> float32 (days, stocks) matrix of calendar days ``lo .. hi - 1``, NaN where a file
    has no value; every file checked for its length and its first calendar index."""
    out = {column: np.full((hi - lo, len(qcodes)), np.nan, dtype=np.float32) for column in stems}
    corrupt: list[str] = []
    for j, code in enumerate(qcodes):
        folder = os.path.join(root, "features", code.lower())  # plain strings: pathlib costs a third of the reads
        for column, stem in stems.items():
            path = os.path.join(folder, stem + BIN_SUFFIX)
            with open(path, "rb") as handle:
                raw = handle.read()
            if len(raw) < 4 or len(raw) % 4:
                corrupt.append(f"{path} ({len(raw)} bytes: not a 4-byte start index plus float32 values)")
                continue
            values = np.frombuffer(raw, dtype="<f4")
            first = float(values[0])
            n = len(values) - 1
            if not (np.isfinite(first) and first == int(first) and first >= 0):
                corrupt.append(f"{path} (first value {first!r} is not a calendar index)")
                continue
            if first + n > n_calendar:
                corrupt.append(
                    f"{path} (starts at calendar index {int(first)} with {n} values: runs past the calendar's "
                    f"{n_calendar} days)"
                )
                continue
            s = int(first)
            a, b = max(s, lo), min(s + n, hi)
            if a < b:
                out[column][a - lo : b - lo, j] = values[1 + a - s : 1 + b - s]
    if corrupt:
        raise DataContractError(
            f"{root / 'features'}: {len(corrupt)} corrupt .bin file(s)\n  where: {preview(corrupt, 3)}\n  fix: "
            "dump those stocks again (scripts/dump_bin.py), with calendars/day.txt from the same dump"
        )
    return out


def _membership(spans: pd.DataFrame, qcodes: np.ndarray, days: pd.DatetimeIndex) -> np.ndarray:
    """bool (days, stocks): inside one of the stock's spans (both ends included)."""
    col = pd.Index(qcodes).get_indexer(spans["qlib_code"])
    first = np.searchsorted(days.asi8, spans["start"].to_numpy("datetime64[ns]").astype(np.int64), side="left")
    after = np.searchsorted(days.asi8, spans["end"].to_numpy("datetime64[ns]").astype(np.int64), side="right")
    diff = np.zeros((len(days) + 1, len(qcodes)), dtype=np.int32)
    np.add.at(diff, (first, col), 1)
    np.add.at(diff, (after, col), -1)
    return np.cumsum(diff, axis=0)[:-1] > 0


def _assemble(
    bins: dict[str, np.ndarray], member: np.ndarray, days: pd.DatetimeIndex, codes: np.ndarray, source: str
) -> pd.DataFrame:
    """The canonical panel from the adjusted (days, stocks) matrices (module docstring)."""
    T = len(days)
    close_adj = bins["close"].astype(np.float64)
    bar = np.isfinite(close_adj)
    t = np.arange(T)[:, None]
    first = np.where(bar.any(axis=0), bar.argmax(axis=0), T)
    last = T - 1 - bar[::-1].argmax(axis=0)
    alive = (t >= first[None, :]) & (t <= last[None, :])

    factor_file = bins["factor"].astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = bar & (factor_file <= 0)
    if bad.any():
        raise _bar_error(source, "factor.day.bin holds zero or negative factors", bad, days, codes)
    factor = tradability.carry_forward(factor_file)
    carried = bar & ~np.isfinite(factor_file) & np.isfinite(factor)
    if carried.any():
        log.info("%s: %d missing factor(s) carried forward from the stock's previous day", source, int(carried.sum()))
    if (bar & ~np.isfinite(factor)).any():
        raise _bar_error(
            source,
            "trading days without a factor (factor.day.bin is NaN there and on every earlier day)",
            bar & ~np.isfinite(factor),
            days,
            codes,
            "dump factor for those days (the factor undoes Qlib's adjustment: raw price = $close / $factor)",
        )

    # Suspended days: the last adjusted close, carried, over today's factor (ex-rights, as in the Tushare importer).
    last_close = tradability.carry_forward(close_adj) / factor
    prices = {}
    for col in _PRICES:
        if col in bins:
            adj = bins[col].astype(np.float64)
            prices[col] = np.round(np.where(bar, adj / factor, last_close), PRICE_DECIMALS)
    columns: dict[str, np.ndarray] = {c: prices[c] for c in _PRICES if c in prices}
    no_trade = alive & ~bar
    if "volume" in bins:
        volume = np.where(bar, bins["volume"].astype(np.float64) * factor, 0.0)
        columns["volume"] = volume
        with np.errstate(invalid="ignore"):
            no_trade |= alive & (volume <= 0)
    if "amount" in bins:
        columns["amount"] = np.where(bar, bins["amount"].astype(np.float64), 0.0)
        if "volume" in columns:
            _check_amount_units(columns["amount"], columns["volume"], prices["close"], bar, source)
    columns["adj_factor"] = factor

    rows, cols = np.nonzero(alive)  # row-major: by date, then code (codes sorted)
    used_days, used_codes = alive.any(axis=1), alive.any(axis=0)
    index = pd.MultiIndex(  # from the sorted levels directly: factorizing 10^6 code strings costs more than the rest
        levels=[days.astype("datetime64[ns]")[used_days], pd.Index(codes[used_codes], dtype="str")],
        codes=[(np.cumsum(used_days) - 1)[rows], (np.cumsum(used_codes) - 1)[cols]],
        names=["date", "code"],
        verify_integrity=False,
    )
    data = {name: values[rows, cols] for name, values in columns.items()}
    data["in_universe"] = member[rows, cols]
    data["is_suspended"] = no_trade[rows, cols]
    outside = member & ~alive
    if outside.any():
        log.info(
            "%s: %d member day(s) of %d stock(s) fall outside the stock's bars (before its first or after its "
            "last); they have no rows",
            source,
            int(outside.sum()),
            int(outside.any(axis=0).sum()),
        )
    return pd.DataFrame(data, index=index)


def _check_amount_units(
    amount: np.ndarray, volume: np.ndarray, close: np.ndarray, bar: np.ndarray, source: str
) -> None:
    """The implied average trade price, amount / raw volume, must be close to the raw close (CNY and shares)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (amount / volume / close)[bar]
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    if len(ratio) and not 0.5 <= float(np.median(ratio)) <= 2.0:
        raise DataContractError(
            f"{source}: the units of amount look wrong: amount / (volume x factor) / (close / factor) is "
            f"{float(np.median(ratio)):.4g} (expected about 1)\n  where: median over all bars\n  fix: amount must be "
            "turnover in CNY and volume Qlib's adjusted shares; convert the amount before dumping it, or leave "
            "it out: data.fields=[open,high,low,close,volume]"
        )


def _bar_error(
    source: str, problem: str, mask: np.ndarray, days: pd.DatetimeIndex, codes: np.ndarray, fix: str | None = None
) -> DataContractError:
    t, j = np.nonzero(mask)
    where = preview((f"({days[a]:%Y-%m-%d}, {codes[b]})" for a, b in zip(t, j)), 5)
    return DataContractError(
        f"{source}: {int(mask.sum())} {problem}\n  where: {where}\n  fix: "
        + (fix or "dump those stocks again (scripts/dump_bin.py)")
    )


# --- writing ------------------------------------------------------------------------------------------


def write_qlib(panel: pd.DataFrame, provider_uri: str | Path, market: str = DEFAULT_MARKET) -> Path:
    """Write a canonical panel as a Qlib provider directory (the inverse of :func:`read_qlib`).

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), canonical (``backtest.data.schema``). Read: ``open high
        low close volume amount`` where present, ``adj_factor`` (1.0 without it), ``in_universe``,
        ``is_suspended``.
    provider_uri : the folder to write; created if needed. Existing files of the same names are replaced.
    market : the name of the instrument file of the ``in_universe`` spans (``instruments/<market>.txt``;
        without ``in_universe`` every stock's whole history). ``all.txt`` always spans each stock's rows.

    Returns
    -------
    The provider directory. ``calendars/day.txt`` holds the panel's days; each stock's ``.bin`` files run
    from its first to its last row, with Qlib's adjustment (prices times the factor, volume over it) and
    NaN in every field on days without trading (:func:`backtest.data.tradability.suspended_rows`) or
    without a row, as in Qlib's own data.
    """
    root = Path(provider_uri).expanduser()
    for name in LAYOUT:
        (root / name).mkdir(parents=True, exist_ok=True)
    grid = WideGrid.of(panel)
    days = grid.dates
    (root / "calendars" / f"{FREQ}.txt").write_text("".join(f"{d:%Y-%m-%d}\n" for d in days))

    trading = grid.present() & ~tradability.suspended(panel, grid)
    factor = (
        grid.to_wide(panel["adj_factor"].to_numpy(np.float64), dtype=np.float64)
        if "adj_factor" in panel.columns
        else np.ones(grid.shape)
    )
    wide: dict[str, np.ndarray] = {}
    for col in FIELDS:
        if col not in panel.columns:
            continue
        values = grid.to_wide(panel[col].to_numpy(np.float64), dtype=np.float64)
        if col in _PRICES:
            values = values * factor
        elif col == "volume":
            values = values / factor
        wide[col] = values
    wide["factor"] = factor
    present = grid.present()
    first = present.argmax(axis=0)
    last = len(days) - 1 - present[::-1].argmax(axis=0)
    qcodes = code_to_qlib(grid.codes)
    for j, code in enumerate(qcodes):
        folder = root / "features" / code.lower()
        folder.mkdir(exist_ok=True)
        span = slice(first[j], last[j] + 1)
        for name, values in wide.items():
            column = np.where(trading[span, j], values[span, j], np.nan)
            np.hstack([[first[j]], column]).astype("<f4").tofile(folder / (name + BIN_SUFFIX))

    lines = [f"{c}\t{days[a]:%Y-%m-%d}\t{days[b]:%Y-%m-%d}\n" for c, a, b in zip(qcodes, first, last)]
    (root / "instruments" / "all.txt").write_text("".join(lines))
    if str(market).lower() != "all":
        member = (
            grid.to_wide(panel["in_universe"].to_numpy(bool), dtype=bool, fill=False)
            if "in_universe" in panel.columns
            else present
        )
        edges = np.diff(np.pad(member, ((1, 1), (0, 0))).astype(np.int8), axis=0)  # +1 a span starts, -1 it ended
        start_col, start_day = np.nonzero(edges.T == 1)
        _, end_day = np.nonzero(edges.T == -1)  # one end after each start, in the same (code, day) order
        spans = [
            f"{qcodes[j]}\t{days[a]:%Y-%m-%d}\t{days[b - 1]:%Y-%m-%d}\n"
            for j, a, b in zip(start_col, start_day, end_day)
        ]
        (root / "instruments" / f"{str(market).lower()}.txt").write_text("".join(spans))
    return root
