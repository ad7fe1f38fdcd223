"""A test period the book could hardly trade in is no result: the main job records it, tags it
``comparable=false`` with the reason, and the summary, the tearsheet and the study report say so.

The fault is injected for real: every stock of the tiny market is suspended (``is_suspended``, zero
volume) on every test day but six, the panel is written to a parquet file and the main job runs on it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from backtest import cli
from backtest.reports.study import write_study_report
from backtest.study import build_report
from backtest.tracking import ARTIFACTS, Tracker
from tests.system.tiny_market import TINY_SCHEDULE

TEST_START = pd.Timestamp("2022-07-01")
#: what the market leaves tradable: 6 of the test period's 123 return days
REASON = "the book could trade on 6 of 123 test days (4.9%)"


def _suspended_but_six_days(panel: pd.DataFrame) -> pd.DataFrame:
    dates = panel.index.get_level_values("date")
    test_days = dates.unique()[dates.unique() >= TEST_START]
    trading = test_days[2::20][:6]  # after the first execution day: each one is a return day
    halted = (dates >= TEST_START) & ~dates.isin(trading)
    faulted = panel.copy()
    faulted.loc[halted, "is_suspended"] = True
    faulted.loc[halted, ["volume", "amount"]] = 0.0
    return faulted


def test_a_test_period_that_could_hardly_trade_is_recorded_as_not_comparable_everywhere(
    tiny_panel: pd.DataFrame, tmp_path: Path, capsys, compose_config
) -> None:
    path = tmp_path / "panel.parquet"
    _suspended_but_six_days(tiny_panel).reset_index().to_parquet(path)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    cfg = compose_config(
        [
            "data=parquet",
            f"data.path={path}",
            f"backtest.test_start={TEST_START:%Y-%m-%d}",
            *TINY_SCHEDULE,
            "engine.feature_cache=false",
            "engine.checkpoints=false",
            f"tracking.uri={uri}",
            "tracking.study=halted",
            "tracking.plots=false",
            "tracking.drift_report=false",
        ]
    )
    out = cli.run(cfg)
    summary = capsys.readouterr().out

    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["leak_guard"] == "passed" and tags["feature_audit"] == "passed"  # the guards alone would pass it
    assert tags["comparable"] == "false"
    assert run.data.metrics["days_tradable"] == 6
    assert REASON in tags["comparable_reason"] and "90%" in tags["comparable_reason"]

    # the summary printed at the end
    assert "comparable NO" in summary and REASON in summary

    # the tearsheet
    tearsheet = Path(run.info.artifact_uri.removeprefix("file://")) / ARTIFACTS.report("tearsheet")
    page = tearsheet.read_text(encoding="utf-8")
    assert "<tr><td>comparable</td><td class='fail'>NO</td></tr>" in page
    assert "<p class='warn'>Not comparable: " + REASON in page

    # the study report of the run's study
    report, _ = build_report(Tracker(uri, "rankbacktest", tmp_path), "halted")
    assert report.trials["comparable"].tolist() == ["false"]
    write_study_report(tmp_path / "study", report)
    for name in ("study_report.html", "study_report.md"):
        text = (tmp_path / "study" / name).read_text(encoding="utf-8")
        assert "Not comparable" in text and REASON in text, name
