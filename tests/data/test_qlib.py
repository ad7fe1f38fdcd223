"""The Qlib provider-directory importer, on the tiny synthetic market written in Qlib's binary format.

``write_qlib`` dumps the market as Qlib's ``scripts/dump_bin.py`` and its Yahoo collector lay out cn data
(adjusted prices and volumes, NaN on days without trading, the factor of each stock scaled by its first
adjusted close); ``read_qlib`` must give the source panel back. The slow test reads the same directory
with pyqlib itself (``make test-qlib`` builds its environment, ``.venv-qlib``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import backtest.data.qlib as qlib_data
from backtest.data import tradability
from backtest.data.qlib import FIELDS, read_qlib, write_qlib
from backtest.data.tushare import import_tushare, panel_to_tushare
from backtest.data.validate import canonicalize
from backtest.errors import ConfigError, DataContractError

FLOAT32 = dict(rtol=2e-7 * 4, atol=0.0)  # a float32 value and a product or quotient of two


def _with_factor(panel: pd.DataFrame, seed: int = 5) -> pd.DataFrame:
    """``panel`` with a backward ``adj_factor``: a few corporate actions per stock on trading days, the
    factor of each stock scaled by its first adjusted close (as Qlib's cn data are)."""
    rng = np.random.default_rng(seed)
    codes = panel.index.get_level_values(1)
    event = (rng.random(len(panel)) < 0.01) & ~tradability.suspended_rows(panel)
    step = np.where(event, 1.0 + rng.uniform(0.01, 0.5, len(panel)), 1.0)
    factor = pd.Series(step, index=panel.index).groupby(codes).cumprod()
    first_adjusted = (panel["close"] * factor).groupby(codes).transform("first")
    return panel.assign(adj_factor=(factor / first_adjusted).to_numpy())


def _expected(panel: pd.DataFrame, market: str = "csi300") -> pd.DataFrame:
    """What ``read_qlib`` must return for a panel written by ``write_qlib``: the market's stocks, the
    columns Qlib keeps, the factor of days without trading carried from the last trading day (Qlib stores
    NaN there), membership from the market's spans."""
    codes = panel.index.get_level_values(1)
    if market != "all":
        panel = panel[codes.isin(codes[panel["in_universe"].to_numpy()].unique())]
    trading = pd.Series(~tradability.suspended_rows(panel), index=panel.index)
    by_code = trading.groupby(level=1)
    # a stock's rows run from its first to its last trading day
    panel = panel[(by_code.cummax() & by_code.transform(lambda t: t[::-1].cummax()[::-1])).to_numpy()]
    trading = ~tradability.suspended_rows(panel)
    out = panel[[c for c in (*FIELDS, "adj_factor", "in_universe") if c in panel.columns]].copy()
    if "adj_factor" in out.columns:
        out["adj_factor"] = out["adj_factor"].where(trading).groupby(level=1).ffill()
    else:
        out["adj_factor"] = 1.0
    if market == "all":
        out["in_universe"] = True
    out["is_suspended"] = ~trading
    return out


@pytest.fixture(scope="module")
def source(tiny_panel: pd.DataFrame) -> pd.DataFrame:
    return _with_factor(tiny_panel)


@pytest.fixture(scope="module")
def provider(source: pd.DataFrame, tmp_path_factory) -> Path:
    return write_qlib(source, tmp_path_factory.mktemp("qlib") / "cn_data", market="csi300")


@pytest.fixture(scope="module")
def panel(provider: Path) -> pd.DataFrame:
    return read_qlib(provider)


def _copy(provider: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(provider, tmp_path / "cn_data"))


def _codes(root: Path, n: int | None = None) -> list[str]:
    """The feature folders of the first ``n`` stocks of instruments/csi300.txt (all of them: None)."""
    spans = pd.read_csv(root / "instruments" / "csi300.txt", sep="\t", header=None)
    return sorted(spans[0].str.lower().unique())[:n]


# --- the panel ----------------------------------------------------------------------------------------


def test_round_trip_gives_the_source_panel(panel: pd.DataFrame, source: pd.DataFrame) -> None:
    expected = _expected(source)
    assert list(panel.columns) == list(expected.columns)
    assert panel.index.equals(expected.index)
    for col in ("open", "high", "low", "close"):  # rounded back to the fen: exact
        np.testing.assert_array_equal(panel[col].to_numpy(), expected[col].to_numpy(), err_msg=col)
    for col in ("volume", "amount", "adj_factor"):  # stored as float32
        np.testing.assert_allclose(panel[col].to_numpy(), expected[col].to_numpy(), **FLOAT32, err_msg=col)
    np.testing.assert_array_equal(panel["in_universe"].to_numpy(), expected["in_universe"].to_numpy())
    np.testing.assert_array_equal(panel["is_suspended"].to_numpy(), expected["is_suspended"].to_numpy())
    pd.testing.assert_frame_equal(canonicalize(panel.reset_index()), panel)  # the loaders' dtypes exactly


def test_adjusted_prices_are_qlibs_stored_values(panel: pd.DataFrame, provider: Path) -> None:
    code = "600030.SH" if "600030.SH" in panel.index.get_level_values(1) else panel.index[0][1]
    stock = panel.xs(code, level="code")
    stored = np.fromfile(provider / "features" / f"sh{code[:6]}" / "close.day.bin", dtype="<f4")
    calendar = pd.DatetimeIndex(pd.read_csv(provider / "calendars" / "day.txt", header=None)[0])
    first = int(stored[0])
    assert calendar[first] == stock.index[0]
    trading = ~stock["is_suspended"].to_numpy()
    adjusted = (stock["close"] * stock["adj_factor"]).to_numpy()
    np.testing.assert_allclose(adjusted[trading], stored[1:][trading], **FLOAT32)
    assert np.isnan(stored[1:][~trading]).all()  # Qlib's convention for days without trading


def test_the_factors_scale_does_not_change_raw_prices(source: pd.DataFrame, panel: pd.DataFrame, tmp_path) -> None:
    rescaled = source.assign(adj_factor=source["adj_factor"] * 1234.5)
    back = read_qlib(write_qlib(rescaled, tmp_path / "q"))
    for col in ("open", "high", "low", "close"):
        np.testing.assert_array_equal(back[col].to_numpy(), panel[col].to_numpy())
    np.testing.assert_allclose(back["volume"].to_numpy(), panel["volume"].to_numpy(), **FLOAT32)
    np.testing.assert_allclose(back["adj_factor"].to_numpy(), panel["adj_factor"].to_numpy() * 1234.5, rtol=1e-6)


def test_suspended_days_carry_the_last_close_with_no_volume(panel: pd.DataFrame) -> None:
    suspended = panel["is_suspended"].to_numpy()
    assert suspended.any()
    rows = panel[suspended]
    assert (rows["volume"] == 0).all() and (rows["amount"] == 0).all()
    for col in ("open", "high", "low"):
        np.testing.assert_array_equal(rows[col].to_numpy(), rows["close"].to_numpy())
    last_traded = panel["close"].where(~panel["is_suspended"]).groupby(level=1).ffill()
    np.testing.assert_array_equal(rows["close"].to_numpy(), last_traded[suspended].to_numpy())


def test_suspended_rows_match_the_tushare_importers(tiny_panel: pd.DataFrame, tmp_path: Path) -> None:
    """The two importers represent a day without trading the same way (``suspended_rows="last_close"``)."""
    from_qlib = read_qlib(write_qlib(tiny_panel, tmp_path / "q"), market="all")
    export = tmp_path / "tushare"
    export.mkdir()
    for key, table in panel_to_tushare(tiny_panel).items():
        table.to_parquet(export / f"{key}.parquet", index=False)
    from_tushare = import_tushare(export)
    assert from_qlib.index.equals(from_tushare.index)
    for col in ("open", "high", "low", "close", "is_suspended"):
        np.testing.assert_array_equal(from_qlib[col].to_numpy(), from_tushare[col].to_numpy(), err_msg=col)
    for col in ("volume", "amount"):
        np.testing.assert_allclose(from_qlib[col].to_numpy(), from_tushare[col].to_numpy(), **FLOAT32)


def test_market_all_reads_every_stock_over_its_whole_history(source: pd.DataFrame, provider: Path) -> None:
    back = read_qlib(provider, market="all")
    expected = _expected(source, market="all")
    assert back.index.equals(expected.index)
    assert back["in_universe"].all()
    np.testing.assert_array_equal(back["close"].to_numpy(), expected["close"].to_numpy())


def test_universe_follows_the_spans_point_in_time(panel: pd.DataFrame, provider: Path) -> None:
    spans = pd.read_csv(provider / "instruments" / "csi300.txt", sep="\t", header=None, names=["code", "a", "b"])
    days = panel.index.get_level_values(0)
    assert (pd.to_datetime(spans["a"]) > days[0]).any() and (pd.to_datetime(spans["b"]) < days[-1]).any()
    for code, lines in spans.groupby("code"):
        stock = panel.xs(f"{code[2:]}.{code[:2]}", level="code")["in_universe"]
        inside = np.zeros(len(stock), dtype=bool)
        for a, b in zip(lines["a"], lines["b"]):
            inside |= (stock.index >= pd.Timestamp(a)) & (stock.index <= pd.Timestamp(b))
        np.testing.assert_array_equal(stock.to_numpy(), inside, err_msg=code)
    assert panel.index.get_level_values(1).nunique() == spans["code"].nunique()  # every stock ever a member


def test_a_window_reads_the_same_values_as_the_whole_calendar(panel: pd.DataFrame, provider: Path) -> None:
    """A cut never changes what is read for the days it keeps (point in time): rows differ only by days
    without trading at the edges (no bar before them in the window, or none after them)."""
    start, end = pd.Timestamp("2021-06-01"), pd.Timestamp("2022-03-15")
    cut = read_qlib(provider, start="2021-06-01", end="2022-03-15")
    dates = panel.index.get_level_values(0)
    whole = panel[(dates >= start) & (dates <= end)]
    assert cut.index.isin(whole.index).all()
    assert whole[~whole.index.isin(cut.index)]["is_suspended"].all()
    pd.testing.assert_frame_equal(cut, whole.loc[cut.index])


def test_amount_is_read_from_money_too(provider: Path, panel: pd.DataFrame, tmp_path: Path) -> None:
    root = _copy(provider, tmp_path)
    for folder in (root / "features").iterdir():
        (folder / "amount.day.bin").rename(folder / "money.day.bin")
    pd.testing.assert_frame_equal(read_qlib(root), panel)


def test_optional_fields_absent_everywhere_drop_out(provider: Path, panel: pd.DataFrame, tmp_path: Path) -> None:
    root = _copy(provider, tmp_path)
    for folder in (root / "features").iterdir():
        for name in ("open", "high", "low", "amount"):
            (folder / f"{name}.day.bin").unlink()
    back = read_qlib(root)
    assert list(back.columns) == ["close", "volume", "adj_factor", "in_universe", "is_suspended"]
    pd.testing.assert_frame_equal(back, panel[back.columns])
    chosen = read_qlib(provider, fields=["close", "volume"])
    pd.testing.assert_frame_equal(chosen, back)


def test_index_series_are_skipped(provider: Path, panel: pd.DataFrame, tmp_path: Path) -> None:
    root = _copy(provider, tmp_path)
    shutil.copytree(root / "features" / _codes(root)[0], root / "features" / "sh000300")
    with (root / "instruments" / "all.txt").open("a") as f:
        f.write("SH000300\t2021-01-04\t2022-12-30\n")
    assert "000300.SH" not in read_qlib(root, market="all").index.get_level_values(1)


def test_market_names_are_case_insensitive(provider: Path, panel: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(read_qlib(provider, market="CSI300"), panel)


def test_hydra_config_builds_the_same_panel(panel: pd.DataFrame, provider: Path, compose_config) -> None:
    from backtest.cli.compose import build_data

    cfg = compose_config(["data=qlib", f"data.provider_uri={provider}"])
    assert cfg.data.market == "csi300" and cfg.data.start is None and cfg.data.fields is None
    assert cfg.data.benchmark_path is None  # the job's key, not the loader's: build_data leaves it out
    pd.testing.assert_frame_equal(build_data(cfg), panel)


# --- refusals -----------------------------------------------------------------------------------------


def _drop_file(field: str, n: int) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        for code in _codes(root, n):
            (root / "features" / code / f"{field}.day.bin").unlink()

    return change


def _write_bin(values: list[float]) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        np.array(values, dtype="<f4").tofile(root / "features" / _codes(root, 1)[0] / "close.day.bin")

    return change


def _truncate(root: Path) -> None:
    path = root / "features" / _codes(root, 1)[0] / "volume.day.bin"
    path.write_bytes(path.read_bytes()[:-2])


def _edit_text(name: str, change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / name
        path.write_text("".join(line + "\n" for line in change(path.read_text().splitlines())))

    return edit


def _scale_amount(root: Path) -> None:
    for code in _codes(root):
        path = root / "features" / code / "amount.day.bin"
        values = np.fromfile(path, dtype="<f4")
        values[1:] /= 1000  # thousands of CNY
        values.tofile(path)


# (case id, change to a copy of the provider directory, keyword arguments, error, words of the message)
REFUSALS = [
    ("factor missing for every stock", _drop_file("factor", None), {}, DataContractError, ["'factor'", "EVERY"]),
    ("open missing for some stocks", _drop_file("open", 2), {}, DataContractError, ["'open'", "2 of the", "fields"]),
    (
        "a chosen field missing",
        _drop_file("volume", 1),
        {"fields": ["close", "volume"]},
        DataContractError,
        ["'volume'", "1 of the"],
    ),
    ("truncated .bin", _truncate, {}, DataContractError, ["corrupt", "volume.day.bin", "bytes"]),
    ("bin past the calendar", _write_bin([480, 1, 2, 3, 4, 5, 6]), {}, DataContractError, ["runs past the calendar"]),
    ("bin start not an index", _write_bin([-3.5, 1, 2]), {}, DataContractError, ["not a calendar index"]),
    (
        "calendar line not a date",
        _edit_text("calendars/day.txt", lambda lines: [*lines[:3], "2021-13-45", *lines[4:]]),
        {},
        DataContractError,
        ["not dates", "2021-13-45"],
    ),
    (
        "calendar out of order",
        _edit_text("calendars/day.txt", lambda lines: [lines[1], lines[0], *lines[2:]]),
        {},
        DataContractError,
        ["not strictly increasing"],
    ),
    (
        "a foreign code",
        _edit_text("instruments/csi300.txt", lambda lines: [*lines, "AAPL\t2021-01-04\t2022-12-30"]),
        {},
        DataContractError,
        ["not A-share codes", "AAPL"],
    ),
    (
        "a member without data",
        _edit_text("instruments/csi300.txt", lambda lines: [*lines, "SH605999\t2021-01-04\t2022-12-30"]),
        {},
        DataContractError,
        ["have no folder", "sh605999", "survivorship"],
    ),
    (
        "instrument span out of order",
        _edit_text("instruments/csi300.txt", lambda lines: [*lines, "SH600000\t2022-01-04\t2021-12-30"]),
        {},
        DataContractError,
        ["without a valid span"],
    ),
    ("amount in thousands", _scale_amount, {}, DataContractError, ["units of amount", "fields"]),
    ("unknown market", None, {"market": "csi800"}, DataContractError, ["no market 'csi800'", "all, csi300"]),
    ("window off the calendar", None, {"start": "2030-01-01"}, DataContractError, ["no trading day", "2022-12-30"]),
    ("unknown field", None, {"fields": ["close", "vwap"]}, ConfigError, ["unknown field", "vwap"]),
    ("fields without close", None, {"fields": ["open"]}, ConfigError, ["close is required"]),
    ("start after end", None, {"start": "2022-01-01", "end": "2021-01-01"}, ConfigError, ["after end"]),
    ("start not a date", None, {"start": "yesterday-ish"}, ConfigError, ["not a date"]),
]


@pytest.mark.parametrize(
    ("change", "kwargs", "error", "words"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_a_broken_provider_is_refused_with_the_fix(
    provider: Path, tmp_path: Path, change, kwargs, error, words
) -> None:
    root = provider
    if change is not None:
        root = _copy(provider, tmp_path)
        change(root)
    with pytest.raises(error) as info:
        read_qlib(root, **kwargs)
    message = str(info.value)
    every = len(_codes(provider))  # "EVERY": the count of the market's stocks, "n of the n"
    for word in words:
        assert (f"{every} of the {every} stocks" if word == "EVERY" else word) in message, message
    assert "\n  fix: " in message


@pytest.mark.parametrize(
    "where",
    ["parent", "features", "a stock's folder", "calendars/day.txt", "typo"],
)
def test_a_path_next_to_the_provider_names_the_right_one(provider: Path, where: str) -> None:
    path = {
        "parent": provider.parent,
        "features": provider / "features",
        "a stock's folder": provider / "features" / _codes(provider, 1)[0],
        "calendars/day.txt": provider / "calendars" / "day.txt",
        "typo": provider.parent / "cn_dat",
    }[where]
    with pytest.raises(DataContractError) as info:
        read_qlib(path)
    message = str(info.value)
    assert str(provider) in message and "\n  fix: " in message, message
    assert ("not found" if where == "typo" else "not a Qlib provider directory") in message


def test_a_folder_without_instruments_is_refused(provider: Path, tmp_path: Path) -> None:
    root = _copy(provider, tmp_path)
    shutil.rmtree(root / "instruments")
    with pytest.raises(DataContractError, match=r"has no instruments/"):
        read_qlib(root)


@pytest.mark.parametrize("case", ["unknown market", "open missing for some stocks", "a member without data"])
def test_refusals_come_before_any_bin_is_read(provider: Path, tmp_path: Path, monkeypatch, case: str) -> None:
    _, change, kwargs, error, _ = next(c for c in REFUSALS if c[0] == case)
    root = provider
    if change is not None:
        root = _copy(provider, tmp_path)
        change(root)

    def never(*args, **kwargs):
        raise AssertionError("a .bin file was read before the refusal")

    monkeypatch.setattr(qlib_data, "_read_bins", never)
    with pytest.raises(error):
        read_qlib(root, **kwargs)


# --- end to end, and against the real thing ---------------------------------------------------------------


@pytest.mark.slow
def test_the_main_job_runs_on_a_provider_directory(provider: Path, tmp_path: Path) -> None:
    from tests.system.tiny_market import TINY, main_job

    quick = [a for a in TINY if not a.startswith(("data.", "backtest.test_start="))]
    proc = main_job(
        ["data=qlib", f"data.provider_uri={provider}", "backtest.test_start=2022-09-01", *quick]
        + [f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "leak guard      passed" in proc.stdout
    assert "dropped 11 indicator(s)" in proc.stdout + proc.stderr  # money flow, market caps: not in Qlib's data


@pytest.mark.slow
def test_pyqlib_reads_the_same_values(provider: Path, panel: pd.DataFrame) -> None:
    """Qlib's own reader (``D.features``) on the same directory gives the same adjusted values, the same
    calendar and the same point-in-time universe. Runs in ``.venv-qlib`` (``make test-qlib``)."""
    qlib = pytest.importorskip("qlib")
    from qlib.data import D

    qlib.init(provider_uri=str(provider), region="cn", kernels=1, expression_cache=None, dataset_cache=None)
    assert pd.DatetimeIndex(D.calendar()).equals(panel.index.get_level_values(0).unique())
    fields = ["$open", "$high", "$low", "$close", "$volume", "$amount", "$factor"]
    for market, ours in (("csi300", panel), ("all", read_qlib(provider, market="all"))):
        theirs = D.features(D.instruments(market), fields).dropna(how="all")
        theirs.index = pd.MultiIndex.from_arrays(
            [
                pd.DatetimeIndex(theirs.index.get_level_values("datetime")).astype("datetime64[ns]"),
                qlib_data.code_from_qlib(theirs.index.get_level_values("instrument")).astype(str),
            ],
            names=["date", "code"],
        )
        theirs = theirs.sort_index()
        traded = ours[ours["in_universe"] & ~ours["is_suspended"]]  # Qlib returns the market's days with a bar
        assert len(traded) > 15_000
        assert theirs.index.equals(traded.index), market
        for col in ("open", "high", "low", "close"):
            adjusted = (traded[col] * traded["adj_factor"]).to_numpy()
            np.testing.assert_allclose(adjusted, theirs[f"${col}"].to_numpy(), rtol=1e-6, err_msg=col)
        np.testing.assert_allclose(
            (traded["volume"] / traded["adj_factor"]).to_numpy(), theirs["$volume"].to_numpy(), rtol=1e-6
        )
        np.testing.assert_allclose(traded["amount"].to_numpy(), theirs["$amount"].to_numpy(), rtol=1e-6)
        np.testing.assert_allclose(traded["adj_factor"].to_numpy(), theirs["$factor"].to_numpy(), rtol=1e-6)
