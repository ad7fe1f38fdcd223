"""Beyond one machine: a study through Hydra's submitit launcher (its local executor: real subprocess
jobs, the path SLURM jobs take) and a sweep into the team store (MLflow server on a real PostgreSQL)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from backtest.reports.study import STUDY_REPORT_FILES
from tests.system.tiny_market import TINY, main_job


def _sweep_job(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return main_job(["-m", *TINY, "features=all,no_volatility", *args], tmp_path)


@pytest.mark.parametrize(
    "launcher,target,fields",
    [
        ("slurm", "SlurmLauncher", {"timeout_min": 180, "cpus_per_task": 2, "mem_gb": 8, "array_parallelism": 64}),
        ("rehearsal", "LocalLauncher", {"timeout_min": 120, "cpus_per_task": 1}),
    ],
)
def test_the_launcher_configs_compose_onto_submitit(launcher: str, target: str, fields: dict) -> None:
    from hydra import compose, initialize_config_dir

    from backtest.cli.compose import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    node = cfg.hydra.launcher
    assert node._target_ == f"hydra_plugins.hydra_submitit_launcher.submitit_launcher.{target}"
    assert {k: node[k] for k in fields} == fields
    # submitit's pickles and logs go with the sweep's folder (the one the nodes must share)
    assert node.submitit_folder == f"{cfg.hydra.sweep.dir}/.submitit/%j"


def _check_study(client: MlflowClient) -> tuple[object, list]:
    """The store holds the study whole: the parent and both children FINISHED, the report once."""
    runs = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    parents = [r for r in runs if r.data.tags.get("run_kind") == "sweep"]
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags), key=lambda r: r.data.tags["trial_num"])
    assert len(runs) == 3 and len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.status == "FINISHED" and [c.info.status for c in children] == ["FINISHED", "FINISHED"]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert [c.data.tags["trial"] for c in children] == ["features=all", "features=no_volatility"]
    assert all(c.data.tags["comparable"] == "true" for c in children)
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert set(STUDY_REPORT_FILES.values()) <= top
    # the study-wide metrics were logged once, at the end, after both children had finished
    for key in ("pbo", "n_trials"):
        assert len(client.get_metric_history(parent.info.run_id, key)) == 1
    for child in children:
        assert len(client.get_metric_history(child.info.run_id, "dsr")) == 1
        assert child.info.end_time <= parent.info.end_time
    return parent, children


@pytest.mark.slow
def test_a_study_through_submitit_local_lands_whole_in_one_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    t0 = time.perf_counter()
    proc = _sweep_job([f"tracking.uri={uri}", "tracking.study=rehearsal", "hydra/launcher=rehearsal"], tmp_path)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    parent, children = _check_study(MlflowClient(uri))
    # each trial ran as its own submitit job (a subprocess with its own folder, log and pickled result)
    jobs = sorted(p for p in (tmp_path / "sweep" / ".submitit").iterdir() if p.name.isdigit())
    assert len(jobs) == 2, jobs
    for job in jobs:
        assert (job / f"{job.name}_0_result.pkl").exists()
        logs = (job / f"{job.name}_0_log.err").read_text() + (job / f"{job.name}_0_log.out").read_text()
        assert "ended FINISHED" in logs
    assert str(os.getpid()) not in {j.name for j in jobs}
    # the report was written once, by the launching process
    assert len(re.findall(r"wrote \d+ study report files", proc.stdout + proc.stderr)) == 1
    print(f"submitit_local: two-trial study in {seconds:.1f} s")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_a_sweep_into_the_team_store_is_read_back_from_postgresql(tmp_path: Path) -> None:
    pytest.importorskip("pgserver")
    import sqlalchemy

    port, pgdata, artifacts = _free_port(), tmp_path / "pgdata", tmp_path / "team-artifacts"
    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_BACKEND_STORE_URI"}
    log = (tmp_path / "team.log").open("w")
    team = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backtest.tracking.team",
            "--port",
            str(port),
            "--pgdata",
            str(pgdata),
            "--artifacts",
            str(artifacts),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**env, "MLFLOW_DISABLE_TELEMETRY": "true"},
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while "team store:" not in (tmp_path / "team.log").read_text():
            assert team.poll() is None and time.monotonic() < deadline, (tmp_path / "team.log").read_text()
            time.sleep(0.5)
        t0 = time.perf_counter()
        proc = _sweep_job(["tracking=server", f"tracking.uri={uri}", "tracking.study=team"], tmp_path)
        seconds = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr[-3000:]
        parent, children = _check_study(MlflowClient(uri))
        # the artifacts went through the server into its folder; the runs live in PostgreSQL
        assert list(artifacts.rglob(STUDY_REPORT_FILES["trials"]))
        assert len(list(artifacts.rglob("daily_returns.parquet"))) == 2
        engine = sqlalchemy.create_engine(f"postgresql+psycopg2://postgres:@/mlflow?host={pgdata.resolve()}")
        with engine.connect() as db:
            rows = db.execute(sqlalchemy.text("SELECT run_uuid, status FROM runs")).all()
        engine.dispose()
        assert sorted(rows) == sorted((r.info.run_id, "FINISHED") for r in [parent, *children])
        print(f"team store: two-job sweep in {seconds:.1f} s")
    finally:
        os.killpg(team.pid, signal.SIGINT)
        code = team.wait(timeout=60)
        log.close()
    assert code == 0, (tmp_path / "team.log").read_text()[-2000:]
    assert not (pgdata / "postmaster.pid").exists()  # the local PostgreSQL stopped with it
