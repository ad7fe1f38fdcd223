"""Reading a study back: every run tagged with one ``study``, as a table."""

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
    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = [e.name for e in client.search_experiments(view_type=ViewType.ALL)]
        raise TrackingError(
            f"study_runs: experiment {experiment!r} not found in {redact_uri(uri)!r}; "
            f"experiments there: {preview(names) or 'none'}. Fix: pass tracking.experiment of the study."
        )
    escaped = study.replace("\\", "\\\\").replace("'", "\\'")
    runs = []
    page_token = None
    while True:
        page = client.search_runs(
            [found.experiment_id],
            filter_string=f"tags.study = '{escaped}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=page_token,
        )
        runs.extend(page)
        page_token = page.token
        if not page_token:
            break
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
