"""The one tradability rule: hand-made panels for each clause, then labels, features and the portfolio
held to it end to end on a CSV panel without ``is_suspended``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.data import tradability
from backtest.data.loaders import read_panel
from backtest.data.panel import WideGrid
from backtest.data.tradability import (
    CHINEXT_20PCT_FROM,
    Tradability,
    board_limit_price,
    board_of,
    carry_forward,
    eligible,
    limit_fraction,
    limit_locked,
    limit_prices,
    suspended,
    trading,
)
from backtest.features.inputs import MarketData
from backtest.labels import LabelSpec, make_labels
from backtest.portfolio import PortfolioSpec, simulate


def panel_of(start: str, columns: dict[str, dict[str, list]]) -> pd.DataFrame:
    """A canonical panel from ``{column: {code: values per day}}``; a None value means no row that day."""
    codes = sorted(next(iter(columns.values())))
    n = len(next(iter(next(iter(columns.values())).values())))
    dates = pd.bdate_range(start, periods=n, name="date")
    rows = []
    for code in codes:
        for i in range(n):
            if columns["close"][code][i] is None:
                continue
            values = {name: per_code[code][i] for name, per_code in columns.items()}
            rows.append({"date": dates[i], "code": code, **values})
    return pd.DataFrame(rows).set_index(["date", "code"]).sort_index()


def cells(grid: WideGrid, matrix: np.ndarray) -> list[tuple[pd.Timestamp, str]]:
    """The sorted (date, code) keys of the True cells of a (date x code) matrix."""
    rows, cols = np.nonzero(matrix)
    return sorted(zip(grid.dates[rows], grid.codes[cols]))


def mask(panel: pd.DataFrame, matrix: np.ndarray) -> pd.DataFrame:
    """A (date x code) matrix as a labelled 0/1 frame, for readable assertions."""
    grid = WideGrid.of(panel)
    return pd.DataFrame(matrix.astype(int), index=grid.dates.strftime("%m-%d"), columns=grid.codes)


# --------------------------------------------------------------------------------------------------
# Suspended days


def test_the_suspension_flag_stops_trading_and_a_missing_flag_does_not() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "close": {"A": [10.0, 10.0, 10.0], "B": [10.0, 10.0, 10.0]},
            "is_suspended": {"A": [False, True, False], "B": [False, None, False]},
        },
    )
    grid = WideGrid.of(panel)
    assert mask(panel, trading(panel, grid)).to_dict("list") == {"A": [1, 0, 1], "B": [1, 1, 1]}


def test_zero_volume_without_the_flag_is_a_day_without_trading_and_nan_volume_is_no_evidence() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "close": {"A": [10.0, 10.0, 10.0, 10.0], "B": [10.0, 10.0, 10.0, 10.0]},
            "volume": {"A": [100.0, 0.0, 100.0, np.nan], "B": [100.0, 100.0, 0.0, 100.0]},
        },
    )
    grid = WideGrid.of(panel)
    assert mask(panel, trading(panel, grid)).to_dict("list") == {"A": [1, 0, 1, 1], "B": [1, 1, 0, 1]}
    assert mask(panel, suspended(panel, grid)).to_dict("list") == {"A": [0, 1, 0, 0], "B": [0, 0, 1, 0]}


def test_zero_volume_stops_trading_even_where_the_flag_says_trading() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "close": {"A": [10.0, 10.0, 10.0]},
            "volume": {"A": [100.0, 0.0, 100.0]},
            "is_suspended": {"A": [False, False, True]},
        },
    )
    # Day 2: the flag says trading, no share traded: not trading. Day 3: flagged, volume or not.
    assert mask(panel, trading(panel, WideGrid.of(panel))).to_dict("list") == {"A": [1, 0, 0]}


def test_no_row_and_no_usable_price_are_not_trading() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "close": {"A": [10.0, None, 10.0, 10.0], "B": [10.0, 10.0, 10.0, 10.0]},
            "open": {"A": [10.0, None, np.nan, 10.0], "B": [10.0, 10.0, 10.0, 10.0]},
            "is_suspended": {"A": [False, None, True, False], "B": [False] * 4},
        },
    )
    grid = WideGrid.of(panel)
    fill = grid.to_wide(panel["open"], dtype=np.float64)
    fill[3, 1] = 0.0  # a zero price is a broken bar, never a fill
    assert mask(panel, trading(panel, grid, fill)).to_dict("list") == {"A": [1, 0, 0, 1], "B": [1, 1, 1, 0]}
    # Without a price to trade at, only the row and the suspension count.
    assert mask(panel, trading(panel, grid)).to_dict("list") == {"A": [1, 0, 0, 1], "B": [1, 1, 1, 1]}


# --------------------------------------------------------------------------------------------------
# Boards and limit-locked opens


def test_boards_and_their_limits_around_the_chinext_reform() -> None:
    codes = ["600000.SH", "000001.SZ", "300750.SZ", "301001.SZ", "688001.SH"]
    assert board_of(codes).tolist() == ["main", "main", "chinext", "chinext", "star"]
    dates = pd.DatetimeIndex(["2019-12-31", CHINEXT_20PCT_FROM - pd.Timedelta(days=3), CHINEXT_20PCT_FROM])
    np.testing.assert_array_equal(
        limit_fraction(dates, codes),
        [[0.1, 0.1, 0.1, 0.1, 0.2], [0.1, 0.1, 0.1, 0.1, 0.2], [0.1, 0.1, 0.2, 0.2, 0.2]],
    )
    assert CHINEXT_20PCT_FROM == pd.Timestamp("2020-08-24")


def board_panel(start: str, day2_open: float) -> pd.DataFrame:
    """Three boards closing at 10.00 on day 1 and opening at ``day2_open`` on day 2 (no limit columns)."""
    codes = ["600000.SH", "300001.SZ", "688001.SH"]
    return panel_of(
        start,
        {
            "open": {c: [10.0, day2_open] for c in codes},
            "close": {c: [10.0, day2_open] for c in codes},
        },
    )


@pytest.mark.parametrize(
    ("start", "day2_open", "at_up", "at_down"),
    [
        # Main board 10%: limit-up 11.00, limit-down 9.00, half a tick counts.
        ("2024-01-08", 11.00, {"600000.SH"}, set()),
        ("2024-01-08", 10.996, {"600000.SH"}, set()),
        ("2024-01-08", 10.994, set(), set()),
        ("2024-01-08", 9.00, set(), {"600000.SH"}),
        # ChiNext after the reform and STAR: 20% (12.00 / 8.00).
        ("2024-01-08", 12.00, {"600000.SH", "300001.SZ", "688001.SH"}, set()),
        ("2024-01-08", 8.00, set(), {"600000.SH", "300001.SZ", "688001.SH"}),
        # ChiNext before 2020-08-24 (Thu 20 and Fri 21 Aug 2020): still 10%; STAR 20% already.
        ("2020-08-20", 11.00, {"600000.SH", "300001.SZ"}, set()),
        ("2020-08-20", 9.00, set(), {"600000.SH", "300001.SZ"}),
        # Across the reform: day 1 is Fri 21 Aug, day 2 Mon 24 Aug: ChiNext is at 20% on day 2.
        ("2020-08-21", 11.00, {"600000.SH"}, set()),
    ],
)
def test_limit_locked_opens_on_each_board(start: str, day2_open: float, at_up: set, at_down: set) -> None:
    panel = board_panel(start, day2_open)
    grid = WideGrid.of(panel)
    up, down = limit_locked(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
    assert not up[0].any() and not down[0].any()  # no previous close: never at a limit
    assert set(grid.codes[up[1]]) == at_up
    assert set(grid.codes[down[1]]) == at_down


def test_board_limit_prices_round_half_a_fen_up_exactly() -> None:
    # 1.15 * 1.1 = 1.265 and 1.15 * 0.9 = 1.035 exactly: the limits are 1.27 and 1.04 (float rounding of
    # 1.2649999... would say 1.26 and lock an open at 1.26 that can in fact be bought).
    panel = panel_of("2024-01-08", {"open": {"A": [1.15, 1.26, 1.27]}, "close": {"A": [1.15, 1.15, 1.27]}})
    grid = WideGrid.of(panel)
    up, down = limit_prices(panel, grid)
    np.testing.assert_allclose(up[1:, 0], [1.27, 1.27])
    np.testing.assert_allclose(down[1:, 0], [1.04, 1.04])
    at_up, _ = limit_locked(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
    assert at_up[:, 0].tolist() == [False, False, True]  # 1.26 can be bought, 1.27 cannot
    np.testing.assert_allclose(board_limit_price(np.array([10.05, 2.05]), np.array([0.2, 0.1]), -1), [8.04, 1.85])


def test_limit_columns_win_per_cell_over_the_board_rule() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "open": {"600000.SH": [10.0, 10.5, 11.0, 11.0]},
            "close": {"600000.SH": [10.0, 10.0, 10.0, 11.0]},
            # A 5% (ST) limit on day 2; day 3 has no limit column value: the board rule fills in.
            "up_limit": {"600000.SH": [10.5, 10.5, np.nan, 13.0]},
            "down_limit": {"600000.SH": [9.5, 9.5, np.nan, 9.0]},
        },
    )
    grid = WideGrid.of(panel)
    up, down = limit_prices(panel, grid)
    np.testing.assert_allclose(up[:, 0], [10.5, 10.5, 11.0, 13.0])
    np.testing.assert_allclose(down[:, 0], [9.5, 9.5, 9.0, 9.0])
    at_up, _ = limit_locked(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
    assert at_up[:, 0].tolist() == [False, True, True, False]


def test_the_limit_reference_is_the_last_close_ex_rights() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "open": {"A": [20.0, 20.0, 10.9, 11.0]},
            "close": {"A": [20.0, 20.0, 10.0, 11.0]},
            "adj_factor": {"A": [1.0, 1.0, 2.0, 2.0]},  # 2-for-1 split on day 3: the reference is 20 / 2
        },
    )
    up, down = limit_prices(panel, WideGrid.of(panel))
    np.testing.assert_allclose(up[1:, 0], [22.0, 11.0, 11.0])
    np.testing.assert_allclose(down[1:, 0], [18.0, 9.0, 9.0])


def test_can_buy_and_can_sell_follow_the_limits() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "open": {"A": [10.0, 11.0, 9.9], "B": [10.0, 9.0, 9.0], "C": [10.0, 10.0, 10.0]},
            "close": {"A": [10.0, 11.0, 11.0], "B": [10.0, 10.0, 9.0], "C": [10.0, 10.0, 10.0]},
            "volume": {"A": [1.0, 1.0, 1.0], "B": [1.0, 1.0, 1.0], "C": [1.0, 0.0, 1.0]},
        },
    )
    grid = WideGrid.of(panel)
    rule = Tradability.of(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
    # Day 2: A opens at limit-up (no buy, can sell), B at limit-down (buy, no sell), C does not trade.
    assert rule.can_buy[1].tolist() == [False, True, False]
    assert rule.can_sell[1].tolist() == [True, False, False]
    # Day 3: A opens at 9.90 = 11.00 * 0.9 (limit-down); B at 9.00 is 10% below 10.00 again.
    assert rule.can_buy[2].tolist() == [True, True, True]
    assert rule.can_sell[2].tolist() == [False, False, True]


# --------------------------------------------------------------------------------------------------
# Point-in-time eligibility


def test_only_members_of_the_day_are_eligible() -> None:
    panel = panel_of(
        "2024-01-08",
        {
            "close": {"A": [10.0, 10.0, 10.0], "B": [10.0, None, 10.0]},
            "in_universe": {"A": [True, False, None], "B": [True, None, True]},
        },
    )
    grid = WideGrid.of(panel)
    assert mask(panel, eligible(panel, grid)).to_dict("list") == {"A": [1, 0, 0], "B": [1, 0, 1]}
    without = panel.drop(columns=["in_universe"])
    assert mask(without, eligible(without, grid)).to_dict("list") == {"A": [1, 1, 1], "B": [1, 0, 1]}


def test_carry_forward_keeps_the_last_finite_value() -> None:
    wide = np.array([[np.nan, 1.0], [2.0, np.nan], [np.inf, np.nan], [3.0, 4.0]])
    np.testing.assert_array_equal(carry_forward(wide), [[np.nan, 1.0], [2.0, 1.0], [2.0, 1.0], [3.0, 4.0]])


# --------------------------------------------------------------------------------------------------
# Every consumer uses the same rule


def test_features_labels_and_portfolio_share_the_rule() -> None:
    # B: flagged False but no volume on day 3; C: flagged on day 4 with volume (a vendor's flag).
    panel = panel_of(
        "2024-01-08",
        {
            "open": {c: [10.0 + i * 0.1 for i in range(8)] for c in "ABC"},
            "close": {c: [10.0 + i * 0.1 for i in range(8)] for c in "ABC"},
            "volume": {"A": [1e4] * 8, "B": [1e4, 1e4, 1e4, 0.0] + [1e4] * 4, "C": [1e4] * 8},
            "is_suspended": {"A": [False] * 8, "B": [False] * 8, "C": [False] * 4 + [True] + [False] * 3},
        },
    )
    grid = WideGrid.of(panel)
    rule = trading(panel, grid)
    assert (~rule).sum() == 2
    np.testing.assert_array_equal(MarketData(panel, grid).traded, rule)
    labels = make_labels(panel, LabelSpec(processing="raw", exit_offset=3))
    entry_exit = np.zeros(grid.shape, dtype=bool)
    entry_exit[:-3] = rule[1:-2] & rule[3:]
    assert sorted(labels.index) == cells(grid, entry_exit)
    # B ranked first on day 2 cannot be bought at the open of day 3 (A is); C ranked first on day 3
    # cannot be bought at the open of day 4 (B is).
    scores = pd.Series(
        [2.0, 3.0, 1.0, 1.0, 2.0, 3.0],
        index=pd.MultiIndex.from_product([grid.dates[[2, 3]], list("ABC")], names=["date", "code"]),
    )
    result = simulate(scores, panel, PortfolioSpec(top_k=1, rebalance_every=1))
    assert result.blocked[["date", "code", "reason"]].values.tolist() == [
        [grid.dates[3], "B", "suspended"],
        [grid.dates[4], "C", "suspended"],
    ]
    buys = result.trades[result.trades["side"] == "buy"]
    assert buys[["date", "code"]].values.tolist() == [[grid.dates[3], "A"], [grid.dates[4], "B"]]


# --------------------------------------------------------------------------------------------------
# End to end: a user's CSV with zero-volume days and no is_suspended column

N_DAYS = 120
CODES = ["000001.SZ", "300001.SZ", "600001.SH", "600002.SH", "600003.SH", "688001.SH"]
#: Days (0-based rows) on which a stock has a vendor-style zero-volume bar (prices carried).
ZERO_VOLUME = {
    "600002.SH": [6, 11, 12, 40, 41, 42, 77, 101],
    "300001.SZ": [16, 26, 55, 56, 88],
    "688001.SH": [31, 64, 65, 66, 67, 110],
}


def write_csv_panel(path: Path) -> pd.DataFrame:
    """A ~120-day CSV panel (date, code, open, high, low, close, volume), zero-volume days as vendors
    ship them: the bar carries the last close, volume 0, no suspension flag."""
    rng = np.random.default_rng(11)
    dates = pd.bdate_range("2023-03-01", periods=N_DAYS)
    rows = []
    for code in CODES:
        close = 10.0
        for i, date in enumerate(dates):
            if i in ZERO_VOLUME.get(code, ()):
                rows.append((date.strftime("%Y-%m-%d"), code, close, close, close, close, 0))
                continue
            open_ = round(close * np.exp(rng.normal(0, 0.01)), 2)
            new_close = round(close * np.exp(rng.normal(0, 0.02)), 2)
            high, low = max(open_, new_close) + 0.05, min(open_, new_close) - 0.05
            rows.append((date.strftime("%Y-%m-%d"), code, open_, high, low, new_close, int(rng.integers(1e5, 1e6))))
            close = new_close
    frame = pd.DataFrame(rows, columns=["date", "code", "open", "high", "low", "close", "volume"])
    frame = frame.sort_values(["date", "code"], ignore_index=True)
    frame.to_csv(path, index=False)
    return frame


def scores_favouring_zero_volume(panel: pd.DataFrame) -> pd.Series:
    """Small random scores, except that a stock with a zero-volume day tomorrow ranks first today."""
    rng = np.random.default_rng(5)
    grid = WideGrid.of(panel)
    volume = grid.to_wide(panel["volume"], dtype=np.float64)
    score = rng.normal(0.0, 0.1, grid.shape)
    score[:-1][volume[1:] == 0] += 10.0
    return pd.Series(grid.to_long(score), index=panel.index, name="score")


def opened_positions(result, grid: WideGrid) -> list[tuple[int, int]]:
    """(row, col) of every position opened at an open: weight 0 the day before, > 0 that day."""
    weights = result.positions.pivot(index="date", columns="code", values="weight")
    weights = weights.reindex(index=grid.dates, columns=grid.codes).fillna(0.0).to_numpy()
    before = np.vstack([np.zeros((1, grid.shape[1])), weights[:-1]])
    held_days = np.isin(grid.dates, result.returns.index)
    rows, cols = np.nonzero((weights > 0) & (before == 0) & held_days[:, None])
    return list(zip(rows.tolist(), cols.tolist()))


def test_csv_panel_without_the_flag_never_buys_or_labels_a_zero_volume_day(tmp_path: Path) -> None:
    path = tmp_path / "panel.csv"
    write_csv_panel(path)
    panel = read_panel(path)  # the data=csv loader (conf/data/csv.yaml)
    assert "is_suspended" not in panel.columns
    grid = WideGrid.of(panel)
    rule = tradability.trading(panel, grid, grid.to_wide(panel["open"], dtype=np.float64))
    zero_days = {(r, grid.codes.get_loc(c)) for c, days in ZERO_VOLUME.items() for r in days}
    assert set(zip(*np.nonzero(~rule))) == zero_days

    scores = scores_favouring_zero_volume(panel)
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1))
    opened = opened_positions(result, grid)
    assert len(opened) > 50
    assert [(grid.dates[r].date(), grid.codes[c]) for r, c in opened if not rule[r, c]] == []
    buys = result.trades[result.trades["side"] == "buy"]
    buy_cells = zip(grid.dates.get_indexer(buys["date"]), grid.codes.get_indexer(buys["code"]))
    assert all(rule[r, c] for r, c in buy_cells)
    # The test has teeth: every zero-volume day was wanted (ranked first the day before) and blocked.
    blocked = set(zip(grid.dates.get_indexer(result.blocked["date"]), grid.codes.get_indexer(result.blocked["code"])))
    assert set(result.blocked["reason"]) == {"suspended"}
    assert blocked == zero_days

    labels = make_labels(panel, LabelSpec(processing="raw"))
    expected = np.zeros(grid.shape, dtype=bool)
    expected[:-5] = rule[1:-4] & rule[5:]
    assert sorted(labels.index) == cells(grid, expected)
    assert labels.excluded["not_trading_at_entry"] == int((~rule[1:-4]).sum())
