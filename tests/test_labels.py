"""Labels: exact hand-computed returns, label_end, processing edges and the exclusion rule."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from backtest.data.calendar import exchange_calendar
from backtest.errors import ConfigError, DataContractError, InsufficientHistoryError
from backtest.labels import (
    Labels,
    LabelSpec,
    cross_sectional_target,
    forward_horizons,
    forward_returns,
    make_labels,
    newey_west_lags,
)

DATES = pd.bdate_range("2024-01-01", periods=8, name="date")  # Mon 1 Jan .. Wed 10 Jan


def make_panel(opens: dict[str, list[float]], dates: pd.DatetimeIndex = DATES, **columns: dict) -> pd.DataFrame:
    """A canonical panel from per-stock open prices (NaN = no row that day); close = open.

    ``columns`` maps a column name to {code: list of values} aligned with ``dates``.
    """
    rows = []
    for code, prices in opens.items():
        for i, price in enumerate(prices):
            if price is None:
                continue
            row = {"date": dates[i], "code": code, "open": price, "close": price}
            for name, per_code in columns.items():
                row[name] = per_code[code][i]
            rows.append(row)
    return pd.DataFrame(rows).set_index(["date", "code"]).sort_index()


# ----------------------------------------------------------------------------------------------------
# Returns and label_end


def test_forward_return_is_open_t_plus_1_to_open_t_plus_5() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [20, 20, 22, 24, 20, 18, 30, 33]})
    labels = make_labels(panel, LabelSpec(processing="raw"))

    # 8 days, exit at t+5: only t = 0, 1, 2 have a complete window.
    assert list(labels.index.get_level_values("date").unique()) == list(DATES[:3])
    expected = {
        (DATES[0], "A"): 15 / 11 - 1,  # open(t+1) = 11, open(t+5) = 15
        (DATES[1], "A"): 16 / 12 - 1,
        (DATES[2], "A"): 17 / 13 - 1,
        (DATES[0], "B"): 18 / 20 - 1,
        (DATES[1], "B"): 30 / 22 - 1,
        (DATES[2], "B"): 33 / 24 - 1,
    }
    for key, value in expected.items():
        assert labels.fwd_return[key] == pytest.approx(value, rel=1e-15)
    assert (labels.target == labels.fwd_return).all()
    assert list(labels.label_end.xs("A", level="code")) == list(DATES[5:8])
    assert labels.horizon_days == 5
    assert dict(labels.excluded) == {"end_of_data": 10, "not_trading_at_entry": 0, "not_trading_at_exit": 0}


def test_label_end_counts_trading_days_not_calendar_days() -> None:
    # Around the 2024 National Day closure: 27 Sep, 30 Sep, then 8 Oct onwards.
    dates = exchange_calendar("2024-09-26", "2024-10-14")
    assert [d.strftime("%m-%d") for d in dates] == [
        "09-26",
        "09-27",
        "09-30",
        "10-08",
        "10-09",
        "10-10",
        "10-11",
        "10-14",
    ]
    panel = make_panel({"A": [1.0, 2.0, 4.0, 5.0, 6.0, 8.0, 9.0, 10.0]}, dates=dates)
    labels = make_labels(panel, LabelSpec(processing="raw"))

    assert labels.label_end[(dates[0], "A")] == pd.Timestamp("2024-10-10")  # 5 trading days, 14 calendar
    assert labels.label_end[(dates[2], "A")] == pd.Timestamp("2024-10-14")
    assert labels.fwd_return[(dates[0], "A")] == pytest.approx(8.0 / 2.0 - 1)  # open 27 Sep -> open 10 Oct


def test_custom_offsets_and_price_field() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]})
    panel["close"] = panel["open"] * 2
    panel.loc[(DATES[3], "A"), "close"] = 39.0
    labels = make_labels(panel, LabelSpec(price_field="close", entry_offset=1, exit_offset=3, processing="raw"))

    assert labels.fwd_return[(DATES[0], "A")] == pytest.approx(39.0 / 22.0 - 1)  # close(t+1) -> close(t+3)
    assert labels.label_end[(DATES[0], "A")] == DATES[3]
    assert len(labels) == 5 and labels.horizon_days == 3


def test_adjusted_prices_remove_a_split() -> None:
    # A 2-for-1 split on day 3: the raw open halves, the backward factor doubles.
    panel = make_panel(
        {"A": [10, 10, 10, 5, 5, 5.5, 5.5, 5.5]},
        adj_factor={"A": [1, 1, 1, 2, 2, 2, 2, 2]},
    )
    labels = make_labels(panel, LabelSpec(processing="raw"))
    assert labels.fwd_return[(DATES[0], "A")] == pytest.approx(11.0 / 10.0 - 1)  # not 5.5 / 10 - 1


def test_open_missing_falls_back_to_close_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]}).drop(columns="open")
    with caplog.at_level(logging.WARNING, logger="backtest.labels"):
        labels = make_labels(panel, LabelSpec(processing="raw"))
    assert labels.spec.price_field == "close"
    assert labels.fwd_return[(DATES[0], "A")] == pytest.approx(15 / 11 - 1)
    assert "no 'open' column" in caplog.text
    assert "trades at the close" in caplog.text and "at the open" not in caplog.text


def test_missing_price_field_is_refused() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]})
    with pytest.raises(DataContractError, match=r"'high' is not a column.*label.price_field"):
        make_labels(panel, LabelSpec(price_field="high"))


# ----------------------------------------------------------------------------------------------------
# Cross-sectional processing


def test_bins_of_ten_stocks_are_zero_to_nine() -> None:
    returns = np.array([[0.03, -0.05, 0.10, 0.00, 0.07, -0.01, 0.02, 0.04, -0.03, 0.06]])
    # Sorted: -0.05 -0.03 -0.01 0.00 0.02 0.03 0.04 0.06 0.07 0.10 -> bins 0..9 in that order.
    assert cross_sectional_target(returns, "bins").tolist() == [[5, 0, 9, 3, 8, 2, 4, 6, 1, 7]]


def test_bins_of_twenty_stocks_hold_two_each_and_edges_are_exact() -> None:
    returns = np.arange(20, dtype=float)[None, :] / 100  # rank r = i + 1, pct = i / 19
    bins = cross_sectional_target(returns, "bins")[0]
    # floor(10 i / 19): i = 0,1 -> 0; 2,3 -> 1 (20/19); ...; 17 -> 8 (170/19 = 8.9); 18, 19 -> 9.
    assert bins.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9]


def test_bins_put_a_percentile_on_an_edge_into_the_upper_bin() -> None:
    # n = 11: pct = i / 10 exactly on every edge; bin b = i, the best (pct = 1) joins bin 9.
    returns = np.linspace(-0.05, 0.05, 11)[None, :]
    assert cross_sectional_target(returns, "bins")[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]


def test_bins_with_fewer_stocks_than_bins_spread_over_the_range() -> None:
    # n = 3: pct 0, 0.5, 1 -> bins 0, 5, 9; n = 2: 0 and 9; n = 1: the middle, 5.
    assert cross_sectional_target(np.array([[0.2, -0.1, 0.0]]), "bins").tolist() == [[9, 0, 5]]
    assert cross_sectional_target(np.array([[0.2, -0.1]]), "bins").tolist() == [[9, 0]]
    assert cross_sectional_target(np.array([[0.2]]), "bins").tolist() == [[5]]
    assert cross_sectional_target(np.array([[0.2]]), "rank").tolist() == [[0.5]]
    assert cross_sectional_target(np.array([[0.2]]), "three_class").tolist() == [[1]]


def test_ties_share_a_bin_whatever_the_order_of_the_codes() -> None:
    # Four stocks tie at 0.01: ranks 3..6 average to 4.5, pct = 3.5 / 9 = 0.389 -> bin 3 for all four.
    returns = np.array([[0.05, -0.02, 0.01, 0.01, 0.01, 0.01, 0.30, -0.08, 0.09, 0.07]])
    bins = cross_sectional_target(returns, "bins")[0]
    assert bins.tolist() == [6, 1, 3, 3, 3, 3, 9, 0, 8, 7]
    order = np.array([9, 3, 0, 7, 5, 1, 8, 2, 6, 4])
    assert (cross_sectional_target(returns[:, order], "bins")[0] == bins[order]).all()


def test_rank_is_the_percentile_from_zero_to_one() -> None:
    returns = np.array([[0.02, -0.01, np.nan, 0.05, 0.02]])
    rank = cross_sectional_target(returns, "rank")[0]
    # Among 4 labelled: -0.01 -> r1, 0.02 x2 -> r2.5, 0.05 -> r4; pct = (r - 1) / 3.
    assert rank[[0, 1, 3, 4]].tolist() == [0.5, 0.0, 1.0, 0.5]
    assert np.isnan(rank[2])


def test_three_class_is_30_40_30_with_symmetric_edges() -> None:
    ten = np.arange(10, dtype=float)[None, :]
    assert cross_sectional_target(ten, "three_class")[0].tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    # n = 11: pct = i / 10; pct = 0.3 and pct = 0.7 sit on the edges and belong to the middle class.
    eleven = np.arange(11, dtype=float)[None, :]
    assert cross_sectional_target(eleven, "three_class")[0].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    # Reversing the order swaps the outer classes exactly.
    reversed_classes = cross_sectional_target(-eleven, "three_class")[0]
    assert reversed_classes.tolist() == [2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0]
    # n = 300: 90 / 120 / 90.
    classes = cross_sectional_target(np.arange(300, dtype=float)[None, :], "three_class")[0]
    assert np.bincount(classes).tolist() == [90, 120, 90]


def test_bins_of_three_hundred_stocks_hold_thirty_each() -> None:
    rng = np.random.default_rng(0)
    bins = cross_sectional_target(rng.normal(size=(3, 300)), "bins")
    for day in bins:
        assert np.bincount(day).tolist() == [30] * 10


def test_missing_samples_get_minus_one_and_do_not_count() -> None:
    returns = np.array([[np.nan, 0.01, np.nan, 0.03], [np.nan, np.nan, np.nan, np.nan]])
    assert cross_sectional_target(returns, "bins").tolist() == [[-1, 0, -1, 9], [-1, -1, -1, -1]]
    assert cross_sectional_target(returns, "three_class").tolist() == [[-1, 0, -1, 2], [-1, -1, -1, -1]]


def test_processing_is_per_day_within_the_universe() -> None:
    # C is not a member on day 0: it is not labelled and does not move A and B's ranks.
    panel = make_panel(
        {
            "A": [10, 10, 10, 10, 10, 11, 11, 11],
            "B": [10, 10, 10, 10, 10, 12, 12, 12],
            "C": [10, 10, 10, 10, 10, 30, 30, 30],
        },
        in_universe={"A": [True] * 8, "B": [True] * 8, "C": [False, True, True, True, True, True, True, True]},
    )
    labels = make_labels(panel, LabelSpec(processing="rank"))
    day0 = labels.target.xs(DATES[0], level="date")
    assert day0.to_dict() == {"A": 0.0, "B": 1.0}
    day1 = labels.target.xs(DATES[1], level="date")
    assert day1.to_dict() == {"A": 0.0, "B": 0.5, "C": 1.0}
    assert labels.target.dtype == np.float64


def test_bins_target_is_int64() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [10, 11, 12, 13, 14, 16, 17, 18]})
    labels = make_labels(panel)
    assert labels.spec == LabelSpec()
    assert labels.target.dtype == np.int64
    assert labels.target.xs(DATES[0], level="date").to_dict() == {"A": 0, "B": 9}


# ----------------------------------------------------------------------------------------------------
# Exclusion


def test_suspension_at_entry_or_exit_excludes_but_in_between_does_not() -> None:
    nan = np.nan
    panel = make_panel(
        {
            "A": [10, 11, 12, 13, 14, 15, 16, 17],  # always trading
            "B": [10, 11, 12, nan, 14, 15, 16, 17],  # suspended on day 3 (NaN prices)
            "C": [10, 11, 12, 13, 14, 15, 15, 17],  # suspended on day 6 with a carried price
        },
        is_suspended={
            "A": [False] * 8,
            "B": [False, False, False, True, False, False, False, False],
            "C": [False, False, False, False, False, False, True, False],
        },
    )
    labels = make_labels(panel, LabelSpec(processing="raw"))
    kept = set(labels.index)
    # B, day 3 suspended: t=2 enters on day 3 (out); t=0, t=1 hold through it (in).
    assert {(DATES[0], "B"), (DATES[1], "B")} <= kept and (DATES[2], "B") not in kept
    # C, day 6 suspended: t=1 exits on day 6 (out); t=0 and t=2 are fine.
    assert {(DATES[0], "C"), (DATES[2], "C")} <= kept and (DATES[1], "C") not in kept
    assert labels.fwd_return[(DATES[0], "B")] == pytest.approx(15 / 11 - 1)
    assert dict(labels.excluded) == {"end_of_data": 15, "not_trading_at_entry": 1, "not_trading_at_exit": 1}


def test_zero_volume_counts_as_a_suspension() -> None:
    panel = make_panel(
        {"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [10, 11, 12, 13, 14, 15, 16, 17]},
        volume={"A": [100.0] * 8, "B": [100.0, 0.0, 100.0, 100.0, 100.0, 100.0, 100.0, np.nan]},
    )
    labels = make_labels(panel, LabelSpec(processing="raw"))
    # B t=0 enters on a zero-volume day: out. NaN volume on day 7 is no evidence: t=2 is kept.
    assert (DATES[0], "B") not in labels.index
    assert (DATES[2], "B") in labels.index
    assert labels.excluded["not_trading_at_entry"] == 1


def test_zero_volume_stops_trading_even_where_the_flag_says_trading() -> None:
    panel = make_panel(
        {"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [10, 11, 12, 13, 14, 15, 16, 17]},
        volume={"A": [100.0] * 8, "B": [100.0] * 5 + [0.0, 100.0, 100.0]},
        is_suspended={"A": [False] * 8, "B": [False] * 8},
    )
    labels = make_labels(panel, LabelSpec(processing="raw"))
    # B trades nothing on day 5 although the flag says it trades: t=0, which exits there, loses its label.
    assert (DATES[0], "B") not in labels.index
    assert (DATES[1], "B") in labels.index and (DATES[2], "B") in labels.index
    assert dict(labels.excluded) == {"end_of_data": 10, "not_trading_at_entry": 0, "not_trading_at_exit": 1}


def test_delisted_before_exit_and_listed_after_entry_are_excluded() -> None:
    panel = make_panel(
        {
            "A": [10, 11, 12, 13, 14, 15, 16, 17],
            "D": [10, 11, 12, 13, 14, None, None, None],  # delisted after day 4
            "N": [None, None, 10, 11, 12, 13, 14, 15],  # listed on day 2
        }
    )
    labels = make_labels(panel, LabelSpec(processing="raw"), max_excluded_fraction=0.5)
    assert not [key for key in labels.index if key[1] == "D"]  # exits on days 5..7 never happen
    assert [key[0] for key in labels.index if key[1] == "N"] == [DATES[2]]  # N's first day has a window
    # end_of_data: A t=3..7, D t=3..4, N t=3..7; D's t=0..2 would exit after its last day.
    assert dict(labels.excluded) == {"end_of_data": 12, "not_trading_at_entry": 0, "not_trading_at_exit": 3}


def test_too_many_exclusions_fail_loudly() -> None:
    nan = np.nan
    suspended = [False, True, True, False, True, True, True, False]
    panel = make_panel({"A": [10, nan, nan, 13, nan, nan, nan, 17]}, is_suspended={"A": suspended})
    # t = 0, 1 enter on suspended days; t = 2 enters on day 3 and exits on day 7.
    with pytest.raises(
        DataContractError, match=r"drop 2 of 3 eligible samples \(66.7%.*bound 35%.*entry: 2, exit: 0.*2024-01-01, A"
    ):
        make_labels(panel)
    labels = make_labels(panel, LabelSpec(processing="raw"), max_excluded_fraction=0.9)
    assert list(labels.index) == [(DATES[2], "A")]  # nothing filled
    assert labels.fwd_return.iloc[0] == pytest.approx(17 / 13 - 1)

    one_lost = make_panel(
        {"A": [10, 11, nan, 13, 14, 15, 16, 17], "B": [10, 11, 12, 13, 14, 15, 16, 17]},
        is_suspended={"A": [False, False, True] + [False] * 5, "B": [False] * 8},
    )
    assert len(make_labels(one_lost, max_excluded_fraction=0.2)) == 5  # 1 of 6 = 16.7% <= 20%
    with pytest.raises(DataContractError, match="more than the bound 10%"):
        make_labels(one_lost, max_excluded_fraction=0.1)
    with pytest.raises(ConfigError, match="max_excluded_fraction"):
        make_labels(one_lost, max_excluded_fraction=1.5)


def test_too_little_history_names_what_is_needed() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14]}, dates=DATES[:5])
    with pytest.raises(InsufficientHistoryError, match="at least 6 trading days; the panel has 5"):
        make_labels(panel)


def test_an_empty_universe_is_refused() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]}, in_universe={"A": [False] * 8})
    with pytest.raises(DataContractError, match="universe is empty"):
        make_labels(panel)


def test_an_unsorted_panel_is_refused() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]}).iloc[::-1]
    with pytest.raises(DataContractError, match="not sorted"):
        make_labels(panel)


# ----------------------------------------------------------------------------------------------------
# Spec and container


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"entry_offset": 0}, "entry_offset must be >= 1"),
        ({"entry_offset": 3, "exit_offset": 3}, "exit_offset must be greater"),
        ({"processing": "quintiles"}, "processing must be one of raw, rank, bins, three_class"),
        ({"n_bins": 1}, "n_bins must be >= 2"),
        ({"exit_offset": 5.0}, "exit_offset must be an integer"),
        ({"entry_offset": True}, "entry_offset must be an integer"),
        ({"price_field": ""}, "price_field must be a panel price column"),
    ],
)
def test_label_spec_refuses_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LabelSpec(**kwargs)


def test_labels_refuse_misaligned_series() -> None:
    index = pd.MultiIndex.from_product([DATES[:2], ["A"]], names=["date", "code"])
    series = pd.Series([0.1, 0.2], index=index)
    with pytest.raises(DataContractError, match="must share the index"):
        Labels(series, pd.Series(DATES[5:7], index=index), series.iloc[::-1], LabelSpec())


def _naive_forward_returns(panel: pd.DataFrame, spec: LabelSpec) -> pd.Series:
    """Reference: a per-stock loop over the calendar, written independently of make_labels."""
    calendar = list(panel.index.get_level_values("date").unique().sort_values())
    out = {}
    for code, rows in panel.groupby(level="code"):
        rows = rows.droplevel("code")
        for i, day in enumerate(calendar):
            if day not in rows.index or i + spec.exit_offset >= len(calendar):
                continue
            if "in_universe" in rows and not rows.at[day, "in_universe"]:
                continue
            entry, exit_ = calendar[i + spec.entry_offset], calendar[i + spec.exit_offset]
            if entry not in rows.index or exit_ not in rows.index:
                continue
            if rows.at[entry, "is_suspended"] or rows.at[exit_, "is_suspended"]:
                continue
            buy = rows.at[entry, spec.price_field] * rows.at[entry, "adj_factor"]
            sell = rows.at[exit_, spec.price_field] * rows.at[exit_, "adj_factor"]
            out[(day, code)] = sell / buy - 1
    return pd.Series(out).sort_index()


def test_matches_a_naive_per_stock_loop_on_a_messy_random_panel() -> None:
    rng = np.random.default_rng(3)
    dates = pd.bdate_range("2024-03-01", periods=30, name="date")
    codes = [f"{i:06d}.SZ" for i in range(12)]
    frame = pd.DataFrame(
        [(d, c) for d in dates for c in codes if rng.random() > 0.1], columns=["date", "code"]
    ).set_index(["date", "code"])
    n = len(frame)
    frame["open"] = np.exp(rng.normal(2, 0.3, n))
    frame["close"] = frame["open"] * np.exp(rng.normal(0, 0.02, n))
    frame["adj_factor"] = rng.choice([1.0, 1.5, 2.0], n)
    frame["is_suspended"] = rng.random(n) < 0.05
    frame.loc[frame["is_suspended"], ["open", "close"]] = np.nan
    frame["in_universe"] = rng.random(n) < 0.8
    spec = LabelSpec(entry_offset=2, exit_offset=6, processing="raw")

    labels = make_labels(frame, spec)
    expected = _naive_forward_returns(frame, spec)
    assert len(expected) > 150
    assert list(labels.index) == list(expected.index)
    np.testing.assert_allclose(labels.fwd_return.to_numpy(), expected.to_numpy(), rtol=1e-12)


def test_on_the_tiny_synthetic_market(tiny_panel: pd.DataFrame) -> None:
    labels = make_labels(tiny_panel)
    calendar = tiny_panel.index.get_level_values("date").unique()
    sample_pos = calendar.get_indexer(labels.index.get_level_values("date"))
    end_pos = calendar.get_indexer(pd.DatetimeIndex(labels.label_end))
    assert (end_pos - sample_pos == 5).all()
    # Only members are labelled; every labelled day's bins use the whole 0..9 range.
    assert tiny_panel.loc[labels.index, "in_universe"].all()
    per_day = labels.target.groupby(level="date").agg(["min", "max", "size"])
    assert (per_day["min"] == 0).all() and (per_day["max"] == 9).all()
    assert per_day["size"].min() >= 30
    assert sum(labels.excluded.values()) > 0 and labels.excluded["end_of_data"] > 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("default", LabelSpec(processing="bins")),
        ("three_class", LabelSpec(processing="three_class", n_bins=3)),  # 3 levels: LambdaRank gets 3 gains
        ("raw", LabelSpec(processing="raw")),
        ("rank", LabelSpec(processing="rank")),
    ],
)
def test_label_configs_instantiate_the_spec(name: str, expected: LabelSpec, compose_config) -> None:
    from hydra.utils import instantiate

    cfg = compose_config(config_name=f"label/{name}")
    assert instantiate(cfg.label, _convert_="all") == expected


def test_labels_survive_pickling_for_worker_processes() -> None:
    import pickle

    labels = make_labels(make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [9, 8, 7, 6, 5, 4, 3, 2]}))
    copy = pickle.loads(pickle.dumps(labels))
    assert copy.spec == labels.spec and dict(copy.excluded) == dict(labels.excluded)
    pd.testing.assert_series_equal(copy.target, labels.target)
    pd.testing.assert_series_equal(copy.label_end, labels.label_end)


# ----------------------------------------------------------------------------------------------------
# Forward returns of several horizons, by the label's rule


def test_forward_returns_of_each_horizon_are_the_label_with_that_exit() -> None:
    nan = float("nan")
    panel = make_panel(
        {"A": [10, 11, 12, 13, 14, 15, 16, 17], "B": [20, 20, 22, nan, 20, 18, 30, 33]},
        is_suspended={"A": [False] * 8, "B": [False, False, False, True, False, False, False, False]},
    )
    forward = forward_returns(panel, LabelSpec(), (2, 5))
    assert list(forward.columns) == ["fwd_ret_2d", "fwd_ret_5d"]
    assert forward.loc[(DATES[0], "A"), "fwd_ret_2d"] == 12 / 11 - 1  # open(t+1) -> open(t+2): one day held
    assert forward.loc[(DATES[5], "A"), "fwd_ret_2d"] == 17 / 16 - 1  # the last day with a window
    assert np.isnan(forward.loc[(DATES[6], "A"), "fwd_ret_2d"])  # t+2 is past the last day
    assert np.isnan(forward.loc[(DATES[1], "B"), "fwd_ret_2d"])  # B is suspended at the exit, day 3
    assert np.isnan(forward.loc[(DATES[2], "B"), "fwd_ret_5d"])  # ... and at t=2's entry
    assert forward.loc[(DATES[0], "B"), "fwd_ret_5d"] == 18 / 20 - 1  # held through the suspension
    # the label's horizon is the label, bit for bit, NaN where a sample has no label
    labels = make_labels(panel, LabelSpec(processing="raw"))
    np.testing.assert_array_equal(forward["fwd_ret_5d"].reindex(labels.index).to_numpy(), labels.fwd_return.to_numpy())
    assert forward["fwd_ret_5d"].drop(labels.index).isna().all()


def test_forward_returns_on_given_rows_and_the_horizons_a_run_stores() -> None:
    panel = make_panel({"A": [10, 11, 12, 13, 14, 15, 16, 17]})
    rows = pd.MultiIndex.from_tuples([(DATES[3], "A"), (DATES[0], "A"), (DATES[0], "Z")], names=["date", "code"])
    forward = forward_returns(panel, LabelSpec(), (2,), rows)
    assert forward.index.equals(rows)
    assert forward["fwd_ret_2d"].tolist()[:2] == [15 / 14 - 1, 12 / 11 - 1] and np.isnan(forward.iloc[2, 0])
    assert forward_horizons(LabelSpec(exit_offset=7)) == (2, 5, 7, 10, 20)
    assert newey_west_lags(20) == 19 == make_labels(panel, LabelSpec(exit_offset=2)).ic_lags + 18
    with pytest.raises(ConfigError, match=r"after the entry day \(t\+1\); received \[1\]. Fix: use horizons above 1"):
        forward_returns(panel, LabelSpec(), (1, 5))
