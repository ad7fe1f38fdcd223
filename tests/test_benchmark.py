"""The index benchmark: the cap-weighted universe by hand, its alignment with the strategy's returns, a
supplied series and its refusals."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.benchmark import SuppliedIndex, benchmark_index, index_returns, supplied_index_returns
from backtest.data.loaders import read_index_series
from backtest.engine import plan_backtest
from backtest.errors import DataContractError
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec, return_days, simulate
from backtest.splits import RollingSchedule
from tests.small_backtest import SCHEDULE

DAYS = pd.bdate_range("2024-01-01", periods=4, name="date")  # D0 .. D3
NAN = np.nan


def hand_panel(**columns: list[float]) -> pd.DataFrame:
    """Three stocks a, b, c over four days; each column lists a, b, c of D0, then of D1, D2, D3.

    Open to open (dated by the first open): D1 a +10%, b 0, c -10%; D2 a +10%, b +10%, c 0.
    Close to close (dated by the first close): D0 a +10%, c -10%; D1 0; D2 a +10%.
    Float caps: D0 100 / 300 / 600; D1 200 / 200 / none (c's total_mv 400); D2 500 / 250 / 250.
    Members: all on D0 and D2; b is out on D1.
    """
    base = {
        "open": [10, 20, 30, 10, 20, 30, 11, 20, 27, 12.1, 22, 27],
        "close": [10, 20, 30, 11, 20, 27, 11, 20, 27, 12.1, 20, 27],
        "float_mv": [100, 300, 600, 200, 200, NAN, 500, 250, 250, 500, 250, 250],
        "total_mv": [1000, 1000, 1000, 1000, 1000, 400, 1000, 1000, 1000, 1000, 1000, 1000],
        "in_universe": [1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
    }
    base.update(columns)
    index = pd.MultiIndex.from_product([DAYS, ["a", "b", "c"]], names=["date", "code"])
    frame = pd.DataFrame(base, index=index).astype(float)
    frame["in_universe"] = frame["in_universe"].astype(bool)
    return frame


# --------------------------------------------------------------------------------------------------
# The cap-weighted universe, by hand


def test_open_to_open_index_weights_by_the_previous_close() -> None:
    index = index_returns(hand_panel(), alignment="open")
    assert index.source == "float_mv" and list(index.returns.index) == [DAYS[1], DAYS[2]]
    # D1: D0's caps and members (0.1, 0.3, 0.6): 0.1 * 10% + 0.3 * 0 + 0.6 * -10%
    # D2: D1's members a, c; a's float cap 200, c's total cap 400 (no float_mv): 1/3 * 10% + 2/3 * 0 (b is out)
    assert index.returns.tolist() == pytest.approx([0.01 - 0.06, 0.1 / 3], abs=1e-15)
    # the same day's caps would be a look-ahead: D1's on D1 give 1/3 * 10% + 2/3 * -10%, D2's 0.5*10%+0.25*10%
    assert index.returns.iloc[0] != pytest.approx(0.1 / 3 - 0.2 / 3)


def test_close_to_close_index_weights_by_the_close_it_starts_at() -> None:
    index = index_returns(hand_panel(), alignment="close")
    assert list(index.returns.index) == list(DAYS[:3])
    # D0: D0's caps 0.1 * 10% + 0.6 * -10%; D1: a and c flat; D2: D2's caps 500 / 1000 * 10% (b -> 20 is flat)
    assert index.returns.tolist() == pytest.approx([-0.05, 0.0, 0.05], abs=1e-15)


def test_a_suspended_member_earns_nothing_then_the_gap() -> None:
    volume = [1.0] * 12
    volume[6] = 0.0  # a does not trade on D2: its D1 return is 0, its D2 return 12.1 / 10 - 1
    index = index_returns(hand_panel(volume=volume), alignment="open")
    assert index.returns.tolist() == pytest.approx([0.3 * 0 + 0.6 * -0.1, 0.21 / 3], abs=1e-15)


def test_without_float_mv_the_index_is_weighted_by_total_mv_and_says_so(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="backtest.benchmark"):
        index = index_returns(hand_panel().drop(columns="float_mv"), alignment="open")
    assert index.source == "total_mv" and "no float_mv" in index.description
    assert "weighted by total_mv" in caplog.text
    # D1: total caps 1000 each: (10% + 0 - 10%) / 3; D2: a 1000, c 400 -> 1000 / 1400 * 10%
    assert index.returns.tolist() == pytest.approx([0.0, 0.1 / 1.4], abs=1e-15)


def test_without_any_cap_the_index_weights_the_members_equally_and_says_so(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="backtest.benchmark"):
        index = index_returns(hand_panel().drop(columns=["float_mv", "total_mv"]), alignment="open")
    assert index.source == "equal" and "equal-weight" in index.description
    assert "neither float_mv nor total_mv" in caplog.text
    assert index.returns.tolist() == pytest.approx([0.0, 0.05], abs=1e-15)  # D2: a and c, half each


def test_a_panel_without_open_can_still_give_its_close_index() -> None:
    with pytest.raises(DataContractError, match="needs a 'open' column(.|\n)*fix: alignment='close'"):
        index_returns(hand_panel().drop(columns="open"), alignment="open")


# --------------------------------------------------------------------------------------------------
# Alignment with the strategy's returns


def random_panel(n_days: int = 40, n_codes: int = 6, seed: int = 0) -> pd.DataFrame:
    """A market without limits hit or suspensions, members changing, equal float caps."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2024-01-01", periods=n_days, name="date")
    codes = [f"60000{j}.SH" for j in range(n_codes)]
    opens = 10 * np.exp(np.cumsum(rng.normal(0, 0.02, (n_days, n_codes)), axis=0))
    member = rng.random((n_days, n_codes)) < 0.8
    member[:, :2] = True
    index = pd.MultiIndex.from_product([dates, codes], names=["date", "code"])
    return pd.DataFrame(
        {
            "open": opens.ravel(),
            "close": opens.ravel(),
            "volume": 1e6,
            "float_mv": 1e9,
            "in_universe": member.ravel(),
        },
        index=index,
    )


