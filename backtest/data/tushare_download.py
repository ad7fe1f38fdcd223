r"""Download Tushare Pro data into the directory layout that ``backtest.data.tushare`` imports.

::

    .venv/bin/pip install -e '.[tushare]'
    export TUSHARE_TOKEN=...            # from https://tushare.pro (user centre); never put it in a file
    .venv/bin/python -m backtest.data.tushare_download --directory data/tushare \\
        --start 2018-01-01 --end 2025-12-31 --index-code 399300.SZ
    .venv/bin/python -m backtest data=tushare data.directory=$PWD/data/tushare

What is downloaded, one file per API in Tushare's own fields and units (see ``backtest.data.tushare``):
``trade_cal`` (SSE) for the period; ``index_weight`` of the index from ``policy.lookback_days`` before
the start (so that the snapshot in force on the first day is included) to the end; for every stock in
those snapshots (plus ``codes``): ``daily``, ``adj_factor``, ``moneyflow``, ``daily_basic``,
``stk_limit`` over the period, one stock per call, in date chunks under Tushare's row limit; and the
industry classification (``stock_basic``, Tushare's own, undated; or ``index_member_all``, Shenwan
level 1 with in/out dates, which needs more account points). Stocks that left the index or were
delisted are included: they were members on some day, and dropping them would be survivorship bias.

Secrets. The token is read from the environment variable ``TUSHARE_TOKEN`` only, handed to
``tushare.pro_api`` (which, unlike ``tushare.set_token``, writes no token file), and never logged,
written, or kept in an error message: messages from failed calls are scrubbed. The ``tushare`` package
is imported only when a download starts without an injected ``client``.

Atomicity. Nothing is written until every call has succeeded; then each file goes to a temporary file
in the target directory and is renamed over its final name, so an interrupted run never leaves a
half-written file, and a failed run leaves the directory as it was. A manifest
(``tushare_manifest.json``: period, index, stocks, row counts, package version; no token) records what
was downloaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from backtest.data.tushare import DEFAULT_FILES, DEFAULT_INDEX_CODE, EXTENSIONS, FILE_KEYS
from backtest.errors import BacktestError, ConfigError, DataContractError, preview

log = logging.getLogger(__name__)

TOKEN_ENV = "TUSHARE_TOKEN"
#: Per-(stock, day) APIs, downloaded one stock per call.
STOCK_DAY_APIS: tuple[str, ...] = ("daily", "adj_factor", "moneyflow", "daily_basic", "stk_limit")
INDUSTRY_APIS: tuple[str, ...] = ("stock_basic", "index_member_all")
FILE_FORMATS: Mapping[str, str] = {"parquet": ".parquet", "csv": ".csv"}
MANIFEST = "tushare_manifest.json"
_REDACTED = "***"


class TushareClient(Protocol):
    """What the downloader needs from ``tushare.pro_api(token)``: the generic ``query`` call.

    ``query(api_name, fields="", **params)`` returns a DataFrame in Tushare's field layout, dates as
    ``YYYYMMDD`` text. A fake with this method serves files in tests.
    """

    def query(self, api_name: str, fields: str = "", **params: Any) -> pd.DataFrame: ...


class TushareRequestError(BacktestError):
    """A Tushare API call failed after its retries (network, rate limit, points or permission)."""


@dataclass(frozen=True)
class DownloadPolicy:
    """Pacing and chunking of the API calls.

    Attributes
    ----------
    min_interval_s : at least this long between two calls (0.15 s is 400 calls a minute, under the
        per-minute limit of most accounts).
    retries : further attempts after a failed call, waiting ``backoff_s * attempt`` seconds before each.
    chunk_days : calendar days per per-stock call; 3,000 days hold ~2,000 trading days, well under the
        6,000-row limit of ``daily``.
    index_weight_chunk_days : calendar days per ``index_weight`` call (monthly snapshots of up to 1,000
        constituents stay under the row limit).
    lookback_days : ``index_weight`` starts this many calendar days before ``start``, so that the
        (monthly) snapshot in force on the first day is included.
    """

    min_interval_s: float = 0.15
    retries: int = 3
    backoff_s: float = 5.0
    chunk_days: int = 3000
    index_weight_chunk_days: int = 180
    lookback_days: int = 40


def download_tushare(
    directory: str | Path,
    start: str | pd.Timestamp,
    end: str | pd.Timestamp,
    index_code: str | None = DEFAULT_INDEX_CODE,
    codes: Sequence[str] = (),
    apis: Sequence[str] = STOCK_DAY_APIS,
    industry_api: str | None = "stock_basic",
    file_format: str = "parquet",
    overwrite: bool = False,
    client: TushareClient | None = None,
    policy: DownloadPolicy = DownloadPolicy(),
) -> dict[str, Path]:
    """Download a Tushare export for ``start .. end`` into ``directory``; return the files written.

    Parameters
    ----------
    directory : target folder (created if needed).
    start, end : first and last day of the period, inclusive (``YYYY-MM-DD`` or ``YYYYMMDD``).
    index_code : the index whose constituents to download (``399300.SZ`` CSI 300, ``000905.SH`` CSI 500,
        ``000852.SH`` CSI 1000); ``None`` for no index (then ``codes`` names the stocks).
    codes : further stocks to download (``600000.SH`` style).
    apis : which per-(stock, day) APIs, a subset of :data:`STOCK_DAY_APIS`.
    industry_api : ``"stock_basic"``, ``"index_member_all"`` or ``None`` for no industry file.
    file_format : ``"parquet"`` or ``"csv"``.
    overwrite : replace an existing export in ``directory`` (its Tushare files are removed first); without
        it an existing export is refused.
    client : an object with ``query(api_name, fields="", **params) -> DataFrame``; default
        ``tushare.pro_api(token)`` with the token from the environment variable ``TUSHARE_TOKEN``.
    policy : pacing, retries and chunking of the calls.

    Returns
    -------
    dict file key -> path written (keys of ``backtest.data.tushare.FILE_KEYS`` that had data).

    Raises
    ------
    ConfigError : bad arguments, an existing export without ``overwrite``, no token, no tushare package.
    TushareRequestError : a call failed after its retries (nothing is written).
    DataContractError : the index has no constituents in the period.
    """
    directory = Path(directory).expanduser()
    first, last = _parse_day(start, "start"), _parse_day(end, "end")
    if first > last:
        raise ConfigError(f"download_tushare: start {first:%Y-%m-%d} is after end {last:%Y-%m-%d}\n  fix: swap them")
    bad_apis = sorted(set(apis) - set(STOCK_DAY_APIS))
    if bad_apis:
        raise ConfigError(f"download_tushare: unknown api(s) {bad_apis}; choose among {list(STOCK_DAY_APIS)}")
    if industry_api not in (*INDUSTRY_APIS, None):
        raise ConfigError(
            f"download_tushare: industry_api must be one of {[*INDUSTRY_APIS, None]}, got {industry_api!r}"
        )
    if file_format not in FILE_FORMATS:
        raise ConfigError(f"download_tushare: file_format must be one of {list(FILE_FORMATS)}, got {file_format!r}")
    if index_code is None and not codes:
        raise ConfigError(
            "download_tushare: nothing to download: no index_code and no codes\n  fix: pass "
            "index_code='399300.SZ' (CSI 300) or a list of codes"
        )
    existing = _existing_export(directory)
    if existing and not overwrite:
        raise ConfigError(
            f"{directory} already holds a Tushare export ({preview(p.name for p in existing)})\n  fix: "
            "choose an empty directory, or pass overwrite=True (--overwrite) to replace it"
        )

    secrets: tuple[str, ...] = ()
    version = "injected client"
    if client is None:
        token = _token_from_env()
        secrets = (token,)
        client, version = _tushare_client(token)
    calls = _Calls(client, policy, secrets)
    s, e = f"{first:%Y%m%d}", f"{last:%Y%m%d}"

    frames: dict[str, pd.DataFrame] = {}
    frames["trade_cal"] = calls.query("trade_cal", exchange="SSE", start_date=s, end_date=e)
    members: list[str] = []
    if index_code is not None:
        frames["index_weight"] = calls.chunked(
            "index_weight",
            first - pd.Timedelta(days=policy.lookback_days),
            last,
            policy.index_weight_chunk_days,
            index_code=index_code,
        )
        members = _members_in_period(frames["index_weight"], index_code, first, last)
    stocks = sorted(set(members) | {str(c).strip() for c in codes})
    log.info(
        "tushare download %s .. %s: %d stocks (%d from %s), apis %s",
        s,
        e,
        len(stocks),
        len(members),
        index_code,
        ", ".join(apis),
    )
    for api in apis:
        parts = []
        for i, code in enumerate(stocks, 1):
            parts.append(calls.chunked(api, first, last, policy.chunk_days, ts_code=code))
            if i % 50 == 0:
                log.info("tushare %s: %d / %d stocks", api, i, len(stocks))
        frames[api] = _concat(parts)
        empty = sorted(set(stocks) - set(frames[api].get("ts_code", pd.Series(dtype=str)).astype(str)))
        if empty:
            log.warning("tushare %s: no rows for %d stock(s) in the period: %s", api, len(empty), preview(empty))
    if industry_api == "stock_basic":
        listed = _concat(
            [
                calls.query(
                    "stock_basic",
                    exchange="",
                    list_status=status,
                    fields="ts_code,symbol,name,area,industry,market,list_date,delist_date",
                )
                for status in ("L", "D", "P")
            ]
        )
        frames["industry"] = listed[listed["ts_code"].astype(str).isin(stocks)] if len(listed) else listed
    elif industry_api == "index_member_all":
        frames["industry"] = _concat([calls.query("index_member_all", ts_code=code) for code in stocks])

    written = _write_export(directory, frames, FILE_FORMATS[file_format], overwrite)
    manifest = {
        "source": "tushare",
        "start": s,
        "end": e,
        "index_code": index_code,
        "stocks": len(stocks),
        "extra_codes": sorted(set(codes)),
        "apis": list(apis),
        "industry_api": industry_api,
        "tushare": version,
        "calls": calls.count,
        "files": {k: {"name": p.name, "rows": int(len(frames[k]))} for k, p in written.items()},
        "policy": asdict(policy),
        "downloaded_at": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"),
    }
    _atomic_write(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False)))
    log.info("tushare download: %d files written to %s (%d calls)", len(written), directory, calls.count)
    return written


# --- the client and its calls ------------------------------------------------------------------------


def _token_from_env() -> str:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(
            f"the Tushare token is missing: environment variable {TOKEN_ENV} is not set\n  fix: "
            f"`export {TOKEN_ENV}=<your token>` (tushare.pro, user centre) in the shell that runs the "
            "download; never put the token in a config file or on the command line"
        )
    return token


def _tushare_client(token: str) -> tuple[TushareClient, str]:
    try:
        import tushare
    except ImportError:
        raise ConfigError(
            "the tushare package is not installed\n  fix: .venv/bin/pip install -e '.[tushare]' "
            "(the optional 'tushare' extra)"
        ) from None
    return tushare.pro_api(token), f"tushare {getattr(tushare, '__version__', '?')}"


class _Calls:
    """Paced, retried API calls whose error messages never carry a secret."""

    def __init__(self, client: TushareClient, policy: DownloadPolicy, secrets: tuple[str, ...]) -> None:
        self._client = client
        self._policy = policy
        self._secrets = secrets
        self._last = -np.inf
        self.count = 0

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return text

    def query(self, api: str, fields: str = "", **params: Any) -> pd.DataFrame:
        attempts = self._policy.retries + 1
        for attempt in range(1, attempts + 1):
            wait = self._last + self._policy.min_interval_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last = time.monotonic()
            self.count += 1
            try:
                result = self._client.query(api, fields=fields, **params)
            except Exception as exc:
                message = self._scrub(f"{type(exc).__name__}: {exc}")
                if attempt == attempts:
                    raise TushareRequestError(
                        f"tushare {api}({_describe(params)}) failed after {attempts} attempt(s): {message}\n  fix: "
                        "check the network, your account's points and per-minute limit for this API (moneyflow and "
                        "index_member_all need more points than daily), then run again; nothing was written"
                    ) from None
                log.warning(
                    "tushare %s(%s) failed (%s); retry %d of %d", api, _describe(params), message, attempt, attempts - 1
                )
                time.sleep(self._policy.backoff_s * attempt)
                continue
            log.debug("tushare %s(%s): %d rows", api, _describe(params), 0 if result is None else len(result))
            return pd.DataFrame() if result is None else result
        raise AssertionError("unreachable")

    def chunked(self, api: str, first: pd.Timestamp, last: pd.Timestamp, days: int, **params: Any) -> pd.DataFrame:
        """``api`` over ``first .. last`` in consecutive, non-overlapping windows of ``days`` calendar days."""
        parts = []
        lo = first
        while lo <= last:
            hi = min(lo + pd.Timedelta(days=days - 1), last)
            parts.append(self.query(api, start_date=f"{lo:%Y%m%d}", end_date=f"{hi:%Y%m%d}", **params))
            lo = hi + pd.Timedelta(days=1)
        return _concat(parts)


def _describe(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if v != "")


def _concat(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _parse_day(value: str | pd.Timestamp, name: str) -> pd.Timestamp:
    try:
        day = pd.Timestamp(str(value)) if not isinstance(value, pd.Timestamp) else value
    except ValueError:
        day = pd.NaT
    if pd.isna(day):
        raise ConfigError(f"download_tushare: cannot read {name}={value!r} as a date\n  fix: use YYYY-MM-DD")
    return day.normalize()


def _members_in_period(weights: pd.DataFrame, index_code: str, first: pd.Timestamp, last: pd.Timestamp) -> list[str]:
    """Constituents of the snapshots in force on some day of ``first .. last``."""
    if len(weights) == 0:
        raise DataContractError(
            f"tushare index_weight: no constituents of {index_code} from "
            f"{first:%Y-%m-%d} (minus the lookback) to {last:%Y-%m-%d}\n  fix: check the index "
            "code (399300.SZ CSI 300, 000905.SH CSI 500, 000852.SH CSI 1000) and the period"
        )
    dates = pd.to_datetime(weights["trade_date"].astype(str), format="%Y%m%d")
    before = dates[dates <= first]
    keep = (dates <= last) & (dates >= (before.max() if len(before) else first))
    return sorted(weights.loc[keep, "con_code"].astype(str).unique())


# --- writing ------------------------------------------------------------------------------------------


def _existing_export(directory: Path) -> list[Path]:
    names = [f"{DEFAULT_FILES[key]}{ext}" for key in FILE_KEYS for ext in EXTENSIONS] + [MANIFEST]
    return [directory / n for n in names if (directory / n).is_file()]


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_export(directory: Path, frames: Mapping[str, pd.DataFrame], ext: str, overwrite: bool) -> dict[str, Path]:
    """Write every non-empty frame to a temporary file, then remove the old export, then rename them all."""
    directory.mkdir(parents=True, exist_ok=True)
    staged: dict[str, tuple[Path, Path]] = {}
    try:
        for key, frame in frames.items():
            if len(frame) == 0:
                log.warning("tushare %s: no rows in the period; no file written", key)
                continue
            final = directory / f"{DEFAULT_FILES[key]}{ext}"
            tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
            if ext == ".parquet":
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
            staged[key] = (tmp, final)
        if overwrite:
            for old in _existing_export(directory):
                old.unlink()
        for tmp, final in staged.values():
            os.replace(tmp, final)
    finally:
        for tmp, _ in staged.values():
            tmp.unlink(missing_ok=True)
    return {key: final for key, (_, final) in staged.items()}


# --- command line ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m backtest.data.tushare_download --directory DIR --start YYYY-MM-DD --end YYYY-MM-DD``."""
    parser = argparse.ArgumentParser(
        prog="python -m backtest.data.tushare_download",
        description=(f"Download a Tushare export for `data=tushare`. The token is read from ${TOKEN_ENV} only."),
    )
    parser.add_argument("--directory", required=True, help="target folder")
    parser.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    parser.add_argument("--end", required=True, help="last day, YYYY-MM-DD")
    parser.add_argument(
        "--index-code",
        default=DEFAULT_INDEX_CODE,
        help="index whose constituents to download, or 'none' (default %(default)s)",
    )
    parser.add_argument("--codes", default="", help="further stocks, comma-separated (600000.SH,000001.SZ)")
    parser.add_argument("--apis", default=",".join(STOCK_DAY_APIS), help="per-stock APIs (default %(default)s)")
    parser.add_argument("--industry-api", default="stock_basic", choices=[*INDUSTRY_APIS, "none"])
    parser.add_argument("--format", default="parquet", choices=list(FILE_FORMATS))
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export in the folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        download_tushare(
            args.directory,
            args.start,
            args.end,
            index_code=None if args.index_code.lower() == "none" else args.index_code,
            codes=[c for c in args.codes.split(",") if c.strip()],
            apis=[a for a in args.apis.split(",") if a.strip()],
            industry_api=None if args.industry_api == "none" else args.industry_api,
            file_format=args.format,
            overwrite=args.overwrite,
        )
    except BacktestError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
