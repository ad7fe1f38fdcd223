"""Loading long panels from parquet and CSV, any subset of columns, point-in-time membership."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.data.fingerprint import panel_fingerprint
from backtest.data.loaders import read_panel
from backtest.data.membership import membership_from_snapshots
from backtest.errors import ConfigError, DataContractError


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_round_trip_keeps_the_fingerprint(tmp_path: Path, tiny_panel: pd.DataFrame, suffix: str) -> None:
    path = tmp_path / f"panel{suffix}"
    long = tiny_panel.reset_index()
    long.to_parquet(path) if suffix == ".parquet" else long.to_csv(path, index=False)
    loaded = read_panel(path)
    assert loaded.shape == tiny_panel.shape
    assert panel_fingerprint(loaded) == panel_fingerprint(tiny_panel)


def test_close_only_panel_loads(tmp_path: Path, tiny_panel: pd.DataFrame) -> None:
    path = tmp_path / "close.parquet"
    tiny_panel[["close"]].reset_index().to_parquet(path)
    loaded = read_panel(path)
    assert list(loaded.columns) == ["close"]
    assert len(loaded) == len(tiny_panel)


def test_any_subset_of_columns_loads(tmp_path: Path, tiny_panel: pd.DataFrame) -> None:
    path = tmp_path / "subset.csv"
    tiny_panel[["close", "volume", "industry", "in_universe"]].reset_index().to_csv(path, index=False)
    loaded = read_panel(path)
    assert loaded["in_universe"].dtype == bool
    assert loaded["industry"].nunique() == tiny_panel["industry"].nunique()


def test_membership_snapshots_are_carried_forward_never_backward() -> None:
    dates = pd.to_datetime(["2024-01-02", "2024-01-03", "2024-02-01", "2024-02-02"])
    index = pd.MultiIndex.from_product([dates, ["A", "B"]], names=["date", "code"])
    snapshots = pd.DataFrame({"date": ["2024-01-03", "2024-02-01"], "code": ["A", "B"]})
    member = membership_from_snapshots(snapshots, index).reshape(4, 2)
    # Before the first snapshot nobody is a member; A from 01-03; B replaces A from 02-01.
    assert member.tolist() == [[False, False], [True, False], [False, True], [False, True]]


def test_membership_file_sets_in_universe(tmp_path: Path, tiny_panel: pd.DataFrame) -> None:
    path = tmp_path / "panel.parquet"
    tiny_panel[["close"]].reset_index().to_parquet(path)
    codes = tiny_panel.index.get_level_values("code").unique()[:5]
    mem = tmp_path / "members.csv"
    pd.DataFrame({"date": "2021-01-04", "code": codes}).to_csv(mem, index=False)
    loaded = read_panel(path, membership_path=mem)
    per_day = loaded["in_universe"].groupby(level="date").sum()
    assert per_day.max() == 5
    assert np.array_equal(loaded["in_universe"].groupby(level="code").any()[codes].to_numpy(), np.ones(5, bool))


def test_missing_file_and_unknown_type(tmp_path: Path) -> None:
    with pytest.raises(DataContractError, match="not found"):
        read_panel(tmp_path / "nope.parquet")
    odd = tmp_path / "panel.xlsx"
    odd.write_text("x")
    with pytest.raises(DataContractError, match="unknown file type"):
        read_panel(odd)


def test_a_directory_is_named_a_directory_not_a_missing_file(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "daily.csv").write_text("date,code,close\n")
    with pytest.raises(DataContractError) as info:
        read_panel(folder)
    message = str(info.value)
    assert "is a directory, expected a file" in message and "not found" not in message
    assert "daily.csv" in message and f"fix: pass the file itself, e.g. data.path={folder / 'daily.csv'}" in message


GBK_PANEL = "date,code,name,close\n2024-01-02,000001.SZ,平安银行,10.0\n2024-01-02,600000.SH,浦发银行,7.0\n"


def test_a_gbk_csv_names_the_encoding_and_data_encoding_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "gbk.csv"
    path.write_bytes(GBK_PANEL.encode("gbk"))
    with pytest.raises(DataContractError) as info:
        read_panel(path)
    message = str(info.value)
    assert "not valid utf-8 text" in message and "GB18030 (GBK)" in message
    assert "fix: data.encoding=gb18030" in message and "complete csv export" not in message
    panel = read_panel(path, encoding="gb18030")
    assert panel["name"].tolist() == ["平安银行", "浦发银行"]


def test_an_unknown_encoding_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "panel.csv"
    path.write_text(GBK_PANEL)
    with pytest.raises(ConfigError, match=r"unknown text encoding 'klingon'(.|\n)*fix: data.encoding=utf-8"):
        read_panel(path, encoding="klingon")
