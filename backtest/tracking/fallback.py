"""A local store for results whose server went away, and the command that hands them over later.

When the MLflow server stops answering while a backtest is being recorded,
:func:`backtest.record.record_run` records the whole run in the project's fallback store
(:func:`fallback_uri`, a SQLite file), tagged ``pending_sync=true`` and ``fallback_for=<the server's URI,
redacted>``, and says so. Once the server is back::

    python -m backtest.tracking sync --to http://host:5000          # every pending run, then marked synced
    python -m backtest.tracking sync --to http://user:password@host:5000   # a server behind a login

copies each pending run (params, every metric's full history, tags, artifacts, status and times) into
the experiment of the same name on the server and tags the local copy ``synced_to=<new run id>``. Sync is
idempotent: the server's copy carries the source run's id (tag ``synced_from``) from its creation and the
mark ``sync_complete=true`` once it is whole, so a sync killed halfway is repeated by the next one, which
deletes the half copy (no mark) and copies the run again, and a whole copy is never copied twice. The
server's URI is resolved as a run's ``tracking.uri`` is (:func:`backtest.tracking.store.resolve_tracking_uri`):
a login in it goes to MLflow's environment variables and is never printed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import mlflow
import mlflow.exceptions
from mlflow.entities import Metric, Param, RunTag

from backtest.errors import BacktestError
from backtest.tracking.redaction import redact_uri
from backtest.tracking.store import prepare_store, resolve_tracking_uri

logger = logging.getLogger(__name__)

PENDING_TAG = "pending_sync"
#: on the target's copy of a run: the source run's id (set when the copy is created) and the mark that the
#: copy is whole (set last, before it is ended)
SOURCE_TAG = "synced_from"
COMPLETE_TAG = "sync_complete"
_NOT_COPIED = {PENDING_TAG, "fallback_for", "superseded_run", "mlflow.parentRunId"}


def fallback_uri(project_dir: Path | str) -> str:
    """The project's fallback store: ``sqlite:///<project dir>/fallback/mlruns.db``."""
    return f"sqlite:///{Path(project_dir).resolve() / 'fallback' / 'mlruns.db'}"


def sync_runs(source_uri: str, target_uri: str) -> list[tuple[str, str]]:
    """Copy every run tagged ``pending_sync=true`` of ``source_uri`` to ``target_uri``.

    Returns ``(source run id, target run id)`` pairs. A run is marked synced only after all of it was
    copied, so an interrupted sync is repeated: a whole copy already on the target (tag ``synced_from``
    with the mark ``sync_complete=true``) is kept and not copied again, a half copy (no mark) is deleted
    and the run copied anew (:func:`_whole_copy`).
    """
    source = mlflow.MlflowClient(tracking_uri=source_uri)
    target = mlflow.MlflowClient(tracking_uri=target_uri)
    copied = []
    for experiment in source.search_experiments():
        runs = source.search_runs(
            [experiment.experiment_id], filter_string=f"tags.{PENDING_TAG} = 'true'", max_results=1000
        )
        if not runs:
            continue
        target_experiment = prepare_store(target_uri, experiment.name)
        for run in runs:
            run_id = _whole_copy(target, run, target_experiment) or _copy_run(source, target, run, target_experiment)
            _mark_synced(source, target, run, run_id)
            copied.append((run.info.run_id, run_id))
    return copied


def _whole_copy(target: mlflow.MlflowClient, run, experiment_id: str) -> str | None:
    """The id of the target's whole copy of ``run``, None when it has none; the half copies an interrupted
    sync left there (no ``sync_complete`` mark: killed before the copy was whole) are deleted, and a whole
    copy that was not ended as its source (killed between the mark and the end) is ended so now."""
    copies = target.search_runs(
        [experiment_id], filter_string=f"tags.{SOURCE_TAG} = '{run.info.run_id}'", max_results=1000
    )
    whole = None
    for copy in copies:
        if whole is None and copy.data.tags.get(COMPLETE_TAG) == "true":
            whole = copy.info.run_id
            if copy.info.status != run.info.status:
                target.set_terminated(whole, status=run.info.status, end_time=run.info.end_time)
            logger.info("run %s is already whole in the target as %s: not copied again", run.info.run_id, whole)
        else:
            target.delete_run(copy.info.run_id)
            logger.info("deleted run %s: a copy of %s that an interrupted sync left", copy.info.run_id, run.info.run_id)
    return whole