def test_with_equal_caps_the_index_is_the_daily_costless_equal_weight_book_on_the_same_days() -> None:
    """The index's periods are the strategy's: with equal caps it is the equal-weight benchmark rebalanced
    every day without costs, return for return on the strategy's own dates."""
    panel = random_panel()
    scores = pd.Series(np.random.default_rng(1).normal(size=len(panel)), index=panel.index)
    spec = PortfolioSpec(top_k=1, rebalance_every=1, commission=0.0, stamp_duty=0.0, slippage=0.0)
    result = simulate(scores, panel, spec)
    index = benchmark_index(panel, result.returns.index)
    assert index.returns.index.equals(result.returns.index)
    np.testing.assert_allclose(index.returns.to_numpy(), result.benchmark_returns.to_numpy(), rtol=0, atol=1e-14)


def test_the_planned_return_days_are_the_days_simulate_books(tiny_panel) -> None:
    schedule = RollingSchedule(**SCHEDULE)
    calendar = pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique())
    period = schedule.test_period(calendar)
    spec = PortfolioSpec()
    test_rows = tiny_panel.index.get_level_values(0).to_series().between(*period).to_numpy()
    scores = pd.Series(0.0, index=tiny_panel.index[test_rows]).where(tiny_panel["in_universe"][test_rows])
    booked = simulate(scores, tiny_panel, spec).returns.index
    assert return_days(calendar, period, spec).equals(booked)


# --------------------------------------------------------------------------------------------------
# A supplied series

LEVELS = pd.DataFrame(
    {"open": [100.0, 102.0, 99.96, 104.958], "close": [101.0, 101.0, 111.1, 99.99]}, index=DAYS
)  # open to open: +2%, -2%, +5%; close to close: 0, +10%, -10%


def test_open_levels_give_the_strategys_own_open_to_open_periods() -> None:
    supplied = SuppliedIndex(Path("idx.csv"), LEVELS)
    returns = supplied_index_returns(supplied, DAYS, "open").returns
    assert returns.round(12).tolist() == [0.02, -0.02, 0.05]  # dated by the open they start at


def test_close_levels_against_open_fills_are_the_session_of_each_day() -> None:
    supplied = SuppliedIndex(Path("idx.csv"), LEVELS[["close"]])
    returns = supplied_index_returns(supplied, DAYS, "open").returns
    # the return dated d reads the level known at the open of d (the close of d - 1) and of d + 1 (the close of d)
    assert returns.iloc[1:].round(12).tolist() == [0.0, 0.1] and np.isnan(returns.iloc[0])
    closing = supplied_index_returns(supplied, DAYS, "close").returns  # a close fill: close(d) -> close(d + 1)
    assert closing.round(12).tolist() == [0.0, 0.1, -0.1]


def test_a_return_column_is_compounded_like_close_levels() -> None:
    daily = pd.DataFrame({"return": [0.0, 0.1, -0.1]}, index=DAYS[1:])  # close(d - 1) -> close(d) of D1..D3
    supplied = SuppliedIndex(Path("idx.csv"), daily)
    assert supplied_index_returns(supplied, DAYS, "open").returns.iloc[1:].round(12).tolist() == [0.0, 0.1]
    assert supplied_index_returns(supplied, DAYS, "close").returns.round(12).tolist() == [0.0, 0.1, -0.1]


