"""File names inside a run's report folder (written by :func:`backtest.reports.write_backtest_reports`) and
of a study report (:func:`backtest.reports.study.write_study_report`, at the root of a sweep's parent run).

Kept apart from the report code so that readers of a run (the artifact layout, the study code) know the
names without importing the plotting libraries.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

REPORT_FILES: Mapping[str, str] = MappingProxyType(
    {
        "tearsheet": "tearsheet.html",  # quantstats tearsheet vs equal weight
        "equity": "equity.png",  # equity curves, log scale
        "drawdown": "drawdown.png",
        "drift": "drift",  # folder: drift_report.html and its CSV tables
        "signal": "signal.html",  # the signal page: rank IC over time and horizons, deciles, IC by industry
        "portfolio": "portfolio.html",  # the portfolio page: turnover, costs, holdings, blocked trades, exposures
    }
)

STUDY_REPORT_FILES: Mapping[str, str] = MappingProxyType(
    {
        "html": "study_report.html",  # self-contained: images embedded as base64
        "markdown": "study_report.md",  # the same tables; images referenced by file name
        "trials": "study_trials.csv",  # StudyReport.trials
        "years": "study_years.csv",  # StudyReport.years
        "pbo": "study_pbo.csv",  # one row per CSCV combination (header only when PBO was skipped)
        "summary": "study_summary.json",  # period, trials, baseline, DSR's N, PBO with its blocks, notes
        "equity": "study_equity.png",  # equity curves of every trial and the equal-weight benchmark
        "pbo_plot": "study_pbo.png",  # logit histogram and IS vs OOS Sharpe (not written without a PBO)
        "fold_rank_ic": "study_fold_rank_ic.png",  # the trials' rank IC per fold (written when the folds are given)
    }
)
