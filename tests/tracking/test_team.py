"""The team store keeps its database password secret: off every process's command line, out of every message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backtest.tracking import team, ui
from backtest.tracking.ui import free_port, process_tree

PASSWORD = "team-s3cret-pw"


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def test_a_server_that_does_not_start_is_one_line_with_a_fix_and_no_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    uri = f"postgresql://bob:{PASSWORD}@db.invalid:5432/mlflow"
    monkeypatch.setenv(team.ENV_DATABASE, uri)
    started: list[tuple[list[str], dict[str, str]]] = []
    real_popen = subprocess.Popen

    def exits_at_once(command: list[str], **kwargs: object) -> subprocess.Popen:
        started.append((list(command), dict(kwargs["env"])))  # type: ignore[arg-type]
        return real_popen([sys.executable, "-c", "raise SystemExit(3)"], **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(ui.subprocess, "Popen", exits_at_once)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        code = team.main(["--port", str(free_port()), "--artifacts", str(tmp_path / "artifacts")])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    errors = [line for line in err.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: mlflow server on postgresql://bob:***@db.invalid"), err
    assert "exited with code 3" in errors[0] and "Fix:" in errors[0], err
    assert "Traceback" not in out + err
    assert PASSWORD not in out + err + caplog.text
    # the server was given its store in the environment, not on the command line
    [(command, env)] = started
    assert not any(PASSWORD in arg for arg in command) and "--backend-store-uri" not in command
    assert env[team.ENV_DATABASE] == uri


@pytest.mark.slow
def test_the_database_password_is_on_no_command_line_of_the_team_store(tmp_path: Path) -> None:
    pgserver = pytest.importorskip("pgserver")
    pgdata = tmp_path / "pgdata"
    postgres = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        postgres.psql("CREATE DATABASE mlflow;")
        postgres.psql(f"ALTER USER postgres PASSWORD '{PASSWORD}';")
        uri = postgres.get_uri("mlflow").replace(
            "postgresql://postgres:@", f"postgresql+psycopg2://postgres:{PASSWORD}@"
        )
        assert PASSWORD in uri
        port, log_path = free_port(), tmp_path / "team.log"
        log = log_path.open("w")
        team_process = subprocess.Popen(
            [sys.executable, "-m", "backtest.tracking.team", "--port", str(port)]
            + ["--artifacts", str(tmp_path / "team-artifacts")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, team.ENV_DATABASE: uri, "MLFLOW_DISABLE_TELEMETRY": "true"},
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while "team store:" not in log_path.read_text():
                assert team_process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.5)
            processes = process_tree(team_process.pid)  # the team command, mlflow server, its uvicorn
            assert len(processes) >= 3, processes
            lines = {pid: _cmdline(pid) for pid in processes}
            assert any("mlflow server" in line for line in lines.values()), lines
            leaked = sorted(pid for pid, line in lines.items() if PASSWORD in line)
            if leaked:  # not an assert: its report would print the command lines, password and all
                pytest.fail(f"the database password is on the command line of processes {leaked}")
        finally:
            os.killpg(team_process.pid, signal.SIGINT)
            code = team_process.wait(timeout=60)
            log.close()
        assert code == 0, log_path.read_text()[-2000:]
        assert PASSWORD not in log_path.read_text()
    finally:
        postgres.cleanup()
