"""File names inside a run's report folder (written by :func:`backtest.reports.write_backtest_reports`).

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
    }
)
