"""The Tushare importer and downloader, on a small export in Tushare's real field layout.

The fixture (tests/data/fixtures/tushare, written by make_fixtures.py there) holds 7 stocks over
2024-01-02 .. 2024-02-29 (37 trading days): a suspension with an adjustment during it (000002.SZ), an
ex-dividend day (600000.SH), a limit-up day (300750.SZ), a stock leaving the CSI 300 (601318.SH), one
joining it (688981.SH) and a new listing (301589.SZ).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.data.panel import adjusted_price
from backtest.data.schema import MONEYFLOW_COLUMNS
from backtest.data.tushare import FILE_KEYS, import_tushare, panel_to_tushare
from backtest.data.tushare_download import (
    DownloadPolicy,
    TushareRequestError,
    download_tushare,
)
from backtest.data.tushare_download import (
    main as download_main,
)
from backtest.data.validate import canonicalize, validate_panel
from backtest.errors import ConfigError, DataContractError

FIXTURES = Path(__file__).parent / "fixtures" / "tushare"
D = pd.Timestamp
FAST = DownloadPolicy(min_interval_s=0.0, retries=1, backoff_s=0.0)
EXACT = dict(rel=1e-12, abs=0.0)


@pytest.fixture(scope="module")
def panel() -> pd.DataFrame:
    return import_tushare(FIXTURES)


def _row(panel: pd.DataFrame, day: str, code: str) -> pd.Series:
    return panel.loc[(D(day), code)]


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "export"
    shutil.copytree(FIXTURES, target, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return target


def _edit(directory: Path, name: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    path = directory / f"{name}.csv"
    change(pd.read_csv(path, dtype=str, keep_default_na=False)).to_csv(path, index=False)


# --- the panel ----------------------------------------------------------------------------------------


def test_fixture_imports_as_a_valid_canonical_panel(panel: pd.DataFrame) -> None:
    assert validate_panel(panel) is panel
    pd.testing.assert_frame_equal(canonicalize(panel.reset_index()), panel)  # the loaders' dtypes exactly
    assert len(panel) == 245 + 3  # 245 daily bars + 3 suspended days of 000002.SZ
    assert panel.index.get_level_values("code").nunique() == 7
    assert panel.index.get_level_values("date").nunique() == 37
    assert list(panel.columns) == [
        "open",
        "high",
        "low",
        "close",
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
    ]
    # Spring Festival (2024-02-09 .. 02-16) is closed on trade_cal: no rows, and no suspension rows either.
    dates = panel.index.get_level_values("date")
    assert not ((dates >= D("2024-02-09")) & (dates <= D("2024-02-16"))).any()


def test_units_are_converted_to_shares_and_cny(panel: pd.DataFrame) -> None:
    row = _row(panel, "2024-01-03", "000001.SZ")
    # daily: prices as they are; vol 98765.43 lots x 100; amount 92876.543 thousand CNY x 1000
    assert (row["open"], row["high"], row["low"], row["close"]) == (9.37, 9.42, 9.31, 9.39)
    assert row["volume"] == pytest.approx(9_876_543.0, **EXACT)
    assert row["amount"] == pytest.approx(92_876_543.0, **EXACT)
    # moneyflow: 10,000 CNY -> CNY
    assert row["buy_sm_amount"] == pytest.approx(12_345_600.0, **EXACT)
    assert row["sell_elg_amount"] == pytest.approx(19_876_500.0, **EXACT)
    assert row["net_mf_amount"] == pytest.approx(-3_210_900.0, **EXACT)
    # daily_basic: total_mv 18222157.1879 and circ_mv 18221858.4 (10,000 CNY) -> total_mv, float_mv in CNY
    assert row["total_mv"] == pytest.approx(182_221_571_879.0, **EXACT)
    assert row["float_mv"] == pytest.approx(182_218_584_000.0, **EXACT)
    # stk_limit and adj_factor as they are
    assert (row["up_limit"], row["down_limit"], row["adj_factor"]) == (10.23, 8.37, 127.7841)


def test_limit_up_day(panel: pd.DataFrame) -> None:
    row = _row(panel, "2024-01-25", "300750.SZ")  # ChiNext, 20%: pre_close 150.00 -> limit 180.00
    assert row["close"] == row["high"] == row["up_limit"] == 180.0
    assert row["down_limit"] == 120.0
    assert row["open"] == 160.0


def test_adj_factor_removes_the_dividend_gap(panel: pd.DataFrame) -> None:
    stock = panel.xs("600000.SH", level="code")
    assert stock.loc["2024-01-19", "adj_factor"] == 8.0
    assert stock.loc["2024-01-22", "adj_factor"] == 8.497
    raw = stock.loc["2024-01-22", "close"] / stock.loc["2024-01-19", "close"] - 1  # 6.30 / 6.67 - 1
    adj = adjusted_price(panel).xs("600000.SH", level="code")
    adjusted = adj.loc["2024-01-22"] / adj.loc["2024-01-19"] - 1  # 6.30 * 8.497 / (6.67 * 8.0) - 1
    assert raw == pytest.approx(-0.0554722639, abs=1e-9)
    assert adjusted == pytest.approx(6.30 * 8.497 / (6.67 * 8.0) - 1, abs=1e-12)
    assert adjusted == pytest.approx(6.30 / 6.28 - 1, abs=3e-4)  # the ex-rights day's own return


def test_backward_adjustment_is_point_in_time(tmp_path: Path, panel: pd.DataFrame) -> None:
    """Cut the export before the ex-dividend day: adjusted prices up to the cut are the same."""
    cut = _copy(tmp_path)
    for name in ("daily", "adj_factor", "moneyflow", "daily_basic", "stk_limit"):
        _edit(cut, name, lambda t: t[t["trade_date"] <= "20240119"])
    early = import_tushare(cut)
    full = adjusted_price(panel)
    pd.testing.assert_series_equal(adjusted_price(early), full.loc[early.index], check_names=False)


def test_a_missing_adj_factor_is_carried_forward_never_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    export = _copy(tmp_path)
    drop = {("600000.SH", "20240123"), ("600000.SH", "20240102")}  # a day after the ex-date, and the first day
    _edit(export, "adj_factor", lambda t: t[[(c, d) not in drop for c, d in zip(t["ts_code"], t["trade_date"])]])
    for mode in ("last_close", "absent"):
        with caplog.at_level(logging.INFO):
            factor = import_tushare(export, suspended_rows=mode)["adj_factor"].xs("600000.SH", level="code")
        assert factor.loc["2024-01-23"] == 8.497  # from 01-22, not from a later day
        assert np.isnan(factor.loc["2024-01-02"])  # nothing before it to carry
        assert "1 missing factor(s) carried forward" in caplog.text


# --- suspensions --------------------------------------------------------------------------------------


SUSPENDED = [D("2024-01-10"), D("2024-01-11"), D("2024-01-12")]


def test_suspended_days_carry_the_last_close_ex_rights(panel: pd.DataFrame) -> None:
    assert panel.index[panel["is_suspended"].to_numpy()].tolist() == [(d, "000002.SZ") for d in SUSPENDED]
    stock = panel.xs("000002.SZ", level="code")
    days = stock.loc["2024-01-09":"2024-01-12"]
    # adj_factor 2.0 -> 2.1 on 01-11 while suspended: the carried close is 8.00 * 2.0 / 2.1 from 01-11 on.
    assert days["adj_factor"].tolist() == [2.0, 2.0, 2.1, 2.1]
    assert days["close"].tolist() == pytest.approx([8.0, 8.0, 8.0 * 2.0 / 2.1, 8.0 * 2.0 / 2.1], **EXACT)
    for col in ("open", "high", "low"):
        assert days.loc[SUSPENDED, col].tolist() == days.loc[SUSPENDED, "close"].tolist()
    assert (days["close"] * days["adj_factor"]).tolist() == pytest.approx([16.0] * 4, **EXACT)
    susp = stock.loc[SUSPENDED]
    assert (susp["volume"] == 0).all() and (susp["amount"] == 0).all()
    assert (susp[list(MONEYFLOW_COLUMNS)] == 0).all().all()
    assert (susp["total_mv"] == stock.loc["2024-01-09", "total_mv"]).all()
    assert susp["up_limit"].tolist() == [8.8, 8.38, 8.38]  # stk_limit has rows on suspended days
    # the first bar after: pre_close 7.62 (ex-rights), close 7.70
    assert stock.loc["2024-01-15", "close"] == 7.7 and not stock.loc["2024-01-15", "is_suspended"]


def test_suspended_rows_nan_and_absent(panel: pd.DataFrame) -> None:
    nan = import_tushare(FIXTURES, suspended_rows="nan")
    rows = nan.loc[[(d, "000002.SZ") for d in SUSPENDED]]
    assert rows[["open", "high", "low", "close"]].isna().all().all()
    assert rows["is_suspended"].all() and (rows["volume"] == 0).all()
    pd.testing.assert_frame_equal(nan[~nan["is_suspended"]], panel[~panel["is_suspended"]])

    absent = import_tushare(FIXTURES, suspended_rows="absent")
    assert len(absent) == 245 and "is_suspended" not in absent.columns
    assert not absent.index.isin([(d, "000002.SZ") for d in SUSPENDED]).any()


def test_no_rows_before_listing(panel: pd.DataFrame) -> None:
    stock = panel.xs("301589.SZ", level="code")
    assert stock.index[0] == D("2024-01-17") and len(stock) == 26
    assert stock["up_limit"].iloc[:5].isna().all() and stock["up_limit"].iloc[5:].notna().all()  # no limits
    assert stock["buy_sm_amount"].isna().all()  # not in moneyflow
    assert stock["industry"].isna().all()  # not in the industry file


def test_calendar_from_daily_when_trade_cal_is_skipped(panel: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(import_tushare(FIXTURES, files={"trade_cal": None}), panel)


# --- point-in-time membership and industry ---------------------------------------------------------------


def test_membership_is_point_in_time(panel: pd.DataFrame) -> None:
    member = panel["in_universe"].unstack("code")
    added, left = member["688981.SH"], member["601318.SH"]
    reconstitution = D("2024-02-01")
    assert not added[added.index < reconstitution].any() and added[added.index >= reconstitution].all()
    assert left[left.index < reconstitution].all() and not left[left.index >= reconstitution].any()
    assert (member.sum(axis=1) == 5).all()
    assert not member["301589.SZ"].any()
    # 600087.SH is in the 2023-12-01 snapshot only (superseded before the first day) and has no bars: ignored.
    assert "600087.SH" not in member.columns


def test_membership_of_another_index() -> None:
    member = import_tushare(FIXTURES, index_code="000905.SH")["in_universe"].unstack("code", fill_value=False)
    jan, feb = member.index < D("2024-02-01"), member.index >= D("2024-02-01")
    assert member.loc[jan, "688981.SH"].all() and not member.loc[feb, "688981.SH"].any()
    assert member.loc[feb, ["601318.SH", "301589.SZ"]].all().all()
    assert not member.loc[jan, ["601318.SH", "301589.SZ"]].any().any()
    assert not member[["000001.SZ", "000002.SZ", "600000.SH", "300750.SZ"]].any().any()


def test_industry_is_applied_by_date(panel: pd.DataFrame) -> None:
    industry = panel["industry"].unstack("code")
    assert industry.loc["2024-01-18", "601318.SH"] == "非银金融"  # out_date 20240118 is its last day
    assert industry.loc["2024-01-19", "601318.SH"] == "综合"
    assert (industry["000001.SZ"] == "银行").all() and (industry["300750.SZ"] == "电力设备").all()
    assert set(panel["industry"].dropna().unique()) == {"银行", "房地产", "电力设备", "非银金融", "综合", "电子"}


def test_undated_stock_basic_industry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    export = _copy(tmp_path)
    (export / "industry.csv").write_text(
        "ts_code,symbol,name,industry,list_date\n000001.SZ,000001,平安银行,银行,19910403\n"
        "601318.SH,601318,中国平安,保险,20070301\n"
    )
    with caplog.at_level(logging.WARNING):
        industry = import_tushare(export)["industry"].unstack("code")
    assert (industry["601318.SH"] == "保险").all() and (industry["000001.SZ"] == "银行").all()
    assert industry["000002.SZ"].isna().all()
    assert "undated industry classification" in caplog.text


# --- files ---------------------------------------------------------------------------------------------


def test_only_daily_is_required(tmp_path: Path) -> None:
    export = tmp_path / "only_daily"
    export.mkdir()
    shutil.copy(FIXTURES / "daily.csv", export / "daily.csv")
    panel = import_tushare(export)
    assert list(panel.columns) == ["open", "high", "low", "close", "volume", "amount", "is_suspended"]
    assert len(panel) == 248  # the calendar comes from daily's own days


def test_files_can_be_renamed_or_skipped(tmp_path: Path, panel: pd.DataFrame) -> None:
    export = _copy(tmp_path)
    (export / "daily.csv").rename(export / "bars_2024.csv")
    renamed = import_tushare(export, files={"daily": "bars_2024.csv", "moneyflow": None})
    assert not set(MONEYFLOW_COLUMNS) & set(renamed.columns)
    pd.testing.assert_frame_equal(renamed, panel.drop(columns=list(MONEYFLOW_COLUMNS)))


def test_hydra_config_builds_the_same_panel(panel: pd.DataFrame, compose_config) -> None:
    from backtest.cli.compose import load_panel

    cfg = compose_config(["data=tushare", f"data.directory={FIXTURES}"])
    assert cfg.data.index_code == "399300.SZ" and cfg.data.suspended_rows == "last_close"
    built, market = load_panel(cfg)  # as the main job loads it: benchmark_path is the job's, not the loader's
    assert market is None
    pd.testing.assert_frame_equal(built, panel)


# --- malformed inputs ---------------------------------------------------------------------------------


def _set(column: str, row: int, value: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(t: pd.DataFrame) -> pd.DataFrame:
        t = t.copy()
        t.loc[row, column] = value
        return t

    return change


def _scale(columns: list[str], factor: float) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda t: t.assign(**{c: t[c].astype(float) * factor for c in columns})


_AMOUNTS = [c for c in MONEYFLOW_COLUMNS]
# (case id, file, change, words the message must contain)
MALFORMED = [
    ("daily without close", "daily", lambda t: t.drop(columns="close"), ["daily.csv", "missing column", "close"]),
    ("daily without ts_code", "daily", lambda t: t.drop(columns="ts_code"), ["missing column", "ts_code"]),
    (
        "moneyflow without net_mf_amount",
        "moneyflow",
        lambda t: t.drop(columns="net_mf_amount"),
        ["moneyflow.csv", "net_mf_amount"],
    ),
    (
        "text in a numeric column",
        "daily",
        _set("vol", 3, "12.3k"),
        ["text in numeric field 'vol'", "12.3k", "2024-02-29"],
    ),
    (
        "unparseable trade_date",
        "adj_factor",
        _set("trade_date", 0, "2024-13-45"),
        ["adj_factor.csv", "unparseable", "2024-13-45"],
    ),
    (
        "member code without bars",
        "index_weight",
        lambda t: pd.concat([t, pd.DataFrame([["399300.SZ", "600087.SH", "20240201", "1.0"]], columns=t.columns)]),
        ["index_weight.csv", "600087.SH", "no rows in the panel"],
    ),
    ("duplicate rows", "moneyflow", lambda t: pd.concat([t, t.iloc[[5]]]), ["share a (ts_code, trade_date) key"]),
    ("vol already in shares", "daily", _scale(["vol"], 100.0), ["units look wrong", "lots"]),
    ("moneyflow in CNY", "moneyflow", _scale(_AMOUNTS, 10_000.0), ["moneyflow.csv", "units look wrong"]),
    ("total_mv in CNY", "daily_basic", _scale(["total_mv"], 10_000.0), ["daily_basic.csv", "units look wrong"]),
    ("stk_limit adjusted", "stk_limit", _scale(["up_limit", "down_limit"], 8.0), ["stk_limit.csv", "units"]),
    (
        "codes without exchange suffix",
        "adj_factor",
        lambda t: t.assign(ts_code=t["ts_code"].str[:6]),
        ["adj_factor.csv", "none of its", "ts_code"],
    ),
    (
        "bar on a closed day",
        "trade_cal",
        lambda t: t.assign(is_open=np.where(t["cal_date"] == "20240105", "0", t["is_open"])),
        ["daily.csv", "not open days", "2024-01-05"],
    ),
    (
        "industry without a name column",
        "industry",
        lambda t: t.drop(columns=["l1_name"]),
        ["industry.csv", "industry name"],
    ),
    ("index_weight without con_code", "index_weight", lambda t: t.drop(columns="con_code"), ["con_code"]),
    ("header-only moneyflow", "moneyflow", lambda t: t.iloc[:0], ["moneyflow.csv", "no rows"]),
]


@pytest.mark.parametrize("case,name,change,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_export_is_refused_with_a_clear_message(tmp_path: Path, case, name, change, words) -> None:
    export = _copy(tmp_path)
    _edit(export, name, change)
    with pytest.raises(DataContractError) as info:
        import_tushare(export)
    message = str(info.value)
    for word in words:
        assert word in message, f"{case}: {word!r} not in {message!r}"
    assert "fix:" in message


def test_unknown_index_code_names_the_ones_there() -> None:
    with pytest.raises(DataContractError, match=r"no constituents of index 000852.SH(.|\n)*399300.SZ"):
        import_tushare(FIXTURES, index_code="000852.SH")


def test_missing_directory_daily_or_two_versions_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(DataContractError, match="directory not found"):
        import_tushare(tmp_path / "nowhere")
    export = _copy(tmp_path)
    with pytest.raises(DataContractError, match="no Tushare daily file"):
        import_tushare(export, files={"daily": None})
    pd.read_csv(export / "moneyflow.csv").to_parquet(export / "moneyflow.parquet")
    with pytest.raises(DataContractError, match=r"'moneyflow' is there twice"):
        import_tushare(export)


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown file key"):
        import_tushare(FIXTURES, files={"dayly": "daily.csv"})
    with pytest.raises(ConfigError, match="suspended_rows"):
        import_tushare(FIXTURES, suspended_rows="ffill")


# --- round trip through the Tushare layout on the synthetic market -----------------------------------------


def test_synthetic_market_round_trips_through_the_tushare_layout(tmp_path: Path, tiny_panel: pd.DataFrame) -> None:
    for key, table in panel_to_tushare(tiny_panel).items():
        table.to_csv(tmp_path / f"{key}.csv", index=False)
    back = import_tushare(tmp_path)
    assert back.index.equals(tiny_panel.index)
    assert list(back.columns) == list(back.columns.intersection(tiny_panel.columns))
    assert set(back.columns) == set(tiny_panel.columns)
    suspended = tiny_panel["is_suspended"].to_numpy()
    assert suspended.any()
    for col in tiny_panel.columns:
        want, got = tiny_panel[col], back[col]
        if want.dtype.kind == "f":
            # The synthetic market draws opens on suspended days; the importer carries the last close.
            rows = ~suspended if col in ("open", "high", "low") else np.ones(len(want), bool)
            np.testing.assert_allclose(got[rows], want[rows], rtol=1e-12, atol=0, err_msg=col)
        else:
            assert (got.astype(str).to_numpy() == want.astype(str).to_numpy()).all(), col


# --- the downloader, offline --------------------------------------------------------------------------------


class FakeTushare:
    """Serves the fixture files like ``tushare.pro_api(token).query``: filtered, dates as text."""

    _DATE_FIELD = {"trade_cal": "cal_date", "index_member_all": None, "stock_basic": None}
    _FILE = {"index_member_all": "industry"}

    def __init__(self, fail: Callable[[str, dict], Exception | None] | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail
        self.tables = {key: pd.read_csv(FIXTURES / f"{key}.csv", dtype=str, keep_default_na=False) for key in FILE_KEYS}
        self.tables["stock_basic"] = pd.DataFrame(
            {
                "ts_code": ["000001.SZ", "600000.SH", "601318.SH", "600087.SH"],
                "industry": ["银行", "银行", "保险", "银行"],
                "list_status": ["L", "L", "L", "D"],
            }
        )

    def query(self, api_name: str, fields: str = "", **params) -> pd.DataFrame:
        self.calls.append((api_name, params))
        if self.fail is not None and (exc := self.fail(api_name, params)) is not None:
            raise exc
        table = self.tables[self._FILE.get(api_name, api_name)]
        date_field = self._DATE_FIELD.get(api_name, "trade_date")
        keep = np.ones(len(table), dtype=bool)
        for param, value in params.items():
            if param == "start_date":
                keep &= (table[date_field] >= value).to_numpy()
            elif param == "end_date":
                keep &= (table[date_field] <= value).to_numpy()
            elif param in table.columns and value != "":
                keep &= (table[param] == value).to_numpy()
        out = table[keep].replace("", np.nan)
        numeric = [
            c
            for c in out.columns
            if c not in ("ts_code", "con_code", "index_code", "exchange", "list_status", "is_new", "name")
            and not c.endswith(("_date", "_name"))
            and c not in ("l1_code", "l2_code", "l3_code", "industry")
        ]
        return out.astype({c: float for c in numeric}).reset_index(drop=True)


def _download(directory: Path, client: object = None, **kwargs) -> dict[str, Path]:
    args = dict(industry_api="index_member_all", policy=FAST)
    args.update(kwargs)
    return download_tushare(directory, "2024-01-02", "2024-02-29", client=client, **args)


def test_download_round_trip_gives_the_same_panel(tmp_path: Path, panel: pd.DataFrame) -> None:
    fake = FakeTushare()
    written = _download(tmp_path / "dl", fake, codes=["301589.SZ"])  # a non-member, by name
    assert set(written) == set(FILE_KEYS) and all(p.suffix == ".parquet" for p in written.values())
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == sorted(
        [f"{k}.parquet" for k in FILE_KEYS] + ["tushare_manifest.json"]
    )  # no temporary files left
    pd.testing.assert_frame_equal(import_tushare(tmp_path / "dl"), panel)
    daily_calls = [p for api, p in fake.calls if api == "daily"]
    assert sorted(p["ts_code"] for p in daily_calls) == [
        "000001.SZ",
        "000002.SZ",
        "300750.SZ",
        "301589.SZ",
        "600000.SH",
        "601318.SH",
        "688981.SH",
    ]  # not 600087.SH
    manifest = json.loads((tmp_path / "dl" / "tushare_manifest.json").read_text())
    assert manifest["index_code"] == "399300.SZ" and manifest["files"]["daily"]["rows"] == 245
    assert manifest["start"] == "20240102" and manifest["end"] == "20240229"


def test_download_in_short_chunks_as_csv(tmp_path: Path) -> None:
    fake = FakeTushare()
    _download(
        tmp_path / "dl",
        fake,
        codes=["301589.SZ"],
        file_format="csv",
        policy=DownloadPolicy(min_interval_s=0.0, retries=0, chunk_days=7, index_weight_chunk_days=10),
    )
    windows = [
        (p["start_date"], p["end_date"]) for api, p in fake.calls if api == "daily" and p["ts_code"] == "000001.SZ"
    ]
    assert windows[:2] == [("20240102", "20240108"), ("20240109", "20240115")] and windows[-1][1] == "20240229"
    assert len(windows) == 9  # 59 calendar days in windows of 7
    got = import_tushare(tmp_path / "dl")
    want = import_tushare(FIXTURES)
    pd.testing.assert_frame_equal(got, want)  # nothing lost or duplicated at the chunk borders


def test_download_with_stock_basic_industry(tmp_path: Path) -> None:
    _download(tmp_path / "dl", FakeTushare(), industry_api="stock_basic", apis=["daily"])
    industry = pd.read_parquet(tmp_path / "dl" / "industry.parquet")
    assert sorted(industry["ts_code"]) == ["000001.SZ", "600000.SH", "601318.SH"]  # only downloaded stocks
    panel = import_tushare(tmp_path / "dl")
    assert (panel.xs("601318.SH", level="code")["industry"] == "保险").all()


TOKEN = "tok-3f9a1c-SECRET-77e2"


@pytest.fixture
def fake_tushare_module(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A stand-in ``tushare`` package whose ``pro_api(token)`` returns a FakeTushare."""
    seen = types.SimpleNamespace(tokens=[], client=None)

    def pro_api(token: str = "", timeout: int = 30) -> FakeTushare:
        seen.tokens.append(token)
        seen.client = FakeTushare(fail=seen.fail)
        return seen.client

    seen.fail = None
    module = types.ModuleType("tushare")
    module.pro_api = pro_api
    module.__version__ = "1.4.21"
    monkeypatch.setitem(sys.modules, "tushare", module)
    monkeypatch.setenv("TUSHARE_TOKEN", TOKEN)
    return seen


