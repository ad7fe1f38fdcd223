"""Malformed inputs: each gives a clear DataContractError, leaves no output, and at the CLI exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.data.loaders import read_panel
from backtest.data.validate import canonicalize, validate_panel
from backtest.errors import DataContractError

GOOD = """date,code,open,high,low,close,volume
2024-01-02,000001.SZ,10.0,10.5,9.8,10.2,1000
2024-01-02,600000.SH,7.0,7.2,6.9,7.1,2000
2024-01-03,000001.SZ,10.2,10.4,10.0,10.3,1100
2024-01-03,600000.SH,7.1,7.3,7.0,7.2,2100
"""


def _edit(line: int, old: str, new: str) -> str:
    lines = GOOD.splitlines()
    assert old in lines[line], (lines[line], old)
    lines[line] = lines[line].replace(old, new, 1)
    return "\n".join(lines) + "\n"


# (case id, file text, extra read_panel kwargs, words the message must contain)
CASES = [
    (
        "duplicate (date, code) rows",
        GOOD + "2024-01-03,600000.SH,7.1,7.3,7.0,7.2,2100\n",
        {},
        ["share a (date, code) key", "600000.SH"],
    ),
    (
        "unsorted dates",
        "\n".join([GOOD.splitlines()[0], *GOOD.splitlines()[3:], *GOOD.splitlines()[1:3]]) + "\n",
        {},
        ["not sorted", "sort"],
    ),
    ("unparseable date", _edit(2, "2024-01-02", "2024-13-45"), {}, ["unparseable", "2024-13-45"]),
    ("NaN close on a trading row", _edit(3, ",10.3,", ",,"), {}, ["missing (NaN) 'close'", "2024-01-03, 000001.SZ"]),
    ("zero price", _edit(1, ",10.2,", ",0,"), {}, ["zero or negative", "'close'"]),
    ("negative price", _edit(1, "10.0,", "-10.0,"), {}, ["zero or negative", "'open'"]),
    ("high < low", _edit(2, "7.0,7.2,6.9", "7.0,6.8,6.9"), {}, ["low <= open, close <= high", "600000.SH"]),
    ("missing required column", GOOD.replace(",close,", ",price,"), {}, ["missing required column", "close"]),
    ("text in a numeric column", _edit(4, ",2100", ",2.1k"), {}, ["text in numeric column 'volume'", "2.1k"]),
    ("empty file", "", {}, ["empty"]),
    ("header only", GOOD.splitlines()[0] + "\n", {}, ["empty"]),
    ("date on a weekend", GOOD + "2024-01-06,600000.SH,7.1,7.3,7.0,7.2,2100\n", {}, ["weekend"]),
    (
        "date off the trading calendar",
        GOOD + "2024-02-12,600000.SH,7.1,7.3,7.0,7.2,2100\n",
        {"calendar": True},
        ["not on the trading calendar", "2024-02-12"],
    ),
    (
        "membership row for an unknown code",
        GOOD,
        {"membership": "date,code\n2024-01-02,000001.SZ\n2024-01-02,688999.SH\n"},
        ["no rows in the panel", "688999.SH"],
    ),
    ("negative volume", _edit(1, ",1000", ",-5"), {}, ["negative value", "'volume'"]),
    (
        "empty universe",
        GOOD.replace(",volume\n", ",volume,in_universe\n")
        .replace("000\n", "000,false\n")
        .replace("100\n", "100,false\n"),
        {},
        ["universe is empty"],
    ),
    ("missing code column", GOOD.replace("date,code,", "date,ticker,"), {}, ["missing key column", "code"]),
    (
        "boolean column with junk",
        GOOD.replace(",volume\n", ",volume,is_suspended\n")
        .replace("000\n", "000,maybe\n")
        .replace("100\n", "100,no\n"),
        {},
        ["must be boolean", "maybe"],
    ),
    ("infinite close", _edit(3, ",10.3,", ",inf,"), {}, ["infinite value(s) in 'close'", "2024-01-03, 000001.SZ"]),
    ("minus infinite low", _edit(2, ",6.9,", ",-inf,"), {}, ["infinite value(s) in 'low'", "600000.SH"]),
    ("infinite volume", _edit(4, ",2100", ",inf"), {}, ["infinite value(s) in 'volume'", "2024-01-03, 600000.SH"]),
    (
        "infinite amount",
        GOOD.replace(",volume\n", ",volume,amount\n")
        .replace("000\n", "000,5e6\n")
        .replace("1100\n", "1100,Infinity\n")
        .replace("2100\n", "2100,5e6\n"),
        {},
        ["infinite value(s) in 'amount'"],
    ),
    ("one stock", "\n".join(GOOD.splitlines()[0:4:2]) + "\n", {}, ["at least 2 stocks", "has 1", "600000.SH"]),
]


def _load(tmp_path: Path, text: str, extra: dict) -> pd.DataFrame:
    path = tmp_path / "panel.csv"
    path.write_text(text)
    kwargs = {}
    if extra.get("calendar"):
        cal = tmp_path / "calendar.csv"
        cal.write_text("cal_date,is_open\n20240102,1\n20240103,1\n20240212,0\n")
        kwargs["calendar_path"] = cal
    if "membership" in extra:
        mem = tmp_path / "members.csv"
        mem.write_text(extra["membership"])
        kwargs["membership_path"] = mem
    return read_panel(path, **kwargs)


def test_good_file_loads(tmp_path: Path) -> None:
    panel = _load(tmp_path, GOOD, {})
    assert panel.shape == (4, 5)
    assert panel.loc[(pd.Timestamp("2024-01-03"), "600000.SH"), "close"] == 7.2
    assert list(panel.index.names) == ["date", "code"]


@pytest.mark.parametrize("case,text,extra,words", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_refused_with_a_clear_message(tmp_path: Path, case, text, extra, words) -> None:
    before = sorted(tmp_path.iterdir())
    with pytest.raises(DataContractError) as info:
        _load(tmp_path, text, extra)
    message = str(info.value)
    for word in words:
        assert word in message, f"{case}: {word!r} not in {message!r}"
    assert "fix:" in message, f"{case}: the message must say how to fix it: {message!r}"
    written = sorted(tmp_path.iterdir())
    assert len(written) - len(before) <= 3  # only the inputs this test wrote; the loader writes nothing
    assert all(p.suffix == ".csv" for p in written)


def test_at_least_twelve_malformed_inputs() -> None:
    assert len(CASES) >= 12


def test_validate_refuses_unindexed_frame() -> None:
    frame = pd.DataFrame({"date": pd.to_datetime(["2024-01-02"]), "code": ["A"], "close": [1.0]})
    with pytest.raises(DataContractError, match=r"indexed by \(date, code\)"):
        validate_panel(frame)


def test_suspended_rows_may_carry_nan_prices() -> None:
    frame = pd.DataFrame(
        {
            "date": pd.to_datetime(["2024-01-02", "2024-01-02"]),
            "code": ["A", "B"],
            "close": [1.0, np.nan],
            "is_suspended": [False, True],
        }
    )
    panel = canonicalize(frame)
    assert panel["is_suspended"].tolist() == [False, True]


@pytest.mark.parametrize("case", ["unparseable date", "high < low"])
def test_cli_prints_the_message_and_exits_2_without_traceback(tmp_path: Path, case: str) -> None:
    _, text, _, words = next(c for c in CASES if c[0] == case)
    path = tmp_path / "bad.csv"
    path.write_text(text)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "backtest", "data=csv", f"data.path={path}", f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert words[0] in proc.stderr


if __name__ == "__main__":  # print the bad-input table for the README
    import tempfile

    print("| input | message |\n|---|---|")
    for case, text, extra, _ in CASES:
        with tempfile.TemporaryDirectory() as d:
            try:
                _load(Path(d), text, extra)
                msg = "(loaded!)"
            except DataContractError as exc:
                msg = str(exc).split("\n")[0].split(": ", 1)[1]
        print(f"| {case} | {msg} |")