def _copy_run(source: mlflow.MlflowClient, target: mlflow.MlflowClient, run, experiment_id: str) -> str:
    tags = {k: v for k, v in run.data.tags.items() if k not in _NOT_COPIED}
    tags[SOURCE_TAG] = run.info.run_id
    new = target.create_run(experiment_id, start_time=run.info.start_time, tags=tags, run_name=run.info.run_name)
    run_id = new.info.run_id
    try:
        params = [Param(k, v) for k, v in run.data.params.items()]
        for start in range(0, len(params), 100):
            target.log_batch(run_id, params=params[start : start + 100])
        history = [m for key in run.data.metrics for m in source.get_metric_history(run.info.run_id, key)]
        metrics = [Metric(m.key, m.value, m.timestamp, m.step) for m in history]
        for start in range(0, len(metrics), 1000):
            target.log_batch(run_id, metrics=metrics[start : start + 1000])
        with tempfile.TemporaryDirectory(prefix="rankbacktest-sync-") as tmp:
            local = source.download_artifacts(run.info.run_id, "", tmp)
            if any(Path(local).iterdir()):
                target.log_artifacts(run_id, local)
        target.set_tag(run_id, COMPLETE_TAG, "true")
        target.set_terminated(run_id, status=run.info.status, end_time=run.info.end_time)
    except BaseException:
        target.set_terminated(run_id, status="FAILED")
        raise
    return run_id


def _mark_synced(source: mlflow.MlflowClient, target: mlflow.MlflowClient, run, run_id: str) -> None:
    """End the target's run that was open when its server went away, and tag the source run synced."""
    superseded = run.data.tags.get("superseded_run")  # the server's run that was open when it went away
    if superseded:
        try:
            if target.get_run(superseded).info.status == "RUNNING":
                target.set_tag(superseded, "error", f"the store stopped answering; the run is {run_id}")
                target.set_terminated(superseded, status="FAILED")
        except mlflow.exceptions.MlflowException:
            logger.info("run %s is not in the target store", superseded)
    source.log_batch(run.info.run_id, tags=[RunTag(PENDING_TAG, "false"), RunTag("synced_to", run_id)])
    logger.info("synced run %s -> %s", run.info.run_id, run_id)


def main(argv: list[str] | None = None) -> int:
    """``python -m backtest.tracking sync --to URI [--from URI]``."""
    from backtest import PROJECT_DIR

    parser = argparse.ArgumentParser(
        prog="python -m backtest.tracking", description="Copy runs recorded in the fallback store to a tracking server."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sync = sub.add_parser("sync", help="copy every run tagged pending_sync=true, then mark it synced")
    sync.add_argument(
        "--to",
        required=True,
        dest="target",
        help="the tracking server, e.g. http://host:5000 or http://user:pw@host:5000",
    )
    sync.add_argument(
        "--from",
        dest="source",
        default=fallback_uri(PROJECT_DIR),
        help="the store holding the pending runs (default: the project's fallback store)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not Path(args.source.removeprefix("sqlite:///")).exists() and args.source.startswith("sqlite:///"):
        print(f"nothing to sync: {args.source} does not exist", file=sys.stderr)
        return 0
    try:
        target = resolve_tracking_uri(args.target, PROJECT_DIR)  # a login in the URI goes where runs put it
        pairs = sync_runs(args.source, target)
    except BacktestError as exc:
        print(f"error: {redact_uri(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # the server is still away, or refused: the runs stay pending
        print(
            f"error: sync to {redact_uri(args.target)} failed, the runs stay pending: {redact_uri(str(exc))}",
            file=sys.stderr,
        )
        return 2
    for source_id, target_id in pairs:
        print(f"{source_id} -> {target_id}")
    print(f"{len(pairs)} run(s) synced to {redact_uri(target)}")
    return 0
