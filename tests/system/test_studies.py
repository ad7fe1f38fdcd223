"""Every configured study (conf/study/*.yaml) runs end to end as a sweep on a tiny market.

The studies are found by glob, so a new one is covered without touching this file. Each keeps the values
it sweeps, its schedule and its models; only the market is shrunk (and the store and caches sent to a
temporary folder). The sweep must end with a study report on its parent run.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from backtest.cli.compose import CONF_DIR, build
from backtest.comparison import build_study_report
from backtest.reports.study import STUDY_REPORT_FILES, write_study_report
from backtest.study import digest
from tests.system.tiny_market import TINY_MARKET, main_job

STUDIES = sorted(p.stem for p in (Path(CONF_DIR) / "study").glob("*.yaml"))
# a study whose trials need more history than the tiny market's 547 labelled days before its test
TINY_EXTRA = {"early_stopping": ["backtest.train_window=300"]}


def test_the_research_log_studies_are_found() -> None:
    assert {"leak", "volatility", "moneyflow", "top80", "labels", "industry", "transformer"} <= set(STUDIES)


@pytest.mark.parametrize("study", STUDIES)
def test_every_study_composes_with_its_name(study: str, compose_config) -> None:
    cfg = compose_config([f"+study={study}"])
    assert cfg.tracking.study == cfg.study.name == study
    for group in ("features", "label", "backtest", "portfolio", "tracking"):
        build(cfg[group])


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_study_runs_end_to_end_and_reports(study: str, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "backtest",
            "-m",
            f"+study={study}",
            *TINY_MARKET,
            "tracking.tearsheet=false",
            *TINY_EXTRA.get(study, []),
            f"tracking.uri={uri}",
            f"engine.cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    parents = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    children = [r for r in runs if r.data.tags["run_kind"] == "backtest"]
    assert len(parents) == 1 and len(children) == int(parents[0].data.tags["n_trials"]) >= 2
    assert {c.data.tags["study"] for c in children} == {study}
    assert len({c.data.tags["trial"] for c in children}) == len(children)  # every trial named apart
    parent = parents[0]
    assert math.isfinite(parent.data.metrics["pbo"]) and 0 <= parent.data.metrics["pbo"] <= 1
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= set(STUDY_REPORT_FILES.values())
    for child in children:
        assert child.info.status == "FINISHED" and math.isfinite(child.data.metrics["dsr"])
        # every model (the StockTransformer too) is compared with the baselines on its own folds
        for key in (
            "baseline_factor_rank_ic_mean",
            "baseline_linear_rank_ic_mean",
            "model_minus_factor_rank_ic",
            "baseline_equal_weight_sharpe",
        ):
            assert math.isfinite(child.data.metrics[key]), (child.info.run_name, key)
    assert f"study {study}:" in proc.stdout


def test_a_bad_primary_statistic_is_refused_before_any_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = main_job(
        [
            "-m",
            "+study=moneyflow",
            "study.primary=sharp",
            *TINY_MARKET,
            f"tracking.uri=sqlite:///{store / 'mlruns.db'}",
        ],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "study.primary: expected one of rank_ic, ndcg, sharpe; received 'sharp'" in proc.stderr
    assert "fix: study.primary=rank_ic" in proc.stderr
    assert not store.exists()  # no parent run, no job run: the store was never touched


def test_a_seed_sweep_that_would_change_the_market_is_refused_before_any_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = main_job(
        [
            "-m",
            "+study=moneyflow",
            "seed=1,2",  # data.seed follows seed unless pinned
            *TINY_MARKET,
            f"tracking.uri=sqlite:///{store / 'mlruns.db'}",
        ],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        "every replicate would get another market" in proc.stderr and "fix: pin the market: data.seed=42" in proc.stderr
    )
    assert not store.exists()


@pytest.mark.parametrize(
    "sweep,words",
    [
        (
            "portfolio.top_k=5,abc",
            ["job 1 of the sweep (portfolio.top_k=abc): portfolio.top_k: expected a number", "fix: portfolio.top_k=5"],
        ),
        ("backtest.embargo=2,-1", ["job 1 of the sweep (backtest.embargo=-1): backtest.embargo must be >= 0"]),
    ],
)
def test_a_bad_value_in_any_job_of_a_sweep_is_refused_before_the_first_job(
    tmp_path: Path, sweep: str, words: list[str]
) -> None:
    store = tmp_path / "store"
    proc = main_job(["-m", sweep, *TINY_MARKET, f"tracking.uri=sqlite:///{store / 'mlruns.db'}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("error: ") == 1, proc.stderr[-2000:]
    for word in words:
        assert word in proc.stderr, proc.stderr[-2000:]
    assert not store.exists()  # no parent run, no trial (the first job never ran), no study report
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_a_study_with_seed_replicates_nests_every_replicate_under_one_parent(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "backtest",
            "-m",
            "+study=moneyflow",
            "seed=1,2",
            "data.seed=42",
            *TINY_MARKET,
            "tracking.tearsheet=false",
            f"tracking.uri={uri}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "OMP_NUM_THREADS": "1"},
        timeout=1800,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    (parent,) = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    children = [r for r in runs if r.data.tags["run_kind"] == "backtest"]
    assert len(children) == 4 and parent.data.tags["n_trials"] == "2"  # 2 configurations x 2 seeds
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.data.params["data.seed"] for c in children} == {"42"}  # one market
    assert (
        len({c.data.tags["trial_key"] for c in children}) == 2
        and len({c.data.tags["config_key"] for c in children}) == 4
    )
    assert parent.data.metrics["n_trials"] == 2 and parent.data.metrics["features_no_moneyflow/n_seeds"] == 2
    assert math.isfinite(parent.data.metrics["features_no_moneyflow/rank_ic_diff"])


def test_the_digest_tabulates_every_study_report_under_a_folder(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    dates = pd.bdate_range("2024-01-02", periods=300)
    for study, shift in (("alpha", 0.0), ("beta", 0.002)):
        returns = pd.DataFrame(
            {"a=1": rng.normal(0.0005, 0.01, 300), "a=2": rng.normal(0.0005 + shift, 0.01, 300)}, index=dates
        )
        trial_metrics = pd.DataFrame({"rank_ic_mean": [0.01, 0.02], "minutes": [3.0, 4.5]}, index=returns.columns)
        report = build_study_report(
            returns, pd.Series(rng.normal(0, 0.01, 300), index=dates), title=study, trial_metrics=trial_metrics
        )
        write_study_report(tmp_path / study, report)
    (tmp_path / "not_a_study").mkdir()
    text = digest(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| alpha") or line.startswith("| beta")]
    assert len(rows) == 4 and "not_a_study" not in text
    trials = pd.read_csv(tmp_path / "beta" / STUDY_REPORT_FILES["trials"], index_col=0)
    beta = next(r for r in rows if r.startswith("| beta | a=2 "))
    cells = [c.strip() for c in beta.strip("|").split("|")]
    assert cells[2] == f"{trials.at['a=2', 'sharpe']:+.2f}" and cells[8] == f"{trials.at['a=2', 'dsr']:.2f}"
    assert cells[6] == f"{trials.at['a=2', 'rank_ic_mean']:+.4f}" and cells[7] == ""  # no s.e. or factor given
    assert cells[9].startswith(f"{trials.at['a=2', 'sharpe_diff']:+.2f} [") and cells[14] == "4.5"
    assert cells[10].startswith("sharpe ") and cells[11] in ("better than baseline", "no detectable difference")
    assert "| alpha | a=1 |" in text and "baseline" in next(r for r in rows if r.startswith("| alpha | a=1 "))
    assert "**beta**: 2024-01-02 .. " in text and "(300 days), N = 2 for the DSR, PBO " in text
