"""Look-ahead: every registered feature is causal; planted look-ahead features are caught."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import backtest.engine as engine
import backtest.features.audit as audit_module
from backtest.errors import FeatureAuditError
from backtest.features import FeatureSetSpec, audit_features, build_features
from backtest.features.audit import (
    AUDIT_HORIZON,
    SITUATIONS,
    _audit_cost,
    choose_cutoffs,
    cutoff_groups,
    cutoff_situations,
)
from backtest.features.build import compute_features
from backtest.features.inputs import MarketData
from backtest.features.registry import Indicator, default_registry
from backtest.features.rolling import lag
from backtest.features.sets import plan_features
from backtest.splits import RollingSchedule
from tests.features.feature_fixtures import EVERYTHING, PLANTED, make_panel


@pytest.mark.parametrize("seed", [0, 1])
def test_every_registered_feature_is_causal_on_truncated_panels(seed, leaky_registry):
    """Recompute every registered feature (all transforms) on the panel cut after each cutoff and
    compare with the full-history, full-future build: bit-identical on every day up to the cutoff."""
    panel = make_panel(seed)
    spec = FeatureSetSpec(name="everything", exclude=tuple(p.name for p in PLANTED), industry_neutral=True)
    plan = plan_features(spec, leaky_registry, panel.columns)
    assert not plan.dropped and len(plan.indicators) == len(leaky_registry) - len(PLANTED)
    full, _ = compute_features(panel, plan, rows="all")
    dates = panel.index.get_level_values(0)
    for cutoff in dates.unique()[[20, 40, 63, 78, 100, 130]]:
        n = int((dates <= cutoff).sum())
        cut, _ = compute_features(panel.iloc[:n], plan, rows="all")
        same = (cut == full[:n]) | (np.isnan(cut) & np.isnan(full[:n]))
        bad = [plan.columns[j].name for j in np.flatnonzero(~same.all(axis=0))]
        assert bad == [], f"cutoff {cutoff:%Y-%m-%d}: {bad}"
        assert np.isfinite(cut[-12:]).mean() > 0.5  # the comparison is not vacuous near the cutoff


def test_audit_passes_every_registered_feature(panel, cutoffs):
    full_future = audit_features(panel, EVERYTHING, cutoffs, horizon=None, warmup=10_000)
    cheap = audit_features(panel, EVERYTHING, cutoffs)
    for report in (full_future, cheap):
        assert report.passed and report.findings == () and report.offending == []
        assert report.status == "passed"  # the feature_audit tag
        assert report.n_features == 389 and len(report.cutoffs) == len(cutoffs)
        report.raise_if_failed()
    assert cheap.n_values_compared < full_future.n_values_compared
    assert "passed" in cheap.summary()


def test_audit_counts_the_rows_its_two_builds_compute(panel):
    """One cutoff: the reference build's rows (warm-up, the cutoff day, the horizon) plus the truncated
    build's (warm-up and the cutoff day), counted from the panel's dates."""
    days = panel.index.get_level_values(0)
    unique = days.unique()
    p = 90
    report = audit_features(panel, EVERYTHING, [unique[p]], warmup=30, horizon=7)
    reference = int(((days >= unique[p - 30]) & (days <= unique[p + 7])).sum())
    truncated = int(((days >= unique[p - 30]) & (days <= unique[p])).sum())
    assert report.rows_built == reference + truncated
    assert report.n_values_compared == truncated * report.n_features


def test_audit_passes_on_the_synthetic_market(tiny_panel):
    report = audit_features(tiny_panel, EVERYTHING)
    assert report.passed and len(report.cutoffs) >= 3 and report.uncovered == ()


@pytest.mark.parametrize("leak", [p.name for p in PLANTED])
def test_each_planted_look_ahead_feature_is_flagged(leak, panel, cutoffs, leaky_registry):
    spec = FeatureSetSpec(name="leaky", indicators=(leak, "ret_5d", "mf_main_net_rate"), exclude=())
    report = audit_features(panel, spec, cutoffs, registry=leaky_registry)
    assert not report.passed and report.status == "failed"
    assert {f.feature.removesuffix("_cs_rank").removesuffix("_cs_z") for f in report.findings} == {leak}
    worst = max(report.findings, key=lambda f: f.max_abs_diff)
    assert worst.max_abs_diff > 0 and worst.n_mismatched > 0 and worst.first_date <= worst.cutoff
    with pytest.raises(FeatureAuditError, match=leak):
        report.raise_if_failed()


def test_all_planted_features_flagged_together_and_nothing_else(panel, cutoffs, leaky_registry):
    spec = FeatureSetSpec(name="leaky", exclude=())
    report = audit_features(panel, spec, cutoffs, registry=leaky_registry)
    bases = {name.removesuffix("_cs_rank").removesuffix("_cs_z") for name in report.offending}
    assert bases == {p.name for p in PLANTED}
    assert "FAILED" in report.summary() and "leak_shift" in report.summary()


def test_audit_window_is_small_and_skips_a_cutoff_without_future(panel, caplog):
    last = panel.index.get_level_values(0)[-1]
    report = audit_features(panel, FeatureSetSpec(indicators=("ret_1d",)), [last])
    assert report.passed and report.cutoffs == () and "no future" in caplog.text


def test_a_planted_leak_also_shows_in_the_feature_matrix(panel, leaky_registry):
    """The leak is real: the leaked value equals the next day's return."""
    spec = FeatureSetSpec(name="leaky", indicators=("leak_shift", "ret_1d"), cs_rank=False, cs_z=False)
    frame = build_features(panel, spec, data_fingerprint="x", registry=leaky_registry, rows="all").to_frame()
    one = frame.xs("600000.SH", level="code")
    np.testing.assert_array_equal(one["leak_shift"].to_numpy()[:-1], one["ret_1d"].to_numpy()[1:])


