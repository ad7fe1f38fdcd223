"""The main job through Hydra: every experiment composes, a run lands in MLflow whole, errors exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from backtest import cli
from backtest.metrics import HEADLINE_KEYS, dsr, expected_max_sharpe

EXPERIMENTS = sorted(p.stem for p in (Path(cli.CONF_DIR) / "experiment").glob("*.yaml"))
TINY = ["data.n_stocks=60", "data.n_members=40", "data.start=2023-06-01", "backtest.test_start=2025-09-01",
        "backtest.train_window=80", "backtest.valid_days=10", "backtest.retrain_every=20",
        "model.config.num_boost_round=20", "model.config.min_data_in_leaf=30", "model.config.num_threads=1",
        "engine.feature_cache=false", "engine.checkpoints=false", "tracking.tearsheet=false"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_builds(experiment: str, compose_config) -> None:
    cfg = compose_config([f"experiment={experiment}"])
    for group in ("features", "label", "backtest", "portfolio", "tracking"):
        cli._build(cfg[group])
    cli._build(cfg.model, _partial_=True)()


@pytest.mark.parametrize("group,option", [("model", "stock_transformer"), ("features", "price_only"),
                                          ("label", "three_class"), ("portfolio", "softmax_capped"),
                                          ("features", "top80_by_gain")])
def test_config_options_compose_and_build(group: str, option: str, compose_config) -> None:
    cfg = compose_config([f"{group}={option}"])
    built = cli._build(cfg[group], _partial_=True)() if group == "model" else cli._build(cfg[group])
    assert built is not None


def test_main_job_records_one_complete_run(tmp_path: Path, capsys, compose_config) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    cfg = compose_config(TINY + [f"tracking.uri={uri}"])
    out = cli.run(cfg)
    client = MlflowClient(uri)
    run = client.get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    assert set(HEADLINE_KEYS) - {"psr", "dsr"} <= (set(run.data.metrics)
                                                   | {k for k, v in out["metrics"].items() if v != v})
    assert run.data.metrics["n_folds"] == out["metrics"]["n_folds"] >= 2
    history = client.get_metric_history(out["run_id"], "fold/rank_ic")
    # one point per fold, step = fold number (the last fold's labels may not be known yet: no point)
    assert sorted(m.step for m in history) == list(range(len(history)))
    assert len(history) >= out["metrics"]["n_folds"] - 1
    tags = run.data.tags
    assert tags["leak_guard"] == "passed" and tags["feature_audit"] == "passed" and tags["comparable"] == "true"
    for key in ("git_commit", "git_dirty", "data_fingerprint", "feature_fingerprint", "code_fingerprint", "config_key"):
        assert tags[key]
    assert tags["resumed_folds"] == "0" and int(tags["days_blocked"]) == out["metrics"]["days_blocked"]
    assert run.data.params["backtest.purge"] == "True" and run.data.params["seed"] == "42"
    artifacts = _all_artifacts(client, out["run_id"])
    for path in ("data/predictions.parquet", "data/positions.parquet", "data/daily_returns.parquet",
                 "guards/leakage_records.json", "data/feature_importance.csv", "reports/equity.png",
                 "reports/drawdown.png", "config/config.yaml", "reports/drift/feature_value_drift.csv",
                 "reports/drift/importance_rank_stability.csv"):
        assert path in artifacts, (path, artifacts)
    printed = capsys.readouterr().out
    assert "leak guard      passed" in printed and out["run_id"] in printed and "mlflow server" in printed


def _all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        found |= _all_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "-m", "backtest", *args, f"hydra.run.dir={tmp_path / 'run'}",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)


def test_purge_off_without_leak_demo_is_refused_before_any_work(tmp_path: Path) -> None:
    proc = _cli(["backtest.purge=false", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    assert proc.returncode == 2
    assert "leak_demo" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched


def test_unknown_option_is_a_clear_error(tmp_path: Path) -> None:
    proc = _cli(["features=nonexistent"], tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "nonexistent" in proc.stderr


def test_a_failing_sweep_job_stops_the_sweep_and_fails_its_parent_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'stopped.db'}"
    proc = _cli(["-m", *TINY, "backtest.embargo=2,-1", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 2 and "embargo must be >= 0" in proc.stderr and "Traceback" not in proc.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    by_kind = {r.data.tags["run_kind"]: r for r in runs}
    assert len(runs) == 2 and set(by_kind) == {"sweep", "backtest"}  # the second job failed before its run
    assert by_kind["backtest"].info.status == "FINISHED"
    assert by_kind["sweep"].info.status == "FAILED" and "a job failed" in by_kind["sweep"].data.tags["error"]


def test_sweep_groups_child_runs_under_one_parent(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'sweep.db'}"
    proc = _cli(["-m", *TINY, "features=all,no_volatility", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rankbacktest")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert {c.data.tags["n_trials"] for c in children} == {"2"}
    assert len({c.data.tags["study"] for c in children}) == 1
    # the sweep's end deflates every child's Sharpe against the whole study (a job alone sees only
    # the runs before it): dsr logged again at step 1, from the two children's Sharpe variance
    sharpes = [c.data.metrics["sharpe"] for c in children]
    var = float(np.var(sharpes, ddof=1))
    assert parents[0].data.metrics["trial_sharpe_var"] == pytest.approx(var)
    assert parents[0].data.metrics["expected_max_sharpe"] == pytest.approx(expected_max_sharpe(2, var))
    for child in children:
        history = client.get_metric_history(child.info.run_id, "dsr")
        assert sorted(p.step for p in history) == [0, 1]
        returns = pd.read_parquet(client.download_artifacts(child.info.run_id, "data/daily_returns.parquet",
                                                            str(tmp_path)))["strategy"]
        assert child.data.metrics["dsr"] == pytest.approx(dsr(returns, 2, var), abs=1e-12)
        assert var == 0 or child.data.metrics["dsr"] < child.data.metrics["psr"]
    assert "2 trials, DSR against the best of them" in proc.stdout
    trials = pd.read_csv(client.download_artifacts(parents[0].info.run_id, "study/trials.csv", str(tmp_path)),
                         index_col=0)
    assert set(trials.index) == {c.info.run_id for c in children}
    assert sorted(trials["params.features.name"]) == ["all", "no_volatility"]  # what the sweep varied
    assert "params.seed" not in trials.columns  # ... and only that
    assert trials["sharpe"].is_monotonic_decreasing
    for child in children:
        assert trials.at[child.info.run_id, "dsr"] == pytest.approx(child.data.metrics["dsr"])


def test_a_label_the_model_cannot_learn_from_is_refused_when_composed(tmp_path: Path) -> None:
    proc = _cli(["label=raw", "model=lambdarank", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot learn from label.processing=raw" in proc.stderr and "fix: label=default" in proc.stderr
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched
