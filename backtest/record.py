"""What a finished backtest leaves in its tracked run: metrics, data, guard evidence, reports and, last,
the provenance and guard tags, at the paths of :data:`backtest.tracking.layout.ARTIFACTS`.

::

    BacktestResult --record_backtest--> run: headline metrics, per-fold metrics, predictions, positions,
                                         daily returns (with the baselines'), the best factor of each
                                         fold, periods, feature importance, per-fold feature
                                         PSI, leakage records, feature audit, reports/, then the tags
                                         (comparable last)

The tags come last so that a run that died while being recorded never says ``comparable=true``.

The reports get the run's own evidence, never recomputed: the tearsheet's robustness block reads the
engine's headline metrics and guard verdicts (:func:`run_evidence`); the drift report gets each fold's
reference window (its training window) and test days from the leakage records (:func:`fold_windows`)
and the per-fold PSI computed here from the feature matrix (:func:`fold_psi`), which is also stored
(``data/feature_psi.csv``) so that ``python -m backtest.reports drift --run-id ID`` can rebuild the
report from the store alone.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from backtest.drift import PSI_MAX_ROWS, feature_value_drift, psi_artifact, psi_by_fold
from backtest.drift import fold_windows as windows_of_folds
from backtest.engine import BacktestResult
from backtest.leakage import is_comparable
from backtest.provenance import Provenance
from backtest.reports import DriftRun, RunEvidence, write_backtest_reports
from backtest.reports.files import REPORT_FILES
from backtest.reports.plots import plot_fold_metric
from backtest.tracking import ARTIFACTS, TrackedRun
from backtest.tracking.layout import COMPARE_IMAGES


@dataclass(frozen=True)
class ReportChoice:
    """Which reports a run writes (the ``tracking`` config's switches)."""

    tearsheet: bool = True
    plots: bool = True
    drift_report: bool = True


def record_backtest(run: TrackedRun, result: BacktestResult, *, provenance: Provenance, title: str,
                    reports: ReportChoice, fold_metrics: bool = True) -> None:
    """Log ``result`` to ``run``: metrics, artifacts, reports, then the provenance and guard tags.

    ``fold_metrics=False`` skips the per-fold metrics (already logged as the folds finished).
    """
    run.log_metrics({k: v for k, v in result.metrics.items() if v is not None and math.isfinite(v)})
    if fold_metrics:
        run.log_fold_metrics(result.fold_metrics)
    p = result.portfolio
    run.log_frame(result.scores.to_frame(), ARTIFACTS.predictions)
    run.log_frame(p.positions, ARTIFACTS.positions)
    daily = {"strategy": p.returns, "equal_weight": p.benchmark_returns}
    if result.baselines is not None:
        daily.update({f"baseline_{name}": b.portfolio.returns for name, b in result.baselines.runs.items()})
        run.log_frame(result.baselines.choices, ARTIFACTS.baseline_choices)
    run.log_frame(pd.DataFrame(daily), ARTIFACTS.daily_returns)
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
            tmp, p.returns, p.benchmark_returns, title=title, importance=importance_by_decision(result),
            value_drift=value_drift(result) if reports.drift_report else None, fold_psi=psi,
            evidence=run_evidence(result, run_name=title, run_id=run.run_id),
            drift_run=DriftRun(run_name=title, run_id=run.run_id, windows=windows),
            tearsheet=reports.tearsheet, plots=reports.plots, drift_report=reports.drift_report,
        )
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
        images["fold_rank_ic"] = plot_fold_metric(result.fold_metrics, "rank_ic",
                                                  Path(directory) / COMPARE_IMAGES["fold_rank_ic"])
    return images


def run_evidence(result: BacktestResult, *, run_name: str | None = None, run_id: str | None = None) -> RunEvidence:
    """The tearsheet's robustness block: the engine's headline metrics and guard verdicts as they are."""
    return RunEvidence(
        metrics=dict(result.metrics), leak_guard=result.leak_guard, feature_audit=result.feature_audit,
        comparable=is_comparable(result.leak_guard, result.feature_audit), ndcg_depth=result.ndcg_depth,
        run_name=run_name, run_id=run_id,
    )


def fold_windows(result: BacktestResult) -> pd.DataFrame:
    """Each fold's training window (its drift reference) and test days (the scored dates it served)."""
    return windows_of_folds(result.records, result.scores.index.get_level_values(0).unique())


def fold_psi(result: BacktestResult, windows: pd.DataFrame | None = None,
             max_rows: int | None = PSI_MAX_ROWS) -> pd.DataFrame:
    """Fold x feature PSI: each fold's test days against its training window, at most ``max_rows``
    evenly spaced rows a side (:func:`backtest.drift.psi_by_fold`)."""
    windows = fold_windows(result) if windows is None else windows
    matrix = result.features
    return psi_by_fold(matrix.values, matrix.index.get_level_values(0), windows, result.feature_names,
                       max_rows=max_rows)


def importance_by_decision(result: BacktestResult) -> pd.DataFrame | None:
    """Fold x feature gain indexed by each fold's decision date; None for rankers without importance."""
    if result.importance.empty:
        return None
    decision = {r.fold: r.decision_date for r in result.records}
    importance = result.importance.copy()
    importance.index = pd.DatetimeIndex([decision[f] for f in importance.index], name="decision_date")
    return importance


def value_drift(result: BacktestResult, max_rows: int = 20_000) -> pd.DataFrame:
    """PSI / KS of every feature: the first fold's training window against the test period."""
    first = result.records[0]
    dates = result.features.index.get_level_values(0)
    reference = (dates >= first.train_start) & (dates <= first.train_end)
    current = dates.isin(result.scores.index.get_level_values(0).unique())
    values = result.features.values
    return feature_value_drift(values[reference], values[current], result.feature_names, max_rows=max_rows)
