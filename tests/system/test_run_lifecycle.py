"""The record never lies about how a run ended: refusals write nothing, kills end or supersede the run,
a lost server costs seconds and no result. Each fault is injected for real (signals, a server process
stopped, an OSError from the disk)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from backtest import PROJECT_DIR, cli
from backtest.errors import StoreUnavailableError
from backtest.tracking.ui import server_command, server_env
from tests.system.signal_job import POINTS
from tests.system.tiny_market import TINY, main_job

FAST = [o for o in TINY if not o.startswith("backtest.retrain_every")] + ["backtest.retrain_every=5"]


def _backtest(args: list[str], tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.Popen(
        [sys.executable, "-m", "backtest", *args, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("rankbacktest")
    return client.search_runs([experiment.experiment_id]) if experiment else []


def _wait_for_fold_metrics(uri: str, n: int, timeout: float = 240.0) -> None:
    """Poll the store until its run has ``n`` per-fold points (logged as the folds finish)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            runs = _runs(uri)
            if runs and len(MlflowClient(uri).get_metric_history(runs[0].info.run_id, "fold/rank_ic")) >= n:
                return
        except Exception:  # the store may be half-created on the first polls
            pass
        time.sleep(0.2)
    raise AssertionError(f"no {n} fold metrics in {uri} after {timeout} s")


