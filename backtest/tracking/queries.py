"""Reading studies back: every run tagged with one ``study``, and the parent runs of the sweeps, as tables.

The table is built from the pages of ``MlflowClient.search_runs`` on the store named by the caller, not
with ``mlflow.search_runs``: that function makes the same table (``params.*``, ``metrics.*``, ``tags.*``
columns) but only from MLflow's process-wide tracking URI, and setting that URI (``mlflow.set_tracking_uri``)
also exports ``MLFLOW_TRACKING_URI`` to every child process. This package names its store on every call
instead: a tracker and its fallback store, or the two stores of a sync, live in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import mlflow
import pandas as pd
from mlflow.entities import ViewType

from backtest.errors import TrackingError, preview
from backtest.tracking.redaction import redact_uri

#: ``run_kind`` tag: one backtest, or the parent run of a sweep.
RunKind = Literal["backtest", "sweep"]


def study_runs(
    uri: str,
    experiment: str,
    study: str,
    *,
    kind: RunKind | None = "backtest",
    statuses: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The runs of one study (tag ``study``) as one row per run, oldest first.

    Parameters
    ----------
    uri : a resolved tracking URI.
    experiment : experiment name.
    study : the ``study`` tag value.
    kind : keep runs with this ``run_kind`` tag (``backtest`` excludes the sweep's parent run); None
        keeps all.
    statuses : keep runs with these statuses (e.g. ``["FINISHED"]``); None keeps all, so that the
        number of trials for the DSR counts the failed ones too.

    Returns
    -------
    DataFrame indexed by ``run_id``: ``run_name``, ``status``, ``start_time``, ``end_time``
    (Timestamps, UTC), then ``params.<key>`` (str), ``metrics.<key>`` (float, the latest value of
    each key) and ``tags.<key>`` (str) columns; empty (with the fixed columns) when the study has no run.

    Raises
    ------
    TrackingError : the experiment does not exist in the store.
    """
    runs = _search(uri, experiment, f"tags.study = '{_quoted(study)}'")
    return _table(runs, kind=kind, statuses=statuses)


def sweep_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The parent runs of every sweep (``run_kind=sweep``) of ``experiment``, oldest first; the columns
    of :func:`study_runs`.

    Raises
    ------
    TrackingError : the experiment does not exist in the store.
    """
    return _table(_search(uri, experiment, "tags.run_kind = 'sweep'"), kind="sweep", statuses=None)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _search(uri: str, experiment: str, filter_string: str) -> list[Any]:
    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = [e.name for e in client.search_experiments(view_type=ViewType.ALL)]
        raise TrackingError(
            f"experiment {experiment!r} not found in {redact_uri(uri)!r}; "
            f"experiments there: {preview(names) or 'none'}. Fix: pass the experiment of the study "
            "(tracking.experiment)."
        )
    runs = []
    page_token = None
    while True:
        page = client.search_runs(
            [found.experiment_id],
            filter_string=filter_string,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=page_token,
        )
        runs.extend(page)
        page_token = page.token
        if not page_token:
            return runs


def _table(runs: list[Any], *, kind: RunKind | None, statuses: Sequence[str] | None) -> pd.DataFrame:
    rows = []
    for run in runs:
        row: dict[str, Any] = {
            "run_id": run.info.run_id,
            "run_name": run.info.run_name,
            "status": run.info.status,
            "start_time": pd.to_datetime(run.info.start_time, unit="ms", utc=True),
            "end_time": pd.to_datetime(run.info.end_time, unit="ms", utc=True) if run.info.end_time else pd.NaT,
        }
        row.update({f"params.{k}": v for k, v in run.data.params.items()})
        row.update({f"metrics.{k}": float(v) for k, v in run.data.metrics.items()})
        row.update({f"tags.{k}": v for k, v in run.data.tags.items()})
        rows.append(row)
    fixed = ["run_id", "run_name", "status", "start_time", "end_time"]
    table = pd.DataFrame(rows, columns=None if rows else fixed)
    if kind is not None and len(table):
        table = table[table.get("tags.run_kind", pd.Series(index=table.index, dtype=object)) == kind]
    if statuses is not None and len(table):
        table = table[table["status"].isin(list(statuses))]
    rest = sorted(c for c in table.columns if c not in fixed)
    return table[fixed + rest].set_index("run_id")
