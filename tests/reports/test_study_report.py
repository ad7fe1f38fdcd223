"""The study report of a sweep: CSCV / PBO against an independent reference, the paired Sharpe
difference, the report's numbers and its files."""

from __future__ import annotations

import base64
import itertools
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata

from backtest import metrics as m
from backtest.errors import DataContractError
from backtest.metrics import paired_sharpe_difference
from backtest.reports.study import (
    BENCHMARK_COLUMN,
    STUDY_REPORT_FILES,
    build_study_report,
    pbo_cscv,
    trial_colors,
    write_study_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------
# An independent CSCV, straight from the paper's algorithm (loops, no shared code)


def _column_sharpe(rows: np.ndarray) -> np.ndarray:
    return rows.mean(axis=0) / rows.std(axis=0, ddof=1)


def reference_cscv(values: np.ndarray, n_blocks: int, metric=_column_sharpe) -> tuple[float, np.ndarray]:
    """PBO and the logits, one per combination in itertools order. Blocks: numpy.array_split (the
    documented rule for a remainder: the first T mod S blocks get one row more)."""
    n_trials = values.shape[1]
    blocks = np.array_split(np.arange(len(values)), n_blocks)
    logits = []
    for chosen in itertools.combinations(range(n_blocks), n_blocks // 2):
        is_rows = np.concatenate([blocks[b] for b in chosen])
        oos_rows = np.concatenate([blocks[b] for b in range(n_blocks) if b not in chosen])
        best = int(np.argmax(metric(values[is_rows])))
        oos_rank = rankdata(metric(values[oos_rows]), method="average")[best]  # 1 = worst
        omega = oos_rank / (n_trials + 1)
        logits.append(np.log(omega / (1 - omega)))
    logits = np.array(logits)
    return float(np.mean(logits <= 0)), logits


@pytest.mark.parametrize(
    ("n_rows", "n_trials", "n_blocks", "seed"),
    [
        (500, 10, 14, 0),  # 3,432 combinations; remainder 500 mod 14 = 10
        (203, 5, 8, 1),  # 203 = 8 * 25 + 3: a remainder of 3 rows
        (97, 3, 10, 2),  # odd N: a median rank gives lambda = 0; remainder 7
        (64, 2, 2, 3),
        (150, 7, 12, 4),  # remainder 6
    ],
)
def test_pbo_matches_the_reference_cscv(n_rows: int, n_trials: int, n_blocks: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # trials of different skill so the selection is not pure noise
    values = rng.normal(0.0, 0.01, size=(n_rows, n_trials)) + rng.normal(0.0, 0.0008, size=n_trials)
    expected_pbo, expected_logits = reference_cscv(values, n_blocks)
    result = pbo_cscv(pd.DataFrame(values), n_blocks)
    assert result.n_blocks == n_blocks
    assert result.n_combinations == len(expected_logits)
    assert result.pbo == expected_pbo
    np.testing.assert_allclose(result.logits, expected_logits, rtol=0, atol=1e-12)
    assert sum(result.block_sizes) == n_rows
    assert result.block_sizes == tuple(len(b) for b in np.array_split(np.arange(n_rows), n_blocks))


def test_custom_metric_matches_the_reference_and_the_vectorised_sharpe() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(0.0002, 0.01, size=(123, 4))
    frame = pd.DataFrame(values, columns=list("abcd"))
    for metric in (_column_sharpe, lambda rows: rows.mean(axis=0)):
        expected_pbo, expected_logits = reference_cscv(values, 6, metric)
        result = pbo_cscv(frame, 6, metric=metric)
        assert result.pbo == expected_pbo
        np.testing.assert_allclose(result.logits, expected_logits, rtol=0, atol=1e-12)
    # the loop over combinations with the default metric gives the vectorised result
    vectorised = pbo_cscv(frame, 6)
    looped = pbo_cscv(frame, 6, metric=_column_sharpe)
    np.testing.assert_array_equal(vectorised.selected, looped.selected)
    np.testing.assert_allclose(vectorised.is_performance, looped.is_performance, rtol=1e-10)
    np.testing.assert_allclose(vectorised.oos_performance, looped.oos_performance, rtol=1e-10)


def test_pbo_is_fast_enough_for_the_papers_sixteen_blocks() -> None:
    frame = pd.DataFrame(np.random.default_rng(6).normal(0.0, 0.01, size=(500, 10)))
    pbo_cscv(frame, 16)  # warm-up
    start = time.perf_counter()
    result = pbo_cscv(frame, 16)
    elapsed = time.perf_counter() - start
    assert result.n_combinations == 12_870
    assert elapsed < 1.0, f"pbo_cscv took {elapsed:.2f}s for T=500, N=10, S=16"


# --------------------------------------------------------------------------------------------------
# Hand-made matrices with a known PBO


def test_a_trial_skilled_in_every_block_gives_pbo_zero() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(0.0, 0.01, size=(480, 6))
    values[:, 2] += 0.02  # two standard deviations of drift a day: best in every half
    result = pbo_cscv(pd.DataFrame(values, columns=[f"t{i}" for i in range(6)]), 16)
    assert result.pbo == 0.0
    assert (result.selected == 2).all()
    np.testing.assert_allclose(result.best_is_oos_rank, 6 / 7)  # OOS best of 6: rank 6 / (N + 1)
    np.testing.assert_allclose(result.logits, np.log(6.0), rtol=1e-12)
    assert result.prob_oos_loss == 0.0
    assert result.selection_counts()["t2"] == 12_870


def test_pure_noise_trials_give_pbo_near_one_half() -> None:
    # Trials of the same distribution with IS and OOS on disjoint days: the IS-best trial's OOS rank is
    # uniform on 1..N, so for an even N the expected PBO is exactly P(rank <= N/2) = 0.5. One matrix's
    # PBO is far from that (its 70 combinations reuse the same days: the spread across matrices is
    # about 0.25), so average 100 independent matrices: the standard error is about 0.025 and the
    # tolerance 0.08 is over three of them.
    pbos = [
        pbo_cscv(pd.DataFrame(np.random.default_rng(1000 + s).normal(0.0, 0.01, size=(400, 10))), 8).pbo
        for s in range(100)
    ]
    assert np.mean(pbos) == pytest.approx(0.5, abs=0.08)
    assert np.std(pbos) > 0.1  # and single matrices do spread widely


def _alternating_trials() -> pd.DataFrame:
    """6 trials over 8 blocks of 4 days. Each trial's block mean is +1 in 4 blocks and -1 in the other 4
    (a different pattern per trial), on top of the same within-block noise: an in-sample half with more
    +1 blocks leaves more -1 blocks out of sample. Dyadic values keep every sum exact, so trials with the
    same number of +1 blocks tie exactly."""
    noise = np.array([0.5, -0.5, 0.25, -0.25])
    patterns = [(0, 1, 2, 3), (0, 2, 4, 6), (1, 3, 5, 7), (4, 5, 6, 7), (0, 1, 6, 7), (2, 3, 4, 5)]
    columns = {}
    for i, plus in enumerate(patterns):
        signs = np.array([1.0 if b in plus else -1.0 for b in range(8)])
        columns[f"alt{i}"] = (signs[:, None] + noise[None, :]).ravel()
    return pd.DataFrame(columns)


def test_in_sample_winners_that_lose_out_of_sample_give_pbo_one() -> None:
    frame = _alternating_trials()
    assert frame.sum().eq(0).all()  # each trial's +1 and -1 blocks cancel over the period
    result = pbo_cscv(frame, 8)
    assert result.pbo == 1.0
    assert (result.logits <= 0).all()
    # the IS best is OOS worst (or tied for worst): never above the median
    expected_pbo, expected_logits = reference_cscv(frame.to_numpy(), 8)
    assert expected_pbo == 1.0
    np.testing.assert_allclose(result.logits, expected_logits, atol=1e-12)
    # where the selected trial is strictly the IS best, its OOS rank is 1: omega = 1/7
    assert np.isclose(result.best_is_oos_rank, 1 / 7).sum() > 0
    assert result.degradation_slope < 0


def test_pbo_errors_are_explicit() -> None:
    frame = pd.DataFrame(np.random.default_rng(8).normal(0.0, 0.01, size=(40, 3)))
    with pytest.raises(DataContractError, match="at least 2 trials"):
        pbo_cscv(frame[[0]], 4)
    for bad in (3, 0, 1, -2, 4.0, True):
        with pytest.raises(DataContractError, match="even integer"):
            pbo_cscv(frame, bad)
    with pytest.raises(DataContractError, match="at most|n_blocks <= 22"):
        pbo_cscv(frame, 24)
    with pytest.raises(DataContractError, match="cannot be cut into 16 blocks"):
        pbo_cscv(frame.iloc[:10], 16)
    holed = frame.copy()
    holed.iloc[5, 1] = np.nan
    with pytest.raises(DataContractError, match="common dates"):
        pbo_cscv(holed, 4)
    with pytest.raises(DataContractError, match="DataFrame"):
        pbo_cscv(frame.to_numpy(), 4)
    with pytest.raises(DataContractError, match="one value per trial"):
        pbo_cscv(frame, 4, metric=lambda rows: rows.mean())


# --------------------------------------------------------------------------------------------------
# Paired Sharpe difference


DAYS4 = pd.bdate_range("2024-01-01", periods=4)


def test_paired_difference_of_identical_series_is_zero() -> None:
    r = pd.Series(np.random.default_rng(9).normal(0.0005, 0.01, 250), index=pd.bdate_range("2024-01-01", periods=250))
    assert paired_sharpe_difference(r, r.copy(), np.random.default_rng(0), n_boot=200) == (0.0, 0.0, 0.0)


def test_paired_difference_hand_computed() -> None:
    strategy = pd.Series([0.01, -0.01, 0.02, 0.0], index=DAYS4)  # mean 0.005, std sqrt(5e-4 / 3)
    baseline = pd.Series([0.0, 0.01, 0.0, 0.01], index=DAYS4)  # mean 0.005, std 0.005 * sqrt(4 / 3)
    diff, low, high = paired_sharpe_difference(strategy, baseline, np.random.default_rng(1), n_boot=500,
                                               block_length=1)
    assert diff == pytest.approx(np.sqrt(252) * (np.sqrt(3 / 20) - np.sqrt(3 / 4)), rel=1e-12)
    assert diff == pytest.approx(-7.5995, abs=1e-4)
    assert low <= high


def test_a_constant_daily_excess_over_the_same_noise_is_detected() -> None:
    days = pd.bdate_range("2022-01-03", periods=500)
    baseline = pd.Series(np.random.default_rng(10).normal(0.0003, 0.012, 500), index=days)
    better = baseline + 0.0004  # same noise, 10% a year more
    diff, low, high = paired_sharpe_difference(better, baseline, np.random.default_rng(2))
    # every resample shifts the mean by 0.0004 at an unchanged std: each bootstrap difference is > 0
    assert diff == pytest.approx(0.0004 / baseline.std(ddof=1) * np.sqrt(252), rel=1e-9)
    assert 0 < low < diff < high
    # the pairing is what detects it: the two Sharpe intervals side by side overlap widely
    b_low, b_high = m.sharpe_ci(baseline, np.random.default_rng(3))
    s_low, s_high = m.sharpe_ci(better, np.random.default_rng(4))
    assert s_low < b_high and b_low < s_high
    worse_diff, worse_low, worse_high = paired_sharpe_difference(baseline - 0.0004, baseline, np.random.default_rng(2))
    assert worse_low < worse_diff < worse_high < 0


def test_paired_difference_refuses_different_dates() -> None:
    a = pd.Series([0.01, -0.01, 0.02, 0.0], index=DAYS4)
    with pytest.raises(DataContractError, match="same dates.*only in returns: 1"):
        paired_sharpe_difference(a, a.iloc[:3], np.random.default_rng(0))
    with pytest.raises(DataContractError, match="Series"):
        paired_sharpe_difference(a.to_frame(), a, np.random.default_rng(0))


# --------------------------------------------------------------------------------------------------
# The study report


DAYS = pd.bdate_range("2023-10-02", periods=300)  # 2023-10-02 .. 2024-11-22


@pytest.fixture(scope="module")
def study_inputs() -> tuple[pd.DataFrame, pd.Series, pd.DataFrame]:
    rng = np.random.default_rng(11)
    base = pd.Series(rng.normal(0.0004, 0.01, len(DAYS)), index=DAYS)
    returns = pd.DataFrame(
        {
            "base": base,
            "better": base + 0.002,  # same noise, a constant edge
            "worse": base - 0.002,
            "reversed": pd.Series(base.to_numpy()[::-1], index=DAYS),  # the same days in reverse order
        }
    )
    benchmark = pd.Series(rng.normal(0.0003, 0.009, len(DAYS)), index=DAYS)
    # misaligned inputs: the benchmark lacks 3 dates, one trial has 2 missing values
    benchmark = benchmark.drop(DAYS[[10, 11, 200]])
    returns.loc[DAYS[[50, 250]], "worse"] = np.nan
    trial_metrics = pd.DataFrame(
        {
            "rank_ic_mean": [0.01, 0.03, -0.01, 0.0],
            "metrics.turnover": [12.0, 13.0, 11.0, 12.5],
            "params.model.lr": [0.05, 0.1, 0.01, 0.05],
            "params.seed": [7, 7, 7, 7],  # the same everywhere: not a config difference
            "metrics.sharpe": [9.0, 9.0, 9.0, 9.0],  # a metric, never copied
        },
        index=["base", "better", "worse", "reversed"],
    )
    return returns, benchmark, trial_metrics


@pytest.fixture(scope="module")
def study(study_inputs):
    returns, benchmark, trial_metrics = study_inputs
    return build_study_report(returns, benchmark, title="LR sweep", trial_metrics=trial_metrics, n_trials=10,
                              n_boot=400, seed=3)


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
    assert study.expected_max_sharpe == pytest.approx(m.expected_max_sharpe(10, var), rel=1e-12)
    for n in names:
        row = study.trials.loc[n]
        assert row["dsr"] == pytest.approx(m.dsr(r[n], 10, var), rel=1e-12)
        assert row["dsr"] < row["psr"]  # deflation by 10 trials lowers the bar's probability
        rest = m.drop_best_months(r[n], 3)
        assert row["sharpe_ex_best_3_months"] == pytest.approx(m.sharpe(rest), rel=1e-12)
        assert row["ann_return_ex_best_month"] == pytest.approx(m.ann_return(m.drop_best_months(r[n], 1)), rel=1e-12)
    assert study.best_trial == "better"
    # from trial_metrics: the metrics and the config that varies, nothing else
    assert study.trials.loc["better", "rank_ic_mean"] == 0.03
    assert study.trials.loc["worse", "turnover"] == 11.0
    assert study.trials["params.model.lr"].tolist() == [0.05, 0.1, 0.01, 0.05]
    assert "params.seed" not in study.trials.columns and "metrics.sharpe" not in study.trials.columns


def test_report_verdicts(study) -> None:
    verdicts = study.trials["verdict"].to_dict()
    assert verdicts == {
        "base": "baseline",
        "better": "better than baseline (interval above 0)",
        "worse": "worse than baseline (interval below 0)",
        "reversed": "no detectable difference (interval spans 0)",
    }
    base = study.trials.loc["base"]
    assert (base["diff_vs_baseline"], base["diff_ci_low"], base["diff_ci_high"]) == (0.0, 0.0, 0.0)
    better = study.trials.loc["better"]
    assert better["diff_vs_baseline"] == pytest.approx(better["sharpe"] - base["sharpe"], rel=1e-12)


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
    assert report.trials.loc["better", "dsr"] == pytest.approx(m.psr(r), rel=1e-12)
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
# Files


def test_write_study_report(tmp_path: Path, study) -> None:
    written = write_study_report(tmp_path / "study", study)
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values())
    assert all(p.parent == tmp_path / "study" and p.stat().st_size > 0 for p in written)

    page = (tmp_path / "study" / STUDY_REPORT_FILES["html"]).read_text(encoding="utf-8")
    assert "<h1>LR sweep</h1>" in page
    assert f"PBO = {study.pbo.pbo:.3f}" in page
    assert f"DSR = {study.trials.loc['better', 'dsr']:.3f}" in page
    for name in [*study.trial_names, BENCHMARK_COLUMN]:
        assert name in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    assert base64.b64decode(images[0]) == (tmp_path / "study" / STUDY_REPORT_FILES["equity"]).read_bytes()
    assert "n_combinations = 3,432" in page and "n_blocks = 14" in page
    assert "better than baseline (interval above 0)" in page

    markdown = (tmp_path / "study" / STUDY_REPORT_FILES["markdown"]).read_text(encoding="utf-8")
    assert f"]({STUDY_REPORT_FILES['equity']})" in markdown and f"]({STUDY_REPORT_FILES['pbo_plot']})" in markdown
    assert "| trial | sharpe |" in markdown

    combos = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["pbo"])
    assert len(combos) == study.pbo.n_combinations
    np.testing.assert_allclose(combos["logit"], study.pbo.logits, rtol=1e-12)
    assert (combos["logit"] <= 0).mean() == study.pbo.pbo
    assert {"omega", "logit", "selected", "is_blocks"} <= set(combos.columns)
    trials = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["trials"], index_col="trial")
    np.testing.assert_allclose(trials["sharpe"], study.trials["sharpe"].astype(float), rtol=1e-12)
    years = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["years"], index_col=["year", "series"])
    assert years.loc[(2024, "better"), "return"] == pytest.approx(study.years.loc[(2024, "better"), "return"])
    for png in ("equity", "pbo_plot"):
        assert (tmp_path / "study" / STUDY_REPORT_FILES[png]).read_bytes().startswith(PNG_MAGIC)


def test_write_single_trial_report_without_pbo(tmp_path: Path, study_inputs) -> None:
    returns, benchmark, _ = study_inputs
    report = build_study_report(returns[["base"]], benchmark, title="alone", n_boot=50)
    written = write_study_report(tmp_path, report)
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values()) - {STUDY_REPORT_FILES["pbo_plot"]}
    page = (tmp_path / STUDY_REPORT_FILES["html"]).read_text(encoding="utf-8")
    assert "Not computed: PBO not computed: it needs at least 2 trials" in page
    assert page.count("data:image/png;base64,") == 1
    assert len(pd.read_csv(tmp_path / STUDY_REPORT_FILES["pbo"])) == 0


def test_trial_colours_are_fixed_by_position() -> None:
    colors = trial_colors(["a", "b", "c"])
    assert colors == {"a": "#1f77b4", "b": "#ff7f0e", "c": "#2ca02c", BENCHMARK_COLUMN: "#8c8c8c"}
    assert trial_colors([f"t{i}" for i in range(11)])["t10"] == "#1f77b4"  # tab10 cycles