def test_a_date_the_panel_does_not_trade_is_spanned_by_the_next_return() -> None:
    calendar = DAYS.delete(2)  # the panel has no D2: the return from D1 runs to D3
    supplied = SuppliedIndex(Path("idx.csv"), LEVELS[["open"]])
    returns = supplied_index_returns(supplied, calendar, "open").returns
    assert returns.round(12).tolist() == [0.02, round(104.958 / 102.0 - 1, 12)]


def test_the_column_at_the_fill_is_preferred() -> None:
    supplied = SuppliedIndex(Path("idx.csv"), LEVELS.assign(**{"return": 0.5}))
    assert supplied.column_for("open") == "open" and supplied.column_for("close") == "close"
    assert SuppliedIndex(Path("idx.csv"), LEVELS[["open"]]).column_for("close") == "open"


def test_a_supplied_series_is_taken_on_the_strategys_return_days(tiny_panel) -> None:
    calendar = pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique())
    close = pd.Series(np.linspace(3000.0, 3500.0, len(calendar)), index=calendar)
    supplied = SuppliedIndex(Path("csi300.csv"), close.to_frame("close"))
    days = calendar[200:260]
    index = benchmark_index(tiny_panel, days, supplied)
    assert index.source == "file" and index.returns.index.equals(days)
    expected = (close / close.shift(1) - 1).reindex(days)  # an open fill: the session of each day
    np.testing.assert_allclose(index.returns.to_numpy(), expected.to_numpy(), rtol=1e-14)


def test_a_series_that_does_not_cover_the_test_period_is_refused_before_any_training(tiny_panel) -> None:
    calendar = pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique())
    early = calendar[calendar < pd.Timestamp("2022-09-01")]
    supplied = SuppliedIndex(Path("csi300.csv"), pd.DataFrame({"close": 3000.0}, index=early))
    with pytest.raises(DataContractError) as err:
        plan_backtest(
            tiny_panel,
            label=LabelSpec(),
            schedule=RollingSchedule(**SCHEDULE),
            portfolio=PortfolioSpec(),
            benchmark=supplied,
        )
    message = str(err.value)
    assert "data.benchmark_path: csi300.csv" in message and "does not cover the backtest" in message
    assert f"its close values run {early[0]:%Y-%m-%d} .. {early[-1]:%Y-%m-%d}" in message
    # the first return (from the open of 2022-07-04) reads the close of the first decision day, 2022-07-01
    assert "\n  fix: give a close level on every trading day from 2022-07-01 to 2022-12-29" in message


def test_a_gap_inside_the_period_is_refused_too(tiny_panel) -> None:
    calendar = pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique())
    holey = pd.DataFrame({"close": 3000.0}, index=calendar.delete(400))
    with pytest.raises(DataContractError, match=rf"e\.g\. {calendar[400]:%Y-%m-%d}(.|\n)*fix:"):
        benchmark_index(tiny_panel, calendar[380:420], SuppliedIndex(Path("x.csv"), holey))


# --------------------------------------------------------------------------------------------------
# Reading the file


def write(tmp_path: Path, text: str, name: str = "index.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_tushare_index_daily_export_reads_as_it_is(tmp_path: Path) -> None:
    path = write(tmp_path, "ts_code,trade_date,close,open,pct_chg\n000300.SH,20240103,3300,3310,-0.3\n"
                 "000300.SH,20240102,3310,3320,0.1\n")  # fmt: skip
    table = read_index_series(path)
    assert list(table.columns) == ["open", "close"] and table.index.is_monotonic_increasing
    assert table.loc["2024-01-03", "close"] == 3300.0
    parquet = tmp_path / "index.parquet"
    table.reset_index().to_parquet(parquet)
    pd.testing.assert_frame_equal(SuppliedIndex.read(parquet).table, table)


@pytest.mark.parametrize(
    "text,words",
    [
        ("when,close\n2024-01-02,1\n", "needs a date (or trade_date) column"),
        ("date,price\n2024-01-02,1\n", "one of the columns open, close (index levels) or return"),
        ("date,close\n2024-13-45,1\n", "dates in column 'date' do not parse"),
        ("date,close\n2024-01-02,1\n2024-01-02,2\n", "1 dates appear more than once"),
        ("date,close\n2024-01-02,0\n", "not a positive index level"),
        ("date,return\n2024-01-02,1.5\n", "not a simple return in (-1, 1)"),
        ("date,close\n2024-01-02,x\n", "no numeric value in close"),
    ],
)
def test_a_malformed_series_is_refused_with_a_fix(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(DataContractError) as err:
        read_index_series(write(tmp_path, text))
    assert words in str(err.value) and "\n  fix: " in str(err.value)


def test_a_missing_file_or_a_folder_is_refused_with_a_fix(tmp_path: Path) -> None:
    for path, words in ((tmp_path / "nope.csv", "not found"), (tmp_path, "is a directory")):
        with pytest.raises(DataContractError, match=rf"benchmark file {words}(.|\n)*fix: data.benchmark_path="):
            read_index_series(path)
