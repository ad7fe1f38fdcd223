"""What a finished backtest leaves in its tracked run: metrics, data, guard evidence, reports and, last,
the provenance and guard tags, at the paths of :data:`backtest.tracking.layout.ARTIFACTS`.

::

    BacktestResult --record_backtest--> run: headline metrics (with the params ndcg_depth, the depth of
                                         ndcg, ic_lags, the Newey-West lags of rank_ic_se, and
                                         index_source, what the index_* metrics compare with),
                                         per-fold metrics, predictions and their forward returns
                                         (with industry and cap: what alphalens and Qlib read), positions, daily
                                         returns (equal weight, the index, the baselines'), the daily rank IC and
                                         NDCG (what a study pairs runs on), the best factor of each
                                         fold, periods, feature importance, per-fold feature
                                         PSI, leakage records, feature audit, reports/ (with the
                                         signal and portfolio pages: write_run_pages), then the tags
                                         (comparable last)
                   --record_run-------> the same, with the run's provenance; if the store stopped
                                         answering, the whole run in the fallback store instead

The tags come last so that a run that died while being recorded never says ``comparable=true``.

The main job opens its run from a :class:`RunIdentity` (name, config, tags, study) and hands the result to
:func:`record_run`, which decides where it is recorded: in that run, or, when the store stopped answering,
in a run of the local fallback store (:func:`backtest.tracking.fallback_uri`) opened from the same identity
and tagged ``pending_sync=true``, ``fallback_for=<the store>`` and ``superseded_run=<the run left behind>``
(``python -m backtest.tracking sync`` hands it over later); the run left behind ends FAILED saying so.

The reports get the run's own evidence, never recomputed: the tearsheet's robustness block reads the
engine's headline metrics and guard verdicts (:func:`run_evidence`); the drift report gets each fold's
reference window (its training window) and test days from the leakage records (:func:`fold_windows`)
and the per-fold PSI computed here from the feature matrix (:func:`fold_psi`), which is also stored
(``data/feature_psi.csv``) so that ``python -m backtest.reports drift --run-id ID`` can rebuild the
report from the store alone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from backtest.drift import PSI_MAX_ROWS, evenly_spaced, feature_value_drift, psi_artifact, psi_by_fold
from backtest.drift import fold_windows as windows_of_folds
from backtest.engine import BacktestResult
from backtest.errors import FeatureAuditError, LeakageError, StoreUnavailableError, TrackingError
from backtest.memory import read_rows
from backtest.provenance import Provenance
from backtest.reports import DriftRun, RunEvidence, write_backtest_reports, write_run_pages
from backtest.reports.files import REPORT_FILES
from backtest.reports.plots import plot_fold_metric
from backtest.splits import decision_dates
from backtest.tracking import ARTIFACTS, STORE_ERRORS, TrackedRun, Tracker, fallback_uri, redact_uri
from backtest.tracking.layout import COMPARE_IMAGES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportChoice:
    """Which reports a run writes (the ``tracking`` config's switches)."""

    tearsheet: bool = True
    plots: bool = True
    drift_report: bool = True
    pages: bool = True  # the signal and portfolio pages


@dataclass(frozen=True)
class RunIdentity:
    """What a backtest's run is called and carries besides its result: the same in the store it is opened
    in and, should that store stop answering, in the fallback store.

    Attributes
    ----------
    name : the run name (a job of a sweep: with the values it was given).
    config : the resolved config, logged as params and ``config/config.yaml`` (secrets redacted).
    tags : the tags set when the run opens (``leak_demo``, ``config_key``; a sweep job's ``trial``, ``trial_num``).
    data_fingerprint : the panel's fingerprint (:func:`backtest.data.fingerprint.panel_fingerprint`).
    leak_demo : the config declares the run a leakage demonstration.
    study, n_trials : the study the run belongs to (tag ``study``) and its number of trials (for the DSR).
    parent_run_id : a sweep's parent run, in the store the run is opened in.
    sweep_job : a job of a sweep: its own DSR is provisional (``dsr_provisional``); the study-wide ``dsr``
        is logged when the sweep ends.
    """

    name: str
    config: Mapping[str, Any]
    tags: Mapping[str, str]
    data_fingerprint: str
    leak_demo: bool = False
    study: str | None = None
    n_trials: int = 1
    parent_run_id: str | None = None
    sweep_job: bool = False

    @contextlib.contextmanager
    def open(self, tracker: Tracker) -> Iterator[TrackedRun]:
        """A run of ``tracker`` with this name, tags and config; it ends FINISHED, or FAILED / KILLED with the
        reason (:meth:`backtest.tracking.Tracker.start_run`)."""
        with tracker.start_run(
            self.name, parent_run_id=self.parent_run_id, study=self.study, n_trials=self.n_trials, tags=self.tags
        ) as run:
            run.log_config(self.config)
            yield run


@dataclass(frozen=True)
class RecordedRun:
    """Where a backtest was recorded: its run, the run's artifact root and the store holding it (``run``:
    a handle on it, in that store)."""

    run_id: str
    artifact_uri: str
    store_uri: str
    run: TrackedRun | None = field(default=None, compare=False, repr=False)


def record_summary(recorded: RecordedRun, text: str) -> None:
    """The summary printed at the end of the run (``text``) as its description in MLflow's UI
    (:meth:`backtest.tracking.TrackedRun.set_note`). A store that does not take it costs a warning, never
    the run, which is recorded whole already."""
    if recorded.run is None:
        return
    try:
        recorded.run.set_note(text)
    except (*STORE_ERRORS, TrackingError) as exc:
        log.warning("run %s keeps no description: the store did not take it (%s)", recorded.run_id, one_line(exc))


def record_run(
    tracker: Tracker,
    run: TrackedRun,
    result: BacktestResult,
    identity: RunIdentity,
    *,
    reports: ReportChoice,
    fallback: str | None = None,
    lost: StoreUnavailableError | None = None,
) -> RecordedRun:
    """Record ``result`` with its provenance in ``run`` (opened by ``identity.open(tracker)``), or, when the
    store stops answering, the whole run in the fallback store; returns where it went.

    Parameters
    ----------
    tracker, run : the store and the open run the backtest was tracked in while it ran.
    result : the finished backtest; a sweep job's ``dsr`` becomes ``dsr_provisional`` in its metrics.
    identity : what the run was opened with; a fallback run is opened with the same (without the parent).
    reports : which reports to write.
    fallback : the fallback store (None: the project's, :func:`backtest.tracking.fallback_uri`).
    lost : the store already stopped answering while the folds were logged: record in the fallback store
        at once. ``run``'s per-fold metrics were logged as the folds finished; a fallback run gets them all.

    Raises
    ------
    StoreUnavailableError : the fallback store cannot be written either, in one line with the fix (both
        runs end FAILED; a run whose status cannot be written either, as on a full disk, stays RUNNING
        under its ``owner`` tag and the next start of its configuration marks it FAILED).
    """
    if identity.sweep_job and "dsr" in result.metrics:  # the study-wide dsr is logged when the sweep ends
        result.metrics["dsr_provisional"] = result.metrics.pop("dsr")
    provenance = Provenance(
        data_fingerprint=identity.data_fingerprint,
        feature_fingerprint=result.features.fingerprint,
        leak_guard=result.leak_guard,
        feature_audit=result.feature_audit,
        leak_demo=identity.leak_demo,
        code_fingerprint=result.code_fingerprint,
        tradable_days=result.portfolio.days_tradable,
        test_days=len(result.portfolio.returns),
    )
    try:
        if lost is not None:
            raise lost
        t0 = time.perf_counter()
        record_backtest(run, result, provenance=provenance, title=identity.name, reports=reports, fold_metrics=False)
        result.timings["record_s"] = time.perf_counter() - t0
        return RecordedRun(run.run_id, run.artifact_uri, tracker.uri, run)
    except StoreUnavailableError as exc:
        # The server is gone: the whole run goes to the local fallback store, to be synced later.
        local_uri = fallback or fallback_uri(tracker.project_dir)
        try:
            recorded = _record_in_fallback(local_uri, tracker, run, result, identity, provenance, reports)
        except (*STORE_ERRORS, TrackingError) as lost_too:
            # both stores are gone (one full disk holds them by default): say so in one line, with the fix
            raise StoreUnavailableError(
                f"the tracking store {redact_uri(tracker.uri)} stopped answering ({one_line(exc)}) and the "
                f"fallback store {redact_uri(local_uri)} could not take the run either ({one_line(lost_too)}). "
                "Fix: free space on the disk, and keep the fallback store on another disk than the tracking "
                "store: tracking.fallback_uri=sqlite:////OTHER/DISK/mlruns.db"
            ) from lost_too
        log.warning(
            "the tracking store %s stopped answering (%s): the run was recorded in the fallback store "
            "%s as %s. When the server is back: python -m backtest.tracking sync --to %s",
            redact_uri(tracker.uri),
            exc,
            recorded.store_uri,
            recorded.run_id,
            redact_uri(tracker.uri),
        )
        run.end("FAILED", error=f"the store stopped answering; recorded in the fallback store as {recorded.run_id}")
        return recorded


def _record_in_fallback(
    uri: str,
    tracker: Tracker,
    run: TrackedRun,
    result: BacktestResult,
    identity: RunIdentity,
    provenance: Provenance,
    reports: ReportChoice,
) -> RecordedRun:
    """The whole run recorded in the fallback store at ``uri``, tagged ``pending_sync=true``."""
    local = Tracker(uri, tracker.experiment, tracker.project_dir)
    pending = replace(
        identity,
        parent_run_id=None,
        tags={
            **identity.tags,
            "pending_sync": "true",
            "fallback_for": redact_uri(tracker.uri),
            "superseded_run": run.run_id,
        },
    )
    with pending.open(local) as copy:
        record_backtest(copy, result, provenance=provenance, title=identity.name, reports=reports)
        return RecordedRun(copy.run_id, copy.artifact_uri, local.uri, copy)


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (MLflow's and SQLAlchemy's span several)."""
    return " ".join(str(getattr(exc, "message", exc)).split())


def record_guard_failure(run: TrackedRun, exc: LeakageError | FeatureAuditError, data_fingerprint: str) -> None:
    """Tag the run that a guard stopped with the guard that failed (``leak_guard`` or ``feature_audit``:
    ``failed``) and the data it ran on; the run then ends FAILED with the error."""
    guard = "feature_audit" if isinstance(exc, FeatureAuditError) else "leak_guard"
    run.set_tags({guard: "failed", "data_fingerprint": data_fingerprint})


def record_backtest(
    run: TrackedRun,
    result: BacktestResult,
    *,
    provenance: Provenance,
    title: str,
    reports: ReportChoice,
    fold_metrics: bool = True,
) -> None:
    """Log ``result`` to ``run``: metrics, artifacts, reports, then the provenance and guard tags.

    ``fold_metrics=False`` skips the per-fold metrics (already logged as the folds finished).
    """
    run.log_metrics({k: v for k, v in result.metrics.items() if v is not None and math.isfinite(v)})
    # the depth of the metric ``ndcg`` (portfolio.top_k) and the Newey-West lags of ``rank_ic_se`` (the label
    # horizon less one day), which a study's paired differences reuse
    params = {"ndcg_depth": result.ndcg_depth, "ic_lags": result.ic_lags}
    if result.index is not None:  # what the index_* metrics compare with (backtest.benchmark.INDEX_SOURCES)
        params["index_source"] = result.index.source
    run.log_params(params)
    if fold_metrics:
        run.log_fold_metrics(result.fold_metrics, decision_dates(result.records))
    p = result.portfolio
    run.log_frame(result.scores.to_frame(), ARTIFACTS.predictions)
    if result.forward_returns is not None:
        run.log_frame(result.forward_returns, ARTIFACTS.forward_returns)
    run.log_frame(p.positions, ARTIFACTS.positions)
    daily = {"strategy": p.returns, "equal_weight": p.benchmark_returns}
    if result.index is not None:
        daily["index"] = result.index.returns
    if result.baselines is not None:
        daily.update({f"baseline_{name}": b.portfolio.returns for name, b in result.baselines.runs.items()})
        run.log_frame(result.baselines.choices, ARTIFACTS.baseline_choices)
    run.log_frame(pd.DataFrame(daily), ARTIFACTS.daily_returns)
    if result.daily_ranking is not None:
        run.log_frame(result.daily_ranking, ARTIFACTS.daily_ranking)
    run.log_frame(p.periods, ARTIFACTS.periods)
    run.log_frame(result.fold_metrics, ARTIFACTS.fold_metrics)
    run.log_frame(result.importance, ARTIFACTS.feature_importance)
    windows = fold_windows(result)
    psi = fold_psi(result, windows) if reports.drift_report else None
    if psi is not None:
        run.log_frame(psi_artifact(psi, windows), ARTIFACTS.feature_psi)
    run.log_json([r.to_dict() for r in result.records], ARTIFACTS.leakage_records)
    if result.audit is not None:
        run.log_json({"passed": result.audit.passed, "summary": result.audit.summary()}, ARTIFACTS.feature_audit)
    with tempfile.TemporaryDirectory(prefix="rankbacktest-reports-") as tmp:
        write_backtest_reports(
            tmp,
            p.returns,
            p.benchmark_returns,
            title=title,
            importance=importance_by_decision(result),
            value_drift=value_drift(result) if reports.drift_report else None,
            fold_psi=psi,
            fold_rank_ic=result.fold_metrics.get("rank_ic"),
            evidence=run_evidence(result, run_name=title, run_id=run.run_id),
            drift_run=DriftRun(run_name=title, run_id=run.run_id, windows=windows),
            tearsheet=reports.tearsheet,
            plots=reports.plots,
            drift_report=reports.drift_report,
        )
        if reports.pages:
            t0 = time.perf_counter()
            horizon, forward = result.labels.horizon_days, result.forward_returns
            write_run_pages(tmp, result.scores, forward, p, horizon=horizon, title=title, run_id=run.run_id)
            result.timings["pages_s"] = time.perf_counter() - t0
        run.log_artifact(tmp, ARTIFACTS.reports)
        run.log_compare_images(compare_images(result, tmp if reports.plots else None, Path(tmp) / "compare"))
    tags = {
        "resumed_folds": result.resumed_folds,  # folds taken from checkpoints...
        "days_blocked": int(result.metrics.get("days_blocked", 0)),  # days the book was not the one chosen
    }
    if result.resumed_from:
        tags["resumed_from"] = result.resumed_from  # ...made by this code fingerprint
    run.set_tags(tags)
    run.log_provenance(provenance)


def compare_images(result: BacktestResult, reports_dir: Path | str | None, directory: Path | str) -> dict[str, Path]:
    """The charts a compare-runs page shows side by side (keys of ``COMPARE_IMAGES``): the equity and
    drawdown PNGs of the written report folder (None: no plots), and the per-fold rank IC drawn into
    ``directory``."""
    images = {name: Path(reports_dir) / REPORT_FILES[name] for name in ("equity", "drawdown")} if reports_dir else {}
    if "rank_ic" in result.fold_metrics.columns:
        images["fold_rank_ic"] = plot_fold_metric(
            result.fold_metrics, "rank_ic", Path(directory) / COMPARE_IMAGES["fold_rank_ic"]
        )
    return images


def run_evidence(result: BacktestResult, *, run_name: str | None = None, run_id: str | None = None) -> RunEvidence:
    """The tearsheet's robustness block: the engine's headline metrics and guard verdicts as they are."""
    return RunEvidence(
        metrics=dict(result.metrics),
        leak_guard=result.leak_guard,
        feature_audit=result.feature_audit,
        not_comparable=result.not_comparable,
        ndcg_depth=result.ndcg_depth,
        index=result.index.description if result.index is not None else None,
        run_name=run_name,
        run_id=run_id,
    )


def fold_windows(result: BacktestResult) -> pd.DataFrame:
    """Each fold's training window (its drift reference) and test days (the scored dates it served)."""
    return windows_of_folds(result.records, result.scores.index.get_level_values(0).unique())


def fold_psi(
    result: BacktestResult, windows: pd.DataFrame | None = None, max_rows: int | None = PSI_MAX_ROWS
) -> pd.DataFrame:
    """Fold x feature PSI: each fold's test days against its training window, at most ``max_rows``
    evenly spaced rows a side (:func:`backtest.drift.psi_by_fold`)."""
    windows = fold_windows(result) if windows is None else windows
    matrix = result.features
    return psi_by_fold(
        matrix.values, matrix.index.get_level_values(0), windows, result.feature_names, max_rows=max_rows
    )


def importance_by_decision(result: BacktestResult) -> pd.DataFrame | None:
    """Fold x feature gain indexed by each fold's decision date; None for rankers without importance."""
    if result.importance.empty:
        return None
    decision = decision_dates(result.records)
    importance = result.importance.copy()
    importance.index = pd.DatetimeIndex([decision[f] for f in importance.index], name="decision_date")
    return importance


def value_drift(result: BacktestResult, max_rows: int = 20_000) -> pd.DataFrame:
    """The effect sizes of every feature's shift (PSI, KS D, SMD): the first fold's training window against
    the whole test period (:func:`backtest.drift.feature_value_drift`)."""
    first = result.records[0]
    dates = result.features.index.get_level_values(0)
    reference = np.flatnonzero((dates >= first.train_start) & (dates <= first.train_end))
    current = np.flatnonzero(dates.isin(result.scores.index.get_level_values(0).unique()))
    # thinned before the rows are gathered: a window of every feature's rows would be a large copy
    ref, cur = (rows[evenly_spaced(len(rows), max_rows)] for rows in (reference, current))
    values = result.features.values
    return feature_value_drift(read_rows(values, ref), read_rows(values, cur), result.feature_names)
