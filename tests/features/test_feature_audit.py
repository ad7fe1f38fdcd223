"""Look-ahead: every registered feature is causal; planted look-ahead features are caught."""

from __future__ import annotations

import numpy as np
import pytest
from feature_fixtures import PLANTED, make_panel

from backtest.errors import FeatureAuditError
from backtest.features import FeatureSetSpec, audit_features, build_features
from backtest.features.build import compute_features
from backtest.features.sets import plan_features

EVERYTHING = FeatureSetSpec(name="everything", exclude=(), industry_neutral=True)


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
        assert report.n_features == 389 and len(report.cutoffs) == len(cutoffs)
        report.raise_if_failed()
    assert cheap.n_values_compared < full_future.n_values_compared
    assert "passed" in cheap.summary()


def test_audit_passes_on_the_synthetic_market(tiny_panel):
    report = audit_features(tiny_panel, EVERYTHING)
    assert report.passed and len(report.cutoffs) == 3


@pytest.mark.parametrize("leak", [p.name for p in PLANTED])
def test_each_planted_look_ahead_feature_is_flagged(leak, panel, cutoffs, leaky_registry):
    spec = FeatureSetSpec(name="leaky", indicators=(leak, "ret_5d", "mf_main_net_rate"), exclude=())
    report = audit_features(panel, spec, cutoffs, registry=leaky_registry)
    assert not report.passed
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
