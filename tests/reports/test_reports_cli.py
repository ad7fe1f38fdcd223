"""``python -m backtest.reports drift``: the drift report rebuilt from a real SQLite MLflow store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.drift import population_stability_index, read_psi_artifact
from backtest.record import fold_windows
from backtest.reports.__main__ import main
from backtest.tracking import ARTIFACTS


@pytest.fixture(scope="module")
def recorded(recorded_run):
    """The small backtest recorded in a fresh SQLite store (``tests/reports/conftest.py``): (store URI, run id,
    result, tracker)."""
    return recorded_run.tracker.uri, recorded_run.run_id, recorded_run.result, recorded_run.tracker


def test_stored_per_fold_psi_is_the_psi_of_each_folds_slices(recorded, tmp_path: Path) -> None:
    uri, run_id, result, tracker = recorded
    path = tracker.client.download_artifacts(run_id, ARTIFACTS.feature_psi, str(tmp_path))
    psi, windows = read_psi_artifact(path)
    assert psi.shape == (len(result.records), len(result.feature_names)) >= (3, 5)
    pd.testing.assert_frame_equal(windows, fold_windows(result))
    fold = windows.index[1]
    w = windows.loc[fold]
    assert w["train_end"] < w["test_start"] <= w["test_end"]
    dates = result.features.index.get_level_values(0)
    ref = result.features.values[(dates >= w["train_start"]) & (dates <= w["train_end"])]
    cur = result.features.values[(dates >= w["test_start"]) & (dates <= w["test_end"])]
    assert len(ref) < 10_000  # the tiny market's windows are not thinned: the slices are whole
    for j, name in enumerate(result.feature_names):
        assert psi.loc[fold, name] == population_stability_index(ref[:, j], cur[:, j])


def test_drift_report_is_rebuilt_from_the_store_as_recorded(recorded, tmp_path: Path, capsys) -> None:
    uri, run_id, _, tracker = recorded
    assert main(["drift", "--run-id", run_id, "--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    assert f"drift report of run lambdarank-small ({run_id})" in capsys.readouterr().out
    rebuilt = (tmp_path / "out" / "drift_report.md").read_text()
    recorded_md = Path(tracker.client.download_artifacts(run_id, "reports/drift/drift_report.md", str(tmp_path)))
    assert rebuilt == recorded_md.read_text()  # the same report, from the stored artifacts alone
    assert rebuilt.startswith("# Feature drift report: lambdarank-small\n")
    assert f"MLflow run {run_id}; test period (decision dates) 2022-07-01 .. " in rebuilt
    for name in ("psi_heatmap.png", "importance_rank_heatmap.png", "psi_by_fold.csv", "feature_value_drift.csv"):
        assert (tmp_path / "out" / name).is_file(), name


def test_log_puts_the_rebuilt_report_into_the_runs_reports_folder(recorded, tmp_path: Path, monkeypatch) -> None:
    uri, run_id, _, tracker = recorded
    monkeypatch.chdir(tmp_path)
    assert main(["drift", "--run-id", run_id, "--tracking-uri", uri, "--log"]) == 0
    assert (tmp_path / f"drift-lambdarank-small-{run_id[:8]}" / "drift_report.html").is_file()  # default --out
    logged = {info.path for info in tracker.client.list_artifacts(run_id, "reports/drift")}
    assert {"reports/drift/drift_report.html", "reports/drift/psi_heatmap.png"} <= logged


def test_a_run_recorded_without_per_fold_psi_is_refused_with_a_fix(recorded, tmp_path: Path, capsys) -> None:
    uri, _, result, tracker = recorded
    with tracker.start_run("before-psi") as old:  # what a run recorded before data/feature_psi.csv holds
        old.log_frame(result.importance, ARTIFACTS.feature_importance)
        old.log_json([r.to_dict() for r in result.records], ARTIFACTS.leakage_records)
    assert main(["drift", "--run-id", old.run_id, "--tracking-uri", uri, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: run {old.run_id} has no data/feature_psi.csv")
    assert "Fix: rerun" in err and not (tmp_path / "x").exists()


def test_unknown_run_exits_2_with_one_line(recorded, tmp_path: Path) -> None:
    uri = recorded[0]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "backtest.reports", "drift", "--run-id", "0" * 32, "--tracking-uri", uri],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: run '{'0' * 32}' not found in {uri}. Fix: ")
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_does_not_exist_is_not_created(tmp_path: Path, capsys) -> None:
    uri = f"sqlite:///{tmp_path / 'typo.db'}"
    assert main(["drift", "--run-id", "abc", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: no MLflow store at {tmp_path / 'typo.db'}. Fix: pass the tracking URI of the store "
        "the run was recorded in (--tracking-uri; the run summary's 'open the UI' line names it).\n"
    )
    assert not (tmp_path / "typo.db").exists()


def test_leakage_records_give_the_folds_decision_dates(recorded, tmp_path: Path) -> None:
    _, run_id, result, tracker = recorded
    records = json.loads(
        Path(tracker.client.download_artifacts(run_id, ARTIFACTS.leakage_records, str(tmp_path))).read_text()
    )
    windows = fold_windows(result)
    assert [pd.Timestamp(r["decision_date"]) for r in records] == list(windows["test_start"])
    assert np.all(windows["test_end"].iloc[:-1].to_numpy() < windows["test_start"].iloc[1:].to_numpy())
