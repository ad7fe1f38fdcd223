"""The command line: ``python -m backtest [hydra overrides]`` (``-m`` for multirun sweeps).

The only package that imports hydra and omegaconf. This file holds the main job's flow; each other
concern has its module here:

- :mod:`~backtest.cli.compose`: every part built from its config group, the panel, the run's name and tags;
- :mod:`~backtest.cli.errors`: Hydra's and the library's errors as one line with a fix, exit status 2;
- :mod:`~backtest.cli.preflight`: the checks every job passes before any work, a sweep's jobs before it begins;
- :mod:`~backtest.cli.sweep`: a multirun as one study (the ``SweepTracking`` callback), a job's trial;
- :mod:`~backtest.cli.argv`: secrets refused on the command line before Hydra saves it;
- :mod:`~backtest.cli.progress`: the folds' progress bar, the stage timings;
- :mod:`~backtest.cli.summary`: the summary printed at the end.

Library code gets plain objects: the engine plans and runs the backtest, :func:`backtest.record.record_run`
records it (in the fallback store if the tracking store stops answering), and the summary is printed.
SIGTERM, Ctrl-C or SIGHUP stop the job at its next safe point (:mod:`backtest.stop`): the run ends KILLED
and the job exits ``128 + signal`` with one line, ``stopped: signal SIGTERM``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import hydra
from hydra.errors import HydraException, InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from backtest import PROJECT_DIR
from backtest.cli.argv import keep_secrets_off_the_command_line
from backtest.cli.compose import CONF_DIR, load_panel, run_identity
from backtest.cli.errors import refuse, user_error
from backtest.cli.preflight import check_job
from backtest.cli.progress import FoldProgress, log_stage_seconds
from backtest.cli.summary import print_summary
from backtest.cli.sweep import sweep_trial
from backtest.data.fingerprint import panel_fingerprint
from backtest.errors import BacktestError, FeatureAuditError, LeakageError, RunInterrupted
from backtest.stop import raise_if_stopped, stop_on_signals

log = logging.getLogger("backtest")


def run(cfg: DictConfig) -> dict[str, Any]:
    """The main job: compose, build, run under the guards, record in MLflow, print the summary."""
    trial = sweep_trial(cfg)
    parts, benchmark = check_job(cfg)  # the checks every job of a sweep passed before the sweep began
    from backtest.data.synthetic import oracle_scores
    from backtest.engine import plan_backtest, run_backtest
    from backtest.record import record_guard_failure, record_run, record_summary
    from backtest.reports.summary import summarize_panel
    from backtest.splits import decision_dates
    from backtest.study import trial_sharpe_var
    from backtest.tracking import Tracker

    t0 = time.perf_counter()
    panel, market = load_panel(cfg)
    data_fp = panel_fingerprint(panel)
    log.info("panel loaded in %.1f s\n%s", time.perf_counter() - t0, summarize_panel(panel, data_fp))
    # Labels and folds next: a schedule the data cannot serve (or an index file that does not cover its test
    # period) is refused before the store is touched.
    plan = plan_backtest(
        panel, label=parts.label, schedule=parts.schedule, portfolio=parts.portfolio, benchmark=benchmark
    )

    identity = run_identity(cfg, parts, data_fp, trial)
    raise_if_stopped()  # stopped while planning: no run is opened
    tracker = Tracker.from_config(parts.tracking, PROJECT_DIR)
    tracker.end_stale_runs(identity.tags["config_key"])
    progress = FoldProgress(decision_dates(plan.folds))
    with identity.open(tracker) as mlrun:
        progress.run = mlrun
        try:
            result = run_backtest(
                plan,
                features=parts.features,
                ranker_factory=parts.ranker_factory,
                data_fingerprint=data_fp,
                options=parts.options,
                n_trials=identity.n_trials,
                seed=int(cfg.seed),
                on_fold=progress,
                trial_sharpe_var=trial_sharpe_var(tracker, identity.study),
                oracle=oracle_scores(market, parts.label.holding_days) if market else None,
            )
        except (LeakageError, FeatureAuditError) as exc:
            record_guard_failure(mlrun, exc, data_fp)
            raise
        finally:
            progress.close()
        fallback = parts.tracking.fallback_uri
        recorded = record_run(
            tracker, mlrun, result, identity, reports=parts.reports, fallback=fallback, lost=progress.lost
        )
    record_summary(recorded, print_summary(result, recorded))  # the summary is the run's description too
    log_stage_seconds(result.timings)
    return {
        "run_id": recorded.run_id,
        "metrics": result.metrics,
        "leak_guard": result.leak_guard,
        "tracking_uri": recorded.store_uri,
    }


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> Any:
    try:
        return run(cfg)
    except (BacktestError, InstantiationException, OmegaConfBaseException, TypeError) as exc:
        err = user_error(exc, cfg)
        if err is None:
            raise
        refuse(err)


def main() -> None:
    """``python -m backtest``: secrets refused before Hydra saves anything; every user error exits 2.

    Hydra reports its own composition errors (a typo'd key, an unknown option, an override that does not
    parse) and exits 1; with ``HYDRA_FULL_ERROR`` set for the call they reach this function instead, which
    prints them in one line with a fix and exits 2. Set ``HYDRA_FULL_ERROR=1`` yourself for tracebacks.
    A stop signal ends the job at its next safe point with ``stopped: signal NAME`` and exit ``128 +
    signal`` (:mod:`backtest.stop`).
    """
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    argv, refused = keep_secrets_off_the_command_line(sys.argv[1:])
    if refused is not None:
        refuse(refused)
    sys.argv[1:] = argv
    users_choice = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        with stop_on_signals():
            _hydra_main()
    except RunInterrupted as exc:  # the run, if one was open, has ended KILLED
        print(f"stopped: {exc}", file=sys.stderr)
        sys.exit(exc.exit_status)
    except (BacktestError, HydraException, OmegaConfBaseException) as exc:
        err = None if users_choice == "1" else user_error(exc)
        if err is None:
            raise
        refuse(err)
    finally:
        if users_choice is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = users_choice


if __name__ == "__main__":
    main()
