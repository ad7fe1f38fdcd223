"""Cross-sectional transforms and time aggregates: values, universe, non-members."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from backtest.features import FeatureSetSpec, build_features
from backtest.features.cross_section import DailyCrossSection, peer_mean

SPEC = FeatureSetSpec(
    name="t", indicators=("ret_5d", "mf_main_net_rate", "log_mv", "ind_rel_ret_5"), exclude=(), industry_neutral=True
)


@pytest.fixture(scope="module")
def tiny(tiny_panel):
    return build_features(tiny_panel, SPEC, data_fingerprint="tiny").to_frame()


def test_rank_pct_matches_pandas_including_ties_and_nans():
    day = np.repeat(np.arange(3), 6)
    values = np.array([3, 1, 2, 2, np.nan, 5, 1, 1, 1, 1, 1, 1, np.nan, np.nan, 0.5, -0.0, 0.0, 7])
    eligible = np.ones(18, dtype=bool)
    eligible[5] = False  # the 5 of day 0 is not a member
    got = DailyCrossSection.of(day, eligible, 3).rank_pct(values)
    # day 0: 1 < 2 = 2 < 3 over 4 members; day 1: six ties share rank 3.5 of 6; day 2: -0.0 ties 0.0
    expected = [1.0, 0.25, 0.625, 0.625, np.nan, np.nan, *[3.5 / 6] * 6, np.nan, np.nan, 0.75, 0.375, 0.375, 1.0]
    np.testing.assert_array_equal(got, expected)
    pandas = pd.Series(np.where(eligible, values, np.nan)).groupby(day).rank(pct=True)
    np.testing.assert_array_equal(got, pandas.to_numpy())


def test_zscore_and_industry_neutral_on_small_numbers():
    day = np.zeros(5, dtype=int)
    values = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    eligible = np.array([True, True, True, True, False])
    cs = DailyCrossSection.of(day, eligible, 1)
    sd = np.std([1.0, 2, 3, 4])
    np.testing.assert_allclose(
        cs.zscore(values), [(1 - 2.5) / sd, (2 - 2.5) / sd, (3 - 2.5) / sd, (4 - 2.5) / sd, np.nan]
    )
    industry = np.array([7, 7, 9, 9, 9])
    # residuals from industry means (1.5, 1.5, 3.5, 3.5): -0.5, 0.5, -0.5, 0.5 -> z = -1, 1, -1, 1
    np.testing.assert_allclose(cs.industry_neutral(values, industry), [-1, 1, -1, 1, np.nan])


def test_peer_mean_uses_members_with_values_only():
    values = np.array([[1.0, 3.0, 100.0, np.nan, 5.0]])
    groups = np.array([[1, 1, 1, 1, -1]])
    members = np.array([[True, True, False, True, True]])
    np.testing.assert_array_equal(peer_mean(values, groups, members), [[2.0, 2.0, 2.0, 2.0, np.nan]])


def test_cs_rank_equals_pandas_groupby_rank_on_the_universe(tiny):
    for name in ("ret_5d", "mf_main_net_rate", "log_mv", "mf_main_net_rate_ma20"):
        expected = tiny[name].groupby(level="date").rank(pct=True).astype(np.float32)
        np.testing.assert_array_equal(tiny[f"{name}_cs_rank"].to_numpy(), expected.to_numpy(), err_msg=name)


def test_cs_z_equals_pandas_formula(tiny):
    g = tiny["ret_5d"].astype(np.float64).groupby(level="date")
    expected = (tiny["ret_5d"] - g.transform("mean")) / g.transform("std", ddof=0)
    np.testing.assert_allclose(tiny["ret_5d_cs_z"], expected, rtol=1e-5, atol=1e-6)


def test_industry_neutral_equals_pandas_formula(tiny, tiny_panel):
    frame = tiny.assign(industry=tiny_panel.loc[tiny.index, "industry"].astype(str).to_numpy())
    x = frame["log_mv"].astype(np.float64)
    resid = x - x.groupby([frame.index.get_level_values("date"), frame["industry"]]).transform("mean")
    g = resid.groupby(level="date")
    expected = (resid - g.transform("mean")) / g.transform("std", ddof=0)
    np.testing.assert_allclose(tiny["log_mv_ind_neu"], expected, rtol=1e-4, atol=1e-5)


def test_time_aggregates_are_trailing_means_of_the_stock(tiny_panel):
    spec = FeatureSetSpec(name="t", indicators=("mf_main_net_rate",), cs_rank=False, cs_z=False)
    frame = build_features(tiny_panel, spec, data_fingerprint="tiny", rows="all").to_frame()
    by_code = frame["mf_main_net_rate"].astype(np.float64).groupby(level="code")
    for w in (5, 20):
        expected = by_code.transform(lambda s, w=w: s.rolling(w, min_periods=(w + 1) // 2).mean())
        np.testing.assert_allclose(frame[f"mf_main_net_rate_ma{w}"], expected, rtol=1e-5, atol=1e-8)


def test_rows_are_the_universe_and_non_members_get_no_cross_sectional_values(tiny_panel, tiny):
    members = tiny_panel.index[tiny_panel["in_universe"].to_numpy()]
    assert tiny.index.equals(members)
    every = build_features(tiny_panel, SPEC, data_fingerprint="tiny", rows="all").to_frame()
    assert every.index.equals(tiny_panel.index)
    outside = ~tiny_panel["in_universe"].to_numpy()
    cs_columns = [c for c in every.columns if c.endswith(("_cs_rank", "_cs_z", "_ind_neu"))]
    assert every.loc[outside, cs_columns].isna().all().all()
    assert every.loc[outside, "ret_5d"].notna().mean() > 0.9  # per-stock values exist for non-members
    np.testing.assert_array_equal(every.loc[members].to_numpy(), tiny.to_numpy())


def test_non_members_cannot_move_members_values(tiny_panel, tiny):
    """Scrambling the data of never-member stocks changes nothing in the feature matrix."""
    never = tiny_panel.groupby(level="code")["in_universe"].any()
    never = never.index[~never.to_numpy()]
    assert len(never) >= 3
    scrambled = tiny_panel.copy()
    rows = scrambled.index.get_level_values("code").isin(never)
    rng = np.random.default_rng(0)
    for col in ("open", "high", "low", "close", "volume", "amount", "total_mv", "buy_lg_amount"):
        scrambled.loc[rows, col] = scrambled.loc[rows, col] * rng.uniform(0.5, 2.0, rows.sum())
    again = build_features(scrambled, SPEC, data_fingerprint="scrambled").to_frame()
    np.testing.assert_array_equal(again.to_numpy(), tiny.to_numpy())


def test_without_in_universe_every_row_is_eligible(panel):
    no_members = panel.drop(columns="in_universe")
    frame = build_features(no_members, SPEC, data_fingerprint="x").to_frame()
    assert len(frame) == len(panel)
    day = frame.index.get_level_values("date")[-1]
    last = frame.xs(day, level="date")
    assert last["ret_5d_cs_rank"].notna().sum() == len(last)  # every stock ranked, none dropped
    assert sorted(last["ret_5d_cs_rank"]) == pytest.approx([(i + 1) / len(last) for i in range(len(last))])


def test_cs_rank_of_a_member_ignores_non_member_rows_on_the_same_day(panel):
    frame = build_features(panel, SPEC, data_fingerprint="x", rows="all").to_frame()
    day = panel.index.get_level_values("date").unique()[70]
    today = frame.xs(day, level="date")
    member = panel.xs(day, level="date")["in_universe"]
    assert not member["600003.SH"] and not member["600009.SH"]
    ranks = today.loc[member.to_numpy(), "ret_5d"].rank(pct=True)
    np.testing.assert_array_equal(today.loc[member.to_numpy(), "ret_5d_cs_rank"], ranks.astype(np.float32))
