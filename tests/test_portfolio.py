"""Portfolio simulation: exact numbers on hand-built panels, then invariants on the tiny synthetic market.

The hand-built market (unless a test says otherwise): days d0..d5, three stocks, opens chosen so that the
open-to-open returns are round numbers::

    open   d0   d1   d2    d3    d4    d5        return of day   d1    d2    d3    d4
    A      10   10   11    12.1  12.1  12.1                      +10%  +10%   0     0
    B      20   20   18    18    19.8  19.8                      -10%   0    +10%   0
    C       5    5    5     5     5     6                          0     0     0   +20%

Price limits are far away unless a test sets them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st

from backtest.errors import ConfigError, DataContractError
from backtest.portfolio import DEFAULT_TOP_K, PortfolioSpec, allocate, check_universe, simulate

FREE = dict(commission=0.0, stamp_duty=0.0, slippage=0.0)
OPENS = {
    "A": [10, 10, 11, 12.1, 12.1, 12.1],
    "B": [20, 20, 18, 18, 19.8, 19.8],
    "C": [5, 5, 5, 5, 5, 6],
}


def make_panel(
    opens: dict[str, list[float]],
    *,
    start: str = "2024-01-08",
    closes: dict[str, list[float]] | None = None,
    suspended: set[tuple[int, str]] = frozenset(),
    absent: set[tuple[int, str]] = frozenset(),
    up: dict[tuple[int, str], float] | None = None,
    down: dict[tuple[int, str], float] | None = None,
    limits: bool = True,
    out_of_universe: set[tuple[int, str]] = frozenset(),
    adj: dict[str, list[float]] | None = None,
    suspended_prices: str = "nan",
) -> pd.DataFrame:
    """A canonical panel from per-code open lists (close = open unless given).

    Suspended rows have NaN prices (``suspended_prices="nan"``) or carry the last close as every price
    (``"carry"``, as the synthetic market and Tushare do).
    """
    n = len(next(iter(opens.values())))
    dates = pd.bdate_range(start, periods=n)
    rows = []
    for code, values in opens.items():
        last_close = np.nan
        for i, value in enumerate(values):
            if (i, code) in absent:
                continue
            close = closes[code][i] if closes else value
            row = {"date": dates[i], "code": code, "open": float(value), "close": float(close)}
            if (i, code) in suspended:
                carried = last_close if suspended_prices == "carry" else np.nan
                row.update(open=carried, close=last_close, is_suspended=True)
            else:
                row["is_suspended"] = False
            if limits:
                row["up_limit"] = (up or {}).get((i, code), 1e6)
                row["down_limit"] = (down or {}).get((i, code), 1e-3)
            row["in_universe"] = (i, code) not in out_of_universe
            if adj:
                row["adj_factor"] = adj[code][i]
            last_close = row["close"]
            rows.append(row)
    return pd.DataFrame(rows).set_index(["date", "code"]).sort_index()


def make_scores(panel: pd.DataFrame, by_day: dict[int, dict[str, float]]) -> pd.Series:
    dates = panel.index.get_level_values(0).unique()
    keys, values = [], []
    for day, scores in by_day.items():
        for code, score in scores.items():
            keys.append((dates[day], code))
            values.append(score)
    return pd.Series(values, index=pd.MultiIndex.from_tuples(keys, names=["date", "code"]), name="score")


def day(panel: pd.DataFrame, i: int) -> pd.Timestamp:
    return panel.index.get_level_values(0).unique()[i]


def weights_on(result, date: pd.Timestamp) -> dict[str, float]:
    rows = result.positions[result.positions["date"] == date]
    return dict(zip(rows["code"], rows["weight"]))


# --------------------------------------------------------------------------------------------------
# Timing, drift and the two-period example


def test_open_to_open_timing_matches_the_docstring_example():
    panel = make_panel({"X": [10.0, 10.0, 11.0, 9.9, 9.9]})  # Mon 2024-01-08 .. Fri
    scores = make_scores(panel, {0: {"X": 1.0}})
    result = simulate(scores, panel, PortfolioSpec(top_k=1, **FREE))
    assert list(result.returns.index) == list(pd.to_datetime(["2024-01-09", "2024-01-10", "2024-01-11"]))
    np.testing.assert_allclose(result.returns.to_numpy(), [0.10, -0.10, 0.0], atol=1e-12)
    assert result.periods.loc[pd.Timestamp("2024-01-08"), "execution_date"] == pd.Timestamp("2024-01-09")


def two_period_result(**spec):
    panel = make_panel(OPENS)
    scores = make_scores(
        panel,
        {
            0: {"A": 3, "B": 2, "C": 1},
            1: {"A": 0, "B": 0, "C": 9},
            2: {"A": 1, "B": 2, "C": 3},
            3: {"A": 5, "B": 0, "C": 0},
        },
    )
    return panel, simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=2, **(FREE | spec)))


def test_equal_weight_two_periods_exact():
    panel, result = two_period_result()
    # Rebalances on the 1st and 3rd score dates (d0, d2); scores on d1 and d3 are not used.
    assert list(result.rebalance_dates) == [day(panel, 0), day(panel, 2)]
    # Period 1 holds A, B at 1/2: d1 = (0.1 - 0.1)/2; d2 = 0.55 * 0.1 / 1.0 (weights drifted to 0.55/0.45).
    # Period 2 holds C, B at 1/2: d3 = 0.5 * 0.1; d4 = 0.5 * 0.2 / 1.05 (B drifted to 0.55).
    expected = [0.0, 0.055, 0.05, 0.1 / 1.05]
    np.testing.assert_allclose(result.returns.to_numpy(), expected, atol=1e-12)
    assert list(result.returns.index) == [day(panel, i) for i in (1, 2, 3, 4)]
    assert weights_on(result, day(panel, 2)) == pytest.approx({"A": 0.55, "B": 0.45}, abs=1e-12)
    assert weights_on(result, day(panel, 4)) == pytest.approx({"B": 0.55 / 1.05, "C": 0.5 / 1.05}, abs=1e-12)
    np.testing.assert_allclose(result.periods["strategy"], [0.055, 0.15], atol=1e-12)
    np.testing.assert_allclose(result.periods["n_days"], [2, 2])


def test_benchmark_is_equal_weight_of_all_eligible_names_same_schedule():
    _, result = two_period_result()
    # Period 1: A, B, C at 1/3: d1 = 0, d2 = (1.1/3 * 0.1) / 1. Rebalanced to 1/3 each at d3:
    # d3 = 0.1/3, d4 = (0.2/3) / (3.1/3).
    expected = [0.0, 1.1 / 30, 0.1 / 3, 0.2 / 3.1]
    np.testing.assert_allclose(result.benchmark_returns.to_numpy(), expected, atol=1e-12)
    assert result.benchmark_returns.index.equals(result.returns.index)
    np.testing.assert_allclose(result.periods["benchmark"], [3.11 / 3 - 1, 0.1], atol=1e-12)
    np.testing.assert_allclose(result.periods["excess"], [0.055 - 0.11 / 3, 0.05], atol=1e-12)


def test_turnover_per_rebalance_and_annualised():
    _, result = two_period_result()
    # Building from cash trades 1.0 of value: one-way 0.5. Second rebalance sells A (0.605/1.055 of
    # the book) and buys C and tops up B with the same value.
    h_a = 0.605 / 1.055
    np.testing.assert_allclose(result.turnover.to_numpy(), [0.5, h_a], atol=1e-12)
    assert result.annual_turnover == pytest.approx((0.5 + h_a) * 252 / 4, abs=1e-9)
    trades = result.trades[result.trades["date"] == result.periods["execution_date"].iloc[1]]
    assert dict(zip(trades["code"], trades["side"])) == {"A": "sell", "B": "buy", "C": "buy"}
    assert trades.set_index("code").loc["A", "traded"] == pytest.approx(h_a, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# Weights


def test_softmax_weights_with_temperature():
    panel = make_panel(OPENS)
    # softmax(score / 2) of (2 ln 3, 0) = (3/4, 1/4); C ranks third and is not bought.
    scores = make_scores(panel, {0: {"A": 2 * np.log(3), "B": 0.0, "C": -5.0}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, weighting="softmax", temperature=2.0, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"A": 0.75, "B": 0.25}, abs=1e-12)
    assert result.returns.iloc[0] == pytest.approx(0.75 * 0.1 - 0.25 * 0.1, abs=1e-12)


def test_allocate_exact_values():
    softmax = PortfolioSpec(weighting="softmax")
    np.testing.assert_allclose(allocate(np.log([6.0, 3.0, 1.0]), softmax), [0.6, 0.3, 0.1], atol=1e-12)
    # Cap 0.5: A's excess 0.1 goes to B and C in proportion 3:1.
    capped = PortfolioSpec(weighting="softmax", max_weight=0.5)
    np.testing.assert_allclose(allocate(np.log([6.0, 3.0, 1.0]), capped), [0.5, 0.375, 0.125], atol=1e-12)
    # Cap 0.35 cascades: A capped, B then gets 0.65 * 3/4 = 0.4875 > 0.35 and is capped too; C takes 0.3.
    cascade = PortfolioSpec(weighting="softmax", max_weight=0.35)
    np.testing.assert_allclose(allocate(np.log([6.0, 3.0, 1.0]), cascade), [0.35, 0.35, 0.30], atol=1e-12)
    # Equal weight over a smaller budget.
    np.testing.assert_allclose(allocate(np.zeros(4), PortfolioSpec(), budget=0.8), [0.2] * 4, atol=1e-12)


def test_cap_that_binds_on_every_name_leaves_cash():
    panel = make_panel(OPENS)
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=3, max_weight=0.3, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"A": 0.3, "B": 0.3, "C": 0.3}, abs=1e-12)
    # d1: 0.3 * (0.1 - 0.1 + 0) = 0; d2: A worth 0.33 of a book of 1.0 gains 10%.
    np.testing.assert_allclose(result.returns.iloc[:2], [0.0, 0.033], atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.floats(-5, 5), min_size=1, max_size=12),
    cap=st.one_of(st.none(), st.floats(0.05, 1.0)),
    weighting=st.sampled_from(["equal", "softmax"]),
)
def test_allocate_respects_cap_and_budget(scores, cap, weighting):
    spec = PortfolioSpec(weighting=weighting, max_weight=cap)
    weights = allocate(np.array(scores), spec)
    assert (weights >= 0).all()
    limit = 1.0 if cap is None else cap
    assert weights.max() <= limit + 1e-12
    assert weights.sum() == pytest.approx(min(1.0, len(scores) * limit), abs=1e-9)


# --------------------------------------------------------------------------------------------------
# Tradability


def test_limit_up_open_is_skipped_for_next_ranked_in_strategy_and_benchmark():
    panel = make_panel(OPENS, up={(1, "A"): 10.0})  # A opens at its limit-up price on d1
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"B": 0.5, "C": 0.5}, abs=1e-12)
    # B, C at 1/2: d1 = -0.05, d2 = 0, d3 = 0.45 * 0.1 / 0.95, d4 = 0.5 * 0.2 / 0.995.
    expected = [-0.05, 0.0, 0.045 / 0.95, 0.1 / 0.995]
    np.testing.assert_allclose(result.returns.to_numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(result.benchmark_returns.to_numpy(), expected, atol=1e-12)  # A skipped too
    assert result.blocked[["code", "reason"]].values.tolist() == [["A", "limit_up"]]


def test_limit_up_within_half_a_tick_counts_as_at_the_limit():
    panel = make_panel(OPENS, up={(1, "A"): 10.004})
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=1, **FREE))
    assert weights_on(result, day(panel, 1)) == {"B": 1.0}


def test_held_name_at_limit_up_is_kept_but_not_topped_up():
    panel = make_panel(OPENS, up={(3, "B"): 18.0})  # B opens at limit-up on d3
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 3, "C": 2}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    h_b = 0.45 / 1.055  # B's drifted weight; it wishes 0.5 but cannot be bought
    assert weights_on(result, day(panel, 3)) == pytest.approx({"B": h_b, "C": 1 - h_b}, abs=1e-12)
    np.testing.assert_allclose(result.returns.iloc[2:], [0.1 * h_b, 0.2 * (1 - h_b) / (1 + 0.1 * h_b)], atol=1e-12)
    blocked = result.blocked[result.blocked["date"] == day(panel, 3)]
    assert blocked[["code", "reason"]].values.tolist() == [["B", "limit_up"]]


def test_holding_at_limit_down_cannot_be_sold_and_keeps_its_weight():
    panel = make_panel(OPENS, down={(3, "A"): 12.1})  # A opens at its limit-down price on d3
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    h_a = 0.605 / 1.055  # A's drifted weight at the open of d3; C and B share the rest
    rest = (1 - h_a) / 2
    assert weights_on(result, day(panel, 3)) == pytest.approx({"A": h_a, "B": rest, "C": rest}, abs=1e-12)
    r3 = rest * 0.1
    np.testing.assert_allclose(result.returns.iloc[2:], [r3, rest * 0.2 / (1 + r3)], atol=1e-12)
    assert result.periods["n_holdings"].tolist() == [2, 3]
    blocked = result.blocked[result.blocked["date"] == day(panel, 3)]
    assert blocked[["code", "reason"]].values.tolist() == [["A", "limit_down"]]
    assert "A" not in set(result.trades.loc[result.trades["date"] == day(panel, 3), "code"])


def test_suspended_holding_is_frozen_and_marked_flat_until_it_resumes():
    panel = make_panel(OPENS, suspended={(3, "A"), (4, "A")})  # no open on d3, d4; resumes at 12.1 on d5
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    # A's last price is its d2 open (11): it earns 0 on d2 and d3, and +10% on d4 (11 -> 12.1 on d5).
    # At the d3 rebalance A (0.55 of the book) cannot be sold; B and C share 0.45.
    assert weights_on(result, day(panel, 3)) == pytest.approx({"A": 0.55, "B": 0.225, "C": 0.225}, abs=1e-12)
    r3 = 0.225 * 0.1
    r4 = (0.55 * 0.1 + 0.225 * 0.2) / (1 + r3)
    np.testing.assert_allclose(result.returns.to_numpy(), [0.0, 0.0, r3, r4], atol=1e-12)
    blocked = result.blocked[result.blocked["date"] == day(panel, 3)]
    assert blocked[["code", "reason"]].values.tolist() == [["A", "suspended"]]


def test_zero_volume_without_a_flag_is_a_suspension():
    # A user's file: no is_suspended column, A traded no share on d1 (its bar carries the last close).
    panel = make_panel(OPENS).drop(columns=["is_suspended"])
    panel["volume"] = 1e5
    panel.loc[(day(panel, 1), "A"), "volume"] = 0.0
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"B": 0.5, "C": 0.5}, abs=1e-12)
    assert result.blocked[["code", "reason"]].values.tolist() == [["A", "suspended"]]
    # The flag saying "trading" does not overrule the empty volume.
    flagged = panel.assign(is_suspended=False)
    again = simulate(scores, flagged, PortfolioSpec(top_k=2, **FREE))
    pd.testing.assert_series_equal(again.returns, result.returns)


def test_zero_volume_holding_is_frozen_and_cannot_be_sold():
    panel = make_panel(OPENS).drop(columns=["is_suspended"])
    panel["volume"] = 1e5
    panel.loc[(day(panel, 3), "A"), "volume"] = 0.0
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    # d3: A should be sold but does not trade: it keeps its weight, 0.55 after d1 (+10%, B -10%; its d3
    # open is no price, so it is carried at 11 and d2 is flat); C and B share the rest.
    assert weights_on(result, day(panel, 3)) == pytest.approx({"A": 0.55, "B": 0.225, "C": 0.225}, abs=1e-12)
    assert result.returns.iloc[1] == pytest.approx(0.0, abs=1e-12)
    assert result.blocked[["code", "reason"]].values.tolist() == [["A", "suspended"]]


def test_suspended_candidate_is_skipped():
    panel = make_panel(OPENS, suspended={(1, "A")})
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"B": 0.5, "C": 0.5}, abs=1e-12)
    assert result.blocked[["code", "reason"]].values.tolist() == [["A", "suspended"]]


@pytest.mark.parametrize("suspended_prices", ["nan", "carry"])
def test_suspended_holding_carries_its_last_price(suspended_prices):
    closes = {code: list(values) for code, values in OPENS.items()}
    closes["B"][1] = 19.0  # B closes at 19 on d1, is suspended on d2 (prices NaN or carried 19)
    panel = make_panel(OPENS, closes=closes, suspended={(2, "B")}, suspended_prices=suspended_prices)
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, **FREE))
    # B is marked at its last traded open (20) until it trades again: d1 = 20 -> 20 = 0,
    # d2 = 20 -> 18 (open on resumption) = -10%, then +10%, 0. The carried close is not a fill.
    expected = [0.05, (0.055 - 0.05) / 1.05, 0.045 / 1.055, 0.0]
    np.testing.assert_allclose(result.returns.to_numpy(), expected, atol=1e-12)


def test_board_limits_without_limit_columns():
    # No up_limit column: limit = round(prev close * (1 + L), 2), L = 20% on STAR and on post-reform ChiNext.
    opens = {"600001.SH": [10, 11.0], "688001.SH": [10, 12.0], "300001.SZ": [10, 11.0], "000001.SZ": [10, 10.5]}
    opens = {code: values + [values[-1]] * 3 for code, values in opens.items()}
    order = {"600001.SH": 4, "688001.SH": 3, "300001.SZ": 2, "000001.SZ": 1}
    spec = PortfolioSpec(top_k=2, **FREE)

    panel = make_panel(opens, limits=False, start="2024-01-08")
    result = simulate(make_scores(panel, {0: order}), panel, spec)
    assert set(weights_on(result, day(panel, 1))) == {"300001.SZ", "000001.SZ"}
    assert sorted(result.blocked["code"]) == ["600001.SH", "688001.SH"]
    assert set(result.blocked["reason"]) == {"limit_up"}

    before_reform = make_panel(opens, limits=False, start="2020-08-17")  # ChiNext still at 10%
    result = simulate(make_scores(before_reform, {0: order}), before_reform, spec)
    assert set(weights_on(result, day(before_reform, 1))) == {"000001.SZ"}
    assert sorted(result.blocked["code"]) == ["300001.SZ", "600001.SH", "688001.SH"]


def test_limit_reference_price_is_ex_rights_on_a_split():
    # 2-for-1 split on d3: raw open 6.05 is below 0.9 * the raw previous close 12.1, but the ex-rights
    # reference 12.1 / 2 makes it a normal open, so A can be sold.
    opens = {"A": [10, 10, 11, 6.05, 6.05, 6.05], "B": OPENS["B"], "C": OPENS["C"]}
    adj = {"A": [1, 1, 1, 2, 2, 2], "B": [1] * 6, "C": [1] * 6}
    panel = make_panel(opens, limits=False, adj=adj)
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    assert result.blocked.empty
    sells = result.trades[(result.trades["side"] == "sell")]
    assert sells["code"].tolist() == ["A"]
    # Adjusted prices: the split is not a return (d2: A 11 -> 6.05 * 2 = 12.1, +10%).
    np.testing.assert_allclose(result.returns.iloc[:2], [0.0, 0.055], atol=1e-12)


def test_out_of_universe_stock_is_not_eligible():
    panel = make_panel(OPENS, out_of_universe={(0, "A")})
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, **FREE))
    assert weights_on(result, day(panel, 1)) == pytest.approx({"B": 0.5, "C": 0.5}, abs=1e-12)
    # The benchmark holds only the eligible B and C too.
    np.testing.assert_allclose(result.benchmark_returns.iloc[0], -0.05, atol=1e-12)


def test_delisted_holding_is_sold_at_its_last_price():
    panel = make_panel(OPENS, absent={(3, "A"), (4, "A"), (5, "A")})  # A's last row is d2
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    # d2: A has no later open: it earns 0 (carried 11) and is sold at the d3 rebalance.
    np.testing.assert_allclose(result.returns.iloc[:2], [0.0, 0.0], atol=1e-12)
    trades = result.trades[result.trades["date"] == day(panel, 3)]
    assert trades.set_index("code").loc["A", "side"] == "sell"
    assert set(weights_on(result, day(panel, 3))) == {"B", "C"}


# --------------------------------------------------------------------------------------------------
# Costs


def test_costs_of_building_and_fully_rotating_a_book():
    opens = OPENS | {"D": [8] * 6}
    panel = make_panel(opens)
    scores = make_scores(panel, {0: {"A": 4, "B": 3, "C": 2, "D": 1}, 2: {"A": 1, "B": 2, "C": 3, "D": 4}})
    spec = PortfolioSpec(top_k=2, rebalance_every=1)  # commission 0.025%, stamp 0.05%, slippage 0.1%
    result = simulate(scores, panel, spec)
    rate = 0.00025 + 0.001
    # From cash: invest F with F + rate * F = 1.
    invested = 1 / (1 + rate)
    assert result.returns.iloc[0] == pytest.approx(invested * (1 + 0.0) - 1, abs=1e-12)
    assert result.periods["cost"].iloc[0] == pytest.approx(1 - invested, abs=1e-12)
    # Full rotation A, B -> C, D: sell the whole book (1.0), buy F: F = 1 - rate * (1 + F) - 0.0005.
    invested = (1 - rate - 0.0005) / (1 + rate)
    assert result.returns.iloc[2] == pytest.approx(invested - 1, abs=1e-12)  # C and D flat on d3
    assert result.periods["cost"].iloc[1] == pytest.approx(1 - invested, abs=1e-12)
    # Per-trade costs add up to the period cost; stamp duty is on sells only.
    second = result.trades[result.trades["date"] == day(panel, 3)].set_index("code")
    assert second["cost"].sum() == pytest.approx(1 - invested, abs=1e-12)
    assert second.loc["A", "cost"] == pytest.approx(second.loc["A", "traded"] * (rate + 0.0005), abs=1e-15)
    assert second.loc["C", "cost"] == pytest.approx(second.loc["C", "traded"] * rate, abs=1e-15)
    # The benchmark pays its own costs: building a 4-name book from cash costs the same fraction.
    assert result.benchmark_returns.iloc[0] == pytest.approx((1 + 0.0) / (1 + rate) - 1, abs=1e-12)


def test_partial_rebalance_cost_solves_the_self_financing_equation():
    _, result = two_period_result(commission=0.0003, stamp_duty=0.001, slippage=0.0)
    rate, stamp = 0.0003, 0.001
    start = 1 / (1 + rate)  # book after the first build, in units of the initial capital
    h_a, h_b = 0.605 / 1.055, 0.45 / 1.055  # drifted weights before the second rebalance
    # Sell A, buy C and top B up to half of F: F = 1 - rate * (h_a + F - h_b) - stamp * h_a.
    invested = (1 - rate * (h_a - h_b) - stamp * h_a) / (1 + rate)
    assert result.periods["cost"].iloc[1] == pytest.approx(1 - invested, abs=1e-14)
    assert result.returns.iloc[2] == pytest.approx(invested * (1 + 0.5 * 0.1) - 1, abs=1e-12)
    assert result.returns.iloc[0] == pytest.approx(start - 1, abs=1e-12)


def test_costs_lower_returns_by_the_cost_on_trade_days_only():
    _, free = two_period_result()
    _, costly = two_period_result(commission=0.00025, stamp_duty=0.0005, slippage=0.001)
    diff = (free.returns - costly.returns).to_numpy()
    assert diff[0] > 0 and diff[2] > 0
    assert costly.periods["strategy"].lt(free.periods["strategy"]).all()


# --------------------------------------------------------------------------------------------------
# Inputs


def test_close_only_panel_trades_at_the_close_said_once_before_any_book(caplog):
    panel = make_panel({"X": [10.0, 10.0, 11.0, 9.9, 9.9]}).drop(columns=["open"])
    with caplog.at_level(logging.WARNING, logger="backtest.portfolio"):
        result = simulate(make_scores(panel, {0: {"X": 1.0}}), panel, PortfolioSpec(top_k=1, **FREE))
    np.testing.assert_allclose(result.returns.to_numpy(), [0.10, -0.10, 0.0], atol=1e-12)
    assert not caplog.records  # not once per book: the check before any work says it
    three = make_panel(OPENS).drop(columns=["open"])
    with caplog.at_level(logging.WARNING, logger="backtest.portfolio"):
        check_universe(three, PortfolioSpec(top_k=1), (day(three, 0), day(three, 5)))
    assert [r.getMessage() for r in caplog.records] == [
        "panel has no 'open' column: every book trades at the close of t+1 (not the open) and is marked close to close"
    ]


def test_invalid_spec_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="top_k"):
        PortfolioSpec(top_k=0)
    with pytest.raises(ConfigError, match="weighting"):
        PortfolioSpec(weighting="inverse_vol")
    with pytest.raises(ConfigError, match="max_weight"):
        PortfolioSpec(max_weight=1.5)


def test_scores_outside_the_panel_are_rejected():
    panel = make_panel(OPENS)
    scores = make_scores(panel, {0: {"A": 1.0}})
    scores.loc[(pd.Timestamp("2030-01-01"), "A")] = 2.0
    with pytest.raises(DataContractError, match="not rows of the panel"):
        simulate(scores, panel)
    # A panel date on which the stock has no row is not a row either; a NaN score there is fine.
    delisted = make_panel(OPENS, absent={(2, "A")})
    scores = make_scores(delisted, {0: {"A": 1.0, "B": 0.5}, 2: {"B": 1.0}})
    scores.loc[(day(delisted, 2), "A")] = np.nan
    simulate(scores, delisted)
    scores.loc[(day(delisted, 2), "A")] = 3.0
    with pytest.raises(DataContractError, match="not rows of the panel"):
        simulate(scores, delisted)


def test_duplicate_panel_rows_are_rejected():
    panel = make_panel(OPENS)
    with pytest.raises(DataContractError, match="duplicate"):
        simulate(make_scores(panel, {0: {"A": 1.0}}), pd.concat([panel, panel.iloc[:1]]))


def test_scores_on_the_last_day_only_cannot_be_executed():
    panel = make_panel(OPENS)
    with pytest.raises(DataContractError, match="No rebalance can be executed"):
        simulate(make_scores(panel, {5: {"A": 1.0}}), panel)


# --------------------------------------------------------------------------------------------------
# Days the book is not what the strategy chose; universes the book cannot trade in


def test_a_book_held_as_chosen_counts_no_blocked_day():
    _, result = two_period_result()
    assert result.days_blocked == 0 and result.rebalances_blocked == 0
    assert not result.blocked_days.any() and result.blocked_days.index.equals(result.returns.index)


def test_days_of_a_period_whose_holding_could_not_be_sold_count_as_blocked():
    panel = make_panel(OPENS, suspended={(3, "A"), (4, "A")})  # A held, suspended on d3 and d4
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}, 2: {"A": 1, "B": 2, "C": 3}})
    result = simulate(scores, panel, PortfolioSpec(top_k=2, rebalance_every=1, **FREE))
    # The d3 rebalance cannot sell A: its period (d3, d4) is not the book chosen, and A's marks are stale.
    assert result.blocked_days.tolist() == [False, False, True, True]
    assert result.days_blocked == 2 and result.rebalances_blocked == 1


def test_a_stale_mark_between_rebalances_counts_as_a_blocked_day():
    panel = make_panel(OPENS, suspended={(2, "B")})  # B bought on d1, suspended on d2 only
    result = simulate(make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}}), panel, PortfolioSpec(top_k=2, **FREE))
    assert result.blocked_days.tolist() == [False, True, False, False]
    assert result.days_blocked == 1 and result.rebalances_blocked == 0


def test_a_market_that_stops_trading_blocks_every_later_day():
    everything = {(i, code) for i in range(2, 6) for code in OPENS}  # nobody trades from d2 on
    panel = make_panel(OPENS, suspended=everything)
    result = simulate(make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}}), panel, PortfolioSpec(top_k=2, **FREE))
    np.testing.assert_allclose(result.returns.iloc[1:], 0.0)  # stale marks earn nothing, silently
    assert result.blocked_days.tolist() == [False, True, True, True] and result.days_blocked == 3


def test_a_day_is_tradable_when_at_least_top_k_members_trade():
    # From d2 on only C trades, and from d4 on nobody: a top-2 book can be bought on the return day d1 alone.
    halted = {(i, code) for i in range(2, 6) for code in ("A", "B")} | {(4, "C"), (5, "C")}
    panel = make_panel(OPENS, suspended=halted)
    scores = make_scores(panel, {0: {"A": 3, "B": 2, "C": 1}})
    assert simulate(scores, panel, PortfolioSpec(top_k=2, **FREE)).tradable_days.tolist() == [True, False, False, False]
    top_1 = simulate(scores, panel, PortfolioSpec(top_k=1, **FREE))
    assert top_1.tradable_days.tolist() == [True, True, True, False] and top_1.days_tradable == 3
    assert top_1.tradable_days.index.equals(top_1.returns.index)


def test_a_test_period_without_trading_is_refused_naming_the_period():
    everything = {(i, code) for i in range(2, 6) for code in OPENS}
    panel = make_panel(OPENS, suspended=everything)
    with pytest.raises(DataContractError) as info:
        check_universe(panel, PortfolioSpec(top_k=1), (day(panel, 2), day(panel, 5)))
    message = str(info.value)
    assert "no member trades on any day of the test period 2024-01-10 .. 2024-01-15" in message and "fix:" in message
    # Zero volume without a flag is the same fact.
    zero = make_panel(OPENS).drop(columns=["is_suspended"]).assign(volume=1e5)
    zero.loc[zero.index.get_level_values(0) >= day(zero, 2), "volume"] = 0.0
    with pytest.raises(DataContractError, match="no member trades"):
        check_universe(zero, PortfolioSpec(top_k=1), (day(zero, 2), day(zero, 5)))
    check_universe(zero, PortfolioSpec(top_k=1), (day(zero, 0), day(zero, 5)))  # two days trade: accepted


PORTFOLIO_OPTIONS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "portfolio").glob("*.yaml"))


@pytest.mark.parametrize("option", PORTFOLIO_OPTIONS)
def test_the_portfolio_configs_buy_the_default_number_of_stocks(option: str, compose_config) -> None:
    """The default top_k has one owner, DEFAULT_TOP_K; conf/ writes it out (Hydra cannot import it) and
    conf/portfolio/equal.yaml is PortfolioSpec's defaults."""
    cfg = compose_config([f"portfolio={option}"])
    assert cfg.portfolio.top_k == DEFAULT_TOP_K
    if option == "equal":
        assert instantiate(cfg.portfolio, _convert_="all") == PortfolioSpec()


