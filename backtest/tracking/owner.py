"""Who owns a RUNNING run: the process that opened it, named so that no other process shares the name.

A run records its owner in the tag ``owner`` (besides ``host`` and ``pid``, for people)::

    <boot id>/<pid namespace>/<pid>/<start>

- boot id: ``/proc/sys/kernel/random/boot_id``, drawn anew at every boot of a kernel;
- pid namespace: the inode of ``/proc/self/ns/pid``. Containers on one kernel share its boot id, but each
  has its own pid namespace, in which pids start again from 1;
- pid and start: the process id and the process's start time in clock ticks after boot (field 22 of
  ``/proc/<pid>/stat``). A pid handed out again belongs to a process with another start time.

Neither a host name nor a pid names a process: containers are often all called the same (every machine
of a cluster may be ``vm``), and pids are reused. :func:`owner_state` tells, from this process, whether
a run's owner still runs::

    live     a process of this boot and pid namespace with the owner's pid and start time runs
    gone     the owner is of this boot and pid namespace, and no process has its pid, or the process
             that has it started at another time (the pid was reused)
    unknown  the owner is of another boot or pid namespace (another machine or container, or this
             machine before a reboot), it cannot be read, or the run has none (recorded by a version
             without the tag: its host and pid cannot tell this container's process from another's)

Only a ``gone`` owner lets a run be marked FAILED: a process that may be alive is never declared dead.
Off Linux (no ``/proc``) no owner is recorded, and every run's owner is ``unknown``.

Examples
--------
>>> owner_state(None), owner_state("not an owner")
('unknown', 'unknown')
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

OwnerState = Literal["live", "gone", "unknown"]

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")


def process_owner(pid: int | None = None) -> str | None:
    """The owner of process ``pid`` (this process by default), as tagged on its runs; None off Linux or
    when ``/proc`` does not tell (the process is gone, or ``/proc`` hides it)."""
    pid = os.getpid() if pid is None else pid
    boot, namespace, start = _boot_id(), _pid_namespace(), _start_time(pid)
    if boot is None or namespace is None or start is None:
        return None
    return f"{boot}/{namespace}/{pid}/{start}"


def owner_state(owner: str | None) -> OwnerState:
    """Whether the process named by ``owner`` (a run's ``owner`` tag, None when it has none) still runs,
    as seen from this process: ``live``, ``gone`` or ``unknown`` (the module docstring says when)."""
    parts = (owner or "").split("/")
    if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
        return "unknown"
    boot, namespace, pid, start = parts[0], parts[1], int(parts[2]), int(parts[3])
    here = _boot_id(), _pid_namespace()
    if None in here or (boot, namespace) != here:
        return "unknown"
    try:
        os.kill(pid, 0)  # a process of another user answers PermissionError: it exists
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass
    now = _start_time(pid)
    if now is None:  # it exists but /proc hides it (hidepid), or it exited a moment ago
        return "unknown"
    return "live" if now == start else "gone"


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat(PID_NAMESPACE).st_ino)
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: the process's start time in clock ticks after boot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces and ')'
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None
