"""The numbers of a sweep's study report: its trials compared with the baseline (from backtest.metrics
and backtest.statistics)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from backtest import metrics as m
from backtest.comparison import BENCHMARK_COLUMN, build_study_report
from backtest.errors import DataContractError
from backtest.statistics import dsr, expected_max_sharpe, hac_standard_error, holm_adjust, pbo_cscv, psr
from tests.sweep_trials import DAYS

# --------------------------------------------------------------------------------------------------
# The study report


def test_report_aligns_on_common_dates_and_notes_it(study, study_inputs) -> None:
    kept = DAYS.delete([10, 11, 50, 200, 250])
    assert study.returns.index.equals(kept.rename("date"))
    assert list(study.returns.columns) == ["base", "better", "worse", "reversed", BENCHMARK_COLUMN]
    assert any(note.startswith("5 of 300 dates were dropped") for note in study.notes)
    benchmark = study_inputs[1]
    pd.testing.assert_series_equal(study.returns[BENCHMARK_COLUMN], benchmark.loc[kept], check_names=False)


def test_report_numbers_equal_the_metrics(study) -> None:
    r = study.returns
    names = ["base", "better", "worse", "reversed"]
    sharpes = np.array([m.sharpe(r[n]) for n in names])
    np.testing.assert_allclose(study.trials["sharpe"].to_numpy(np.float64), sharpes, rtol=1e-12)
    var = np.var(sharpes, ddof=1)
    assert study.trial_sharpe_var == pytest.approx(var, rel=1e-12)
    assert study.n_trials == 10
    assert study.expected_max_sharpe == pytest.approx(expected_max_sharpe(10, var), rel=1e-12)
    for n in names:
        row = study.trials.loc[n]
        assert row["dsr"] == pytest.approx(dsr(r[n], 10, var), rel=1e-12)
        assert row["dsr"] < row["psr"]  # deflation by 10 trials lowers the bar's probability
        rest = m.drop_best_months(r[n], 3)
        assert row["sharpe_ex_best_3_months"] == pytest.approx(m.sharpe(rest), rel=1e-12)
        assert row["ann_return_ex_best_month"] == pytest.approx(m.ann_return(m.drop_best_months(r[n], 1)), rel=1e-12)
    assert study.best_trial == "better"
    # from trial_metrics: the metrics and the config that varies, nothing else
    assert study.trials.loc["better", "rank_ic_mean"] == 0.03
    assert study.trials.loc["worse", "turnover"] == 11.0
    assert study.trials["ndcg"].tolist() == [0.5, 0.6, 0.4, 0.5]
    assert study.trials["params.model.lr"].tolist() == [0.05, 0.1, 0.01, 0.05]
    assert "params.seed" not in study.trials.columns and "metrics.sharpe" not in study.trials.columns


def test_report_verdicts_without_daily_series_rest_on_the_sharpe(study) -> None:
    verdicts = study.trials["verdict"].to_dict()
    assert verdicts["base"] == "baseline"
    assert verdicts["better"] == "better than baseline (Sharpe, Holm p < 0.001)"
    assert verdicts["worse"] == "worse than baseline (Sharpe, Holm p < 0.001)"
    assert verdicts["reversed"].startswith("no detectable difference (Sharpe, Holm p = ")
    assert study.trials["verdict_statistic"].drop("base").eq("sharpe").all() and study.primary == "rank_ic"
    assert any(n.startswith("No paired rank IC difference for better, worse, reversed") for n in study.notes)
    base = study.trials.loc["base"]
    assert (base["sharpe_diff"], base["sharpe_diff_ci_low"], base["sharpe_diff_ci_high"]) == (0.0, 0.0, 0.0)
    better = study.trials.loc["better"]
    assert better["sharpe_diff"] == pytest.approx(better["sharpe"] - base["sharpe"], rel=1e-12)
    # the Sharpe's p-value comes from the normal reading of its paired bootstrap interval
    se = (better["sharpe_diff_ci_high"] - better["sharpe_diff_ci_low"]) / (2 * 1.959963984540054)
    assert better["sharpe_diff_se"] == pytest.approx(se, rel=1e-12)
    assert better["p_value"] == pytest.approx(2 * norm.sf(abs(better["sharpe_diff"] / se)), rel=1e-9)
    np.testing.assert_allclose(
        study.trials["p_holm"].drop("base"), holm_adjust(study.trials["p_value"].drop("base")), rtol=1e-12
    )
    assert np.isnan(study.trials.loc["base", "p_holm"]) and np.isnan(better["rank_ic_diff"])


def test_report_years_compound_by_hand(study) -> None:
    r = study.returns
    days_2024 = r.index[r.index.year == 2024]
    wealth = 1.0
    for value in r.loc[days_2024, "better"]:
        wealth *= 1.0 + value
    row = study.years.loc[(2024, "better")]
    assert row["return"] == pytest.approx(wealth - 1.0, rel=1e-12)
    assert row["n_days"] == len(days_2024)
    bench = study.years.loc[(2024, BENCHMARK_COLUMN)]
    assert bench["return"] == pytest.approx(np.prod(1.0 + r.loc[days_2024, BENCHMARK_COLUMN]) - 1.0, rel=1e-12)
    assert row["excess_return"] == pytest.approx(row["return"] - bench["return"], rel=1e-12)
    assert row["sharpe"] == pytest.approx(m.sharpe(r.loc[days_2024, "better"]), rel=1e-12)
    assert set(study.years.index.get_level_values("year")) == {2023, 2024}
    assert len(study.years) == 2 * 5  # 2 years x (4 trials + benchmark)


def test_report_pbo_with_blocks_reduced_for_a_short_period(study) -> None:
    # 295 common days: 16 blocks would hold 18 days, 14 hold 21 >= MIN_BLOCK_DAYS
    assert study.pbo is not None
    assert study.pbo.n_blocks == 14 and study.pbo.n_combinations == 3432
    assert any("reduced from 16 to 14" in note for note in study.notes)
    direct = pbo_cscv(study.returns.drop(columns=BENCHMARK_COLUMN), 14)
    assert study.pbo.pbo == direct.pbo
    # "better" = "base" + an edge = "worse" + twice that: a higher mean at the same std in every half, so
    # "base" and "worse" are never the IS best, and "better" selected is OOS above both (lambda > 0)
    counts = study.pbo.selection_counts()
    assert counts["base"] == 0 and counts["worse"] == 0 and counts.sum() == 3432
    picked_better = study.pbo.selected == study.pbo.trials.index("better")
    assert (study.pbo.logits[picked_better] > 0).all()


def test_single_trial_report_has_no_pbo(study_inputs) -> None:
    returns, benchmark, _ = study_inputs
    report = build_study_report(returns[["better"]], benchmark, title="one", n_boot=100)
    assert report.pbo is None
    assert any(note.startswith("PBO not computed") for note in report.notes)
    r = report.returns["better"]
    assert report.trial_sharpe_var == 0.0 and report.expected_max_sharpe == 0.0
    assert report.trials.loc["better", "dsr"] == pytest.approx(psr(r), rel=1e-12)
    assert report.trials.loc["better", "verdict"] == "baseline"


def test_short_period_skips_pbo(study_inputs) -> None:
    returns, benchmark, _ = study_inputs
    short = build_study_report(returns.iloc[:30], benchmark, title="short", n_boot=50)
    assert short.pbo is None
    assert any("too few for 2 CSCV blocks" in note for note in short.notes)


def test_report_input_errors(study_inputs) -> None:
    returns, benchmark, _ = study_inputs
    with pytest.raises(DataContractError, match="no trial"):
        build_study_report(pd.DataFrame(index=DAYS), benchmark, title="empty")
    with pytest.raises(DataContractError, match="share 0 date"):
        build_study_report(returns.iloc[:0], benchmark, title="no rows")
    with pytest.raises(DataContractError, match="baseline 'nope'"):
        build_study_report(returns, benchmark, title="x", baseline="nope")
    with pytest.raises(DataContractError, match="n_trials"):
        build_study_report(returns, benchmark, title="x", n_trials=2)
    with pytest.raises(DataContractError, match="unique"):
        build_study_report(returns.rename(columns={"worse": BENCHMARK_COLUMN}), benchmark, title="x")
    with pytest.raises(DataContractError, match="even integer"):
        build_study_report(returns, benchmark, title="x", n_blocks=15)
    with pytest.raises(DataContractError, match="DatetimeIndex"):
        build_study_report(returns.reset_index(drop=True), benchmark, title="x")


# --------------------------------------------------------------------------------------------------
# Comparisons on the daily rank IC and NDCG


def test_report_compares_the_daily_rank_ic_on_the_common_days(ranked, ranking_inputs) -> None:
    _, _, daily, _, _ = ranking_inputs
    t = ranked.trials
    common = daily["edge"]["rank_ic"].iloc[3:] - daily["base"]["rank_ic"].iloc[3:]
    edge = t.loc["edge"]
    assert edge["rank_ic_diff_days"] == len(DAYS) - 3
    assert edge["rank_ic_diff"] == pytest.approx(common.mean(), rel=1e-12)
    assert edge["rank_ic_diff_se"] == pytest.approx(hac_standard_error(common.to_numpy(), 4), rel=1e-12)
    assert edge["rank_ic_diff_ci_low"] < edge["rank_ic_diff"] < edge["rank_ic_diff_ci_high"]
    z = edge["rank_ic_diff"] / edge["rank_ic_diff_se"]
    assert edge["rank_ic_diff_p"] == pytest.approx(2 * norm.sf(abs(z)), rel=1e-9)
    assert edge["mde_rank_ic"] == pytest.approx(2.8015852 * edge["rank_ic_diff_se"], rel=1e-6)
    # the NDCG is paired the same way: the noise trial's is 0.01 lower on every day
    assert t.loc["noise", "ndcg_diff"] == pytest.approx(-0.01, abs=1e-12)
    assert t.loc["noise", "ndcg_diff_ci_low"] == pytest.approx(-0.01, abs=1e-12)
    # same daily returns: no Sharpe difference, while the rank IC resolves the edge
    assert edge["sharpe_diff"] == 0.0 and edge["verdict_statistic"] == "rank_ic"
    assert edge["verdict"].startswith("better than baseline (rank IC, Holm p ")
    noise = t.loc["noise"]
    assert noise["rank_ic_diff"] == pytest.approx(0.0008, rel=1e-9)
    assert noise["verdict"].startswith("no detectable difference (rank IC, Holm p = ")


def test_report_verdicts_hold_the_family_wise_error_with_holm(ranked) -> None:
    t = ranked.trials.drop("base")
    np.testing.assert_allclose(t["p_holm"], holm_adjust(t["p_value"]), rtol=1e-12)
    assert (t["p_holm"] >= t["p_value"]).all()
    # the old run has no daily series: its p-value is the Sharpe's, and it joins the same family
    old = ranked.trials.loc["old"]
    assert old["verdict_statistic"] == "sharpe" and np.isnan(old["rank_ic_diff"])
    assert old["p_value"] == old["sharpe_diff_p"] and "(Sharpe, Holm p" in old["verdict"]
    assert any(
        note.startswith("No paired rank IC difference for old: old was recorded before") for note in ranked.notes
    )


def test_an_unresolved_difference_says_how_many_days_would_resolve_it(ranked) -> None:
    noise = ranked.trials.loc["noise"]
    multiplier = norm.ppf(0.975) + norm.ppf(0.80)
    expected = np.ceil(
        noise["rank_ic_diff_days"] * (multiplier * noise["rank_ic_diff_se"] / abs(noise["rank_ic_diff"])) ** 2
    )
    assert noise["days_to_resolve"] == expected > len(DAYS)  # more days than the test has
    assert np.isnan(ranked.trials.loc["edge", "days_to_resolve"])  # resolved: nothing to wait for


def test_report_verdicts_on_ndcg_or_sharpe_when_the_study_says_so(ranking_inputs) -> None:
    returns, benchmark, daily, lags, _ = ranking_inputs
    on_ndcg = build_study_report(
        returns, benchmark, title="n", daily_ranking=daily, ic_lags=lags, primary="ndcg", n_boot=100
    )
    noise = on_ndcg.trials.loc["noise"]
    assert noise["verdict_statistic"] == "ndcg" and noise["verdict"].startswith("worse than baseline (NDCG, Holm p")
    assert noise["p_value"] == noise["ndcg_diff_p"]
    on_sharpe = build_study_report(
        returns, benchmark, title="s", daily_ranking=daily, ic_lags=lags, primary="sharpe", n_boot=100
    )
    assert on_sharpe.trials["verdict_statistic"].eq("sharpe").all()
    # identical daily returns: a Sharpe difference of exactly 0, however large the rank IC edge
    assert on_sharpe.trials.loc["edge", "verdict"] == "no detectable difference (Sharpe, Holm p = 1.000)"
    assert not any(note.startswith("No paired") for note in on_sharpe.notes)
    with pytest.raises(DataContractError, match="primary must be one of rank_ic, ndcg, sharpe"):
        build_study_report(returns, benchmark, title="x", primary="ic")


# --------------------------------------------------------------------------------------------------
# Seed replicates


def test_a_difference_within_the_seed_spread_does_not_count(ranking_inputs) -> None:
    returns, benchmark, daily, lags, _ = ranking_inputs
    edge_diff = build_study_report(returns, benchmark, title="x", daily_ranking=daily, ic_lags=lags, n_boot=50)
    edge = edge_diff.trials.loc["edge", "rank_ic_diff"]  # about +0.015, resolved by the daily noise alone
    spread = pd.DataFrame(
        {
            "n_seeds": [3, 3, 3, 1],
            "rank_ic_seed_sd": [0.002, 0.02, 0.001, np.nan],  # the edge trial's seeds disagree widely
            "ndcg_seed_sd": [0.001, 0.001, 0.001, np.nan],
            "sharpe_seed_sd": [0.3, 0.3, 0.3, np.nan],
        },
        index=["base", "edge", "noise", "old"],
    )
    report = build_study_report(
        returns, benchmark, title="seeds", daily_ranking=daily, ic_lags=lags, seed_spread=spread, n_boot=50
    )
    row = report.trials.loc["edge"]
    seed_se = np.sqrt(0.02**2 / 3 + 0.002**2 / 3)  # 0.0116: 1.96 x 0.0116 = 0.0228 > 0.015
    assert row["seed_se"] == pytest.approx(seed_se, rel=1e-12) and row["rank_ic_diff"] == pytest.approx(edge)
    assert row["p_holm"] < 0.05 and abs(edge) < 1.96 * seed_se
    assert (
        row["verdict"].startswith("no detectable difference (rank IC, Holm p ")
        and "within the seed spread" in row["verdict"]
    )
    assert row["n_seeds"] == 3 and row["rank_ic_seed_sd"] == 0.02 and row["sharpe_seed_sd"] == 0.3
    # the old run (one seed, no daily series) is judged on the Sharpe: only the baseline's seeds count
    old = report.trials.loc["old"]
    assert old["seed_se"] == pytest.approx(0.3 / np.sqrt(3), rel=1e-12) and old["n_seeds"] == 1
    # tighter seeds: the same difference counts
    tight = build_study_report(
        returns,
        benchmark,
        title="tight",
        daily_ranking=daily,
        ic_lags=lags,
        seed_spread=spread.assign(rank_ic_seed_sd=[0.002, 0.003, 0.001, np.nan]),
        n_boot=50,
    )
    assert tight.trials.loc["edge", "verdict"].startswith("better than baseline (rank IC")
    assert list(tight.trials.columns[tight.trials.columns.get_loc("days_to_resolve") + 1 :][:5]) == [
        "n_seeds",
        "rank_ic_seed_sd",
        "ndcg_seed_sd",
        "sharpe_seed_sd",
        "seed_se",
    ]