def test_token_from_the_environment_never_reaches_logs_or_files(
    tmp_path: Path, fake_tushare_module: types.SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    failed: set[str] = set()

    def fail_once(api: str, params: dict) -> Exception | None:
        if api == "moneyflow" and api not in failed:  # a server error that echoes the token
            failed.add(api)
            return RuntimeError(f"抱歉，您的token({TOKEN})访问该接口过于频繁")
        return None

    fake_tushare_module.fail = fail_once
    with caplog.at_level(logging.DEBUG):
        written = _download(tmp_path / "dl")
    assert fake_tushare_module.tokens == [TOKEN]
    assert "retry 1 of 1" in caplog.text and "token(***)" in caplog.text
    assert TOKEN not in caplog.text
    for path in (tmp_path / "dl").rglob("*"):
        assert TOKEN.encode() not in path.read_bytes(), path
    manifest = json.loads((tmp_path / "dl" / "tushare_manifest.json").read_text())
    assert manifest["tushare"] == "tushare 1.4.21" and len(written) == len(FILE_KEYS)


def test_failed_download_writes_nothing_and_scrubs_the_token(
    tmp_path: Path, fake_tushare_module: types.SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    fake_tushare_module.fail = lambda api, params: (
        PermissionError(f"token {TOKEN}: 没有接口访问权限") if api == "daily_basic" else None
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(TushareRequestError) as info:
        _download(tmp_path / "dl")
    message = str(info.value)
    assert "daily_basic(" in message and "after 2 attempt(s)" in message and "***" in message
    assert TOKEN not in message and TOKEN not in caplog.text
    assert info.value.__cause__ is None and info.value.__suppress_context__  # the raw error is not chained
    assert not (tmp_path / "dl").exists() or not any((tmp_path / "dl").iterdir())


def test_missing_token_or_package_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("TUSHARE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"TUSHARE_TOKEN is not set(.|\n)*export TUSHARE_TOKEN="):
        _download(tmp_path / "dl")
    assert download_main(["--directory", str(tmp_path / "dl"), "--start", "2024-01-02", "--end", "2024-01-31"]) == 2
    assert "TUSHARE_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("TUSHARE_TOKEN", TOKEN)
    monkeypatch.setitem(sys.modules, "tushare", None)  # import tushare -> ImportError
    with pytest.raises(ConfigError, match=r"\[tushare\]"):
        _download(tmp_path / "dl")
    assert not (tmp_path / "dl").exists()


def test_existing_export_needs_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "dl"
    target.mkdir()
    (target / "daily.csv").write_text("stale\n")
    fake = FakeTushare()
    with pytest.raises(ConfigError, match="already holds a Tushare export"):
        _download(target, fake)
    assert fake.calls == []  # refused before any call
    _download(target, fake, overwrite=True)
    assert not (target / "daily.csv").exists() and (target / "daily.parquet").exists()
    import_tushare(target)  # no stale second copy of daily


def test_bad_download_arguments() -> None:
    with pytest.raises(ConfigError, match="start 2024-03-01 is after end"):
        download_tushare("x", "2024-03-01", "2024-02-01", client=FakeTushare())
    with pytest.raises(ConfigError, match="unknown api"):
        download_tushare("x", "2024-01-01", "2024-02-01", apis=["daily", "income"], client=FakeTushare())
    with pytest.raises(ConfigError, match="nothing to download"):
        download_tushare("x", "2024-01-01", "2024-02-01", index_code=None, client=FakeTushare())
    with pytest.raises(DataContractError, match="no constituents of 000852.SH"):
        download_tushare("x", "2024-01-01", "2024-02-01", index_code="000852.SH", client=FakeTushare(), policy=FAST)


def test_importing_the_downloader_does_not_import_tushare() -> None:
    code = "import sys, backtest.data.tushare_download; sys.exit('tushare' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
