"""Tracking against a real MLflow SQLite store; marked slow: a real `mlflow server` on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from backtest.errors import ConfigError, RunInterrupted, TrackingError
from backtest.reports.plots import plot_fold_metric
from backtest.stop import stop_on_signals
from backtest.tracking import (
    ARTIFACTS,
    MAX_PARAM_VALUE_CHARS,
    Provenance,
    Tracker,
    TrackingConfig,
    default_artifact_location,
    flatten_config,
    git_state,
    prepare_store,
    provenance_tags,
    redact_config,
    resolve_tracking_uri,
    study_runs,
)
from backtest.tracking.layout import COMPARE_IMAGES
from backtest.tracking.ui import server_command, server_env

# --------------------------------------------------------------------------------------------------
# Fixtures: one SQLite store per module (creating the schema costs ~1.5 s), one experiment per test.


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{root / 'mlruns.db'}"
    prepare_store(uri, "schema")
    return uri


@pytest.fixture()
def tracker(store_uri: str, request: pytest.FixtureRequest, tmp_path: Path) -> Tracker:
    return Tracker(store_uri, experiment=request.node.name, project_dir=tmp_path)


@pytest.fixture()
def client(store_uri: str) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri=store_uri)


PASSED = Provenance("data-abc", "feat-123", leak_guard="passed", feature_audit="passed")


# --------------------------------------------------------------------------------------------------
# Store URIs


def test_default_uri_is_the_project_sqlite_file_with_an_absolute_path(tmp_path: Path) -> None:
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlruns.db"
    assert resolve_tracking_uri("", tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlruns.db"


def test_relative_sqlite_uri_resolves_against_the_project_dir_not_the_cwd(tmp_path: Path) -> None:
    assert resolve_tracking_uri("sqlite:///runs/x.db", tmp_path) == f"sqlite:///{tmp_path.resolve()}/runs/x.db"
    assert resolve_tracking_uri("sqlite:////abs/x.db", tmp_path) == "sqlite:////abs/x.db"


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.com",
        "postgresql://u:p@db:5432/mlflow",
        "postgresql+psycopg2://u@db/mlflow",
        "mysql://u@db/mlflow",
    ],
)
def test_server_and_database_uris_pass_through(uri: str, tmp_path: Path) -> None:
    assert resolve_tracking_uri(uri, tmp_path) == uri


@pytest.mark.parametrize("uri", ["mlruns", "/tmp/mlruns", "file:///tmp/mlruns", "sqlite:///:memory:", "ftp://x/y"])
def test_file_memory_and_unknown_stores_are_refused_with_a_fix(uri: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tracking.uri") as caught:
        resolve_tracking_uri(uri, tmp_path)
    assert "sqlite" in str(caught.value)


def test_artifact_location_next_to_the_sqlite_file_per_experiment(tmp_path: Path) -> None:
    uri = resolve_tracking_uri("sqlite:///db/m.db", tmp_path)
    assert default_artifact_location(uri, "my exp", tmp_path) == (tmp_path.resolve() / "db/mlartifacts/my_exp").as_uri()
    assert default_artifact_location("http://127.0.0.1:5000", "e", tmp_path) is None
    expected = (tmp_path.resolve() / "mlartifacts/e").as_uri()
    assert default_artifact_location("postgresql://u@h/db", "e", tmp_path) == expected


def test_tracker_on_the_default_store_puts_db_and_artifacts_in_the_project(tmp_path: Path) -> None:
    tracker = Tracker.from_config(TrackingConfig(experiment="default-store"), project_dir=tmp_path)
    assert tracker.uri == f"sqlite:///{tmp_path.resolve()}/mlruns.db"
    with tracker.start_run("r") as run:
        run.log_json({"ok": 1}, "leakage/records.json")
    assert (tmp_path / "mlruns.db").is_file()
    assert (tmp_path / "mlartifacts/default-store" / run.run_id / "artifacts/leakage/records.json").is_file()
    experiment = tracker.client.get_experiment(tracker.experiment_id)
    assert experiment.artifact_location == (tmp_path.resolve() / "mlartifacts/default-store").as_uri()


@pytest.mark.slow
def test_parallel_first_use_of_a_new_sqlite_file_does_not_race(tmp_path: Path) -> None:
    # Without serialization, concurrent MLflow schema migrations of a new file fail
    # ("Online migration expected to match one row").
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    code = "import sys; from backtest.tracking import prepare_store; print(prepare_store(sys.argv[1], 'race'))"
    jobs = [
        subprocess.Popen([sys.executable, "-c", code, uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [job.communicate(timeout=120) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0, 0], [err[-500:] for _, err in outputs]
    assert len({out.strip() for out, _ in outputs}) == 1  # one experiment


def test_prepare_store_is_idempotent_and_refuses_a_deleted_experiment(store_uri: str, client) -> None:
    first = prepare_store(store_uri, "idempotent")
    assert prepare_store(store_uri, "idempotent") == first
    client.delete_experiment(first)
    with pytest.raises(TrackingError, match="is deleted.*restore"):
        prepare_store(store_uri, "idempotent")


def test_unreachable_server_fails_fast_with_a_fix() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(TrackingError, match="does not answer.*make ui"):
        prepare_store(f"http://127.0.0.1:{port}", "e")
    assert time.monotonic() - start < 5


# --------------------------------------------------------------------------------------------------
# Params: flattening and redaction


def test_flatten_config_dotted_keys_json_lists_and_plain_strings() -> None:
    config = {
        "model": {"name": "lambdarank", "params": {"learning_rate": 0.05, "num_leaves": 31}},
        "features": ["rsi_14", "macd"],
        "seed": 42,
        "data": {"path": None, "extra": {}},
        "flag": True,
    }
    assert flatten_config(config) == {
        "model.name": "lambdarank",
        "model.params.learning_rate": "0.05",
        "model.params.num_leaves": "31",
        "features": '["rsi_14", "macd"]',
        "seed": "42",
        "data.path": "None",
        "data.extra": "{}",
        "flag": "True",
    }


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "tushare.TOKEN",
        "db.password",
        "Password",
        "aws.secret_access_key",
        "openai.api_key",
        "apiKey",
        "gcp.credentials.file",
        "service_credential",
    ],
)
def test_secret_keys_are_redacted_case_insensitive(key: str) -> None:
    *parents, leaf = key.split(".")
    config: dict = {leaf: "s3cr3t-value"}
    for parent in reversed(parents):
        config = {parent: config}
    flat = flatten_config(config)
    assert flat == {key: "***"}
    assert "s3cr3t-value" not in json.dumps(redact_config(config))


def test_uri_passwords_are_redacted_but_user_and_host_kept() -> None:
    config = {
        "tracking": {"uri": "postgresql://alice:hunter2@db.internal:5432/mlflow"},
        "mirrors": ["https://bob:pa55@example.com/data", "https://example.com/public"],
        "note": "no uri here: user:pass",
    }
    flat = flatten_config(config)
    assert flat["tracking.uri"] == "postgresql://alice:***@db.internal:5432/mlflow"
    assert flat["mirrors"] == '["https://bob:***@example.com/data", "https://example.com/public"]'
    assert flat["note"] == "no uri here: user:pass"
    assert config["tracking"]["uri"] == "postgresql://alice:hunter2@db.internal:5432/mlflow"  # input untouched


def test_long_param_values_are_cut_to_mlflow_limit_with_a_marker() -> None:
    flat = flatten_config({"universe": "x" * 7000, "ok": "y" * 6000})
    assert len(flat["universe"]) == MAX_PARAM_VALUE_CHARS
    assert flat["universe"].endswith("...[+1000 chars]")
    assert flat["ok"] == "y" * 6000


def test_keys_with_characters_mlflow_refuses_are_sanitized() -> None:
    assert flatten_config({"a": {"b@c": 1, "x//y": 2}}) == {"a.b_c": "1", "a.x/y": "2"}


# --------------------------------------------------------------------------------------------------
# Provenance and the comparable flag


@pytest.mark.parametrize(
    ("leak_guard", "feature_audit", "leak_demo", "comparable"),
    [
        ("passed", "passed", False, "true"),
        ("failed", "passed", False, "false"),
        ("disabled", "passed", False, "false"),
        ("passed", "failed", False, "false"),
        ("failed", "failed", False, "false"),
        ("passed", "disabled", False, "false"),  # a switched-off audit is not a pass
        ("disabled", "passed", True, "false"),  # the leak demonstration: purge off
        ("passed", "passed", True, "true"),  # its purged twin: the guards passed, so it is comparable
    ],
)
def test_comparable_exactly_when_both_guards_passed(
    tmp_path: Path, leak_guard: str, feature_audit: str, leak_demo: bool, comparable: str
) -> None:
    provenance = Provenance("d", "f", leak_guard, feature_audit, leak_demo)  # type: ignore[arg-type]
    tags = provenance_tags(provenance, tmp_path)
    assert tags["comparable"] == comparable
    assert tags["leak_guard"] == leak_guard
    assert tags["feature_audit"] == feature_audit
    assert tags["leak_demo"] == ("true" if leak_demo else "false")
    assert ("comparable_reason" in tags) == (comparable == "false")


@pytest.mark.parametrize(
    ("tradable_days", "comparable"),
    [(123, "true"), (111, "true"), (110, "false"), (6, "false")],  # 90% of 123 days is 110.7
)
def test_comparable_only_when_the_book_could_trade_on_90_percent_of_the_test_days(
    tmp_path: Path, tradable_days: int, comparable: str
) -> None:
    provenance = Provenance("d", "f", "passed", "passed", tradable_days=tradable_days, test_days=123)
    tags = provenance_tags(provenance, tmp_path)
    assert tags["comparable"] == comparable
    if comparable == "false":
        assert tags["comparable_reason"].startswith(f"the book could trade on {tradable_days} of 123 test days (")


@pytest.mark.parametrize(
    ("leak_guard", "feature_audit"), [("ok", "passed"), ("passed", "skipped"), ("PASSED", "passed")]
)
def test_guard_markers_outside_the_contract_are_refused(leak_guard: str, feature_audit: str) -> None:
    with pytest.raises(ConfigError, match="expected one of passed, failed, disabled"):
        Provenance("d", "f", leak_guard, feature_audit)  # type: ignore[arg-type]


def test_git_commit_and_dirty_flag_from_the_project_checkout(tmp_path: Path) -> None:
    assert git_state(tmp_path) == ("unknown", "unknown")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD").strip()
    assert git_state(tmp_path) == (head, "false")
    (tmp_path / "mlruns.db-journal").write_text("")  # another job writing to a store in the checkout
    assert git_state(tmp_path) == (head, "false")
    (tmp_path / "sub").mkdir()
    assert git_state(tmp_path / "sub") == (head, "false")
    (tmp_path / "new.py").write_text("")  # untracked code counts
    assert git_state(tmp_path / "sub") == (head, "true")
    (tmp_path / "new.py").unlink()
    (tmp_path / "a.txt").write_text("2")
    assert git_state(tmp_path) == (head, "true")
    tags = provenance_tags(PASSED, tmp_path)
    assert tags["git_commit"] == head and tags["mlflow.source.git.commit"] == head
    assert tags["git_dirty"] == "true"


def test_package_version_tags(tmp_path: Path) -> None:
    tags = provenance_tags(PASSED, tmp_path)
    for name in ("numpy", "pandas", "lightgbm", "torch", "mlflow", "hydra-core", "quantstats"):
        assert tags[f"pkg.{name}"] == metadata.version(name)
    assert tags["pkg.mlflow"] == "3.17.2"


# --------------------------------------------------------------------------------------------------
# One run in a real SQLite store


def test_run_records_params_metrics_with_steps_tags_and_artifacts(tracker: Tracker, client, tmp_path: Path) -> None:
    config = {"model": {"name": "lambdarank", "lr": 0.05}, "tushare": {"token": "abc"}, "seed": 7}
    returns = pd.Series([0.01, -0.02], index=pd.to_datetime(["2024-01-02", "2024-01-03"]), name="strategy")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "tearsheet.html").write_text("<html></html>")
    (reports / "equity.png").write_bytes(b"\x89PNG")
    with tracker.start_run("lambdarank", study="s1", n_trials=4) as run:
        run.log_config(config)
        run.log_provenance(PASSED)
        run.log_fold_metrics({1: {"ic": 0.03, "sharpe": 1.5}, 2: {"ic": -0.01, "sharpe": 0.25}, 3: {"ic": 0.02}})
        run.log_metrics({"sharpe": 0.7, "max_drawdown": -0.25, "n_folds": 3})
        run.log_frame(returns, "data/returns.parquet")
        run.log_json({"fold": 1, "purged": 12}, "leakage/purge.json")
        run.log_artifact(reports, ARTIFACTS.reports)

    stored = client.get_run(run.run_id)
    assert stored.info.status == "FINISHED"
    assert stored.info.run_name == "lambdarank"
    assert stored.data.params == {"model.name": "lambdarank", "model.lr": "0.05", "tushare.token": "***", "seed": "7"}
    assert stored.data.metrics == {
        "sharpe": 0.7,
        "max_drawdown": -0.25,
        "n_folds": 3.0,
        "fold/ic": 0.02,
        "fold/sharpe": 0.25,
    }
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "fold/ic")] == [
        (1, 0.03),
        (2, -0.01),
        (3, 0.02),
    ]
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "fold/sharpe")] == [(1, 1.5), (2, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "sharpe")] == [(0, 0.7)]
    tags = stored.data.tags
    assert {
        k: tags[k]
        for k in (
            "study",
            "n_trials",
            "run_kind",
            "data_fingerprint",
            "feature_fingerprint",
            "leak_guard",
            "feature_audit",
            "comparable",
            "leak_demo",
            "git_commit",
            "git_dirty",
        )
    } == {
        "study": "s1",
        "n_trials": "4",
        "run_kind": "backtest",
        "data_fingerprint": "data-abc",
        "feature_fingerprint": "feat-123",
        "leak_guard": "passed",
        "feature_audit": "passed",
        "comparable": "true",
        "leak_demo": "false",
        "git_commit": "unknown",
        "git_dirty": "unknown",
    }
    assert run.list_artifacts() == [
        "config/config.yaml",
        "data/returns.parquet",
        "leakage/purge.json",
        "reports/equity.png",
        "reports/tearsheet.html",
    ]
    config_text = Path(client.download_artifacts(run.run_id, "config/config.yaml", str(tmp_path))).read_text()
    assert "abc" not in config_text and "token: '***'" in config_text and "lr: 0.05" in config_text
    back = pd.read_parquet(client.download_artifacts(run.run_id, "data/returns.parquet", str(tmp_path)))
    assert back["strategy"].tolist() == [0.01, -0.02]


def test_fold_metrics_from_a_dataframe_skip_missing_cells(tracker: Tracker, client) -> None:
    table = pd.DataFrame({"ic": [0.1, np.nan], "turnover": [2.0, 3.0]}, index=pd.Index([0, 1], name="fold"))
    with tracker.start_run() as run:
        run.log_fold_metrics(table)
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "fold/ic")] == [(0, 0.1)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "fold/turnover")] == [(0, 2.0), (1, 3.0)]


def test_fold_metrics_skip_nan_and_carry_each_folds_decision_date(tracker: Tracker, client) -> None:
    decisions = {0: pd.Timestamp("2025-07-01"), 1: pd.Timestamp("2025-07-29")}
    with tracker.start_run() as run:
        run.log_fold_metrics({0: {"rank_ic": 0.05, "n_train": 500.0}}, decisions)
        run.log_fold_metrics({1: {"rank_ic": np.float32("nan"), "ndcg": None, "n_train": 510.0}}, decisions)
        run.log_fold_metrics({2: {"rank_ic": -0.02}}, decisions)  # no decision date given: the time of logging
    rank_ic = client.get_metric_history(run.run_id, "fold/rank_ic")
    assert [(m.step, m.value) for m in rank_ic] == [(0, 0.05), (2, -0.02)]  # fold 1 had no value: no point
    assert rank_ic[0].timestamp == 1751328000000  # 2025-07-01 00:00 UTC in ms
    assert rank_ic[1].timestamp > 1751328000000 + 365 * 86_400_000  # now, not a decision date
    assert "fold/ndcg" not in client.get_run(run.run_id).data.metrics
    n_train = client.get_metric_history(run.run_id, "fold/n_train")
    assert [(m.step, pd.Timestamp(m.timestamp, unit="ms")) for m in n_train] == list(decisions.items())


def test_the_note_is_the_runs_description_as_a_fixed_width_block(tracker: Tracker, client) -> None:
    with tracker.start_run() as run:
        pass
    run.set_note("\nbacktest 2025-07-02 .. 2025-12-30\nSharpe    -1.28\n")  # after the run ended, as the CLI does
    assert client.get_run(run.run_id).data.tags["mlflow.note.content"] == (
        "```\nbacktest 2025-07-02 .. 2025-12-30\nSharpe    -1.28\n```"
    )


def test_logging_is_batched_within_mlflow_limits(tracker: Tracker, client, monkeypatch) -> None:
    calls: list[tuple[int, int, int]] = []
    original = tracker.client.log_batch

    def counting(run_id, metrics=(), params=(), tags=(), synchronous=None):
        calls.append((len(metrics), len(params), len(tags)))
        return original(run_id, metrics=metrics, params=params, tags=tags, synchronous=synchronous)

    monkeypatch.setattr(tracker.client, "log_batch", counting)
    with tracker.start_run() as run:
        run.log_params({f"p{i:03d}": i for i in range(250)})
        run.log_fold_metrics({fold: {f"m{j}": fold + j / 100 for j in range(50)} for fold in range(30)})
        run.set_tags({f"t{i}": i for i in range(120)})
    assert calls == [(0, 100, 0), (0, 100, 0), (0, 50, 0), (1000, 0, 0), (500, 0, 0), (0, 0, 100), (0, 0, 20)]
    stored = client.get_run(run.run_id)
    assert len(stored.data.params) == 250 and stored.data.params["p249"] == "249"
    history = client.get_metric_history(run.run_id, "fold/m7")
    assert [(m.step, m.value) for m in history] == [(fold, fold + 0.07) for fold in range(30)]


def test_failed_run_ends_failed_with_the_error_tag_and_reraises(tracker: Tracker, client) -> None:
    with pytest.raises(ValueError, match="boom"):
        with tracker.start_run("bad") as run:
            run.log_metrics({"sharpe": 1.0})
            raise ValueError("boom")
    stored = client.get_run(run.run_id)
    assert stored.info.status == "FAILED"
    assert stored.data.tags["error"] == "ValueError: boom"
    assert stored.info.end_time is not None


def test_interrupted_run_ends_killed(tracker: Tracker, client) -> None:
    with pytest.raises(KeyboardInterrupt):
        with tracker.start_run() as run:
            raise KeyboardInterrupt
    assert client.get_run(run.run_id).info.status == "KILLED"


def test_a_stop_is_taken_before_a_write_and_ends_the_run_killed(tracker: Tracker, client) -> None:
    with pytest.raises(RunInterrupted, match="signal SIGTERM"):
        with stop_on_signals(), tracker.start_run() as run:
            run.log_metrics({"sharpe": 1.0})
            signal.raise_signal(signal.SIGTERM)  # the handler only raises the flag
            run.log_metrics({"sortino": 2.0})  # a safe point: the stop is taken before this write
    stored = client.get_run(run.run_id)
    assert stored.info.status == "KILLED" and stored.data.tags["error"] == "interrupted: signal SIGTERM"
    assert set(stored.data.metrics) == {"sharpe"}


def test_a_busy_store_does_not_lose_the_final_status(tracker: Tracker, client, monkeypatch) -> None:
    run = tracker.create_run()
    real, calls = tracker.client.set_terminated, []

    def locked_twice(run_id: str, status: str) -> None:  # another process holds SQLite's write lock
        calls.append(status)
        if len(calls) <= 2:
            raise mlflow.exceptions.MlflowException("(sqlite3.OperationalError) database is locked")
        real(run_id, status=status)

    monkeypatch.setattr(tracker.client, "set_terminated", locked_twice)
    run.end("KILLED", error="interrupted: signal SIGTERM")
    assert calls == ["KILLED"] * 3
    assert client.get_run(run.run_id).info.status == "KILLED"


def test_child_run_of_a_sweep_is_nested_under_its_parent(tracker: Tracker, client) -> None:
    parent = tracker.create_run("sweep", study="grid", n_trials=2, kind="sweep")
    with tracker.start_run("job0", parent_run_id=parent.run_id, study="grid", n_trials=2) as child:
        pass
    parent.end()
    assert client.get_run(child.run_id).data.tags["mlflow.parentRunId"] == parent.run_id
    assert client.get_run(parent.run_id).info.status == "FINISHED"
    with pytest.raises(TrackingError, match="Parent run 'nope' not found"):
        tracker.create_run(parent_run_id="nope")


def test_params_are_immutable(tracker: Tracker) -> None:
    with pytest.raises(TrackingError, match="immutable"):
        with tracker.start_run() as run:
            run.log_params({"model": {"lr": 0.05}})
            run.log_params({"model": {"lr": 0.1}})


def test_non_numeric_metric_is_refused_with_its_key(tracker: Tracker) -> None:
    with tracker.start_run() as run:
        with pytest.raises(TrackingError, match="'sharpe'.*expected a real number"):
            run.log_metrics({"sharpe": "high"})
        with pytest.raises(TrackingError, match="bool"):
            run.log_metrics({"passed": True})


def test_nan_metric_is_stored_as_nan(tracker: Tracker, client) -> None:
    with tracker.start_run() as run:
        run.log_metrics({"ic_mean": float("nan"), "sharpe": np.float32(0.5)})
    metrics = client.get_run(run.run_id).data.metrics
    assert np.isnan(metrics["ic_mean"]) and metrics["sharpe"] == 0.5


def test_compare_images_land_at_the_run_root(tracker: Tracker, client, tmp_path: Path) -> None:
    png = plot_fold_metric(pd.DataFrame({"rank_ic": [0.03, -0.01, 0.02]}), "rank_ic", tmp_path / "charts" / "fold.png")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "equity.png").write_bytes(png.read_bytes())
    images = {"equity": reports / "equity.png", "drawdown": reports / "drawdown.png", "fold_rank_ic": png}
    with tracker.start_run("images") as run:
        logged = run.log_compare_images(images)  # drawdown.png missing: skipped
        run.log_image(png, "charts/fold.png", key="fold/rank_ic", step=2)
    assert logged == [COMPARE_IMAGES["equity"], COMPARE_IMAGES["fold_rank_ic"]]
    files = run.list_artifacts()
    assert {"equity.png", "fold_rank_ic.png", "charts/fold.png"} <= set(files)
    keyed = [path for path in files if path.startswith("images/fold~rank_ic+step+2+")]
    assert len(keyed) == 2  # the image and its compressed preview, drawn by the chart view
    assert client.get_run(run.run_id).data.tags["mlflow.loggedImages"] == "True"


# --------------------------------------------------------------------------------------------------
# Querying a study


def test_study_runs_returns_the_study_trials_with_params_metrics_tags(tracker: Tracker, store_uri: str) -> None:
    parent = tracker.create_run("sweep", study="ablation", kind="sweep")
    for lr, sharpe in ((0.01, 0.4), (0.05, 0.7)):
        with tracker.start_run(f"lr={lr}", parent_run_id=parent.run_id, study="ablation", n_trials=3) as run:
            run.log_params({"model": {"lr": lr}})
            run.log_metrics({"sharpe": sharpe})
    with pytest.raises(RuntimeError):
        with tracker.start_run("lr=0.1", study="ablation", n_trials=3):
            raise RuntimeError("diverged")
    with tracker.start_run("other", study="another"):
        pass
    parent.end()

    table = study_runs(store_uri, tracker.experiment, "ablation")
    assert table["run_name"].tolist() == ["lr=0.01", "lr=0.05", "lr=0.1"]
    assert table["status"].tolist() == ["FINISHED", "FINISHED", "FAILED"]
    assert table["params.model.lr"].tolist()[:2] == ["0.01", "0.05"]
    assert table["metrics.sharpe"].tolist()[:2] == [0.4, 0.7]
    assert np.isnan(table["metrics.sharpe"].iloc[2])
    assert (table["tags.n_trials"] == "3").all()
    assert table.index.name == "run_id"
    finished = study_runs(store_uri, tracker.experiment, "ablation", statuses=["FINISHED"])
    assert len(finished) == 2
    assert len(study_runs(store_uri, tracker.experiment, "ablation", kind=None)) == 4
    assert tracker.study_runs("ablation", kind="sweep")["run_name"].tolist() == ["sweep"]
    assert study_runs(store_uri, tracker.experiment, "nobody").empty
    with pytest.raises(TrackingError, match="experiment 'missing' not found"):
        study_runs(store_uri, "missing", "ablation")


# --------------------------------------------------------------------------------------------------
# A real MLflow server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["sqlite", "postgresql"])
def server_backend(request, tmp_path: Path):
    """The backend store of the test's MLflow server: a SQLite file, or a real PostgreSQL (a team store)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'server.db'}"
        return
    pgserver = pytest.importorskip("pgserver")
    postgres = pgserver.get_server(tmp_path / "pgdata", cleanup_mode="stop")
    try:
        postgres.psql("CREATE DATABASE mlflow;")
        # pgserver listens on a unix socket: postgresql://postgres:@/postgres?host=/path
        yield postgres.get_uri("mlflow").replace("postgresql://", "postgresql+psycopg2://", 1)
    finally:
        postgres.cleanup()


