"""A command of the project that sends itself SIGKILL at a chosen instant: the subprocess of the kill tests
of sweeps and of sync in ``tests/system/test_run_lifecycle.py``.

    python -m tests.system.kill_job POINT backtest [OVERRIDES...]
    python -m tests.system.kill_job POINT backtest.tracking sync --from URI --to URI

POINT is where the process kills itself:

- ``parent_opened``: a sweep's parent run is open, its first job has not started;
- ``study_report``: a sweep's jobs are done, it is recording the study report on the parent run;
- ``sync_artifacts``: sync has created the target's copy of a run with its params, metrics and tags, and
  not yet its artifacts;
- ``sync_ended``: sync has ended the target's whole copy of a run, and not yet tagged the source synced;
- ``none``: the command runs as it is.
"""

from __future__ import annotations

import os
import signal
import sys

import mlflow

KILL_POINTS = ("parent_opened", "study_report", "sync_artifacts", "sync_ended", "none")


def _die(*args: object, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    """Make this process kill itself at ``point`` (see the module docstring)."""
    import backtest.study as study  # a sweep's steps, called through the module

    if point == "parent_opened":
        real_open = study.open_sweep

        def open_sweep(*args: object, **kwargs: object):
            real_open(*args, **kwargs)
            _die()

        study.open_sweep = open_sweep  # type: ignore[assignment]
    elif point == "study_report":
        study.record_report = _die  # type: ignore[assignment]
    elif point == "sync_artifacts":
        mlflow.MlflowClient.log_artifacts = _die  # type: ignore[method-assign]
    elif point == "sync_ended":
        real_end = mlflow.MlflowClient.set_terminated

        def set_terminated(self: mlflow.MlflowClient, *args: object, **kwargs: object) -> None:
            real_end(self, *args, **kwargs)
            _die()

        mlflow.MlflowClient.set_terminated = set_terminated  # type: ignore[method-assign]


def main() -> int:
    point, module, *args = sys.argv[1:]
    assert point in KILL_POINTS, point
    arm(point)
    sys.argv = [module, *args]
    if module == "backtest":
        from backtest.cli import main as backtest_main

        backtest_main()
        return 0
    from backtest.tracking.fallback import main as tracking_main

    return tracking_main()


if __name__ == "__main__":
    raise SystemExit(main())