def test_a_refused_schedule_writes_nothing_to_the_store(tmp_path: Path) -> None:
    db = tmp_path / "refused.db"
    proc = _backtest([*TINY, "backtest.test_start=2023-07-01", f"tracking.uri=sqlite:///{db}"], tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "Traceback" not in err and "Fix:" in err
    assert not db.exists()  # the store was never opened: no FAILED run, no empty database


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_dask_scheduler_is_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    db = tmp_path / "refused.db"
    address = f"tcp://127.0.0.1:{_closed_port()}"
    args = [*TINY, "engine.backend=dask", f"engine.scheduler={address}", f"tracking.uri=sqlite:///{db}"]
    proc = main_job([*args, f"tracking.fallback_uri=sqlite:///{tmp_path / 'fallback.db'}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "no Dask scheduler answers" in proc.stderr
    assert address in proc.stderr and "engine.backend=loky" in proc.stderr  # the fix
    assert not db.exists() and not (tmp_path / "fallback.db").exists()  # no FAILED run, no empty database


def test_a_full_disk_while_recording_ends_the_run_failed_with_the_reason(
    tmp_path: Path, monkeypatch, compose_config
) -> None:
    uri = f"sqlite:///{tmp_path / 'full.db'}"
    fallback = f"sqlite:///{tmp_path / 'fallback.db'}"
    real = MlflowClient.log_artifact

    def full_disk(self, run_id, local_path, artifact_path=None):  # the data artifacts are the first big writes
        if "predictions" in str(local_path):
            raise OSError(errno.ENOSPC, "No space left on device", str(local_path))
        return real(self, run_id, local_path, artifact_path)

    monkeypatch.setattr(MlflowClient, "log_artifact", full_disk)
    cfg = compose_config([*TINY, f"tracking.uri={uri}", f"tracking.fallback_uri={fallback}"])
    with pytest.raises(StoreUnavailableError, match="No space left on device"):
        cli.run(cfg)
    for store in (uri, fallback):  # the server's run and its fallback copy both end FAILED, saying why
        (run,) = _runs(store)
        assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]
        assert "comparable" not in run.data.tags  # written only when a run is recorded whole


def test_a_disk_full_for_the_store_and_its_fallback_leaves_the_run_for_the_next_start_to_close(
    tmp_path: Path, monkeypatch, compose_config
) -> None:
    from backtest.cli import progress
    from backtest.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'full.db'}"
    fallback = f"sqlite:///{tmp_path / 'fallback.db'}"  # on the same disk, as by default
    full = False

    def unless_full(real):
        def write(self, *args, **kwargs):
            if full:  # every write, the run's final status included
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(self, *args, **kwargs)

        return write

    for name in ("create_run", "log_batch", "set_tag", "set_terminated", "log_artifact", "log_artifacts"):
        monkeypatch.setattr(MlflowClient, name, unless_full(getattr(MlflowClient, name)))
    first_fold = progress.FoldProgress.__call__

    def disk_fills_after_the_first_fold(self, outcome, n):
        nonlocal full
        first_fold(self, outcome, n)
        full = True

    monkeypatch.setattr(progress.FoldProgress, "__call__", disk_fills_after_the_first_fold)
    cfg = compose_config([*TINY, f"tracking.uri={uri}", f"tracking.fallback_uri={fallback}"])
    with pytest.raises(StoreUnavailableError) as raised:
        cli.run(cfg)
    message = str(raised.value)
    assert "\n" not in message and "No space left on device" in message and "tracking.fallback_uri=" in message
    full = False  # space freed
    (run,) = _runs(uri)
    assert run.info.status == "RUNNING" and run.data.tags["owner"]  # its status could not be written
    assert _runs(fallback) == []
    tracker = Tracker(uri, "rankbacktest", PROJECT_DIR)
    assert tracker.end_stale_runs(run.data.tags["config_key"]) == [run.info.run_id]  # what the next start does
    (closed,) = _runs(uri)
    assert closed.info.status == "FAILED" and "ended without closing the run" in closed.data.tags["error"]


@pytest.mark.slow
def test_kill_9_then_rerun_leaves_one_finished_run_and_nothing_running(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'killed.db'}"
    args = [*FAST, f"tracking.uri={uri}", "engine.checkpoints=true", f"engine.cache_dir={tmp_path / 'cache'}"]
    proc = _backtest(args, tmp_path)
    _wait_for_fold_metrics(uri, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    (killed,) = _runs(uri)
    assert killed.info.status == "RUNNING"  # nobody could end it
    rerun = _backtest(args, tmp_path)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err[-3000:]
    runs = {r.info.run_id: r for r in _runs(uri)}
    statuses = sorted(r.info.status for r in runs.values())
    assert statuses == ["FAILED", "FINISHED"]  # exactly one FINISHED run of the configuration, nothing RUNNING
    assert "ended without closing the run" in runs[killed.info.run_id].data.tags["error"]
    assert "resuming" in out + err  # the rerun took the killed run's finished folds from the checkpoints


def _killed_at(point: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``args`` (``backtest ...`` or ``backtest.tracking sync ...``) run by :mod:`tests.system.kill_job`,
    which sends itself SIGKILL at ``point`` (``none``: never)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    command = [sys.executable, "-m", "tests.system.kill_job", point, *args]
    return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=600)


def _sweep(uri: str, tmp_path: Path) -> list[str]:
    """A named one-job sweep on the quick market."""
    sweep_dir = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    return ["backtest", "-m", "tracking.study=killed", *FAST, f"tracking.uri={uri}", sweep_dir]


def test_a_sweep_killed_with_its_parent_run_open_is_closed_when_the_study_starts_again(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'sweep.db'}"
    first = _killed_at("parent_opened", _sweep(uri, tmp_path), tmp_path)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    (killed,) = _runs(uri)
    assert killed.info.status == "RUNNING" and killed.data.tags["run_kind"] == "sweep"  # nobody could end it
    again = _killed_at("parent_opened", _sweep(uri, tmp_path), tmp_path)  # the study starts again
    assert again.returncode == -signal.SIGKILL, again.stderr[-3000:]
    runs = {r.info.run_id: r for r in _runs(uri)}
    assert len(runs) == 2 and runs[killed.info.run_id].info.status == "FAILED"
    assert "ended without closing the run" in runs[killed.info.run_id].data.tags["error"]


@pytest.mark.slow
def test_a_sweep_killed_while_it_records_its_study_report_leaves_nothing_running_after_a_rerun(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'sweep.db'}"
    killed = _killed_at("study_report", _sweep(uri, tmp_path), tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (parent,) = [r for r in _runs(uri) if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "RUNNING"
    rerun = _killed_at("none", _sweep(uri, tmp_path), tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    parents = {r.info.run_id: r.info.status for r in _runs(uri) if r.data.tags["run_kind"] == "sweep"}
    assert parents == {parent.info.run_id: "FAILED", **{k: "FINISHED" for k in parents if k != parent.info.run_id}}
    assert len(parents) == 2 and "RUNNING" not in {r.info.status for r in _runs(uri)}


@pytest.mark.parametrize("point", ["sync_artifacts", "sync_ended"])
def test_a_sync_killed_halfway_is_completed_by_the_next_without_a_duplicate(tmp_path: Path, point: str) -> None:
    from backtest.tracking import prepare_store

    fallback, server = f"sqlite:///{tmp_path / 'fallback.db'}", f"sqlite:///{tmp_path / 'server.db'}"
    local = MlflowClient(fallback)
    pending = local.create_run(prepare_store(fallback, "rankbacktest"), tags={"pending_sync": "true"}).info.run_id
    local.log_metric(pending, "sharpe", 0.25)
    (tmp_path / "daily_returns.csv").write_text("date,strategy\n2025-01-02,0.01\n")
    local.log_artifact(pending, str(tmp_path / "daily_returns.csv"), "data")
    local.set_terminated(pending)
    sync = ["backtest.tracking", "sync", "--from", fallback, "--to", server]
    killed = _killed_at(point, sync, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (first,) = _runs(server)
    assert first.info.status == ("RUNNING" if point == "sync_artifacts" else "FINISHED")
    assert local.get_run(pending).data.tags["pending_sync"] == "true"  # the source is not marked synced yet
    done = _killed_at("none", sync, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (copy,) = _runs(server)  # one copy: the half copy deleted and copied anew, a whole one kept
    assert copy.info.status == "FINISHED" and copy.data.tags["synced_from"] == pending
    assert (copy.info.run_id == first.info.run_id) == (point == "sync_ended")
    assert copy.data.metrics == {"sharpe": 0.25}
    assert [a.path for a in MlflowClient(server).list_artifacts(copy.info.run_id, "data")] == ["data/daily_returns.csv"]
    assert local.get_run(pending).data.tags["synced_to"] == copy.info.run_id
    assert local.get_run(pending).data.tags["pending_sync"] == "false"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_sigterm_sighup_and_ctrl_c_end_the_run_killed_with_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    uri = f"sqlite:///{tmp_path / 'stopped.db'}"
    proc = _backtest([*FAST, f"tracking.uri={uri}"], tmp_path)
    _wait_for_fold_metrics(uri, 1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    _assert_stopped(uri, sig, proc.returncode, err)


def _assert_stopped(uri: str, sig: signal.Signals, returncode: int, err: str) -> None:
    """The run ended KILLED with the signal, the job exited 128 + signal with one line and no traceback."""
    (run,) = _runs(uri)
    assert run.info.status == "KILLED" and run.data.tags["error"] == f"interrupted: signal {sig.name}"
    assert "comparable" not in run.data.tags  # written only when a run is recorded whole
    assert returncode == 128 + sig, err[-3000:]
    assert err.rstrip().splitlines()[-1] == f"stopped: signal {sig.name}"
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]


@pytest.fixture(scope="module")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store with MLflow's tables made, to copy: creating them costs seconds a run."""
    db = tmp_path_factory.mktemp("store") / "empty.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


def _stopped_job(
    point: str, sig: signal.Signals, tmp_path: Path, store: Path, overrides: list[str] | None = None
) -> None:
    """``python -m backtest`` on the tiny market raising ``sig`` at ``point`` (``tests/system/signal_job.py``),
    then the checks of :func:`_assert_stopped`."""
    db = tmp_path / "stopped.db"
    shutil.copy(store, db)
    args = [*(overrides or TINY), "engine.audit_cutoffs=0", f"tracking.uri=sqlite:///{db}"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.system.signal_job", point, sig.name, *args, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    _assert_stopped(f"sqlite:///{db}", sig, proc.returncode, proc.stderr)


@pytest.mark.parametrize(
    ("point", "sig"),
    [("fit_cleanup", signal.SIGTERM), ("fold_metrics", signal.SIGINT)],
    ids=["fit_cleanup-SIGTERM", "fold_metrics-SIGINT"],
)
def test_a_stop_in_lightgbm_cleanup_or_a_write_ends_the_run_killed(
    point: str, sig: signal.Signals, tmp_path: Path, migrated_store: Path
) -> None:
    """The two instants where a signal handler that raised lost the stop (LightGBM's cleanup printed
    "Exception ignored" and the run went on to FINISHED) or the run (a write left the store locked)."""
    _stopped_job(point, sig, tmp_path, migrated_store)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("point", [p for p in POINTS if p != "epoch"])
def test_a_stop_at_every_instant_ends_the_run_killed(
    point: str, sig: signal.Signals, tmp_path: Path, migrated_store: Path
) -> None:
    _stopped_job(point, sig, tmp_path, migrated_store)


@pytest.mark.slow
def test_a_stop_between_epochs_ends_the_transformer_run_killed(tmp_path: Path, migrated_store: Path) -> None:
    small = ["architecture.d_model=16", "architecture.n_layers=1", "training.max_epochs=3", "training.num_threads=1"]
    market = [o for o in TINY if not o.startswith("model.")]
    overrides = [*market, "model=stock_transformer", *(f"model.{o}" for o in small)]
    _stopped_job("epoch", signal.SIGTERM, tmp_path, migrated_store, overrides)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(db: Path, artifacts: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        server_command(f"sqlite:///{db}", port=port, artifacts=artifacts),
        env=server_env(f"sqlite:///{db}"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.3)
    raise AssertionError("mlflow server did not start")


@pytest.mark.slow
def test_a_lost_server_costs_seconds_and_the_run_goes_to_the_fallback_store_then_syncs(tmp_path: Path) -> None:
    db, artifacts, port = tmp_path / "server.db", tmp_path / "artifacts", _free_port()
    server_uri, fallback = f"http://127.0.0.1:{port}", f"sqlite:///{tmp_path / 'fallback.db'}"
    server = _server(db, artifacts, port)
    proc = _backtest([*FAST, f"tracking.uri={server_uri}", f"tracking.fallback_uri={fallback}"], tmp_path)
    try:
        _wait_for_fold_metrics(f"sqlite:///{db}", 2)  # progress reaches the server as folds finish
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    lost_at = time.monotonic()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert time.monotonic() - lost_at < 120  # bounded retries, not minutes per request
    assert "python -m backtest.tracking sync --to" in out + err  # the log says where the run went
    (local,) = _runs(fallback)
    assert local.info.status == "FINISHED" and local.data.tags["pending_sync"] == "true"
    assert local.data.tags["comparable"] == "true" and "sharpe" in local.data.metrics
    n_folds = int(local.data.metrics["n_folds"])
    assert len(MlflowClient(fallback).get_metric_history(local.info.run_id, "fold/rank_ic")) >= n_folds - 1

    server = _server(db, artifacts, port)
    try:
        sync = subprocess.run(
            [sys.executable, "-m", "backtest.tracking", "sync", "--from", fallback, "--to", server_uri],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sync.returncode == 0, sync.stderr[-3000:]
        runs = {r.info.status: r for r in _runs(server_uri)}
        assert sorted(runs) == ["FAILED", "FINISHED"]  # the run open when the server died, and the synced one
        synced = runs["FINISHED"]
        assert synced.data.metrics == local.data.metrics and synced.data.tags["synced_from"] == local.info.run_id
        client = MlflowClient(server_uri)
        assert "data/daily_returns.parquet" in [a.path for a in client.list_artifacts(synced.info.run_id, "data")]
        assert MlflowClient(fallback).get_run(local.info.run_id).data.tags["pending_sync"] == "false"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
