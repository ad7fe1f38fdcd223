"""Drift: PSI and KS of feature values, importance drift across folds (backtest.drift), their heatmaps and
the report page (backtest.reports.drift_charts, backtest.reports.drift)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from backtest.drift import (
    KS_D_LARGE,
    KS_D_MODERATE,
    PSI_EPS,
    PSI_SIGNIFICANT,
    SMD_MODERATE,
    evenly_spaced,
    feature_value_drift,
    fold_windows,
    importance_drift,
    importance_jumps,
    population_stability_index,
    psi_artifact,
    psi_bin_edges,
    psi_by_fold,
    psi_flags,
    psi_per_column,
    read_psi_artifact,
)
from backtest.errors import DataContractError
from backtest.reports.drift import DriftRun, write_drift_report
from backtest.reports.drift_charts import plot_importance_rank_heatmap, plot_psi_heatmap

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


def test_feature_value_drift_gives_effect_sizes_psi_ks_d_and_smd_not_p_values() -> None:
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(4000, 3)).astype(np.float32)
    cur = rng.normal(size=(3000, 3)).astype(np.float32)
    cur[:, 1] += 2.0
    cur[:, 2] = np.nan
    table = feature_value_drift(ref, cur, ["rsi", "mf_ratio", "empty"])
    assert table.index.tolist() == ["rsi", "mf_ratio", "empty"]
    assert table.columns.tolist() == ["psi", "ks_d", "smd", "n_ref", "n_cur", "psi_level"]  # no p-value
    for j, name in enumerate(["rsi", "mf_ratio"]):
        a, b = ref[:, j].astype(np.float64), cur[:, j].astype(np.float64)
        assert table.loc[name, "ks_d"] == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)
        pooled = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
        assert table.loc[name, "smd"] == pytest.approx((b.mean() - a.mean()) / pooled, rel=1e-12)
        assert table.loc[name, "psi"] == pytest.approx(population_stability_index(ref[:, j], cur[:, j]), abs=1e-12)
    assert table.loc["rsi", "psi_level"] == "stable" and table.loc["mf_ratio", "psi_level"] == "significant"
    # a shift of 2 standard deviations: D and SMD read large; a resample reads small on both
    assert table.loc["mf_ratio", "ks_d"] > KS_D_LARGE and table.loc["mf_ratio", "smd"] == pytest.approx(2.0, abs=0.1)
    assert table.loc["rsi", "ks_d"] < KS_D_MODERATE and abs(table.loc["rsi", "smd"]) < SMD_MODERATE
    assert math.isnan(table.loc["empty", "psi"]) and table.loc["empty", "n_cur"] == 0
    assert table.loc["rsi", "n_ref"] == 4000 and table.loc["rsi", "n_cur"] == 3000


def test_feature_value_drift_max_rows_takes_evenly_spaced_rows() -> None:
    ref = np.arange(100, dtype=np.float32).reshape(-1, 1)
    full = feature_value_drift(ref, ref, ["x"])
    sub = feature_value_drift(ref, ref, ["x"], max_rows=10)
    assert full.loc["x", "n_ref"] == 100 and sub.loc["x", "n_ref"] == 10
    assert sub.loc["x", "psi"] == 0.0 and sub.loc["x", "ks_d"] == 0.0 and sub.loc["x", "smd"] == 0.0


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


def test_unused_features_have_no_rank_and_make_no_jumps_or_stability(tmp_path: Path) -> None:
    # 40 features; 28 have zero gain in both folds (unused: no rank, not tied for last place).
    # "top" falls from rank 2 to 15 while used in both folds: a jump (>= 10 places, top 30).
    # "dropped" ranks 3 in fold 0 and is unused in fold 1: it leaves the model, but is no rank change.
    used = {f"u{i:02d}": [float(100 - i), float(100 - i)] for i in range(10)}
    gain = {**used, "top": [99.5, 50.0], "dropped": [99.2, 0.0], "entered": [0.0, 60.0]}
    gain.update({f"zero{i:02d}": [0.0, 0.0] for i in range(27)})
    importance = pd.DataFrame(gain, index=[0, 1])
    drift = importance_drift(importance, jump_ranks=10, jump_top=30)
    assert drift.ranks.loc[0, "top"] == 2 and drift.ranks.loc[1, "top"] == 12
    assert drift.ranks.loc[0, "dropped"] == 3 and np.isnan(drift.ranks.loc[1, "dropped"])
    assert drift.ranks[[f"zero{i:02d}" for i in range(27)]].isna().all().all()
    assert drift.jumps[["feature", "fold_from", "fold_to", "rank_from", "rank_to"]].values.tolist() == [
        ["top", 0, 1, 2.0, 12.0]
    ]
    # Ranked with the unused features tied for last place (26.5 of 40), "dropped" would move 23.5 places.
    assert importance_drift(importance, jump_ranks=11).jumps.empty
    # The rank heatmap draws no rank for an unused feature.
    _, drawn = plot_importance_rank_heatmap(drift, tmp_path / "ranks.png", n_features=12)
    assert np.isnan(drawn.loc["dropped", 1]) and drawn.loc["top", 1] == 12 and "zero00" not in drawn.index
    changes = drift.rank_changes
    assert changes.loc["zero00", ["rank_first", "rank_last", "rank_change", "rank_range"]].isna().all()
    assert changes.loc["zero00", "folds_used"] == 0
    assert np.isnan(changes.loc["dropped", "rank_change"]) and changes.loc["dropped", "rank_range"] == 0
    stability = drift.rank_stability.iloc[0]
    both = [f"u{i:02d}" for i in range(10)] + ["top"]
    expected = stats.spearmanr(importance.loc[0, both], importance.loc[1, both]).statistic
    assert stability["spearman"] == pytest.approx(expected, abs=1e-12)
    assert (stability["n_used"], stability["n_entered"], stability["n_left"]) == (11, 1, 1)


def test_jump_needs_the_rank_threshold_and_a_top_rank() -> None:
    ranks = pd.DataFrame({"a": [1.0, 11.0], "b": [40.0, 55.0], "c": [5.0, 14.0]}, index=[0, 1])
    jumps = importance_jumps(ranks, jump_ranks=10, jump_top=30)
    assert jumps["feature"].tolist() == ["a"]  # b moved 15 places outside the top 30, c only 9


# --------------------------------------------------------------------------------------------------
# Per-fold PSI: each fold's training window against its test days

CAL = pd.bdate_range("2024-01-01", periods=120, name="date")
N_CODES = 50
SHIFT_DAY = 100  # "shifted" moves by +1.5 sd from this day on: only the last fold's test days see it


def _market_features() -> tuple[np.ndarray, pd.DatetimeIndex, list[str]]:
    rng = np.random.default_rng(11)
    n = len(CAL) * N_CODES
    dates = CAL.repeat(N_CODES)
    stable = rng.normal(size=n)
    shifted = rng.normal(size=n) + np.where(np.arange(n) >= SHIFT_DAY * N_CODES, 1.5, 0.0)
    gappy = rng.normal(size=n)
    gappy[rng.random(n) < 0.2] = np.nan
    gappy[::97] = np.inf
    values = np.column_stack([stable, shifted, gappy]).astype(np.float32)
    return values, dates, ["stable", "shifted", "gappy"]


WINDOWS = pd.DataFrame(
    {
        "train_start": CAL[[0, 20, 40]],
        "train_end": CAL[[59, 79, 99]],
        "test_start": CAL[[60, 80, 100]],
        "test_end": CAL[[79, 99, 119]],
    },
    index=pd.Index([0, 1, 2], name="fold"),
)


@pytest.mark.parametrize("max_rows", [None, 1000])
def test_psi_by_fold_equals_population_stability_index_on_the_fold_slices(max_rows, tmp_path: Path) -> None:
    values, dates, names = _market_features()
    psi = psi_by_fold(values, dates, WINDOWS, names, max_rows=max_rows)
    assert psi.shape == (3, 3) and psi.index.name == "fold"
    # Fold 1 by hand: rows of days 20..79 (reference) and 80..99 (current), thinned the same way.
    ref = values[20 * N_CODES : 80 * N_CODES]
    cur = values[80 * N_CODES : 100 * N_CODES]
    if max_rows is not None:
        assert len(ref) == 3000 > max_rows
        ref = ref[evenly_spaced(len(ref), max_rows)]
        cur = cur[evenly_spaced(len(cur), max_rows)]
    for j, name in enumerate(names):
        assert psi.loc[1, name] == population_stability_index(ref[:, j], cur[:, j])
    # the heatmap draws exactly these numbers (features x folds)
    _, drawn = plot_psi_heatmap(psi, tmp_path / "psi.png")
    assert drawn.loc["shifted", 1] == psi.loc[1, "shifted"] and drawn.loc["gappy", 2] == psi.loc[2, "gappy"]


def test_psi_per_column_is_the_psi_of_each_column() -> None:
    values, _, _ = _market_features()
    ref, cur = values[:3000], values[-1000:]
    together = psi_per_column(ref, cur)
    assert together.tolist() == [population_stability_index(ref[:, j], cur[:, j]) for j in range(3)]
    assert np.isnan(psi_per_column(np.full((5, 1), np.nan), np.ones((5, 1))))[0]


def test_psi_flags_fire_for_the_planted_shift_and_not_for_stable_features() -> None:
    values, dates, names = _market_features()
    psi = psi_by_fold(values, dates, WINDOWS, names)
    assert psi.loc[2, "shifted"] > 0.5  # +1.5 sd
    assert psi.loc[[0, 1], "shifted"].max() < 0.1 and psi["stable"].max() < 0.1 and psi["gappy"].max() < 0.1
    flags = psi_flags(psi)
    assert flags.index.tolist() == ["shifted"]
    assert flags.loc["shifted", ["folds_flagged", "folds", "max_at", "first_flagged"]].tolist() == [1, 3, 2, 2]
    assert flags.loc["shifted", "max_psi"] == psi.loc[2, "shifted"] > PSI_SIGNIFICANT
    assert psi_flags(psi[["stable"]]).empty


def test_a_fold_with_too_few_test_values_gets_no_psi_and_no_flag() -> None:
    values, dates, names = _market_features()
    short = pd.DataFrame(
        {"train_start": [CAL[40]], "train_end": [CAL[99]], "test_start": [CAL[100]], "test_end": [CAL[102]]},
        index=pd.Index([3], name="fold"),
    )  # 3 days x 50 codes
    assert psi_by_fold(values, dates, short, names).isna().all().all()  # 150 values < PSI_MIN_VALUES
    psi = psi_by_fold(values, dates, short, names, min_values=100)
    assert psi.loc[3, "shifted"] > PSI_SIGNIFICANT and psi.loc[3, "stable"] < PSI_SIGNIFICANT
    assert psi_flags(psi_by_fold(values, dates, short, names)).empty


def test_fold_windows_from_stored_leakage_records() -> None:
    records = [
        {"fold": 0, "decision_date": "2024-03-25", "train_start": "2024-01-01", "train_end": "2024-03-12"},
        {"fold": 1, "decision_date": "2024-04-22", "train_start": "2024-01-29", "train_end": "2024-04-09"},
    ]
    windows = fold_windows(records, CAL[60:100])  # test dates 2024-03-25 .. 2024-05-17
    assert windows.index.tolist() == [0, 1]
    assert windows.loc[0, "test_start"] == CAL[60] and windows.loc[0, "test_end"] == pd.Timestamp("2024-04-19")
    assert windows.loc[1, "test_start"] == pd.Timestamp("2024-04-22") and windows.loc[1, "test_end"] == CAL[99]
    assert windows.loc[1, "train_start"] == pd.Timestamp("2024-01-29")


def test_psi_artifact_round_trip(tmp_path: Path) -> None:
    values, dates, names = _market_features()
    psi = psi_by_fold(values, dates, WINDOWS, names)
    psi_artifact(psi, WINDOWS).to_csv(tmp_path / "feature_psi.csv")
    back, windows = read_psi_artifact(tmp_path / "feature_psi.csv")
    pd.testing.assert_frame_equal(windows, WINDOWS.astype("datetime64[ns]"), check_freq=False)
    assert back.columns.tolist() == names and np.allclose(back.to_numpy(), psi.to_numpy(), rtol=1e-15, atol=0)


# --------------------------------------------------------------------------------------------------
# The report


def test_write_drift_report_files(tmp_path: Path) -> None:
    ref = np.random.default_rng(4).normal(size=(200, 2))
    value_drift = feature_value_drift(ref, ref + np.array([0.0, 3.0]), ["momentum", "mf_main"])
    written = write_drift_report(tmp_path / "drift", importance=IMPORTANCE, value_drift=value_drift, top_n=2)
    assert [p.name for p in written] == [
        "importance_shares.csv",
        "importance_ranks.csv",
        "importance_top_by_period.csv",
        "importance_rank_stability.csv",
        "importance_rank_changes.csv",
        "importance_jumps.csv",
        "importance_rank_heatmap.png",
        "feature_value_drift.csv",
        "drift_report.md",
        "drift_report.html",
    ]
    stability = pd.read_csv(tmp_path / "drift/importance_rank_stability.csv")
    assert stability["spearman"].tolist() == pytest.approx([1.0, -1.0])
    markdown = (tmp_path / "drift/drift_report.md").read_text()
    assert "| 2023-01-03 | 2023-07-03 | 1 |" in markdown
    whole = markdown.split("## Whole test period against the first fold's training window")[1]
    assert "not per fold" in whole and "no p-values" in whole
    header, first = [line for line in whole.splitlines() if line.startswith("| ")][:2]
    assert header.startswith("| feature | psi | ks_d | smd |") and first.startswith("| mf_main | ")  # largest PSI first
    assert "<h2>Rank stability" in (tmp_path / "drift/drift_report.html").read_text()


def test_drift_report_names_the_run_windows_flags_and_embeds_the_heatmaps(tmp_path: Path) -> None:
    values, dates, names = _market_features()
    psi = psi_by_fold(values, dates, WINDOWS, names)
    importance = pd.DataFrame(
        {"stable": [5.0, 4.0, 1.0], "shifted": [1.0, 2.0, 3.0], "gappy": [0.0, 1.0, 2.0]}, index=WINDOWS["test_start"]
    )
    run = DriftRun(run_name="lambdarank-all", run_id="abc123", windows=WINDOWS)
    written = write_drift_report(tmp_path, importance=importance, fold_psi=psi, run=run)
    names_written = [p.name for p in written]
    assert {"psi_heatmap.png", "importance_rank_heatmap.png", "psi_by_fold.csv", "psi_flags.csv"} <= set(names_written)
    for png in ("psi_heatmap.png", "importance_rank_heatmap.png"):
        assert matplotlib.image.imread(tmp_path / png).ndim == 3
    markdown = (tmp_path / "drift_report.md").read_text()
    page = (tmp_path / "drift_report.html").read_text()
    assert markdown.startswith("# Feature drift report: lambdarank-all")
    assert "MLflow run abc123; test period (decision dates) 2024-03-25 .. 2024-06-14, 3 folds" in markdown
    assert "![PSI per feature and fold](psi_heatmap.png)" in markdown
    assert "![Importance rank per feature and fold](importance_rank_heatmap.png)" in markdown
    assert "| 1 | 2024-01-29 | 2024-04-19 | 2024-04-22 | 2024-05-17 |" in markdown  # fold 1's windows
    assert "<title>Feature drift report: lambdarank-all</title>" in page
    assert page.count("src='data:image/png;base64,") == 2
    flagged = markdown.split("## Features with PSI > 0.25")[1].split("##")[0]
    assert "| shifted | 1 | 3 |" in flagged and "| stable |" not in flagged
    # PSI columns are labelled by decision date once the windows are known
    assert pd.read_csv(tmp_path / "psi_flags.csv")["max_at"].tolist() == ["2024-05-20"]


def test_the_report_tells_one_story_per_fold_rank_ic_over_psi_and_jumps_per_fold(tmp_path: Path) -> None:
    values, dates, names = _market_features()
    psi = psi_by_fold(values, dates, WINDOWS, names)
    # "stable" and "shifted" swap first and third place twice; with three features a jump is 2 places into the top 1
    importance = pd.DataFrame(
        {"stable": [5.0, 1.0, 5.0], "shifted": [1.0, 5.0, 1.0], "gappy": [2.0, 2.0, 2.0]}, index=WINDOWS["test_start"]
    )
    rank_ic = pd.Series([0.04, 0.01, -0.03], index=pd.Index([0, 1, 2], name="fold"))
    run = DriftRun(run_name="lambdarank-all", run_id="abc123", windows=WINDOWS)
    write_drift_report(
        tmp_path, importance=importance, fold_psi=psi, fold_rank_ic=rank_ic, run=run, jump_ranks=2, jump_top=1
    )
    summary = pd.read_csv(tmp_path / "fold_summary.csv", index_col="fold")
    assert summary["rank_ic"].tolist() == [0.04, 0.01, -0.03]
    assert summary["psi_flagged"].tolist() == [0, 0, 1]  # only the last fold's test days see the shift
    assert summary["psi_median"].tolist() == pytest.approx(psi.median(axis=1).tolist(), rel=1e-12)
    jumps = pd.read_csv(tmp_path / "importance_jumps.csv")
    # no previous fold for the first; then each swap moves both features
    assert math.isnan(summary.loc[0, "jumps"]) and summary["jumps"].iloc[1:].tolist() == [2, 2]
    assert summary["jumps"].sum() == len(jumps) == 4
    markdown = (tmp_path / "drift_report.md").read_text()
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Per fold" and not any("Whole test period" in h for h in sections)  # none given
    assert "| 2 | 2024-02-26 | 2024-05-17 | 2024-05-20 | 2024-06-14 | -0.03 | 1 | 0.01536 | 2 | -1 |" in markdown
    assert "Above: each fold's rank IC." in markdown
    # the rank IC panel sits above the heatmap: the same heatmap is taller with it
    plain = matplotlib.image.imread(plot_psi_heatmap(psi, tmp_path / "plain.png")[0])
    assert matplotlib.image.imread(tmp_path / "psi_heatmap.png").shape[0] > plain.shape[0] + 100