def test_top_k_at_least_the_universe_is_refused():
    panel = make_panel(OPENS)  # 3 members every day
    with pytest.raises(ConfigError) as info:
        check_universe(panel, PortfolioSpec(top_k=3), (day(panel, 0), day(panel, 5)))
    message = str(info.value)
    assert "portfolio.top_k=3 is at least the eligible universe: 3 members on the median day" in message
    assert "fix: portfolio.top_k=1" in message
    stats = check_universe(panel, PortfolioSpec(top_k=2), (day(panel, 0), day(panel, 5)))
    assert stats == {"median_members": 3.0, "min_members": 3.0, "tradable_days": 6.0}


def test_top_k_is_checked_against_point_in_time_members_on_the_median_test_day():
    # C leaves the index on d3: 3, 3, 3, 2, 2, 2 members; the test period d2..d5 has a median of 2.
    panel = make_panel(OPENS, out_of_universe={(i, "C") for i in range(3, 6)})
    with pytest.raises(ConfigError, match=r"2 members on the median day .* \(min 2\)"):
        check_universe(panel, PortfolioSpec(top_k=2), (day(panel, 3), day(panel, 5)))
    check_universe(panel, PortfolioSpec(top_k=2), (day(panel, 0), day(panel, 3)))  # median 3


def test_a_universe_of_one_member_is_refused():
    panel = make_panel(OPENS, out_of_universe={(i, c) for i in range(6) for c in ("B", "C")})
    with pytest.raises(DataContractError, match="needs at least 2 members per day.*has 1 on the median day"):
        check_universe(panel, PortfolioSpec(top_k=1), (day(panel, 0), day(panel, 5)))


