"""A study rebuilt from the store alone (backtest/study.py): the daily series each run stores, the comparison
on them, and runs recorded before the series existed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from backtest.errors import ConfigError
from backtest.reports.files import STUDY_REPORT_FILES
from backtest.statistics import hac_standard_error
from backtest.study import check_primary, digest, main, metric_prefix, report_study
from backtest.tracking import ARTIFACTS, Tracker

DAYS = pd.bdate_range("2025-01-02", periods=160)


def _record_trial(tracker: Tracker, parent_id: str, num: int, label: str, returns: pd.Series, daily) -> str:
    """One finished trial as ``python -m backtest`` leaves it; ``daily=None``: a run of before the series."""
    tags = {"trial": label, "trial_num": str(num), "config_key": f"key-{label}"}
    with tracker.start_run(label, parent_run_id=parent_id, study="mf", n_trials=3, tags=tags) as run:
        ic = daily["rank_ic"] if daily is not None else pd.Series(0.02, index=DAYS)
        run.log_metrics({"sharpe": float(returns.mean() / returns.std() * np.sqrt(252)), "rank_ic_mean": ic.mean()})
        run.log_frame(pd.DataFrame({"strategy": returns, "equal_weight": returns * 0.5}), ARTIFACTS.daily_returns)
        folds = pd.DataFrame(
            {"rank_ic": [ic.iloc[:80].mean(), ic.iloc[80:].mean()]}, index=pd.Index([0, 1], name="fold")
        )
        run.log_frame(folds, ARTIFACTS.fold_metrics)
        if daily is not None:  # what record_backtest writes since the comparisons rest on the ranking
            run.log_params({"ic_lags": 4, "ndcg_depth": 5})
            run.log_frame(daily, ARTIFACTS.daily_ranking)
        return run.run_id


@pytest.fixture()
def store(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracker = Tracker(uri, "rankbacktest", tmp_path)
    rng = np.random.default_rng(3)
    returns = pd.Series(rng.normal(0.0005, 0.01, len(DAYS)), index=DAYS)
    shared = pd.Series(rng.normal(0.04, 0.1, len(DAYS)), index=DAYS).rolling(5, min_periods=1).mean()
    base = pd.DataFrame({"rank_ic": shared, "ndcg": 0.5 + shared / 5})
    base.iloc[-4:] = np.nan  # the last days' labels are not known yet
    weaker = pd.DataFrame({"rank_ic": shared - 0.02 + rng.normal(0, 0.02, len(DAYS)), "ndcg": 0.5 + shared / 5})
    parent = tracker.create_run("mf (3 trials)", study="mf", n_trials=3, kind="sweep")
    parent.log_json({"study": "mf", "n_trials": 3, "pbo_blocks": 4, "primary": "rank_ic"}, ARTIFACTS.study_sweep)
    ids = [
        _record_trial(tracker, parent.run_id, 0, "features=all", returns, base),
        _record_trial(tracker, parent.run_id, 1, "features=no_moneyflow", returns + rng.normal(0, 0.001, 160), weaker),
        _record_trial(tracker, parent.run_id, 2, "features=old", returns - 0.001, None),  # recorded before
    ]
    parent.end()
    return tracker, uri, parent.run_id, ids, base, weaker


def test_a_study_report_is_rebuilt_from_the_store_with_an_old_run_among_its_trials(store, tmp_path: Path) -> None:
    tracker, uri, parent_id, _, base, weaker = store
    written = report_study(tracker, "mf", tmp_path / "report")
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values())
    trials = pd.read_csv(tmp_path / "report" / STUDY_REPORT_FILES["trials"], index_col="trial")
    row = trials.loc["features=no_moneyflow"]
    daily = (weaker["rank_ic"] - base["rank_ic"]).dropna()
    assert row["rank_ic_diff_days"] == len(DAYS) - 4 == len(daily)
    assert row["rank_ic_diff"] == pytest.approx(daily.mean(), rel=1e-9)
    assert row["rank_ic_diff_se"] == pytest.approx(hac_standard_error(daily.to_numpy(), 4), rel=1e-9)  # param ic_lags
    assert row["verdict_statistic"] == "rank_ic" and row["verdict"].startswith("worse than baseline (rank IC")
    old = trials.loc["features=old"]
    assert old["verdict_statistic"] == "sharpe" and math.isnan(old["rank_ic_diff"])
    assert old["verdict"].startswith("worse than baseline (Sharpe")  # 0.1% a day less on the same days
    summary = json.loads((tmp_path / "report" / STUDY_REPORT_FILES["summary"]).read_text())
    assert any("features=old was recorded before the runs stored their daily rank IC" in n for n in summary["notes"])
    assert summary["pbo_blocks"] == 4  # read from the parent's study/sweep.json
    # the parent run holds every trial's comparison, named after the trial
    parent = MlflowClient(uri).get_run(parent_id).data
    prefix = metric_prefix("features=no_moneyflow")
    assert parent.metrics[f"{prefix}/rank_ic_diff"] == pytest.approx(row["rank_ic_diff"], rel=1e-9)
    assert parent.metrics[f"{prefix}/mde_rank_ic"] == pytest.approx(row["mde_rank_ic"], rel=1e-9)
    assert (
        parent.metrics[f"{prefix}/verdict"] == -1.0
        and parent.metrics[f"{metric_prefix('features=old')}/verdict"] == -1.0
    )
    assert f"{metric_prefix('features=old')}/rank_ic_diff" not in parent.metrics  # NaN is not logged
    assert parent.tags[f"verdict.{prefix}"].endswith("[on rank_ic]")
    # the digest reads the new columns
    text = digest(tmp_path)
    line = next(r for r in text.splitlines() if r.startswith("| report | features=no_moneyflow"))
    assert f"rank_ic {row['rank_ic_diff']:+.4f} [" in line and f"{row['mde_rank_ic']:.4f}" in line
    assert "verdicts on rank_ic (Holm)" in text


def test_the_report_command_takes_another_primary_statistic(store, tmp_path: Path, capsys) -> None:
    _, uri, *_ = store
    out = tmp_path / "on_ndcg"
    assert main(["--tracking-uri", uri, "report", "mf", "--out", str(out), "--no-log", "--primary", "ndcg"]) == 0
    trials = pd.read_csv(out / STUDY_REPORT_FILES["trials"], index_col="trial")
    assert trials.loc["features=no_moneyflow", "verdict_statistic"] == "ndcg"
    assert trials.loc["features=no_moneyflow", "ndcg_diff"] == 0.0  # the same daily NDCG
    assert "verdicts on ndcg, Holm-adjusted" in capsys.readouterr().out


def test_the_digest_reads_reports_written_before_the_ranking_comparisons(tmp_path: Path) -> None:
    folder = tmp_path / "volatility"
    folder.mkdir()
    summary = {"baseline": "a", "n_days": 252, "start": "2024-01-02", "end": "2024-12-31", "n_trials": 2}
    (folder / STUDY_REPORT_FILES["summary"]).write_text(json.dumps({**summary, "pbo": None, "pbo_blocks": None}))
    old = pd.DataFrame(  # the columns of an old study_trials.csv
        {
            "sharpe": [1.0, 0.5],
            "sharpe_ci_low": [-0.5, -1.0],
            "sharpe_ci_high": [2.5, 2.0],
            "sharpe_ex_best_month": [0.8, 0.2],
            "ann_return": [0.1, 0.05],
            "rank_ic_mean": [0.04, 0.03],
            "dsr": [0.9, 0.6],
            "diff_vs_baseline": [0.0, -0.5],
            "diff_ci_low": [0.0, -1.5],
            "diff_ci_high": [0.0, 0.6],
            "verdict": ["baseline", "no detectable difference (interval spans 0)"],
        },
        index=pd.Index(["a", "b"], name="trial"),
    )
    old.to_csv(folder / STUDY_REPORT_FILES["trials"])
    line = next(r for r in digest(tmp_path).splitlines() if r.startswith("| volatility | b "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[9] == "-0.50 [-1.50, +0.60]" and cells[10] == "" and cells[11] == "no detectable difference"
    assert "verdicts on Sharpe" in digest(tmp_path)


def test_a_bad_primary_statistic_is_a_config_error_with_its_fix() -> None:
    assert check_primary("sharpe") == "sharpe"
    with pytest.raises(ConfigError, match=r"received 'IC'\n  fix: study.primary=rank_ic"):
        check_primary("IC")


def test_seed_replicates_are_one_trial_in_the_report_and_one_configuration_for_the_dsr(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracker = Tracker(uri, "rankbacktest", tmp_path)
    rng = np.random.default_rng(8)
    market = pd.Series(rng.normal(0.0004, 0.01, len(DAYS)), index=DAYS)
    shared = pd.Series(rng.normal(0.04, 0.1, len(DAYS)), index=DAYS)
    parent = tracker.create_run("mf (2 trials x 3 seeds)", study="mf", n_trials=2, kind="sweep")
    recorded = {}
    for num, (label, edge) in enumerate([("features=all", 0.0), ("features=no_moneyflow", -0.01)]):
        for seed in (1, 2, 3):
            returns = market + rng.normal(0, 0.002, len(DAYS))
            daily = pd.DataFrame({"rank_ic": shared + edge + rng.normal(0, 0.01, len(DAYS)), "ndcg": 0.5 + shared / 5})
            tags = {
                "trial": label,
                "trial_num": str(num * 3 + seed - 1),
                "replicate": f"seed={seed}",
                "config_key": f"{label}-{seed}",
                "trial_key": label,
            }
            with tracker.start_run(
                f"{label} seed={seed}", parent_run_id=parent.run_id, study="mf", n_trials=2, tags=tags
            ) as run:
                sharpe = float(returns.mean() / returns.std() * np.sqrt(252))
                run.log_metrics({"sharpe": sharpe, "rank_ic_mean": float(daily["rank_ic"].mean()), "ndcg": 0.5})
                run.log_params({"ic_lags": 4, "seed": seed, "model.config.seed": seed})
                run.log_frame(pd.DataFrame({"strategy": returns, "equal_weight": market}), ARTIFACTS.daily_returns)
                run.log_frame(daily, ARTIFACTS.daily_ranking)
                recorded[(label, seed)] = (run.run_id, returns, daily, sharpe)
    parent.end()
    report_study(tracker, "mf", tmp_path / "report", log_to_store=False)
    trials = pd.read_csv(tmp_path / "report" / STUDY_REPORT_FILES["trials"], index_col="trial")
    summary = json.loads((tmp_path / "report" / STUDY_REPORT_FILES["summary"]).read_text())
    assert list(trials.index) == ["features=all", "features=no_moneyflow"] and summary["n_trials"] == 2
    assert "seed" not in trials.columns and "model.config.seed" not in trials.columns  # replicates, not config
    row = trials.loc["features=no_moneyflow"]
    assert row["n_seeds"] == 3
    sharpes = [recorded[("features=no_moneyflow", s)][3] for s in (1, 2, 3)]
    assert row["sharpe_seed_sd"] == pytest.approx(np.std(sharpes, ddof=1), rel=1e-9)
    # the trial is its seeds' mean: mean daily returns, mean daily rank IC
    mean_ic = {
        label: pd.concat([recorded[(label, s)][2]["rank_ic"] for s in (1, 2, 3)], axis=1).mean(axis=1)
        for label in ("features=all", "features=no_moneyflow")
    }
    assert row["rank_ic_diff"] == pytest.approx((mean_ic["features=no_moneyflow"] - mean_ic["features=all"]).mean())
    mean_returns = pd.concat([recorded[("features=no_moneyflow", s)][1] for s in (1, 2, 3)], axis=1).mean(axis=1)
    assert row["sharpe"] == pytest.approx(mean_returns.mean() / mean_returns.std() * np.sqrt(252), rel=1e-9)
    ics = [
        recorded[(label, s)][2]["rank_ic"].mean()
        for label in ("features=all", "features=no_moneyflow")
        for s in (1, 2, 3)
    ]
    seed_se = np.sqrt(np.var(ics[:3], ddof=1) / 3 + np.var(ics[3:], ddof=1) / 3)
    assert row["seed_se"] == pytest.approx(seed_se, rel=1e-9)
    assert row["verdict"].startswith("worse than baseline (rank IC")  # 0.01 below, well beyond both errors


def test_seed_replicates_share_a_trial_key_but_not_a_config_key(compose_config) -> None:
    from backtest.cli.sweep import trial_key
    from backtest.tracking import config_key

    def keys(*overrides: str) -> tuple[str, str]:
        cfg = compose_config(["data.seed=42", *overrides])
        return trial_key(cfg), config_key(OmegaConf.to_container(cfg, resolve=True))

    one, two, other = keys("seed=1"), keys("seed=2"), keys("seed=1", "features=no_moneyflow")
    assert one[0] == two[0] and one[1] != two[1]  # the seed is a replicate, not a configuration
    assert other[0] != one[0]
    assert keys("seed=1", "data.seed=7")[0] != one[0]  # another market is another configuration