# --- leaks that only show for some positions of the cutoff ---------------------------------------------
#
# Each one reads one day ahead only when the day is in one position (a month's last day, a week's first
# day, a suspension's last day, a reconstitution day), so that an audit cut anywhere else passes it:
# the rows that read ahead lie before the cutoff, with their next day inside the cut panel. The default
# audit must cut in every one of these positions.


def _next_where(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values`` with the rows (dates) where ``rows`` holds replaced by the next row (NaN on the last)."""
    out = values.copy()
    rows = np.broadcast_to(rows if rows.ndim == 2 else rows[:, None], values.shape)
    out[:-1][rows[:-1]] = values[1:][rows[:-1]]
    out[-1][rows[-1]] = np.nan
    return out


def leak_month_end(m: MarketData) -> np.ndarray:
    """Daily return, where the month's last day takes the next month's first (the month end read from the
    next trading day's date)."""
    month = m.grid.dates.to_period("M").asi8
    end = np.zeros(len(month), dtype=bool)
    end[:-1] = month[1:] != month[:-1]
    return _next_where(m.ret, end)


def leak_week_start(m: MarketData) -> np.ndarray:
    """Daily return, where the week's first day takes the next day's."""
    week = m.grid.dates.to_period("W").asi8
    start = np.ones(len(week), dtype=bool)
    start[1:] = week[1:] != week[:-1]
    return _next_where(m.ret, start)


def leak_suspension_end(m: MarketData) -> np.ndarray:
    """Volume, where a suspension's last day takes the resumption day's (read from the next row)."""
    last = np.zeros(m.grid.shape, dtype=bool)
    last[:-1] = m.present[:-1] & ~m.traded[:-1] & m.traded[1:]
    return _next_where(m.activity("volume"), last)


def leak_reconstitution(m: MarketData) -> np.ndarray:
    """Daily return, where a stock that joins or leaves the index today takes tomorrow's."""
    change = np.zeros(m.grid.shape, dtype=bool)
    change[1:] = m.present[1:] & m.present[:-1] & (m.eligible[1:] != m.eligible[:-1])
    return _next_where(m.ret, change)


def leak_reconstitution_eve(m: MarketData) -> np.ndarray:
    """5-day return ranked among tomorrow's index members (today's on the last day)."""
    ret5 = m.close / lag(m.close, 5) - 1.0
    members = m.eligible.copy()
    members[:-1] = m.eligible[1:]
    return pd.DataFrame(np.where(members & m.present, ret5, np.nan)).rank(axis=1, pct=True).to_numpy()


POSITIONAL = {
    "month_end": Indicator("leak_month_end", leak_month_end, ("close",), 1, "momentum", "planted: month end"),
    "week_start": Indicator("leak_week_start", leak_week_start, ("close",), 1, "momentum", "planted: week start"),
    "suspension_end": Indicator(
        "leak_suspension_end", leak_suspension_end, ("volume",), 0, "activity", "planted: suspension end"
    ),
    "reconstitution": Indicator(
        "leak_reconstitution", leak_reconstitution, ("close",), 1, "momentum", "planted: reconstitution day"
    ),
    "reconstitution_eve": Indicator(
        "leak_reconstitution_eve",
        leak_reconstitution_eve,
        ("close",),
        5,
        "momentum",
        "planted: tomorrow's members",
        cross_sectional=False,
    ),
}


@pytest.fixture(scope="module")
def positional_registry():
    return default_registry().extended(*POSITIONAL.values())


def _leaky_spec(leak: Indicator) -> FeatureSetSpec:
    return FeatureSetSpec(name="leaky", indicators=(leak.name, "ret_5d"), exclude=(), windows=())


@pytest.mark.parametrize("situation", list(POSITIONAL))
def test_a_positional_leak_shows_only_in_its_position(situation, panel, positional_registry):
    """The planted leak is flagged at every cutoff in its position and passes at cutoffs in no position
    at all: evenly spread cutoffs find it only by luck of the calendar."""
    leak = POSITIONAL[situation]
    table = cutoff_situations(panel).iloc[:-25]
    inside = table.index[table[situation]][:3]
    ordinary = table.index[~table.any(axis=1)][[5, 20, 40]]
    assert len(inside) and len(ordinary) == 3
    for day in inside:
        report = audit_features(panel, _leaky_spec(leak), [day], registry=positional_registry)
        assert report.offending and {f.removesuffix("_cs_rank").removesuffix("_cs_z") for f in report.offending} == {
            leak.name
        }, (situation, day)
    assert audit_features(panel, _leaky_spec(leak), list(ordinary), registry=positional_registry).passed


@pytest.mark.parametrize("situation", list(POSITIONAL))
def test_the_default_audit_catches_a_positional_leak(situation, panel, positional_registry):
    leak = POSITIONAL[situation]
    report = audit_features(panel, _leaky_spec(leak), registry=positional_registry)
    assert not report.passed and {f.removesuffix("_cs_rank").removesuffix("_cs_z") for f in report.offending} == {
        leak.name
    }
    assert situation in report.covered and leak.name in report.summary()


def test_the_default_audit_covers_every_position_for_the_cost_of_three_cutoffs(panel, positional_registry, monkeypatch):
    builds = []
    real = audit_module.compute_features
    monkeypatch.setattr(audit_module, "compute_features", lambda *a, **k: builds.append(1) or real(*a, **k))
    spec = FeatureSetSpec(name="leaky", indicators=tuple(p.name for p in POSITIONAL.values()), exclude=())
    report = audit_features(panel, spec, registry=positional_registry)
    assert set(report.covered) == set(SITUATIONS) and report.uncovered == ()
    assert len(report.cutoffs) > 3 and len(builds) <= 2 * 3  # three lone cutoffs: 3 references + 3 cuts
    assert report.offending == sorted(c.name for c in plan_features(spec, positional_registry, panel.columns).columns)
    assert "not covered" not in report.summary() and "month_end 2021-04-30" in report.summary()


def test_a_clean_registry_passes_the_default_audit_and_reports_its_coverage(panel):
    report = audit_features(panel, EVERYTHING)
    assert report.passed and set(report.covered) == set(SITUATIONS)
    assert "positions covered: " in report.summary()


def test_the_engine_audits_the_test_period_in_every_position_it_holds(tiny_panel):
    schedule = RollingSchedule(retrain_every=20, train_window=100, valid_days=10, embargo=2, test_start="2022-07-01")
    start, end = schedule.test_period(pd.DatetimeIndex(tiny_panel.index.get_level_values(0).unique()))
    held = cutoff_situations(tiny_panel).loc[start:end].iloc[:-AUDIT_HORIZON].any()
    held = set(held.index[held])
    spec = FeatureSetSpec(name="small", indicators=("ret_5d", "vol_20d"))
    # Half a year holds one reconstitution, its eve, five month ends, ...: a budget of four lone cutoffs
    # covers them all; three cover all but one, and the report names the one it missed.
    full = audit_features(tiny_panel, spec, engine._audit_cutoffs(tiny_panel, schedule, 4))
    assert full.passed and set(full.covered) == held and full.uncovered == ()
    assert all(start <= c <= end for c in full.cutoffs) and len(full.cutoffs) >= 4
    tight = audit_features(tiny_panel, spec, engine._audit_cutoffs(tiny_panel, schedule, 3))
    assert tight.passed and set(tight.covered) | set(tight.uncovered) == held
    assert len(tight.uncovered) <= 1 and all(name in tight.summary() for name in tight.uncovered)


def test_cutoffs_are_chosen_within_the_budget_and_never_on_the_last_day(panel):
    dates = panel.index.get_level_values(0).unique()
    for n in (1, 2, 3, 5):
        chosen = [dates.get_loc(d) for d in choose_cutoffs(panel, n)]
        warmups, days = _audit_cost(chosen, AUDIT_HORIZON)
        assert warmups <= 2 * n and days <= n * AUDIT_HORIZON and max(chosen) < len(dates) - 1
    assert choose_cutoffs(panel, 0) == []
    assert cutoff_groups([3, 8, 14, 15]) == [[3, 8], [14, 15]]


def test_positions_the_data_never_holds_are_reported_apart(panel):
    no_index = panel.drop(columns="in_universe")
    report = audit_features(no_index, FeatureSetSpec(name="small", indicators=("ret_5d",)))
    assert report.absent == ("reconstitution_eve", "reconstitution") and report.uncovered == ()
    assert report.summary().endswith("not in the data: reconstitution_eve, reconstitution")
    one_cutoff = audit_features(panel, FeatureSetSpec(name="small", indicators=("ret_5d",)), [panel.index[0][0]])
    assert one_cutoff.uncovered and "not covered: " in one_cutoff.summary()
