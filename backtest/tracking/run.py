"""The run handle: a :class:`Tracker` opens MLflow runs in one experiment of one store, and each
:class:`TrackedRun` logs params, metrics, tags and artifacts to its own ``run_id`` explicitly.

Nothing relies on mlflow's global "active run", so runs of a multirun sweep cannot leak into each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import mlflow
import numpy as np
import pandas as pd
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException

from backtest.errors import StoreUnavailableError, TrackingError, preview
from backtest.provenance import Provenance, provenance_tags
from backtest.stop import raise_if_stopped
from backtest.tracking.layout import ARTIFACTS, COMPARE_IMAGES
from backtest.tracking.owner import owner_state, process_owner
from backtest.tracking.queries import RunKind, study_runs, sweep_runs
from backtest.tracking.redaction import (
    MAX_TAG_VALUE_CHARS,
    cut_text,
    flatten_config,
    metric_key,
    redact_config,
    redact_uri,
    tag_values,
)
from backtest.tracking.store import (
    STORE_ERRORS,
    TrackingConfig,
    default_artifact_location,
    now_ms,
    prepare_store,
    resolve_tracking_uri,
)

logger = logging.getLogger(__name__)

#: the run tag MLflow's UI shows (and edits) as the run's description, in Markdown
NOTE_TAG = "mlflow.note.content"

# MLflow's limits per log_batch call (mlflow.utils.validation).
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000


class Tracker:
    """Opens MLflow runs in one experiment of one store; pass it explicitly to whatever logs.

    Parameters
    ----------
    uri : MLflow tracking URI; resolved with :func:`resolve_tracking_uri` (None = project SQLite).
    experiment : experiment name; created (with :func:`prepare_store`) when missing.
    project_dir : project root: default store location and the git checkout for provenance.
    artifact_location : artifact root of a newly created experiment (database stores); None derives
        it from ``uri`` (:func:`default_artifact_location`).
    """

    def __init__(
        self,
        uri: str | None,
        experiment: str,
        project_dir: Path | str,
        artifact_location: str | None = None,
    ) -> None:
        self.project_dir = Path(project_dir).resolve()
        self.uri = resolve_tracking_uri(uri, self.project_dir)
        self.experiment = experiment
        if artifact_location is None:
            artifact_location = default_artifact_location(self.uri, experiment, self.project_dir)
        self.experiment_id = prepare_store(self.uri, experiment, artifact_location, project_dir=self.project_dir)
        self.client = mlflow.MlflowClient(tracking_uri=self.uri)

    @classmethod
    def from_config(cls, config: TrackingConfig, project_dir: Path | str) -> Tracker:
        """Build the tracker of the ``tracking`` config group."""
        return cls(config.uri, config.experiment, project_dir, config.artifact_location)

    def __repr__(self) -> str:
        return f"Tracker(uri={redact_uri(self.uri)!r}, experiment={self.experiment!r})"

    def create_run(
        self,
        run_name: str | None = None,
        *,
        parent_run_id: str | None = None,
        study: str | None = None,
        n_trials: int | None = None,
        kind: RunKind = "backtest",
        tags: Mapping[str, Any] | None = None,
    ) -> TrackedRun:
        """Open a RUNNING run; the caller must call :meth:`TrackedRun.end`.

        Prefer :meth:`start_run`; this form is for a sweep's parent run, opened in a launcher callback
        and ended in another one.

        Parameters
        ----------
        run_name : shown in the UI.
        parent_run_id : nest this run under that one (tag ``mlflow.parentRunId``); the parent must
            exist in this store (it may belong to another process).
        study : sweep / ablation name (tag ``study``), the key of :func:`study_runs`.
        n_trials : number of configurations tried in the study (tag ``n_trials``; for the DSR).
        kind : ``backtest`` for one backtest, ``sweep`` for the parent of a sweep (tag ``run_kind``).
        tags : more tags (redacted like params).
        """
        all_tags: dict[str, str] = {"run_kind": kind, "host": socket.gethostname(), "pid": str(os.getpid())}
        owner = process_owner()  # what tells this process from any other (backtest.tracking.owner)
        if owner is not None:
            all_tags["owner"] = owner
        if parent_run_id is not None:
            self._check_parent(parent_run_id)
            all_tags["mlflow.parentRunId"] = parent_run_id
        if study is not None:
            all_tags["study"] = study
        if n_trials is not None:
            all_tags["n_trials"] = str(int(n_trials))
        all_tags.update(tag_values(tags or {}))
        try:
            run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=run_name)
        except MlflowException as exc:
            raise TrackingError(
                f"MLflow refused to create a run in experiment {self.experiment!r} of "
                f"{redact_uri(self.uri)!r}: {exc.message}"
            ) from exc
        logger.info("MLflow run %s (%s) started in %r", run.info.run_id, run.info.run_name, self.experiment)
        return TrackedRun(self, run.info.run_id, run.info.run_name)

    @contextlib.contextmanager
    def start_run(
        self,
        run_name: str | None = None,
        *,
        parent_run_id: str | None = None,
        study: str | None = None,
        n_trials: int | None = None,
        kind: RunKind = "backtest",
        tags: Mapping[str, Any] | None = None,
    ) -> Iterator[TrackedRun]:
        """Context manager around one run: FINISHED on success, FAILED on an exception (with an
        ``error`` tag), KILLED on KeyboardInterrupt; the exception is always re-raised.

        Parameters are those of :meth:`create_run`.
        """
        run = self.create_run(
            run_name, parent_run_id=parent_run_id, study=study, n_trials=n_trials, kind=kind, tags=tags
        )
        try:
            yield run
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP turned into RunInterrupted by the CLI
            run.end("KILLED", error=f"interrupted: {exc or type(exc).__name__}")
            raise
        except SystemExit as exc:
            if exc.code in (None, 0):
                run.end("FINISHED")
            else:
                run.end("FAILED", error=f"SystemExit: {exc.code}")
            raise
        except BaseException as exc:
            run.end("FAILED", error=f"{type(exc).__name__}: {exc}")
            raise
        run.end("FINISHED")

    def attach(self, run_id: str) -> TrackedRun:
        """A handle on an existing run of this store (e.g. a finished child of a sweep), to read its
        artifacts or log more metrics to it. Ending it is left to whoever started it."""
        return TrackedRun(self, run_id, None)

    def end_stale_runs(self, config_key: str) -> list[str]:
        """End as FAILED the RUNNING runs of this configuration whose process is gone; return their ids.

        A run killed with SIGKILL cannot end itself: it stays RUNNING. Before a configuration (tag
        ``config_key``, see :func:`config_key`) runs again, its RUNNING runs whose owner is gone (tag
        ``owner``: no process of this kernel boot and pid namespace runs with its pid and start time,
        :func:`backtest.tracking.owner.owner_state`), or is this very process, are marked FAILED with the
        reason; the rerun is a new run (a resumed one: its finished folds come from the checkpoints).
        Host names play no part: containers often share one. A run whose owner cannot be checked from
        here (another machine or container, a boot before the last, or no ``owner`` tag: a run recorded
        by an older version) is left alone, with a warning: it may still be running.
        """
        return self._end_stale(f"tags.config_key = '{config_key}'", "of this configuration")

    def end_stale_sweeps(self, study: str) -> list[str]:
        """End as FAILED the RUNNING parent runs of ``study``'s sweeps whose process is gone; return their ids.

        A sweep killed with SIGKILL (while its jobs run, or while it builds the study report) leaves its
        parent run RUNNING. Before the study starts again its stale parents are ended by the rule of
        :meth:`end_stale_runs`; the new sweep's report covers the study's finished trials, theirs included.
        """
        return self._end_stale(f"tags.study = '{study}' and tags.run_kind = 'sweep'", f"of study {study}")

    def _end_stale(self, selection: str, what: str) -> list[str]:
        """End as FAILED the RUNNING runs of ``selection`` (a filter string) whose owner is gone."""
        this_process = process_owner()
        try:
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"{selection} and attributes.status = 'RUNNING'",
                max_results=1000,
            )
        except MlflowException as exc:
            self._raise_if_unavailable(exc)
            raise
        ended = []
        for stale in runs:
            tags = stale.data.tags
            owner, host, pid = tags.get("owner"), tags.get("host", "unknown"), tags.get("pid", "unknown")
            state = "gone" if owner is not None and owner == this_process else owner_state(owner)
            if state == "live":
                logger.warning("run %s %s is still running (pid %s)", stale.info.run_id, what, pid)
                continue
            if state == "unknown":
                logger.warning(
                    "run %s %s is RUNNING (host %s, pid %s, %s): its process cannot be "
                    "checked from here, so it is left as it is",
                    stale.info.run_id,
                    what,
                    host,
                    pid,
                    f"owner {owner}" if owner else "no owner tag: recorded by an older version",
                )
                continue
            TrackedRun(self, stale.info.run_id, stale.info.run_name).end(
                "FAILED", error=f"interrupted: its process (pid {pid} on {host}) ended without closing the run"
            )
            ended.append(stale.info.run_id)
        if ended:
            logger.warning("marked %d interrupted run(s) %s FAILED: %s", len(ended), what, ", ".join(ended))
        return ended

    def _raise_if_unavailable(self, exc: Exception) -> None:
        if store_unavailable(exc):
            raise StoreUnavailableError(f"The MLflow store {redact_uri(self.uri)!r} does not answer: {exc}") from exc

    def study_runs(
        self, study: str, *, kind: RunKind | None = "backtest", statuses: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """:func:`study_runs` of this tracker's store and experiment."""
        return study_runs(self.uri, self.experiment, study, kind=kind, statuses=statuses)

    def sweep_runs(self) -> pd.DataFrame:
        """:func:`sweep_runs`: the parent runs of every sweep of this tracker's experiment."""
        return sweep_runs(self.uri, self.experiment)

    def _check_parent(self, parent_run_id: str) -> None:
        try:
            parent = self.client.get_run(parent_run_id)
        except MlflowException as exc:
            raise TrackingError(
                f"Parent run {parent_run_id!r} not found in {redact_uri(self.uri)!r}: {exc.message}. "
                "Fix: create the sweep's parent run in the same store before starting its jobs."
            ) from exc
        if parent.info.status != "RUNNING":
            logger.warning(
                "parent run %s is %s, not RUNNING: the child is nested anyway", parent_run_id, parent.info.status
            )


