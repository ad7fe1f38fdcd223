"""Where each artifact of a run lives: the one definition that writers, readers and tests import.

A backtest run (``run_kind=backtest``) holds every path below except ``study_sweep``; a sweep's parent
run (``run_kind=sweep``) holds ``study_sweep`` and, at its root, the study report
(:data:`backtest.reports.files.STUDY_REPORT_FILES`). ``reports`` is a folder written by
:func:`backtest.reports.write_backtest_reports` and :func:`backtest.reports.write_run_pages` (its file names are
in :data:`backtest.reports.REPORT_FILES`). ``predictions`` and ``forward_returns`` are what other tools read
(:mod:`backtest.reports.export`: alphalens' ``factor_data``, Qlib's ``pred`` and ``label``).

Examples
--------
>>> ARTIFACTS.daily_returns
'data/daily_returns.parquet'
>>> ARTIFACTS.report("tearsheet"), ARTIFACTS.report("signal")
('reports/tearsheet.html', 'reports/signal.html')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backtest.reports.files import REPORT_FILES


@dataclass(frozen=True)
class RunArtifacts:
    """Artifact paths inside a run (relative to its artifact root)."""

    config: str = "config/config.yaml"  # the resolved config, secrets redacted
    predictions: str = "data/predictions.parquet"  # score per (date, code) on the decision dates
    # the predictions' rows: fwd_ret_<h>d at each horizon of backtest.labels.FORWARD_HORIZONS and the label's
    # (open(t+1) to open(t+h)), with industry and market_cap where the panel has them (backtest.engine.forward_frame)
    forward_returns: str = "data/forward_returns.parquet"
    positions: str = "data/positions.parquet"  # weights per (date, code)
    # columns strategy, equal_weight and baseline_<name> of each baseline (backtest.baselines); by date
    daily_returns: str = "data/daily_returns.parquet"
    # columns rank_ic and ndcg (at the param ndcg_depth) per scored day with a known label, by date: the
    # daily series a study pairs two runs on (backtest.metrics.daily_ranking_quality)
    daily_ranking: str = "data/daily_ranking.parquet"
    periods: str = "data/periods.csv"  # one row per rebalance period
    fold_metrics: str = "data/fold_metrics.csv"  # one row per fold (also logged as fold/<name>, step = fold)
    feature_importance: str = "data/feature_importance.csv"  # fold x feature gain
    baseline_choices: str = "data/baseline_choices.csv"  # per fold: the best factor, its sign, training IC
    # fold x feature PSI of each fold's test days against its training window; index columns fold,
    # train_start, train_end, test_start, test_end (backtest.drift.psi_by_fold / fold_windows)
    feature_psi: str = "data/feature_psi.csv"
    leakage_records: str = "guards/leakage_records.json"  # one LeakageRecord per fold
    feature_audit: str = "guards/feature_audit.json"  # the look-ahead audit's verdict and offenders
    reports: str = "reports"  # folder: tearsheet, plots, drift report, signal and portfolio pages
    study_sweep: str = "study/sweep.json"  # a sweep's parent run: how the sweep was launched

    def report(self, name: str) -> str:
        """Path of one report file (a key of ``REPORT_FILES``)."""
        return f"{self.reports}/{REPORT_FILES[name]}"


ARTIFACTS = RunArtifacts()

#: A backtest run's charts at its root, where MLflow's compare-runs page finds the files its runs share
#: (it does not look into folders); the copies under ``reports/`` stay where the reports link them.
COMPARE_IMAGES: Mapping[str, str] = {
    "equity": "equity.png",
    "drawdown": "drawdown.png",
    "fold_rank_ic": "fold_rank_ic.png",
}
