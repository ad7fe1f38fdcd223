"""Report artifacts of a backtest: pictures and pages, built from numbers computed elsewhere (the
metrics, :mod:`backtest.drift`). Every function writes only to the path or folder it is given.

- :mod:`~backtest.reports.tearsheet`: quantstats HTML tearsheet vs the equal-weight benchmark, opened by
  the run's robustness block (:class:`RunEvidence`).
- :mod:`~backtest.reports.plots`: the house chart style (:func:`~backtest.reports.plots.new_figure`),
  equity-curve, drawdown and per-fold metric PNGs.
- :mod:`~backtest.reports.drift`: the drift report page (feature-importance drift across folds, feature
  value drift, PSI per fold, with flags), with the heatmaps of :mod:`~backtest.reports.drift_charts`.
- :mod:`~backtest.reports.signal`, :mod:`~backtest.reports.portfolio`: the signal page (rank IC over time
  and horizons, score deciles, rank autocorrelation, IC by industry) and the portfolio page (turnover and
  costs, equity before and after costs, holdings, blocked trades, exposures against the universe), from the
  numbers of :func:`backtest.metrics.signal_analysis` and :func:`backtest.metrics.book_analysis`.
- :mod:`~backtest.reports.returns`: the daily-returns contract the tearsheet and the charts share.
- :mod:`~backtest.reports.export`: one run's artifacts as alphalens' ``factor_data`` and Qlib's ``pred`` /
  ``label`` frames.

:func:`write_backtest_reports` and :func:`write_run_pages` write them into one folder, ready for
``TrackedRun.log_artifact(folder, ARTIFACTS.reports)``. ``python -m backtest.reports drift --run-id ID``
rebuilds a recorded run's drift report from its artifacts (:mod:`backtest.reports.__main__`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from backtest.metrics import book_analysis, horizon_columns, signal_analysis
from backtest.portfolio import PortfolioResult
from backtest.reports.drift import DriftRun, write_drift_report
from backtest.reports.files import REPORT_FILES, STUDY_REPORT_FILES
from backtest.reports.plots import plot_drawdown, plot_equity_curve, plot_fold_metric
from backtest.reports.portfolio import write_portfolio_page
from backtest.reports.signal import write_signal_page
from backtest.reports.tearsheet import RunEvidence, Tearsheet, tearsheet_metrics, write_tearsheet

logger = logging.getLogger(__name__)

__all__ = [
    "REPORT_FILES",
    "STUDY_REPORT_FILES",
    "DriftRun",
    "RunEvidence",
    "Tearsheet",
    "plot_drawdown",
    "plot_equity_curve",
    "plot_fold_metric",
    "tearsheet_metrics",
    "write_backtest_reports",
    "write_drift_report",
    "write_run_pages",
    "write_tearsheet",
]


def write_backtest_reports(
    directory: Path | str,
    returns: pd.Series,
    benchmark: pd.Series,
    *,
    title: str = "Strategy tearsheet",
    importance: pd.DataFrame | None = None,
    periods: pd.Series | Sequence[object] | None = None,
    value_drift: pd.DataFrame | None = None,
    fold_psi: pd.DataFrame | None = None,
    fold_rank_ic: pd.Series | None = None,
    evidence: RunEvidence | None = None,
    drift_run: DriftRun | None = None,
    tearsheet: bool = True,
    plots: bool = True,
    drift_report: bool = True,
    log_scale: bool = True,
) -> list[Path]:
    """Write the reports of one backtest into ``directory``.

    Parameters
    ----------
    directory : output folder (created); its files are named in :data:`REPORT_FILES` (the drift
        folder's content: :func:`write_drift_report`).
    returns, benchmark : Series of daily strategy / equal-weight returns indexed by the same dates.
    title : tearsheet and plot title.
    importance : fold x feature gain, for the importance drift; None skips it.
    periods : period label per fold (default: the year of a dated fold index).
    value_drift : :func:`backtest.drift.feature_value_drift` output; None skips it.
    fold_psi : :func:`backtest.drift.psi_by_fold` output (fold x feature); None skips the per-fold PSI part.
    fold_rank_ic : each fold's rank IC, indexed by fold number, for the drift report (None: left out).
    evidence : the run's robustness metrics and guard verdicts, for the tearsheet's opening block.
    drift_run : the run's name, id and fold windows, for the drift report's header and PSI labels.
    tearsheet, plots, drift_report : which reports to write (the ``tracking`` config's switches).
    log_scale : logarithmic equity axis.

    Returns
    -------
    list of Path : every file written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if tearsheet:
        sheet = write_tearsheet(
            returns, benchmark, directory / REPORT_FILES["tearsheet"], title=title, evidence=evidence
        )
        written.append(sheet.path)
    if plots:
        written.append(
            plot_equity_curve(
                returns,
                benchmark,
                directory / REPORT_FILES["equity"],
                log_scale=log_scale,
                title=f"{title}: equity curve",
            )
        )
        written.append(
            plot_drawdown(returns, benchmark, directory / REPORT_FILES["drawdown"], title=f"{title}: drawdown")
        )
    if drift_report and (importance is not None or value_drift is not None or fold_psi is not None):
        written += write_drift_report(
            directory / REPORT_FILES["drift"],
            importance=importance,
            periods=periods,
            value_drift=value_drift,
            fold_psi=fold_psi,
            fold_rank_ic=fold_rank_ic,
            run=drift_run,
        )
    logger.info("wrote %d report files to %s", len(written), directory)
    return written


def write_run_pages(
    directory: Path | str,
    scores: pd.Series,
    forward: pd.DataFrame | None,
    portfolio: PortfolioResult,
    *,
    horizon: int,
    title: str,
    run_id: str | None = None,
) -> list[Path]:
    """Write a run's signal and portfolio pages into ``directory`` (:data:`REPORT_FILES` ``signal`` and
    ``portfolio``).

    Parameters
    ----------
    scores : Series indexed by (date, code), the out-of-sample scores.
    forward : the scored rows' forward returns with ``industry`` and ``market_cap``
        (:func:`backtest.engine.forward_frame`); None: the portfolio page only, without exposures.
    portfolio : the backtest's book.
    horizon : the label's horizon (``Labels.horizon_days``), the signal page's main one.
    title, run_id : the run, named on the pages.

    Returns
    -------
    list of Path : the pages written; no signal page while no scored name's label is known yet.
    """
    directory = Path(directory)
    written = [
        write_portfolio_page(
            directory / REPORT_FILES["portfolio"], book_analysis(portfolio, forward), title=title, run_id=run_id
        )
    ]
    label = horizon_columns(forward).get(horizon) if forward is not None else None
    if label is not None and forward[label].notna().any():
        groups = forward["industry"] if "industry" in forward.columns else None
        analysis = signal_analysis(scores, forward, horizon, groups=groups)
        written.append(write_signal_page(directory / REPORT_FILES["signal"], analysis, title=title, run_id=run_id))
    else:
        logger.info("no signal page: no scored name's %s-day forward return is known", horizon)
    return written
