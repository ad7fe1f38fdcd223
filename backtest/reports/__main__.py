"""Rebuild a recorded run's reports from the store: ``python -m backtest.reports drift --run-id ID``.

::

    python -m backtest.reports drift --run-id ID [--tracking-uri URI] [--out DIR] [--log]

reads the run's name and its artifacts ``data/feature_importance.csv``, ``data/feature_psi.csv`` (per-fold
PSI with each fold's reference window and test days) and ``guards/leakage_records.json`` (each fold's
decision date), plus ``data/fold_metrics.csv`` (each fold's rank IC) and
``reports/drift/feature_value_drift.csv`` when the run has them, and writes the drift
report (:func:`backtest.reports.drift.write_drift_report`) into ``--out`` (default:
``./drift-<run name>-<run id prefix>``). With ``--log`` the report replaces the run's
``reports/drift`` folder. ``--tracking-uri`` defaults to the project's SQLite store
(:func:`backtest.tracking.resolve_tracking_uri`).

Nothing is recomputed from data: the report is made of what the run stored. A run recorded before the
per-fold PSI was stored (or with ``tracking.drift_report=false``) has no ``data/feature_psi.csv``: the
command says so and exits 2, as it does for an unknown run or store, with one line and no traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from backtest import PROJECT_DIR
from backtest.drift import read_psi_artifact
from backtest.errors import BacktestError
from backtest.reports.drift import DriftRun, write_drift_report

logger = logging.getLogger(__name__)

#: Exit status of a refused command (unknown run or store, missing artifacts).
EXIT_REFUSED = 2


class ReportSourceError(BacktestError):
    """The store, the run or an artifact a report is rebuilt from is missing."""


@dataclass(frozen=True)
class StoredDrift:
    """What a drift report is rebuilt from, read from one run."""

    run: DriftRun
    importance: pd.DataFrame | None
    fold_psi: pd.DataFrame
    value_drift: pd.DataFrame | None
    fold_rank_ic: pd.Series | None = None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return the exit status (0, or 2 with one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="python -m backtest.reports", description="Rebuild a recorded run's reports from the MLflow store."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    drift = sub.add_parser("drift", help="rebuild the feature drift report of a run")
    drift.add_argument("--run-id", required=True, help="the MLflow run id (the run summary prints it)")
    drift.add_argument(
        "--tracking-uri",
        default=None,
        help="the MLflow store (default: the project's SQLite store, sqlite:///<project>/mlruns.db)",
    )
    drift.add_argument(
        "--out", type=Path, default=None, help="output folder (default: ./drift-<run name>-<run id prefix>)"
    )
    drift.add_argument("--log", action="store_true", help="also log the report into the run's reports/drift folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for noisy in ("mlflow", "alembic", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        return _drift(args.run_id, args.tracking_uri, args.out, args.log)
    except BacktestError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED


def _drift(run_id: str, tracking_uri: str | None, out: Path | None, log: bool) -> int:
    from backtest.tracking import ARTIFACTS

    tracked = open_run(run_id, tracking_uri)
    stored = read_stored_drift(tracked)
    name = stored.run.run_name or run_id
    out = out if out is not None else Path.cwd() / f"drift-{_slug(name)}-{run_id[:8]}"
    written = write_drift_report(
        out,
        importance=stored.importance,
        fold_psi=stored.fold_psi,
        fold_rank_ic=stored.fold_rank_ic,
        value_drift=stored.value_drift,
        run=stored.run,
    )
    report = next(p for p in written if p.name == "drift_report.html")
    print(f"drift report of run {name} ({run_id}): {report}")
    if log:
        tracked.log_artifact(out, ARTIFACTS.report("drift"))
        print(f"logged to {ARTIFACTS.report('drift')}/ of run {run_id}")
    return 0


def open_run(run_id: str, tracking_uri: str | None = None):
    """A :class:`backtest.tracking.TrackedRun` handle on an existing run, its ``run_name`` filled in
    (:func:`backtest.tracking.open_run` on the project's store by default)."""
    from backtest.tracking import open_run as open_tracked_run

    return open_tracked_run(run_id, tracking_uri, PROJECT_DIR)


def read_stored_drift(tracked) -> StoredDrift:
    """Read what the drift report needs from a run (see the module docstring).

    Raises
    ------
    ReportSourceError : the run lacks the per-fold PSI or the leakage records.
    """
    from backtest.tracking import ARTIFACTS

    with tempfile.TemporaryDirectory(prefix="rankbacktest-drift-") as tmp:
        psi_path = _download(
            tracked,
            ARTIFACTS.feature_psi,
            tmp,
            required=(
                "it was recorded before per-fold PSI was stored, or with tracking.drift_report=false. Fix: rerun "
                "its configuration (python -m backtest ...) to record a run that has it"
            ),
        )
        records_path = _download(
            tracked,
            ARTIFACTS.leakage_records,
            tmp,
            required=("its recording did not finish. Fix: rerun its configuration (python -m backtest ...)"),
        )
        importance_path = _download(tracked, ARTIFACTS.feature_importance, tmp)
        value_path = _download(tracked, f"{ARTIFACTS.report('drift')}/feature_value_drift.csv", tmp)
        fold_metrics_path = _download(tracked, ARTIFACTS.fold_metrics, tmp)
        assert psi_path is not None and records_path is not None
        fold_psi, windows = read_psi_artifact(psi_path)
        records = json.loads(Path(records_path).read_text(encoding="utf-8"))
        importance = None
        if importance_path is not None:
            importance = pd.read_csv(importance_path, index_col=0)
            importance = importance_by_decision(importance, records) if importance.shape[1] else None
        value_drift = pd.read_csv(value_path, index_col=0) if value_path is not None else None
        fold_rank_ic = None
        if fold_metrics_path is not None:
            fold_rank_ic = pd.read_csv(fold_metrics_path, index_col=0).get("rank_ic")
    run = DriftRun(run_name=tracked.run_name, run_id=tracked.run_id, windows=windows)
    return StoredDrift(run, importance, fold_psi, value_drift, fold_rank_ic)


def importance_by_decision(importance: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """Stored fold x feature gain indexed by each fold's decision date (from the leakage records), as
    the recorded report shows it (so that its periods are calendar years)."""
    decision = {int(r["fold"]): pd.Timestamp(r["decision_date"]) for r in records}
    missing = [f for f in importance.index if int(f) not in decision]
    if missing:
        raise ReportSourceError(f"the leakage records have no fold {missing[0]} of the feature importance.")
    out = importance.copy()
    out.index = pd.DatetimeIndex([decision[int(f)] for f in importance.index], name="decision_date")
    return out


def _download(tracked, artifact: str, directory: str, required: str | None = None) -> str | None:
    """Download one artifact of ``tracked``; None when it is missing and not ``required`` (then the
    reason ``required`` is raised with the path)."""
    path = tracked.download(artifact, directory)
    if path is not None or required is None:
        return path
    raise ReportSourceError(f"run {tracked.run_id} has no {artifact}: {required}.")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
