"""A small backtest recorded in a fresh SQLite store, with its drift report and its signal and portfolio pages,
for the tests of the pages, of the exports that read its artifacts and of the report command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import BacktestResult, EngineOptions, plan_backtest, run_backtest
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec
from backtest.record import ReportChoice, record_backtest
from backtest.splits import RollingSchedule
from backtest.tracking import Provenance, Tracker
from tests.small_backtest import FEATURES, SCHEDULE, small_ranker


@dataclass(frozen=True)
class RecordedRun:
    """The run: its result as the engine returned it, its id, store and artifact folder on disk."""

    result: BacktestResult
    run_id: str
    tracker: Tracker
    artifacts: Path


@pytest.fixture(scope="session")
def recorded_run(tiny_panel, tmp_path_factory) -> RecordedRun:
    """The small backtest (``tests/small_backtest.py``) recorded with its drift report and pages (no tearsheet
    or plots: they are tested elsewhere), its label in the config as the CLI logs it."""
    label = LabelSpec()
    result = run_backtest(
        plan_backtest(tiny_panel, label=label, schedule=RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec()),
        features=FEATURES,
        ranker_factory=small_ranker,
        data_fingerprint=panel_fingerprint(tiny_panel),
        options=EngineOptions(audit_cutoffs=1),
        seed=3,
    )
    root = tmp_path_factory.mktemp("store")
    tracker = Tracker(f"sqlite:///{root / 'mlruns.db'}", "pages", project_dir=root)
    provenance = Provenance(
        "data", result.features.fingerprint, leak_guard=result.leak_guard, feature_audit=result.feature_audit
    )
    with tracker.start_run("lambdarank-small") as run:
        run.log_config({"label": {"entry_offset": label.entry_offset, "exit_offset": label.exit_offset}})
        record_backtest(
            run,
            result,
            provenance=provenance,
            title="lambdarank-small",
            reports=ReportChoice(tearsheet=False, plots=False),
        )
    return RecordedRun(result, run.run_id, tracker, Path(unquote(urlparse(run.artifact_uri).path)))
