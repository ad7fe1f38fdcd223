"""The main job through Hydra: every experiment composes, a run lands in MLflow whole, errors exit 2."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, ListConfig, OmegaConf

from backtest import cli
from backtest.cli.compose import CONF_DIR, build
from backtest.cli.progress import FoldProgress
from backtest.metrics import HEADLINE_KEYS
from backtest.reports.study import STUDY_REPORT_FILES
from backtest.statistics import dsr, expected_max_sharpe
from backtest.tracking import ARTIFACTS
from backtest.tracking.layout import COMPARE_IMAGES
from backtest.tracking.ui import ui_command
from tests.system.tiny_market import TINY, main_job

EXPERIMENTS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_builds(experiment: str, compose_config, tmp_path: Path) -> None:
    cfg = compose_config([f"experiment={experiment}"])
    for group in ("features", "label", "backtest", "portfolio", "tracking"):
        build(cfg[group])
    build(cfg.model, _partial_=True)()
    build(cfg.engine, cache_dir=str(tmp_path))  # the options create and probe their cache folders


@pytest.mark.parametrize(
    "group,option",
    [
        ("model", "stock_transformer"),
        ("model", "linear"),
        ("features", "price_only"),
        ("label", "three_class"),
        ("portfolio", "softmax_capped"),
        ("features", "top80_by_gain"),
    ],
)
def test_config_options_compose_and_build(group: str, option: str, compose_config) -> None:
    cfg = compose_config([f"{group}={option}"])
    built = build(cfg[group], _partial_=True)() if group == "model" else build(cfg[group])
    assert _settings_not_held(built, cfg[group]) == []  # the option's every setting reaches the object


def _settings_not_held(built: object, node: DictConfig, prefix: str = "") -> list[str]:
    """The settings of a composed ``node`` that the object built from it does not hold: the class its
    ``_target_`` names, each value as an attribute of the same name (a list as a tuple), recursively."""
    missing = []
    for key, value in node.items():
        if key == "_target_":
            if type(built).__name__ != value.rsplit(".", 1)[-1]:
                missing.append(f"{prefix}_target_: {type(built).__name__} built, {value} configured")
        elif isinstance(value, DictConfig):
            missing += _settings_not_held(getattr(built, key), value, f"{prefix}{key}.")
        else:
            held = getattr(built, key, "<missing>")
            wanted = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
            if (list(held) if isinstance(held, tuple) else held) != wanted:
                missing.append(f"{prefix}{key}: {held!r} held, {wanted!r} configured")
    return missing


def test_main_job_records_one_complete_run(tmp_path: Path, capsys, compose_config) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    cfg = compose_config(TINY + [f"tracking.uri={uri}"])
    out = cli.run(cfg)
    client = MlflowClient(uri)
    run = client.get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    assert set(HEADLINE_KEYS) - {"psr", "dsr"} <= (
        set(run.data.metrics) | {k for k, v in out["metrics"].items() if v != v}
    )
    assert run.data.metrics["n_folds"] == out["metrics"]["n_folds"] >= 2
    history = client.get_metric_history(out["run_id"], "fold/rank_ic")
    # one point per fold, step = fold number (the last fold's labels may not be known yet: no point, never NaN)
    assert sorted(m.step for m in history) == list(range(len(history)))
    assert len(history) >= out["metrics"]["n_folds"] - 1 and all(np.isfinite(m.value) for m in history)
    # each point is dated at its fold's decision date (the leakage records')
    records = json.loads(
        Path(client.download_artifacts(out["run_id"], ARTIFACTS.leakage_records, str(tmp_path))).read_text()
    )
    decisions = {r["fold"]: pd.Timestamp(r["decision_date"]) for r in records}
    assert {m.step: pd.Timestamp(m.timestamp, unit="ms") for m in history} == {
        m.step: decisions[m.step] for m in history
    }
    tags = run.data.tags
    assert tags["leak_guard"] == "passed" and tags["feature_audit"] == "passed" and tags["comparable"] == "true"
    for key in ("git_commit", "git_dirty", "data_fingerprint", "feature_fingerprint", "code_fingerprint", "config_key"):
        assert tags[key]
    assert tags["resumed_folds"] == "0" and int(tags["days_blocked"]) == out["metrics"]["days_blocked"]
    assert run.data.params["backtest.purge"] == "True" and run.data.params["seed"] == "42"
    # the daily series a study pairs runs on: their means are the headline rank IC and NDCG
    assert run.data.params["ic_lags"] == "4"  # the 5-day label less one day
    ranking = pd.read_parquet(client.download_artifacts(out["run_id"], ARTIFACTS.daily_ranking, str(tmp_path)))
    assert list(ranking.columns) == ["rank_ic", "ndcg"] and isinstance(ranking.index, pd.DatetimeIndex)
    assert ranking["rank_ic"].mean() == pytest.approx(out["metrics"]["rank_ic_mean"], rel=1e-12)
    assert ranking["ndcg"].mean() == pytest.approx(out["metrics"]["ndcg"], rel=1e-12)
    # the index benchmark beside equal weight: a column of the daily returns, its metrics and what it is
    daily = pd.read_parquet(client.download_artifacts(out["run_id"], ARTIFACTS.daily_returns, str(tmp_path)))
    assert list(daily.columns[:3]) == ["strategy", "equal_weight", "index"] and daily["index"].notna().all()
    assert run.data.params["index_source"] == "float_mv"
    assert all(np.isfinite(run.data.metrics[k]) for k in HEADLINE_KEYS if k.startswith("index_"))
    artifacts = _all_artifacts(client, out["run_id"])
    for path in (
        "data/predictions.parquet",
        "data/positions.parquet",
        "data/daily_returns.parquet",
        "guards/leakage_records.json",
        "data/feature_importance.csv",
        "reports/equity.png",
        "reports/drawdown.png",
        "config/config.yaml",
        "reports/drift/feature_value_drift.csv",
        "reports/drift/importance_rank_stability.csv",
        ARTIFACTS.forward_returns,
        ARTIFACTS.report("signal"),
        ARTIFACTS.report("portfolio"),
        *COMPARE_IMAGES.values(),
    ):
        assert path in artifacts, (path, artifacts)  # the compare images sit at the root, for the compare page
    printed = capsys.readouterr().out
    assert "leak guard      passed" in printed and out["run_id"] in printed
    assert "vs the index: beta" in printed and "(index: float-cap-weighted index of the universe)" in printed
    assert f"open the UI     {ui_command(uri)}" in printed  # the command that serves this store (tracking.ui)
    # the printed summary is the run's description in the UI, whole
    note = client.get_run(out["run_id"]).data.tags["mlflow.note.content"]
    assert note.startswith("```\nbacktest ") and note.removeprefix("```\n").removesuffix("\n```") in printed
    assert "leak guard      passed" in note and f"MLflow run      {out['run_id']}" in note


def _all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        found |= _all_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def test_purge_off_without_leak_demo_is_refused_before_any_work(tmp_path: Path) -> None:
    proc = main_job(["backtest.purge=false", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    assert proc.returncode == 2
    assert "leak_demo" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched


def test_unknown_option_is_a_clear_error(tmp_path: Path) -> None:
    proc = main_job(["features=nonexistent"], tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "nonexistent" in proc.stderr


def test_a_failing_sweep_job_stops_the_sweep_and_fails_its_parent_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'stopped.db'}"
    # a test period the second job's data cannot serve: found only once its panel is read (a value that a
    # part refuses, backtest.embargo=-1, is refused before the sweep starts: test_studies.py)
    proc = main_job(["-m", *TINY, "backtest.test_start=2025-09-01,2023-07-01", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    by_kind = {r.data.tags["run_kind"]: r for r in runs}
    assert len(runs) == 2 and set(by_kind) == {"sweep", "backtest"}  # the second job failed before its run
    assert by_kind["backtest"].info.status == "FINISHED"
    assert by_kind["sweep"].info.status == "FAILED" and "a job failed" in by_kind["sweep"].data.tags["error"]


def test_sweep_groups_child_runs_under_one_parent(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'sweep.db'}"
    proc = main_job(["-m", *TINY, "features=all,no_volatility", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rankbacktest")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags), key=lambda r: r.data.tags["trial_num"])
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.data.tags["n_trials"] for c in children} == {"2"}
    assert len({c.data.tags["study"] for c in children}) == 1
    # each trial is named after the value it was given; the first value is the baseline
    assert [c.data.tags["trial"] for c in children] == ["features=all", "features=no_volatility"]
    assert [c.info.run_name for c in children] == [
        "LambdaRankRanker-all features=all",
        "LambdaRankRanker-no_volatility features=no_volatility",
    ]
    # the parent records how the sweep was launched and what it holds
    tags = parent.data.tags
    assert tags["command"].startswith("python -m backtest -m ") and "features=all,no_volatility" in tags["command"]
    assert "features=all,no_volatility" in tags["overrides"].split() and tags["swept"] == "features"
    assert tags["git_commit"] and tags["baseline"] == "features=all"
    assert tags["data_fingerprint"] == children[0].data.tags["data_fingerprint"]
    assert set(tags["trials"].split(",")) == {c.info.run_id for c in children}
    sweep = json.loads(
        Path(client.download_artifacts(parent.info.run_id, ARTIFACTS.study_sweep, str(tmp_path))).read_text()
    )
    assert sweep["n_trials"] == 2 and sweep["swept"] == ["features"]
    # a job's own DSR is provisional (it sees only the trials before it); the sweep's end logs the
    # study-wide dsr once, from the two trials' Sharpe variance
    sharpes = [c.data.metrics["sharpe"] for c in children]
    var = float(np.var(sharpes, ddof=1))
    assert parent.data.metrics["trial_sharpe_var"] == pytest.approx(var)
    assert parent.data.metrics["expected_max_sharpe"] == pytest.approx(expected_max_sharpe(2, var))
    assert 0.0 <= parent.data.metrics["pbo"] <= 1.0 and parent.data.metrics["n_trials"] == 2
    for child in children:
        assert "dsr_provisional" in child.data.metrics
        assert [p.step for p in client.get_metric_history(child.info.run_id, "dsr")] == [0]
        returns = pd.read_parquet(
            client.download_artifacts(child.info.run_id, "data/daily_returns.parquet", str(tmp_path))
        )["strategy"]
        assert child.data.metrics["dsr"] == pytest.approx(dsr(returns, 2, var), abs=1e-12)
        assert var == 0 or child.data.metrics["dsr"] < child.data.metrics["psr"]
    assert "2 trials, baseline features=all" in proc.stdout and "DSR against the best of them" in proc.stdout
    # the study report sits at the root of the parent run
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert set(STUDY_REPORT_FILES.values()) <= top, top
    trials = pd.read_csv(
        client.download_artifacts(parent.info.run_id, STUDY_REPORT_FILES["trials"], str(tmp_path)), index_col=0
    )
    assert list(trials.index) == ["features=all", "features=no_volatility"]
    assert sorted(trials["features.name"]) == ["all", "no_volatility"]  # what the sweep varied
    assert "seed" not in trials.columns  # ... and only that
    for child in children:
        assert trials.at[child.data.tags["trial"], "dsr"] == pytest.approx(child.data.metrics["dsr"])
        assert trials.at[child.data.tags["trial"], "sharpe"] == pytest.approx(child.data.metrics["sharpe"])
    # the study is listed and its report rebuilt from the store, with the same numbers
    listed = subprocess.run(
        [sys.executable, "-m", "backtest.study", "--tracking-uri", uri, "list"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0 and tags["study"] in listed.stdout and parent.info.run_id in listed.stdout
    out = tmp_path / "rebuilt"
    rebuilt = subprocess.run(
        [
            sys.executable,
            "-m",
            "backtest.study",
            "--tracking-uri",
            uri,
            "report",
            tags["study"],
            "--out",
            str(out),
            "--no-log",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    again = pd.read_csv(out / STUDY_REPORT_FILES["trials"], index_col=0)
    pd.testing.assert_series_equal(again["sharpe"], trials["sharpe"])
    pd.testing.assert_series_equal(again["dsr"], trials["dsr"])
    unknown = subprocess.run(
        [sys.executable, "-m", "backtest.study", "--tracking-uri", uri, "report", "nope"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unknown.returncode == 2 and "no finished run" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_portfolio_depth_sweep_names_its_trials_and_reports_one_ndcg_key(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'depth.db'}"
    proc = main_job(["-m", *TINY, "portfolio.top_k=3,5", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags), key=lambda r: r.data.tags["trial_num"])
    assert [c.info.run_name for c in children] == [
        "LambdaRankRanker-all portfolio.top_k=3",
        "LambdaRankRanker-all portfolio.top_k=5",
    ]
    for child, depth in zip(children, ("3", "5"), strict=True):  # one key; the depth is a param
        assert "ndcg" in child.data.metrics and "fold/ndcg" in child.data.metrics
        assert child.data.params["ndcg_depth"] == depth == child.data.params["portfolio.top_k"]
        assert not any(key.removeprefix("fold/").startswith("ndcg_at") for key in child.data.metrics)
    rows = [line for line in proc.stdout.splitlines() if "portfolio.top_k=" in line and "Sharpe" not in line]
    assert any("portfolio.top_k=3" in r for r in rows) and any("portfolio.top_k=5" in r for r in rows), proc.stdout


def test_a_study_config_without_multirun_is_refused(tmp_path: Path) -> None:
    proc = main_job(["+study=volatility", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    fix = shlex.split(proc.stderr.strip().splitlines()[-1].removeprefix("  fix: "))
    assert fix[1:5] == ["-m", "backtest", "-m", "+study=volatility"]  # the user's command with -m: one paste away
    assert not (tmp_path / "x.db").exists()


def test_a_label_the_model_cannot_learn_from_is_refused_when_composed(tmp_path: Path) -> None:
    proc = main_job(["label=raw", "model=lambdarank", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot learn from label.processing=raw" in proc.stderr and "fix: label=default" in proc.stderr
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched


def test_log_lines_print_above_the_fold_bar_never_inside_it(capsys) -> None:
    console = logging.StreamHandler(sys.stderr)  # the console's handler, on the stream of the bar
    console.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(console)
    progress = FoldProgress()
    try:
        for fold in range(3):
            progress(SimpleNamespace(fold=fold, metrics={"rank_ic": 0.01 * fold}, resumed=False), 3)
            logging.getLogger("models.lambdarank").warning("fit of fold %d", fold + 1)
    finally:
        progress.close()
        restored = console in root.handlers  # the console's own handler is back once the bar is closed
        root.removeHandler(console)
    assert restored
    lines = capsys.readouterr().err.split("\n")
    for fold in (1, 2, 3):
        line = next(line for line in lines if f"fit of fold {fold}" in line)
        assert line.rsplit("\r", 1)[-1] == f"WARNING fit of fold {fold}", line  # the bar was cleared first


def test_help_opens_with_the_readmes_example_commands_then_hydras_page(tmp_path: Path) -> None:
    proc = main_job(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    head, groups, config = proc.stdout.partition("== Configuration groups ==")
    assert head.startswith("python -m backtest [overrides]: a leakage-guarded rolling backtest")
    examples = [line.split("  #")[0].strip() for line in head.splitlines() if line.startswith("  python -m backtest")]
    readme = (Path(CONF_DIR).parent / "README.md").read_text()
    assert len(examples) == 8 and [e for e in examples if e not in readme] == []  # the README's commands, no other
    assert groups and "study: " in config and "== Config ==" in config  # Hydra's page follows