# --------------------------------------------------------------------------------------------------
# The tiny synthetic market


@pytest.fixture(scope="module")
def synthetic_run(tiny_panel):
    rng = np.random.default_rng(0)
    scores = pd.Series(rng.standard_normal(len(tiny_panel)), index=tiny_panel.index)
    return scores, simulate(scores, tiny_panel, PortfolioSpec())


def test_synthetic_trades_obey_the_trading_rules(tiny_panel, synthetic_run):
    _, result = synthetic_run
    trades = result.trades
    assert len(trades) > 100
    on_day = tiny_panel.reindex(pd.MultiIndex.from_arrays([trades["date"], trades["code"]]))
    buys = (trades["side"] == "buy").to_numpy()
    assert not on_day["is_suspended"].to_numpy()[buys].any()
    assert (on_day["open"].to_numpy()[buys] < on_day["up_limit"].to_numpy()[buys] - 0.005).all()
    listed = on_day["open"].notna().to_numpy()
    sells = ~buys & listed
    assert (on_day["open"].to_numpy()[sells] > on_day["down_limit"].to_numpy()[sells] + 0.005).all()
    member = (
        tiny_panel["in_universe"]
        .reindex(pd.MultiIndex.from_arrays([trades["decision_date"], trades["code"]]))
        .to_numpy()
    )
    assert member[buys].all()
    assert result.blocked["reason"].isin(["limit_up", "limit_down", "suspended"]).all()


def test_synthetic_books_are_consistent(synthetic_run):
    _, result = synthetic_run
    assert result.returns.index.equals(result.benchmark_returns.index)
    assert result.returns.notna().all() and result.benchmark_returns.notna().all()
    assert result.returns.index.is_unique and result.returns.index.is_monotonic_increasing
    sums = result.positions.groupby("date")["weight"].sum()
    assert (sums <= 1 + 1e-9).all() and (sums > 0.97).all()
    assert (result.positions["weight"] > 0).all()
    # Period returns compound the daily ones.
    for _, row in result.periods.iterrows():
        days = result.returns.loc[row["execution_date"] : row["end_date"]]
        assert len(days) == row["n_days"]
        assert np.prod(1 + days) - 1 == pytest.approx(row["strategy"], abs=1e-12)
    assert result.periods["n_days"].iloc[:-1].eq(5).all()
    assert 0 < result.annual_turnover < 252 / 5


def test_synthetic_board_rule_reproduces_the_limit_columns(tiny_panel, synthetic_run):
    scores, result = synthetic_run
    no_columns = tiny_panel.drop(columns=["up_limit", "down_limit"])
    again = simulate(scores, no_columns, PortfolioSpec())
    pd.testing.assert_series_equal(again.returns, result.returns)
    pd.testing.assert_frame_equal(again.blocked, result.blocked)


def test_a_rebalance_the_panel_ends_before_is_returned_not_logged_and_log_lines_name_the_book(caplog):
    panel = make_panel(OPENS, suspended={(1, "B")})  # six days; B cannot be bought on day 1
    scores = make_scores(panel, {0: {"A": 1.0, "B": 2.0}, 4: {"A": 1.0, "B": 2.0}})  # day 4: no day-6 open
    with caplog.at_level(logging.INFO, logger="backtest.portfolio"):
        result = simulate(scores, panel, PortfolioSpec(top_k=1, rebalance_every=1, **FREE), book="baseline factor")
    assert result.dropped_rebalances == (day(panel, 4),)
    assert list(result.rebalance_dates) == [day(panel, 0)]
    messages = [r.getMessage() for r in caplog.records]
    assert not any("dropped" in m for m in messages)  # the engine says it once, for every book
    assert messages and all(m.startswith("baseline factor book: ") for m in messages), messages