@pytest.mark.slow
def test_tracker_logs_through_a_real_mlflow_server(server_backend: str, tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        server_command(server_backend, port=port, artifacts=tmp_path / "served-artifacts"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=server_env(server_backend),
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError as exc:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "mlflow server did not start:\n" + (tmp_path / "server.log").read_text()
                    ) from exc
                time.sleep(0.5)
        tracker = Tracker(uri, "served", project_dir=tmp_path)
        with tracker.start_run("remote", study="srv") as run:
            run.log_config({"model": {"lr": 0.05}, "db": {"password": "x"}})
            run.log_fold_metrics({1: {"ic": 0.5}, 2: {"ic": 0.25}})
            run.log_metrics({"sharpe": 1.25})
        stored = mlflow.MlflowClient(tracking_uri=uri).get_run(run.run_id)
        assert stored.info.status == "FINISHED"
        assert stored.data.params == {"model.lr": "0.05", "db.password": "***"}
        assert stored.data.metrics == {"sharpe": 1.25, "fold/ic": 0.25}
        history = mlflow.MlflowClient(tracking_uri=uri).get_metric_history(run.run_id, "fold/ic")
        assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
        assert run.list_artifacts() == ["config/config.yaml"]
        assert list((tmp_path / "served-artifacts").rglob("config.yaml"))  # proxied to the server's folder
        assert study_runs(uri, "served", "srv")["metrics.sharpe"].tolist() == [1.25]
        if server_backend.startswith("postgresql"):  # the run really lives in PostgreSQL
            import sqlalchemy

            engine = sqlalchemy.create_engine(server_backend)
            with engine.connect() as db:
                rows = db.execute(sqlalchemy.text("SELECT run_uuid, status FROM runs")).all()
            engine.dispose()
            assert rows == [(run.run_id, "FINISHED")]
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()
