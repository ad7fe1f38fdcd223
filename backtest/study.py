"""Studies: the runs of one sweep (an ablation, a grid) read, deflated and tabulated together.

A study is every run tagged with one ``study`` name. A sweep opens a parent run before its jobs start
(:func:`open_sweep`); each job is a child run that logs a provisional DSR against the runs finished
before it (:func:`trial_sharpe_var`); the sweep's end recomputes every job's DSR against the whole
study and logs the study table on the parent run (:func:`close_sweep`).
"""

from __future__ import annotations

import logging
import time

import pandas as pd

from backtest import metrics as m
from backtest.errors import BacktestError
from backtest.tracking import ARTIFACTS, TrackedRun, Tracker

log = logging.getLogger(__name__)

#: Metrics of each trial in a study's table, the study-wide ``dsr`` last.
STUDY_METRICS = ("sharpe", "sharpe_ex_best_month", "sharpe_ci_low", "sharpe_ci_high", "rank_ic_mean", "dsr")
STUDY_HEADERS = {"run_name": "run", "sharpe": "Sharpe", "sharpe_ex_best_month": "ex best month",
                 "sharpe_ci_low": "CI low", "sharpe_ci_high": "CI high", "rank_ic_mean": "rank IC", "dsr": "DSR"}


def study_name(configured: str | None) -> str:
    """The configured study name, or a dated ``sweep-YYYYmmdd-HHMMSS`` one."""
    return configured or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"


def open_sweep(tracker: Tracker, study: str, n_trials: int) -> TrackedRun:
    """Open the parent run of a sweep of ``n_trials`` jobs (ended by :func:`close_sweep`)."""
    parent = tracker.create_run(f"{study} ({n_trials} runs)", study=study, n_trials=n_trials, kind="sweep")
    log.info("sweep %s: %d runs under parent run %s", study, n_trials, parent.run_id)
    return parent


def trial_sharpe_var(tracker: Tracker, study: str | None) -> float:
    """Variance of the Sharpe ratios already recorded in ``study`` (0 for a lone run).

    Provisional inside a sweep: a job only sees the runs finished before it, so the sweep's end
    recomputes every job's DSR with the whole study (:func:`deflate_study`)."""
    if not study:
        return 0.0
    runs = tracker.study_runs(study)
    if "metrics.sharpe" not in runs.columns:
        return 0.0
    values = runs["metrics.sharpe"].dropna()
    return float(values.var(ddof=1)) if len(values) >= 2 else 0.0


def deflate_study(tracker: Tracker, study: str, n_trials: int) -> pd.DataFrame:
    """Recompute the DSR of every finished run of ``study`` against the whole study and log it (``dsr``,
    step 1, so it supersedes the provisional value a job logged while the sweep was running).

    The number of trials is the larger of ``n_trials`` (the sweep's size) and the runs the study holds,
    failed ones included (a study name reused by several sweeps counts all of them). Returns one row per
    finished run, best Sharpe first: ``run_name``, the config values that differ between the runs
    (``params.<key>``), then :data:`STUDY_METRICS`; the study's ``n_trials``, ``trial_sharpe_var`` and
    annualised ``expected_max_sharpe`` are in ``attrs``.
    """
    runs = tracker.study_runs(study)
    n_trials = max(n_trials, len(runs))
    runs = runs[runs["status"] == "FINISHED"]
    sharpes = runs["metrics.sharpe"].dropna() if "metrics.sharpe" in runs.columns else pd.Series(dtype=float)
    var = float(sharpes.var(ddof=1)) if len(sharpes) >= 2 else 0.0
    runs = runs.loc[sharpes.index]
    varied = [c for c in runs.columns if c.startswith("params.") and runs[c].nunique(dropna=False) > 1]
    table = runs[["run_name", *varied]].copy()
    for key in STUDY_METRICS:
        table[key] = runs.get(f"metrics.{key}", pd.Series(float("nan"), index=runs.index))
    for run_id in table.index:
        child = tracker.attach(run_id)
        value = m.dsr(child.load_frame(ARTIFACTS.daily_returns)["strategy"], n_trials, var)
        child.log_metrics({"dsr": value}, step=1)
        table.loc[run_id, "dsr"] = value
    table = table.sort_values("sharpe", ascending=False)
    table.attrs = {
        "n_trials": float(n_trials),
        "trial_sharpe_var": var,
        "expected_max_sharpe": m.expected_max_sharpe(n_trials, var),  # annualised, as the Sharpes
    }
    return table


def close_sweep(tracker: Tracker, parent: TrackedRun, study: str, n_trials: int) -> str:
    """End a sweep: deflate the study, log its table on the parent run, end the parent; return the table
    as text ("" when the study-wide DSR could not be recomputed: the jobs' own results stand)."""
    try:
        table = deflate_study(tracker, study, n_trials)
        parent.log_metrics(table.attrs)
        if not len(table):
            return ""
        parent.log_frame(table, ARTIFACTS.study_trials)
        shown = table[["run_name", *STUDY_METRICS]].rename(columns=STUDY_HEADERS)
        return (f"\nstudy {study}: {table.attrs['n_trials']:.0f} trials, DSR against the best of them "
                f"(expected max Sharpe {table.attrs['expected_max_sharpe']:+.2f})\n"
                + shown.to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
    except BacktestError as exc:
        log.warning("sweep %s: the study-wide DSR was not recomputed: %s", study, exc)
        return ""
    finally:
        parent.end()
