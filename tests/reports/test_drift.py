"""Drift: PSI and KS of feature values, importance drift across folds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from backtest.errors import DataContractError
from backtest.reports.drift import (
    PSI_EPS,
    feature_value_drift,
    importance_drift,
    population_stability_index,
    psi_bin_edges,
    write_drift_report,
)

# --------------------------------------------------------------------------------------------------
# PSI


def test_psi_of_identical_samples_is_zero() -> None:
    x = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    assert population_stability_index(x, x.copy()) == 0.0


def test_psi_two_bin_hand_example() -> None:
    # Edge = reference median 2.5. Reference 2/4 | 2/4, current {1} | {3, 4, 5} = 1/4 | 3/4.
    psi = population_stability_index(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 4.0, 5.0]), n_bins=2)
    assert psi == pytest.approx((0.25 - 0.5) * math.log(0.25 / 0.5) + (0.75 - 0.5) * math.log(0.75 / 0.5), abs=1e-15)
    assert psi == pytest.approx(0.274653, abs=1e-6)


def test_psi_bins_are_right_closed_and_empty_bins_use_eps() -> None:
    # Reference [1, 2, 2, 3]: median edge 2.0; 2.0 falls in the lower bin -> 3/4 | 1/4.
    # Current all 2.0 -> 1 | 0, the empty bin counted as eps.
    psi = population_stability_index(np.array([1.0, 2.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0, 2.0]), n_bins=2)
    expected = (1 - 0.75) * math.log(1 / 0.75) + (PSI_EPS - 0.25) * math.log(PSI_EPS / 0.25)
    assert psi == pytest.approx(expected, abs=1e-15)


def test_psi_bin_edges_are_reference_deciles_with_duplicates_merged() -> None:
    assert psi_bin_edges(np.arange(1.0, 12.0)) == pytest.approx(np.arange(2.0, 11.0))  # 1..11: deciles 2..10
    # Discrete feature: deciles 0, 0, ..., 0, 0.2, 1 -> three distinct edges.
    assert psi_bin_edges(np.array([0.0] * 8 + [1.0] * 2)) == pytest.approx([0.0, 0.2, 1.0])


def test_psi_ignores_nan_and_is_nan_without_values() -> None:
    ref, cur = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 4.0, 5.0])
    with_nan = population_stability_index(np.append(ref, np.nan), np.append(cur, [np.nan, np.inf]), n_bins=2)
    assert with_nan == population_stability_index(ref, cur, n_bins=2)
    assert math.isnan(population_stability_index(ref, np.array([np.nan])))


def test_psi_flags_a_shifted_feature_and_not_a_resample() -> None:
    rng = np.random.default_rng(1)
    ref = rng.normal(size=20_000)
    assert population_stability_index(ref, rng.normal(size=5_000)) < 0.01
    assert population_stability_index(ref, rng.normal(loc=1.0, size=5_000)) > 0.25


# --------------------------------------------------------------------------------------------------
# Feature value drift table


def test_feature_value_drift_table_matches_psi_and_scipy_ks() -> None:
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(4000, 3)).astype(np.float32)
    cur = rng.normal(size=(3000, 3)).astype(np.float32)
    cur[:, 1] += 2.0
    cur[:, 2] = np.nan
    table = feature_value_drift(ref, cur, ["rsi", "mf_ratio", "empty"])
    assert table.index.tolist() == ["rsi", "mf_ratio", "empty"]
    for j, name in enumerate(["rsi", "mf_ratio"]):
        ks = stats.ks_2samp(ref[:, j], cur[:, j], method="asymp")
        assert table.loc[name, "ks_stat"] == pytest.approx(ks.statistic, abs=1e-12)
        assert table.loc[name, "ks_pvalue"] == pytest.approx(ks.pvalue, rel=1e-9)
        assert table.loc[name, "psi"] == pytest.approx(population_stability_index(ref[:, j], cur[:, j]), abs=1e-12)
    assert table.loc["rsi", "psi_level"] == "stable" and table.loc["mf_ratio", "psi_level"] == "significant"
    assert table.loc["mf_ratio", "ks_pvalue"] < 1e-10
    assert math.isnan(table.loc["empty", "psi"]) and table.loc["empty", "n_cur"] == 0
    assert table.loc["rsi", "n_ref"] == 4000 and table.loc["rsi", "n_cur"] == 3000


def test_feature_value_drift_max_rows_takes_evenly_spaced_rows() -> None:
    ref = np.arange(100, dtype=np.float32).reshape(-1, 1)
    full = feature_value_drift(ref, ref, ["x"])
    sub = feature_value_drift(ref, ref, ["x"], max_rows=10)
    assert full.loc["x", "n_ref"] == 100 and sub.loc["x", "n_ref"] == 10
    assert sub.loc["x", "psi"] == 0.0 and sub.loc["x", "ks_stat"] == 0.0


def test_feature_value_drift_shape_errors() -> None:
    with pytest.raises(DataContractError, match="reference has 2 columns, current 3, names 2"):
        feature_value_drift(np.zeros((5, 2)), np.zeros((5, 3)), ["a", "b"])
    with pytest.raises(DataContractError, match="2-D"):
        feature_value_drift(np.zeros(5), np.zeros(5), ["a"])


# --------------------------------------------------------------------------------------------------
# Importance drift


FOLDS = pd.to_datetime(["2023-01-03", "2023-07-03", "2024-01-02"])
IMPORTANCE = pd.DataFrame(
    {"momentum": [3.0, 30.0, 1.0], "mf_main": [2.0, 20.0, 2.0], "boll_width": [1.0, 10.0, 3.0]}, index=FOLDS
)


def test_importance_shares_normalize_each_fold() -> None:
    drift = importance_drift(IMPORTANCE)
    assert drift.shares.loc[FOLDS[0]].tolist() == pytest.approx([0.5, 1 / 3, 1 / 6])
    assert drift.shares.loc[FOLDS[1]].tolist() == pytest.approx([0.5, 1 / 3, 1 / 6])  # 10x gain, same shares


def test_rank_stability_is_spearman_between_consecutive_folds() -> None:
    stability = importance_drift(IMPORTANCE).rank_stability
    assert stability["fold_from"].tolist() == list(FOLDS[:2])
    assert stability["spearman"].tolist() == pytest.approx([1.0, -1.0])


def test_top_features_per_year() -> None:
    top = importance_drift(IMPORTANCE, top_n=2).top_by_period
    assert top.to_dict("list") == {
        "period": [2023, 2023, 2024, 2024],
        "rank": [1, 2, 1, 2],
        "feature": ["momentum", "mf_main", "boll_width", "mf_main"],
        "share": pytest.approx([0.5, 1 / 3, 0.5, 1 / 3]),
    }


def test_rank_changes_sorted_by_range() -> None:
    changes = importance_drift(IMPORTANCE).rank_changes
    assert changes.index.tolist() == ["momentum", "boll_width", "mf_main"]
    assert changes.loc["momentum", ["rank_first", "rank_last", "rank_change", "rank_range"]].tolist() == [1, 3, 2, 2]
    assert changes.loc["boll_width", "rank_change"] == -2
    assert changes.loc["mf_main", "rank_range"] == 0


def test_explicit_periods_and_missing_gain() -> None:
    importance = pd.DataFrame({"a": [1.0, np.nan], "b": [1.0, 4.0]}, index=[0, 1])
    drift = importance_drift(importance, periods=["H1", "H2"], top_n=1)
    assert drift.top_by_period[["period", "feature"]].values.tolist() == [["H1", "a"], ["H2", "b"]]
    assert drift.shares.loc[1].tolist() == [0.0, 1.0]
    with pytest.raises(DataContractError, match="3 period labels for 2 folds"):
        importance_drift(importance, periods=["a", "b", "c"])
    with pytest.raises(DataContractError, match="gain must be >= 0"):
        importance_drift(-importance.fillna(0))


def test_write_drift_report_files(tmp_path: Path) -> None:
    ref = np.random.default_rng(4).normal(size=(200, 2))
    value_drift = feature_value_drift(ref, ref + np.array([0.0, 3.0]), ["momentum", "mf_main"])
    written = write_drift_report(tmp_path / "drift", importance=IMPORTANCE, value_drift=value_drift, top_n=2)
    assert [p.name for p in written] == [
        "importance_shares.csv", "importance_top_by_period.csv", "importance_rank_stability.csv",
        "importance_rank_changes.csv", "feature_value_drift.csv", "drift_report.md", "drift_report.html",
    ]
    stability = pd.read_csv(tmp_path / "drift/importance_rank_stability.csv")
    assert stability["spearman"].tolist() == pytest.approx([1.0, -1.0])
    markdown = (tmp_path / "drift/drift_report.md").read_text()
    assert "| 2023-01-03 | 2023-07-03 | 1 |" in markdown
    assert "| mf_main | " in markdown.split("Feature value drift")[1].splitlines()[6]  # largest PSI first
    assert "<h2>Rank stability" in (tmp_path / "drift/drift_report.html").read_text()
