"""What a finished backtest leaves in its tracked run: metrics, data, guard evidence, reports and, last,
the provenance and guard tags, at the paths of :data:`backtest.tracking.layout.ARTIFACTS`.

::

    BacktestResult --record_backtest--> run: headline metrics, per-fold metrics, predictions, positions,
                                         daily returns, periods, feature importance, leakage records,
                                         feature audit, reports/, then the tags (comparable last)

The tags come last so that a run that died while being recorded never says ``comparable=true``.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass

import pandas as pd

from backtest.engine import BacktestResult
from backtest.provenance import Provenance
from backtest.reports import feature_value_drift, write_backtest_reports
from backtest.tracking import ARTIFACTS, TrackedRun


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
    run.log_frame(pd.DataFrame({"strategy": p.returns, "equal_weight": p.benchmark_returns}), ARTIFACTS.daily_returns)
    run.log_frame(p.periods, ARTIFACTS.periods)
    run.log_frame(result.fold_metrics, ARTIFACTS.fold_metrics)
    run.log_frame(result.importance, ARTIFACTS.feature_importance)
    run.log_json([r.to_dict() for r in result.records], ARTIFACTS.leakage_records)
    if result.audit is not None:
        run.log_json({"passed": result.audit.passed, "summary": result.audit.summary()}, ARTIFACTS.feature_audit)
    with tempfile.TemporaryDirectory(prefix="rankbacktest-reports-") as tmp:
        write_backtest_reports(
            tmp, p.returns, p.benchmark_returns, title=title, importance=importance_by_decision(result),
            value_drift=value_drift(result) if reports.drift_report else None,
            tearsheet=reports.tearsheet, plots=reports.plots, drift_report=reports.drift_report,
        )
        run.log_artifact(tmp, ARTIFACTS.reports)
    tags = {
        "resumed_folds": result.resumed_folds,  # folds taken from checkpoints...
        "days_blocked": int(result.metrics.get("days_blocked", 0)),  # days the book was not the one chosen
    }
    if result.resumed_from:
        tags["resumed_from"] = result.resumed_from  # ...made by this code fingerprint
    run.set_tags(tags)
    run.log_provenance(provenance)


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
