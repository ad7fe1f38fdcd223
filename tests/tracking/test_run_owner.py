"""Who owns a RUNNING run: the process named by its kernel boot, pid namespace, pid and start time, never by
its host name (containers are often all called the same). Real processes and a real SQLite store; the
owners are read from ``/proc`` here, independently of the code under test."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backtest.tracking import Tracker

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
pytestmark = pytest.mark.skipif(not BOOT_ID.exists(), reason="a process's owner is read from Linux /proc")


def _owner(pid: int, *, boot: str | None = None, start_shift: int = 0) -> str:
    """``<boot id>/<pid namespace inode>/<pid>/<start time in clock ticks after boot>`` of process ``pid``."""
    namespace = os.stat("/proc/self/ns/pid").st_ino
    stat = Path(f"/proc/{pid}/stat").read_text()
    start = int(stat.rsplit(")", 1)[1].split()[19]) + start_shift  # field 22 of /proc/<pid>/stat
    return f"{boot or BOOT_ID.read_text().strip()}/{namespace}/{pid}/{start}"


@pytest.fixture()
def tracker(tmp_path: Path) -> Tracker:
    return Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}", experiment="owners", project_dir=tmp_path)


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen]:
    """A live process of this machine."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture()
def ended() -> tuple[int, str]:
    """The pid and owner of a process of this machine that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    owner = _owner(proc.pid)
    proc.communicate()
    return proc.pid, owner


def test_a_run_records_its_owner_beside_its_host_and_pid(tracker: Tracker) -> None:
    run = tracker.create_run("r", tags={"config_key": "k"})
    tags = tracker.client.get_run(run.run_id).data.tags
    assert tags["owner"] == _owner(os.getpid())
    assert tags["host"] == socket.gethostname() and tags["pid"] == str(os.getpid())
    run.end("FINISHED")


def test_a_run_is_stale_when_its_owner_is_gone_and_live_whatever_its_host_name(
    tracker: Tracker, sleeper: subprocess.Popen, ended: tuple[int, str]
) -> None:
    host, pid = socket.gethostname(), str(sleeper.pid)
    gone_pid, gone_owner = ended
    other_boot = str(uuid.uuid4())

    def running(**tags: str) -> str:
        return tracker.create_run("r", tags={"config_key": "k", **tags}).run_id

    runs = {
        # the sleeper's pid, but a process that started one tick before it: the pid was reused
        "pid reused": running(host=host, pid=pid, owner=_owner(sleeper.pid, start_shift=-1)),
        "live": running(host=host, pid=pid, owner=_owner(sleeper.pid)),
        "live, another host name": running(host="another-host", pid=pid, owner=_owner(sleeper.pid)),
        "gone": running(host=host, pid=str(gone_pid), owner=gone_owner),
        # a machine with this one's host name (every container here is called the same): its pid means
        # nothing on this machine, whether a process of this machine has it or not
        "another machine, this host name": running(
            host=host, pid=str(gone_pid), owner=gone_owner.replace(BOOT_ID.read_text().strip(), other_boot)
        ),
        "another machine, a pid alive here": running(
            host=host, pid=pid, owner=_owner(sleeper.pid, boot=other_boot, start_shift=7)
        ),
    }
    ended_runs = tracker.end_stale_runs("k")
    status = {name: tracker.client.get_run(run_id).info.status for name, run_id in runs.items()}
    assert status == {
        "pid reused": "FAILED",
        "live": "RUNNING",
        "live, another host name": "RUNNING",
        "gone": "FAILED",
        "another machine, this host name": "RUNNING",
        "another machine, a pid alive here": "RUNNING",
    }
    assert sorted(ended_runs) == sorted([runs["pid reused"], runs["gone"]])
    error = tracker.client.get_run(runs["gone"]).data.tags["error"]
    assert error == f"interrupted: its process (pid {gone_pid} on {host}) ended without closing the run"


def test_a_run_recorded_without_an_owner_is_never_marked_failed(
    tracker: Tracker, ended: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    # An older version's run: host and pid only. On a machine whose containers share a host name its
    # process may be alive in another container, so it is left RUNNING, with a warning naming it.
    gone_pid, _ = ended
    legacy = tracker.client.create_run(
        tracker.experiment_id, tags={"config_key": "k", "host": socket.gethostname(), "pid": str(gone_pid)}
    ).info.run_id
    with caplog.at_level(logging.WARNING, logger="backtest.tracking.run"):
        assert tracker.end_stale_runs("k") == []
    assert tracker.client.get_run(legacy).info.status == "RUNNING"
    assert legacy in caplog.text and "no owner tag" in caplog.text