class TrackedRun:
    """Handle of one open MLflow run: everything logged goes to ``run_id`` explicitly.

    Made by :meth:`Tracker.start_run` / :meth:`Tracker.create_run`; not constructed directly.
    """

    def __init__(self, tracker: Tracker, run_id: str, run_name: str | None) -> None:
        self.tracker = tracker
        self.run_id = run_id
        self.run_name = run_name
        self._ended = False

    def __repr__(self) -> str:
        return f"TrackedRun(run_id={self.run_id!r}, run_name={self.run_name!r})"

    @property
    def artifact_uri(self) -> str:
        """Where the store keeps this run's artifacts (a ``file://`` path, or the server's URI)."""
        return self.tracker.client.get_run(self.run_id).info.artifact_uri

    # -- params, metrics, tags ---------------------------------------------------------------------

    def log_params(self, config: Mapping[str, Any]) -> dict[str, str]:
        """Log a nested config as flattened, redacted params (:func:`flatten_config`); return them.

        Params are immutable in MLflow: logging a key again with another value raises TrackingError.
        """
        flat = flatten_config(config)
        params = [Param(k, v) for k, v in flat.items()]
        for chunk in _chunks(params, MAX_PARAMS_PER_BATCH):
            self._log_batch("params", params=chunk)
        return flat

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log ``{name: value}`` at ``step`` (headline metrics: step 0), in batches of 1000.

        NaN and inf are stored as such (MLflow keeps them); a value that is not a real number raises
        TrackingError naming the key.
        """
        timestamp = now_ms()
        entries = [Metric(metric_key(k), _metric_value(k, v), timestamp, int(step)) for k, v in metrics.items()]
        self._log_metric_entries(entries)

    def log_fold_metrics(
        self,
        fold_metrics: Mapping[int, Mapping[str, float]] | pd.DataFrame,
        decision_dates: Mapping[int, pd.Timestamp] | None = None,
    ) -> None:
        """Log per-fold metrics as ``fold/<name>`` with ``step`` = fold number, in batches of 1000.

        A fold's missing value (None or NaN) is not logged: a fold may have no value of a metric (the
        last fold's rank IC, IC and NDCG when none of its test days has a known label yet: its labels end
        after the data), and a NaN point would break the UI's charts of the key.

        Parameters
        ----------
        fold_metrics : ``{fold: {name: value}}``, or a DataFrame indexed by fold number with one column
            per metric.
        decision_dates : each fold's decision date (its first test day): the timestamp of its points, so
            that the UI's "time" axis shows when each fold decided. Folds without one, and every fold
            when None, get the time of logging.
        """
        if isinstance(fold_metrics, pd.DataFrame):
            rows: Mapping[Any, Mapping[str, Any]] = fold_metrics.to_dict(orient="index")
        else:
            rows = fold_metrics
        now = now_ms()
        dates = decision_dates or {}
        entries = []
        for fold, values in rows.items():
            step = _fold_step(fold)
            timestamp = int(pd.Timestamp(dates[fold]).value // 1_000_000) if fold in dates else now
            for name, value in values.items():
                key = f"fold/{name}"
                if value is None or math.isnan(number := _metric_value(key, value)):
                    continue
                entries.append(Metric(metric_key(key), number, timestamp, step))
        self._log_metric_entries(entries)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values as strings, redacted, cut at 8000 chars), in batches of 100."""
        entries = [RunTag(metric_key(k), v) for k, v in tag_values(tags).items()]
        for chunk in _chunks(entries, MAX_TAGS_PER_BATCH):
            self._log_batch("tags", tags=chunk)

    def set_note(self, text: str) -> None:
        """Make ``text`` the run's description (tag :data:`NOTE_TAG`), shown as the terminal shows it: a
        fixed-width block (cut, like any tag, at 8000 characters)."""
        body = text.strip("\n")
        self.set_tags({NOTE_TAG: f"```\n{body}\n```"})

    def log_provenance(self, provenance: Provenance) -> dict[str, str]:
        """Set the provenance and guard tags (:func:`provenance_tags`); return them.

        Logs a warning when the run is not comparable, saying why (tag ``comparable_reason``).
        """
        tags = provenance_tags(provenance, self.tracker.project_dir)
        self.set_tags(tags)
        if not provenance.comparable:
            logger.warning(
                "run %s is tagged comparable=false (%s; leak_demo=%s): its metrics must not be compared with "
                "other runs",
                self.run_id,
                tags["comparable_reason"],
                provenance.leak_demo,
            )
        return tags

    # -- artifacts ---------------------------------------------------------------------------------

    def log_artifact(self, local_path: Path | str, artifact_path: str | None = None) -> None:
        """Upload a file, or a directory's whole content, under ``artifact_path`` of the run.

        A directory ``reports/`` logged with ``artifact_path="reports"`` lands as ``reports/<files>``.
        """
        local_path = Path(local_path)
        if not local_path.exists():
            raise TrackingError(
                f"Artifact {local_path} does not exist (run {self.run_id}). Expected a file or a "
                "directory written before logging it."
            )
        raise_if_stopped()  # a write is a unit: a stop is taken before or after it, never inside
        try:
            if local_path.is_dir():
                self.tracker.client.log_artifacts(self.run_id, str(local_path), artifact_path)
            else:
                self.tracker.client.log_artifact(self.run_id, str(local_path), artifact_path)
        except STORE_ERRORS as exc:
            self._raise_if_unavailable(exc, f"artifact {local_path.name}")
            raise TrackingError(f"Could not log artifact {local_path} to run {self.run_id}: {exc.message}") from exc
        raise_if_stopped()

    def log_config(self, config: Mapping[str, Any], artifact_file: str = ARTIFACTS.config) -> dict[str, str]:
        """Log a resolved config twice: as flattened params and as a redacted YAML artifact.

        Returns the flattened params.
        """
        import yaml  # PyYAML: a light dependency (mlflow's and omegaconf's); imported where needed

        params = self.log_params(config)
        text = yaml.safe_dump(_plain(redact_config(config)), sort_keys=False, allow_unicode=True)
        self._log_text(text, artifact_file)
        return params

    def log_frame(self, frame: pd.DataFrame | pd.Series, artifact_file: str) -> None:
        """Write a DataFrame (or Series) as ``.parquet`` or ``.csv`` (from the suffix) and log it.

        Parameters
        ----------
        frame : e.g. predictions indexed by (date, code), daily returns indexed by date.
        artifact_file : path inside the run, e.g. ``data/predictions.parquet``.
        """
        data = frame.to_frame() if isinstance(frame, pd.Series) else frame
        suffix = Path(artifact_file).suffix.lower()
        if suffix not in (".parquet", ".csv"):
            raise TrackingError(f"log_frame: artifact_file must end with .parquet or .csv, received {artifact_file!r}.")
        with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
            path = Path(tmp) / Path(artifact_file).name
            if suffix == ".parquet":
                data.to_parquet(path)
            else:
                data.to_csv(path)
            self.log_artifact(path, _parent(artifact_file))

    def log_json(self, obj: Any, artifact_file: str) -> None:
        """Write ``obj`` as JSON (dates and numpy scalars as strings) and log it at ``artifact_file``."""
        self._log_text(json.dumps(obj, indent=2, default=str, ensure_ascii=False), artifact_file)

    def log_image(
        self, local_path: Path | str, artifact_file: str | None = None, *, key: str | None = None, step: int = 0
    ) -> None:
        """Log an image file (PNG) where MLflow's UI shows it.

        Parameters
        ----------
        local_path : the image written beforehand.
        artifact_file : its path inside the run; default: its file name at the run's root. MLflow's
            compare-runs page lists only the root-level files that every compared run has, and renders
            the images among them: a chart to compare across runs goes to the root under the same name
            in each run (:data:`backtest.tracking.layout.COMPARE_IMAGES`).
        key : also log it as a keyed image (``images/<key>+step+<step>+...``, MLflow's
            ``log_image(key=, step=)``), which the experiment's chart view draws as an image grid.
        step : the keyed image's step (e.g. the fold number).
        """
        local_path = Path(local_path)
        target = artifact_file or local_path.name
        if local_path.is_file() and local_path.name != Path(target).name:
            with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
                copy = Path(tmp) / Path(target).name
                copy.write_bytes(local_path.read_bytes())
                self.log_artifact(copy, _parent(target))
        else:
            self.log_artifact(local_path, _parent(target))
        if key is not None:
            import PIL.Image  # Pillow: a matplotlib dependency

            try:
                with PIL.Image.open(local_path) as image:
                    self.tracker.client.log_image(
                        self.run_id, image.convert("RGB"), key=key, step=int(step), synchronous=True
                    )
            except (*STORE_ERRORS, ValueError) as exc:
                self._raise_if_unavailable(exc, f"image {key!r}")
                raise TrackingError(f"MLflow refused the image {key!r} for run {self.run_id}: {exc}") from exc

    def log_compare_images(self, images: Mapping[str, Path | str]) -> list[str]:
        """Log the charts a compare-runs page shows side by side at the run's root, under their
        :data:`~backtest.tracking.layout.COMPARE_IMAGES` names.

        MLflow's compare-runs page ("Artifacts" section) lists only the **files at the root** of the
        compared runs' artifact trees (folders are skipped) that **every** compared run has, and renders
        the images among them; so a chart meant for comparing runs goes to the root under the same name
        in every run (the copies under ``reports/`` stay where the reports link them). Keyed images
        (:meth:`log_image` with ``key=``, stored as ``images/<key>+step+...``) are drawn as image grids
        by the experiment's chart view instead.

        ``images`` maps a key of ``COMPARE_IMAGES`` (``equity``, ``drawdown``, ``fold_rank_ic``; another
        key ``name`` is logged as ``name.png``) to a PNG already drawn (by :mod:`backtest.reports.plots`);
        a file that is not there is skipped. Returns the artifact paths logged, in the order given.
        """
        logged = []
        for name, source in images.items():
            if Path(source).is_file():
                target = COMPARE_IMAGES.get(name, f"{name}.png")
                self.log_image(source, target)
                logged.append(target)
        return logged

    def load_frame(self, artifact_file: str, *, missing_ok: bool = False) -> pd.DataFrame | None:
        """Read back a ``.parquet`` or ``.csv`` artifact written by :meth:`log_frame`.

        With ``missing_ok``, a run without the file (recorded before the file was added) gives None
        instead of a TrackingError.
        """
        with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
            if missing_ok:
                path = self.download(artifact_file, tmp)
                if path is None:
                    return None
            else:
                try:
                    path = self.tracker.client.download_artifacts(self.run_id, artifact_file, tmp)
                except STORE_ERRORS as exc:
                    raise TrackingError(
                        f"run {self.run_id} has no readable artifact {artifact_file!r}: {exc}. Fix: read a run "
                        "made by `python -m backtest`, whose artifacts are complete."
                    ) from exc
            if Path(artifact_file).suffix.lower() == ".csv":
                return pd.read_csv(path, index_col=0)
            return pd.read_parquet(path)

    def download(self, artifact_file: str, directory: Path | str) -> str | None:
        """Download one artifact into ``directory``; its local path, or None when the run has no such file.

        Raises TrackingError when the store cannot be read.
        """
        try:
            listed = {info.path for info in self.tracker.client.list_artifacts(self.run_id, _parent(artifact_file))}
            if artifact_file not in listed:
                return None
            return self.tracker.client.download_artifacts(self.run_id, artifact_file, str(directory))
        except STORE_ERRORS as exc:
            raise TrackingError(f"cannot read {artifact_file} of run {self.run_id}: {exc}") from None

    def list_artifacts(self, path: str | None = None) -> list[str]:
        """Paths of the run's artifacts (recursively) under ``path``; files only."""
        found: list[str] = []
        stack = [path]
        while stack:
            for info in self.tracker.client.list_artifacts(self.run_id, stack.pop()):
                (stack.append(info.path) if info.is_dir else found.append(info.path))
        return sorted(found)

    # -- end ---------------------------------------------------------------------------------------

    def end(self, status: Literal["FINISHED", "FAILED", "KILLED"] = "FINISHED", error: str | None = None) -> None:
        """Terminate the run with ``status`` (idempotent). ``error`` is stored in the ``error`` tag.

        A failure of the store while ending is logged, not raised: it must not hide the exception
        that ended the run. The status is written even when the ``error`` tag is not taken; a run whose
        status cannot be written (a lost server, a full disk) stays RUNNING under its ``owner`` tag, and the
        next start of its configuration marks it FAILED (:meth:`Tracker.end_stale_runs`).
        """
        if self._ended:
            return
        self._ended = True
        client = self.tracker.client
        if error is not None:
            try:
                _while_busy(
                    lambda: client.set_tag(self.run_id, "error", cut_text(redact_uri(error), MAX_TAG_VALUE_CHARS))
                )
            except Exception as exc:  # the store may be down: report, never mask the original error
                logger.error("could not tag MLflow run %s with its error: %s", self.run_id, exc)
        try:
            _while_busy(
                lambda: client.set_terminated(self.run_id, status=RunStatus.to_string(RunStatus.from_string(status)))
            )
            logger.info("MLflow run %s ended %s", self.run_id, status)
        except Exception as exc:
            logger.error(
                "could not end MLflow run %s as %s (%s): it stays RUNNING until the next start of its "
                "configuration marks it FAILED",
                self.run_id,
                status,
                exc,
            )

    # -- internals ---------------------------------------------------------------------------------

    def _log_metric_entries(self, entries: list[Metric]) -> None:
        for chunk in _chunks(entries, MAX_METRICS_PER_BATCH):
            self._log_batch("metrics", metrics=chunk)

    def _log_batch(self, what: str, **entities: Sequence[Any]) -> None:
        raise_if_stopped()  # a write is a unit: a stop is taken before or after it, never inside
        try:
            self.tracker.client.log_batch(self.run_id, synchronous=True, **entities)
        except STORE_ERRORS as exc:
            self._raise_if_unavailable(exc, what)
            names = [e.key for group in entities.values() for e in group]
            hint = (
                " Params are immutable: a key logged twice must keep its value; start a new run instead."
                if what == "params" and "changing param values" in exc.message.lower()
                else ""
            )
            raise TrackingError(
                f"MLflow refused {what} ({preview(names)}) for run {self.run_id} in "
                f"{redact_uri(self.tracker.uri)!r}: {exc.message.rstrip('.')}.{hint}"
            ) from exc
        raise_if_stopped()

    def _raise_if_unavailable(self, exc: BaseException, what: str) -> None:
        """Raise StoreUnavailableError when ``exc`` says the store is gone rather than refusing."""
        if store_unavailable(exc):
            raise StoreUnavailableError(
                f"The MLflow store {redact_uri(self.tracker.uri)!r} did not take {what} for run {self.run_id}: {exc}"
            ) from exc

    def _log_text(self, text: str, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(text, encoding="utf-8")
            self.log_artifact(path, _parent(artifact_file))


def open_run(run_id: str, uri: str | None, project_dir: Path | str) -> TrackedRun:
    """A handle on an existing run of the store at ``uri`` (None: the project's SQLite store), with its
    ``run_name``, in a :class:`Tracker` of the run's experiment; ending the run is left to its owner.

    Raises TrackingError, with a fix, when the store (a SQLite file) or the run does not exist; the store
    is not created.
    """
    resolved = resolve_tracking_uri(uri, project_dir)
    if resolved.startswith("sqlite:///") and not Path(resolved[len("sqlite:///") :]).is_file():
        raise TrackingError(
            f"no MLflow store at {resolved[len('sqlite:///') :]}. Fix: pass the tracking URI of the store the run "
            "was recorded in (--tracking-uri; the run summary's 'open the UI' line names it)."
        )
    client = mlflow.MlflowClient(tracking_uri=resolved)
    try:
        info = client.get_run(run_id).info
        experiment = client.get_experiment(info.experiment_id).name
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            raise TrackingError(
                f"the MLflow store {redact_uri(resolved)} refused run {run_id}: {exc.message}"
            ) from None
        raise TrackingError(
            f"run {run_id!r} not found in {redact_uri(resolved)}. Fix: copy the id the run summary prints ('MLflow "
            "run ...') or the MLflow UI shows, and pass --tracking-uri when the run is in another store."
        ) from None
    run = Tracker(resolved, experiment, project_dir).attach(run_id)
    run.run_name = info.run_name
    return run


def config_key(config: Mapping[str, Any]) -> str:
    """The identity of a configuration: a hash of its flattened, redacted params (tag ``config_key``).

    The sweep bookkeeping (``tracking.parent_run_id``, ``tracking.n_trials``) is left out: a rerun of
    one job outside its sweep is the same configuration.
    """
    params = {
        k: v for k, v in flatten_config(config).items() if k not in ("tracking.parent_run_id", "tracking.n_trials")
    }
    return hashlib.blake2b(json.dumps(params, sort_keys=True).encode(), digest_size=10).hexdigest()


def store_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the store is gone (no answer, a full disk) rather than refusing a record."""
    if isinstance(exc, OSError):
        return True
    text = str(getattr(exc, "message", exc)).lower()
    markers = (
        "failed with exception",
        "max retries exceeded",
        "connection refused",
        "database or disk is full",
        "disk i/o error",
        "unable to open database",
    )
    return any(marker in text for marker in markers)


#: seconds between the tries of a write that SQLite answers "database is locked" (:func:`_while_busy`)
BUSY_BACKOFF_S = (0.1, 0.2, 0.4, 0.8, 1.6)


def _while_busy(write: Callable[[], Any]) -> Any:
    """``write()``, tried again after each of :data:`BUSY_BACKOFF_S` while a SQLite store answers "database
    is locked" (another process holds its write lock): the run's final status must not be lost to a busy
    store. Any other error, and the last "locked", is raised."""
    for pause in BUSY_BACKOFF_S:
        try:
            return write()
        except MlflowException as exc:
            if "database is locked" not in str(exc.message).lower():
                raise
            logger.warning("the store is busy (database is locked); trying again in %.1f s", pause)
            time.sleep(pause)
    return write()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _metric_value(key: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise TrackingError(f"Metric {key!r}: received the bool {value!r}; log 0/1 or a tag instead.")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise TrackingError(
            f"Metric {key!r}: expected a real number, received {value!r} ({type(value).__name__}). "
            "Fix: log numbers only; put text into tags."
        ) from exc
    return number


def _fold_step(fold: Any) -> int:
    try:
        step = int(fold)
    except (TypeError, ValueError) as exc:
        raise TrackingError(
            f"Fold metrics: expected integer fold numbers as keys / index, received {fold!r}. "
            "Fix: index the per-fold table by fold number (0, 1, 2, ...)."
        ) from exc
    if step != fold:
        raise TrackingError(f"Fold metrics: fold number {fold!r} is not an integer.")
    return step


def _parent(artifact_file: str) -> str | None:
    parent = Path(artifact_file).parent.as_posix()
    return None if parent in ("", ".") else parent


def _plain(value: Any) -> Any:
    """Nested containers of YAML-safe scalars (numpy scalars, Paths, dates become str or float)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return str(value)
