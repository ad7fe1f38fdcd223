"""The summary the main job prints when it ends: its headline metrics beside equal weight's and the index's,
the guards' verdicts, and where the run, its tearsheet and the UI are
(:func:`backtest.reports.summary.summary_text`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backtest.engine import BacktestResult
    from backtest.record import RecordedRun


def print_summary(result: BacktestResult, recorded: RecordedRun) -> str:
    """Print the summary of ``result``, recorded as ``recorded``, on standard output (the CLI's choice);
    return its text."""
    from backtest.reports.summary import RunSummary, summary_text
    from backtest.tracking import ARTIFACTS
    from backtest.tracking.ui import ui_command

    run = RunSummary(
        n_folds=len(result.records),
        n_features=len(result.feature_names),
        ndcg_depth=result.ndcg_depth,
        leak_guard=result.leak_guard,
        feature_audit=result.feature_audit,
        not_comparable=result.not_comparable,
        run_id=recorded.run_id,
        tearsheet_uri=f"{recorded.artifact_uri}/{ARTIFACTS.report('tearsheet')}",
        ui=ui_command(recorded.store_uri),
        index=result.index.description if result.index is not None else None,
    )
    p, index = result.portfolio, result.index.returns if result.index is not None else None
    text = summary_text(p.returns, p.benchmark_returns, result.metrics, run, index=index)
    print(text)
    return text
