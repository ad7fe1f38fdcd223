"""Experiment tracking: one MLflow run per backtest, with its config, metrics, provenance and artifacts.

This is the only module of the project that imports mlflow. Everything goes through an explicit
:class:`Tracker` (built once by the CLI and passed down) and the :class:`BacktestRun` handle it yields;
nothing relies on mlflow's global "active run", so runs of a multirun sweep cannot leak into each other.

Store
-----
``tracking.uri`` may be

- unset: ``sqlite:///<project dir>/mlruns.db`` with artifacts in ``<project dir>/mlartifacts``;
- another SQLite file ``sqlite:////abs/path.db`` (a relative ``sqlite:///x.db`` is resolved against the
  project dir, never against the current directory, which differs between Hydra jobs); its artifacts go
  to ``mlartifacts/`` next to the database file;
- a database server (``postgresql://user:pw@host/db``, ``mysql://...``): artifacts default to
  ``<project dir>/mlartifacts`` unless ``artifact_location`` is given (an ``s3://`` bucket for a team);
- an MLflow server (``http://host:5000``): the server decides where artifacts go
  (``mlflow server --artifacts-destination ...``).

With a SQLite store, parallel jobs race on creating the schema: call :func:`prepare_store` once in the
launching process before the jobs start (the CLI does it in its multirun callback).

What one run records
--------------------
============  ===============================================================================
params        the flattened resolved config, dotted keys (``model.params.learning_rate``),
              values as strings (lists as JSON), secrets redacted (:func:`redact_config`)
metrics       headline metrics at step 0 (``sharpe``, ``max_drawdown``, ...); per-fold metrics
              ``fold/<name>`` with ``step`` = fold number, so the UI draws one curve per key
tags          ``git_commit``, ``git_dirty``, ``data_fingerprint``, ``feature_fingerprint``,
              ``pkg.<name>``, ``leak_guard``, ``feature_audit``, ``comparable``, ``leak_demo``,
              ``study``, ``n_trials``, ``run_kind`` (``backtest`` or ``sweep``), ``error``
              (failed runs)
artifacts     ``config/config.yaml``, ``data/{predictions,positions,returns}.parquet``,
              ``leakage/*.json``, ``features/importance.csv``, ``reports/`` (tearsheet, plots,
              drift report); see :data:`ARTIFACT_DIRS`
============  ===============================================================================

Example
-------
>>> tracker = Tracker.from_config(TrackingConfig(), project_dir=Path("/work/main"))  # doctest: +SKIP
>>> with tracker.start_run(run_name="lambdarank", study="ablation") as run:           # doctest: +SKIP
...     run.log_config(resolved_config)
...     run.log_provenance(Provenance("d41d8cd9", "a3f2c1", leak_guard="passed", feature_audit="passed"))
...     run.log_fold_metrics({1: {"ic": 0.03}, 2: {"ic": 0.01}})
...     run.log_metrics({"sharpe": 0.7, "max_drawdown": -0.25})
...     run.log_artifact(report_dir, "reports")
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

# Telemetry would try to reach the network (there is none here); it must be off before mlflow loads.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Reading a run's artifacts back (a sweep's study table) must not draw progress bars into the output.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow.entities import Metric, Param, RunStatus, RunTag, ViewType  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

from backtest.errors import ConfigError, TrackingError, preview  # noqa: E402

logger = logging.getLogger(__name__)

__all__ = [
    "ARTIFACT_DIRS",
    "BacktestRun",
    "Provenance",
    "Tracker",
    "TrackingConfig",
    "default_artifact_location",
    "flatten_config",
    "prepare_store",
    "provenance_tags",
    "redact_config",
    "resolve_tracking_uri",
    "study_runs",
]

# MLflow's limits (mlflow.utils.validation): per log_batch call and per value.
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_PARAM_VALUE_CHARS = 6000
MAX_TAG_VALUE_CHARS = 8000

#: Where each kind of artifact goes inside a run (``artifact_path`` arguments).
ARTIFACT_DIRS: Mapping[str, str] = MappingProxyType(
    {
        "config": "config",  # config.yaml (redacted resolved config)
        "data": "data",  # predictions / positions / returns parquet
        "leakage": "leakage",  # purge records, feature-audit results (json)
        "features": "features",  # importance.csv, per-fold boosters
        "reports": "reports",  # tearsheet.html, equity.png, drawdown.png, drift/
    }
)

#: Packages whose versions are recorded as ``pkg.<name>`` tags.
TRACKED_PACKAGES: tuple[str, ...] = (
    "numpy",
    "pandas",
    "lightgbm",
    "torch",
    "mlflow",
    "hydra-core",
    "quantstats",
)

SECRET_KEY_PATTERN = re.compile(r"token|password|passwd|secret|api[_-]?key|credential", re.IGNORECASE)
# scheme://user:password@host -> scheme://user:***@host (the user name stays: it says who logged in).
_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<password>[^@\s/]+)@")
REDACTED = "***"

GuardStatus = Literal["passed", "failed", "disabled"]
AuditStatus = Literal["passed", "failed"]
RunKind = Literal["backtest", "sweep"]

_DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
_SERVER_SCHEMES = ("http", "https", "databricks")


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrackingConfig:
    """The ``tracking`` config group (``conf/tracking/*.yaml``).

    Attributes
    ----------
    uri : MLflow store; None means ``sqlite:///<project dir>/mlruns.db``.
    experiment : MLflow experiment name.
    artifact_location : where artifacts of a newly created experiment go (database stores only);
        None derives it from ``uri`` (see :func:`default_artifact_location`).
    run_name : name shown in the MLflow UI; None lets the CLI name the run after the model.
    study : name of the sweep / ablation this run belongs to (tag ``study``); None for one-off runs.
    parent_run_id : the sweep's parent run (opened by the launcher before the jobs start); the yaml
        reads it from ``RANKBACKTEST_PARENT_RUN_ID`` so that every job of a multirun gets it.
    n_trials : number of configurations in the study (tag ``n_trials``, the DSR's trial count); the
        yaml reads ``RANKBACKTEST_N_TRIALS``.
    tearsheet, plots, drift_report : which reports the run writes and logs.
    """

    uri: str | None = None
    experiment: str = "rankbacktest"
    artifact_location: str | None = None
    run_name: str | None = None
    study: str | None = None
    parent_run_id: str | None = None
    n_trials: int | None = None
    tearsheet: bool = True
    plots: bool = True
    drift_report: bool = True


def resolve_tracking_uri(uri: str | None, project_dir: Path | str) -> str:
    """Return an absolute, explicit MLflow tracking URI.

    Parameters
    ----------
    uri : the configured ``tracking.uri``; None or "" selects the project's SQLite store.
    project_dir : the project root; relative SQLite paths are resolved against it.

    Returns
    -------
    str : ``sqlite:////abs/path.db``, or ``uri`` unchanged for servers and database stores.

    Raises
    ------
    ConfigError : for a plain path or ``file:`` URI (MLflow 3 refuses the file store) and for an
        unknown scheme.

    Examples
    --------
    >>> resolve_tracking_uri(None, "/work/main")
    'sqlite:////work/main/mlruns.db'
    >>> resolve_tracking_uri("sqlite:///runs/x.db", "/work/main")
    'sqlite:////work/main/runs/x.db'
    """
    project_dir = Path(project_dir).resolve()
    if not uri:
        return f"sqlite:///{project_dir / 'mlruns.db'}"
    scheme = urlsplit(uri).scheme.lower()
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///"):
            raise ConfigError(
                f"tracking.uri: expected 'sqlite:///<path to .db file>', received {uri!r}. "
                f"Fix: tracking.uri=sqlite:///{project_dir / 'mlruns.db'}"
            )
        raw_path = uri[len("sqlite:///") :]
        if raw_path in ("", ":memory:"):
            raise ConfigError(
                f"tracking.uri: an in-memory SQLite store ({uri!r}) loses every run when the process ends. "
                f"Fix: tracking.uri=sqlite:///{project_dir / 'mlruns.db'}"
            )
        path = Path(raw_path)
        if not path.is_absolute():
            path = project_dir / path
            logger.info("tracking.uri %s is relative: resolved against the project dir to %s", uri, path)
        return f"sqlite:///{path.resolve()}"
    if scheme in _SERVER_SCHEMES or scheme.split("+")[0] in _DATABASE_SCHEMES:
        return uri
    if scheme in ("", "file"):
        raise ConfigError(
            f"tracking.uri: received {redact_uri(uri)!r}, a file store, which MLflow 3 refuses. "
            f"Expected sqlite:///<abs path>.db, http(s)://<server> or postgresql://<db>. "
            f"Fix: tracking.uri=sqlite:///{project_dir / 'mlruns.db'} (or leave it unset)"
        )
    raise ConfigError(
        f"tracking.uri: unknown scheme {scheme!r} in {redact_uri(uri)!r}. Expected one of sqlite, "
        f"{', '.join(_SERVER_SCHEMES)}, {', '.join(_DATABASE_SCHEMES)}."
    )


def default_artifact_location(uri: str, experiment: str, project_dir: Path | str) -> str | None:
    """Where a new experiment's artifacts go when ``tracking.artifact_location`` is not set.

    Parameters
    ----------
    uri : a resolved tracking URI (:func:`resolve_tracking_uri`).
    experiment : experiment name; artifacts of each experiment get their own folder.
    project_dir : project root, for database servers (PostgreSQL, MySQL).

    Returns
    -------
    str or None : an absolute ``file://`` URI; ``<db dir>/mlartifacts/<experiment>`` for SQLite,
        ``<project dir>/mlartifacts/<experiment>`` for other databases, None for an MLflow server
        (its ``--artifacts-destination`` decides).
    """
    scheme = urlsplit(uri).scheme.lower()
    folder = _slug(experiment)
    if scheme == "sqlite":
        root = Path(uri[len("sqlite:///") :]).parent / "mlartifacts"
    elif scheme.split("+")[0] in _DATABASE_SCHEMES:
        root = Path(project_dir).resolve() / "mlartifacts"
    else:
        return None
    return (root / folder).as_uri()


def prepare_store(
    uri: str,
    experiment_name: str,
    artifact_location: str | None = None,
    *,
    project_dir: Path | str | None = None,
) -> str:
    """Create the store's schema and the experiment once; return the experiment id.

    Call it in the launching process before multirun jobs start: jobs that find neither the SQLite
    file nor the experiment race on creating them ("table already exists", "duplicate column name").
    Idempotent: an existing experiment is returned as is (its artifact location is kept).

    Parameters
    ----------
    uri : a resolved tracking URI (:func:`resolve_tracking_uri`).
    experiment_name : the MLflow experiment.
    artifact_location : for a new experiment; None uses :func:`default_artifact_location`: the
        database file's folder (SQLite) or ``<project_dir>/mlartifacts`` (other databases).
    project_dir : project root for the default artifact location of database servers; None means
        the current directory (the launcher's, which Hydra does not change with version_base 1.3).

    Raises
    ------
    TrackingError : the store cannot be reached, or the experiment exists but is deleted.
    """
    if artifact_location is None:
        artifact_location = default_artifact_location(uri, experiment_name, project_dir or Path.cwd())
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    _check_server(uri)
    last_error: Exception | None = None
    for attempt in range(3):
        try:
            with _sqlite_creation_lock(uri):
                client = mlflow.MlflowClient(tracking_uri=uri)
                return _get_or_create_experiment(client, uri, experiment_name, artifact_location)
        except TrackingError:
            raise
        except Exception as exc:  # schema creation races surface as sqlalchemy, alembic or mlflow errors
            if not _is_creation_race(exc):
                raise TrackingError(
                    f"Cannot open the MLflow store {redact_uri(uri)!r}: {type(exc).__name__}: {exc}. "
                    "Fix: check tracking.uri (for a server: is it running?)."
                ) from exc
            last_error = exc
            logger.info("store %s: creation race (%s), retrying", redact_uri(uri), exc)
            time.sleep(0.5 * (attempt + 1))
    raise TrackingError(
        f"Could not create the MLflow store {redact_uri(uri)!r} after 3 attempts: {last_error}. "
        "Fix: create it once before starting parallel jobs (backtest.tracking.prepare_store)."
    )


def _get_or_create_experiment(
    client: mlflow.MlflowClient, uri: str, name: str, artifact_location: str | None
) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment_id = client.create_experiment(name, artifact_location=artifact_location)
            logger.info(
                "created MLflow experiment %r (id %s) in %s, artifacts in %s",
                name,
                experiment_id,
                redact_uri(uri),
                artifact_location or "the server's artifact store",
            )
            return experiment_id
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)  # another process created it meanwhile
            if experiment is None:
                raise
    if experiment.lifecycle_stage != "active":
        raise TrackingError(
            f"MLflow experiment {name!r} (id {experiment.experiment_id}) in {redact_uri(uri)!r} is deleted. "
            f"Fix: restore it (mlflow experiments restore --experiment-id {experiment.experiment_id}) "
            "or choose another tracking.experiment."
        )
    return experiment.experiment_id


def _is_creation_race(exc: Exception) -> bool:
    text = str(exc).lower()
    markers = ("already exists", "duplicate column", "database is locked", "online migration expected")
    return any(marker in text for marker in markers)


@contextlib.contextmanager
def _sqlite_creation_lock(uri: str) -> Iterator[None]:
    """Serialize schema and experiment creation of one SQLite file across the processes of a machine.

    MLflow migrates a new SQLite file on first open; two processes doing it at once corrupt the
    migration ("Online migration expected to match one row"). The lock file lives in the temp dir
    (keyed by the database path) so that the project checkout stays clean for ``git_dirty``.
    """
    if not uri.startswith("sqlite:///"):
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on prepare_store being called before parallel jobs
        yield
        return
    db_path = str(Path(uri[len("sqlite:///") :]).resolve())
    digest = hashlib.sha1(db_path.encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"rankbacktest-mlflow-{digest}.lock"
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_server(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast (instead of minutes of HTTP retries) when an MLflow server does not answer."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    health = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout_s) as response:  # noqa: S310 (http only)
            response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise TrackingError(
            f"The MLflow server at {redact_uri(uri)!r} does not answer ({exc}). Expected a running "
            "server. Fix: start one (mlflow server --backend-store-uri sqlite:///<abs>/mlruns.db "
            "--artifacts-destination <abs>/mlartifacts --host 127.0.0.1 --port 5000 --workers 1) "
            "or unset tracking.uri to use the local SQLite store."
        ) from exc


# --------------------------------------------------------------------------------------------------
# Params: flatten and redact
# --------------------------------------------------------------------------------------------------


def redact_uri(value: str) -> str:
    """Replace the password of every ``scheme://user:password@host`` in ``value`` by ``***``.

    >>> redact_uri("postgresql://bob:hunter2@db:5432/mlflow")
    'postgresql://bob:***@db:5432/mlflow'
    """
    return _URI_PASSWORD.sub(lambda m: f"{m.group('head')}:{REDACTED}@", value)


def is_secret_key(key: str) -> bool:
    """True when a (dotted) config key names a secret: token, password, secret, api_key, credential."""
    return SECRET_KEY_PATTERN.search(key) is not None


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a nested config with secrets replaced by ``***``.

    A leaf value (a list counts as one) is redacted whole when its dotted key matches
    :data:`SECRET_KEY_PATTERN` (case-insensitive, anywhere in the path: ``db.password``,
    ``tushare.token``, ``credentials.user``); keys stay visible. Strings anywhere else keep their text
    but lose URI passwords (``scheme://user:***@host``).

    Parameters
    ----------
    config : nested mappings / lists of plain values (``OmegaConf.to_container(cfg, resolve=True)``).

    Returns
    -------
    dict : the same structure, redacted; ``config`` is not modified.
    """
    return _redact(config, "")


def _redact(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):  # keep the keys visible, redact the leaves
        return {k: _redact(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if key and is_secret_key(key):
        return REDACTED
    if isinstance(value, (list, tuple)):
        return [_redact(v, key) for v in value]
    if isinstance(value, str):
        return redact_uri(value)
    return value


def flatten_config(config: Mapping[str, Any], max_chars: int = MAX_PARAM_VALUE_CHARS) -> dict[str, str]:
    """Flatten a nested config to ``{dotted.key: str(value)}``, redacted, as MLflow params.

    Parameters
    ----------
    config : nested mappings of plain values.
    max_chars : values longer than this are cut (MLflow refuses params over 6000 chars) with a
        ``...[+N chars]`` marker, and a warning is logged.

    Returns
    -------
    dict : keys in depth-first order; lists become JSON (``["a", "b"]``), None becomes ``None``,
        an empty mapping ``{}``; characters MLflow refuses in keys become ``_``.

    Examples
    --------
    >>> flatten_config({"model": {"lr": 0.05, "api_key": "abc"}, "features": ["rsi", "macd"]})
    {'model.lr': '0.05', 'model.api_key': '***', 'features': '["rsi", "macd"]'}
    """
    flat: dict[str, str] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
            return
        text = _param_text(value)
        if len(text) > max_chars:
            marker = f"...[+{len(text) - max_chars} chars]"
            logger.warning("param %s is %d chars long: cut to MLflow's limit of %d", key, len(text), max_chars)
            text = text[: max_chars - len(marker)] + marker
        flat[_metric_key(key)] = text

    walk(redact_config(config), "")
    return flat


def _param_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), default=str, ensure_ascii=False)
    return str(value)


def _metric_key(key: str) -> str:
    """Make ``key`` acceptable to MLflow (alphanumerics, ``_ - . / : space``; no ``..`` or ``//``)."""
    clean = re.sub(r"[^\w.\-/: ]", "_", key)
    clean = re.sub(r"/{2,}", "/", clean).strip("/")
    clean = re.sub(r"\.{2,}", ".", clean)
    return clean or "_"


# --------------------------------------------------------------------------------------------------
# Provenance tags
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """What a run's result depends on, and whether its leakage guards held.

    Attributes
    ----------
    data_fingerprint : hash of the loaded panel (the loader's fingerprint).
    feature_fingerprint : hash of data fingerprint + feature spec + feature code version.
    leak_guard : ``passed``, ``failed`` or ``disabled`` (purge / embargo from ``label_end``).
    feature_audit : ``passed`` or ``failed`` (future-perturbation invariance of the features).
    leak_demo : the config declares this run a leakage demonstration.
    """

    data_fingerprint: str
    feature_fingerprint: str
    leak_guard: GuardStatus
    feature_audit: AuditStatus
    leak_demo: bool = False

    def __post_init__(self) -> None:
        if self.leak_guard not in ("passed", "failed", "disabled"):
            raise ConfigError(
                f"Provenance.leak_guard: expected 'passed', 'failed' or 'disabled', received {self.leak_guard!r}."
            )
        if self.feature_audit not in ("passed", "failed"):
            raise ConfigError(
                f"Provenance.feature_audit: expected 'passed' or 'failed', received {self.feature_audit!r}."
            )

    @property
    def comparable(self) -> bool:
        """True only when both guards passed and the run is not a leak demonstration.

        A leak demonstration is excluded even when the guards pass: it exists to show a bias the
        guards may not see (survivorship, a hand-made purge), so its numbers must never be compared.
        """
        return self.leak_guard == "passed" and self.feature_audit == "passed" and not self.leak_demo


def git_state(project_dir: Path | str) -> tuple[str, str]:
    """Return ``(commit, dirty)`` of the git checkout at ``project_dir``.

    ``dirty`` is ``"true"`` when tracked files are modified or untracked, non-ignored files exist
    (SQLite journal files ``*.db-journal``, ``-wal``, ``-shm`` excepted); both are ``"unknown"``
    outside a git repository or without a git executable.
    """

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=project_dir, capture_output=True, text=True, timeout=20, check=True
        )
        return done.stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        # SQLite journals of a store inside the checkout come and go while other jobs write: not code.
        status = git("status", "--porcelain", "--untracked-files=normal", "--", ":/", *_NOT_CODE)
        dirty = "true" if status.strip() else "false"
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("no git provenance for %s: %s", project_dir, exc)
        return "unknown", "unknown"
    return commit, dirty


_NOT_CODE = tuple(f":(top,exclude,glob)**/*{suffix}" for suffix in (".db-journal", ".db-wal", ".db-shm", ".db.lock"))


def package_versions(packages: Sequence[str] = TRACKED_PACKAGES) -> dict[str, str]:
    """``{"pkg.<name>": version}`` for each installed distribution; ``"not installed"`` otherwise."""
    versions = {}
    for name in packages:
        try:
            versions[f"pkg.{name}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[f"pkg.{name}"] = "not installed"
    return versions


def provenance_tags(provenance: Provenance, project_dir: Path | str) -> dict[str, str]:
    """All provenance tags of a run, as strings.

    Returns
    -------
    dict : ``git_commit``, ``git_dirty``, ``mlflow.source.git.commit`` (shown by the UI),
        ``data_fingerprint``, ``feature_fingerprint``, ``leak_guard``, ``feature_audit``,
        ``comparable`` and ``leak_demo`` (``"true"``/``"false"``), and ``pkg.<name>``.
    """
    commit, dirty = git_state(project_dir)
    tags = {
        "git_commit": commit,
        "git_dirty": dirty,
        "data_fingerprint": provenance.data_fingerprint,
        "feature_fingerprint": provenance.feature_fingerprint,
        "leak_guard": provenance.leak_guard,
        "feature_audit": provenance.feature_audit,
        "comparable": _flag(provenance.comparable),
        "leak_demo": _flag(provenance.leak_demo),
        **package_versions(),
    }
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit
    return tags


def _flag(value: bool) -> str:
    return "true" if value else "false"


# --------------------------------------------------------------------------------------------------
# Tracker and run
# --------------------------------------------------------------------------------------------------


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
    ) -> BacktestRun:
        """Open a RUNNING run; the caller must call :meth:`BacktestRun.end`.

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
        all_tags: dict[str, str] = {"run_kind": kind}
        if parent_run_id is not None:
            self._check_parent(parent_run_id)
            all_tags["mlflow.parentRunId"] = parent_run_id
        if study is not None:
            all_tags["study"] = study
        if n_trials is not None:
            all_tags["n_trials"] = str(int(n_trials))
        all_tags.update(_tag_values(tags or {}))
        try:
            run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=run_name)
        except MlflowException as exc:
            raise TrackingError(
                f"MLflow refused to create a run in experiment {self.experiment!r} of "
                f"{redact_uri(self.uri)!r}: {exc.message}"
            ) from exc
        logger.info("MLflow run %s (%s) started in %r", run.info.run_id, run.info.run_name, self.experiment)
        return BacktestRun(self, run.info.run_id, run.info.run_name)

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
    ) -> Iterator[BacktestRun]:
        """Context manager around one run: FINISHED on success, FAILED on an exception (with an
        ``error`` tag), KILLED on KeyboardInterrupt; the exception is always re-raised.

        Parameters are those of :meth:`create_run`.
        """
        run = self.create_run(
            run_name, parent_run_id=parent_run_id, study=study, n_trials=n_trials, kind=kind, tags=tags
        )
        try:
            yield run
        except KeyboardInterrupt:
            run.end("KILLED", error="KeyboardInterrupt")
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

    def attach(self, run_id: str) -> BacktestRun:
        """A handle on an existing run of this store (e.g. a finished child of a sweep), to read its
        artifacts or log more metrics to it. Ending it is left to whoever started it."""
        return BacktestRun(self, run_id, None)

    def study_runs(
        self, study: str, *, kind: RunKind | None = "backtest", statuses: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """:func:`study_runs` of this tracker's store and experiment."""
        return study_runs(self.uri, self.experiment, study, kind=kind, statuses=statuses)

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


class BacktestRun:
    """Handle of one open MLflow run: everything logged goes to ``run_id`` explicitly.

    Made by :meth:`Tracker.start_run` / :meth:`Tracker.create_run`; not constructed directly.
    """

    def __init__(self, tracker: Tracker, run_id: str, run_name: str | None) -> None:
        self.tracker = tracker
        self.run_id = run_id
        self.run_name = run_name
        self._ended = False

    def __repr__(self) -> str:
        return f"BacktestRun(run_id={self.run_id!r}, run_name={self.run_name!r})"

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
        timestamp = _now_ms()
        entries = [Metric(_metric_key(k), _metric_value(k, v), timestamp, int(step)) for k, v in metrics.items()]
        self._log_metric_entries(entries)

    def log_fold_metrics(self, fold_metrics: Mapping[int, Mapping[str, float]] | pd.DataFrame) -> None:
        """Log per-fold metrics as ``fold/<name>`` with ``step`` = fold number, in batches of 1000.

        Parameters
        ----------
        fold_metrics : ``{fold: {name: value}}``, or a DataFrame indexed by fold number with one column
            per metric (NaN cells are skipped: a metric a fold does not have).
        """
        if isinstance(fold_metrics, pd.DataFrame):
            rows: Mapping[Any, Mapping[str, Any]] = {
                fold: {k: v for k, v in row.items() if not _is_missing(v)}
                for fold, row in fold_metrics.to_dict(orient="index").items()
            }
        else:
            rows = fold_metrics
        timestamp = _now_ms()
        entries = []
        for fold, values in rows.items():
            step = _fold_step(fold)
            for name, value in values.items():
                key = f"fold/{name}"
                entries.append(Metric(_metric_key(key), _metric_value(key, value), timestamp, step))
        self._log_metric_entries(entries)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values as strings, redacted, cut at 8000 chars), in batches of 100."""
        entries = [RunTag(_metric_key(k), v) for k, v in _tag_values(tags).items()]
        for chunk in _chunks(entries, MAX_TAGS_PER_BATCH):
            self._log_batch("tags", tags=chunk)

    def log_provenance(self, provenance: Provenance) -> dict[str, str]:
        """Set the provenance and guard tags (:func:`provenance_tags`); return them.

        Logs a warning when the run is not comparable, saying which guard is why.
        """
        tags = provenance_tags(provenance, self.tracker.project_dir)
        self.set_tags(tags)
        if not provenance.comparable:
            logger.warning(
                "run %s is tagged comparable=false (leak_guard=%s, feature_audit=%s, leak_demo=%s): "
                "its metrics must not be compared with other runs",
                self.run_id,
                provenance.leak_guard,
                provenance.feature_audit,
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
        try:
            if local_path.is_dir():
                self.tracker.client.log_artifacts(self.run_id, str(local_path), artifact_path)
            else:
                self.tracker.client.log_artifact(self.run_id, str(local_path), artifact_path)
        except MlflowException as exc:
            raise TrackingError(
                f"Could not log artifact {local_path} to run {self.run_id}: {exc.message}"
            ) from exc

    def log_config(self, config: Mapping[str, Any], artifact_file: str = "config/config.yaml") -> dict[str, str]:
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
            raise TrackingError(
                f"log_frame: artifact_file must end with .parquet or .csv, received {artifact_file!r}."
            )
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

    def load_frame(self, artifact_file: str) -> pd.DataFrame:
        """Read back a ``.parquet`` artifact written by :meth:`log_frame`."""
        with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
            try:
                path = self.tracker.client.download_artifacts(self.run_id, artifact_file, tmp)
            except (MlflowException, OSError) as exc:
                raise TrackingError(
                    f"run {self.run_id} has no readable artifact {artifact_file!r}: {exc}. Fix: read a run "
                    "made by `python -m backtest`, whose artifacts are complete."
                ) from exc
            return pd.read_parquet(path)

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
        that ended the run.
        """
        if self._ended:
            return
        self._ended = True
        try:
            if error is not None:
                self.tracker.client.set_tag(self.run_id, "error", _cut(redact_uri(error), MAX_TAG_VALUE_CHARS))
            self.tracker.client.set_terminated(self.run_id, status=RunStatus.to_string(RunStatus.from_string(status)))
            logger.info("MLflow run %s ended %s", self.run_id, status)
        except Exception as exc:  # the store may be down: report, never mask the original error
            logger.error("could not end MLflow run %s as %s: %s", self.run_id, status, exc)

    # -- internals ---------------------------------------------------------------------------------

    def _log_metric_entries(self, entries: list[Metric]) -> None:
        for chunk in _chunks(entries, MAX_METRICS_PER_BATCH):
            self._log_batch("metrics", metrics=chunk)

    def _log_batch(self, what: str, **entities: Sequence[Any]) -> None:
        try:
            self.tracker.client.log_batch(self.run_id, synchronous=True, **entities)
        except MlflowException as exc:
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

    def _log_text(self, text: str, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory(prefix="rankbacktest-artifact-") as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(text, encoding="utf-8")
            self.log_artifact(path, _parent(artifact_file))


# --------------------------------------------------------------------------------------------------
# Querying a study
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Small conversions
# --------------------------------------------------------------------------------------------------


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"...[+{len(text) - limit} chars]"
    return text[: limit - len(marker)] + marker


def _tag_values(tags: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in tags.items():
        text = REDACTED if is_secret_key(str(key)) else redact_uri(_param_text(value))
        out[str(key)] = _cut(text, MAX_TAG_VALUE_CHARS)
    return out


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


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _parent(artifact_file: str) -> str | None:
    parent = Path(artifact_file).parent.as_posix()
    return None if parent in ("", ".") else parent


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "experiment"


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
