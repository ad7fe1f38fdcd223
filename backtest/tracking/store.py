"""The MLflow store: the ``tracking`` config, the URI it resolves to, where artifacts go, and creating
the schema and the experiment once before parallel jobs start.

``tracking.uri`` may be

- unset: ``sqlite:///<project dir>/mlruns.db`` with artifacts in ``<project dir>/mlartifacts``;
- another SQLite file ``sqlite:////abs/path.db`` (a relative ``sqlite:///x.db`` is resolved against the
  project dir, never against the current directory, which differs between Hydra jobs); its artifacts go
  to ``mlartifacts/`` next to the database file;
- a database server (``postgresql://user:pw@host/db``, ``mysql://...``): artifacts default to
  ``<project dir>/mlartifacts`` unless ``artifact_location`` is given (an ``s3://`` bucket for a team);
- an MLflow server (``http://host:5000``): the server decides where artifacts go
  (``mlflow server --artifacts-destination ...``). A server behind a login takes
  ``http://user:password@host:5000``: the credentials are moved out of the URI into MLflow's
  ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` environment variables of this process
  (:func:`resolve_tracking_uri`), so that the URI the project keeps, prints and records has none; or set
  those variables yourself and give the plain URI.

With a SQLite store, parallel jobs race on creating the schema: call :func:`prepare_store` once in the
launching process before the jobs start (the CLI does it in its multirun callback).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import mlflow
from mlflow.exceptions import MlflowException

from backtest.errors import ConfigError, TrackingError
from backtest.tracking.redaction import redact_uri
from backtest.tracking.view import VIEW_TAG, headline_view_tag, is_current

logger = logging.getLogger(__name__)

#: What a store raises when it cannot take a write: MLflow's errors (a server gone, a locked database) and
#: the disk's (a full disk, a read-only folder). Callers outside this package catch these, never MLflow's.
STORE_ERRORS: tuple[type[Exception], ...] = (MlflowException, OSError)

#: The experiment tag MLflow 3's UI keeps for the kind of experiment (``mlflow.experimentKind``; the UI's
#: values: ``genai_development``, ``custom_model_development``, ...): this project's experiments are classic
#: model training (runs, params, metrics, artifacts), not GenAI apps. Set on creation and added to an
#: existing experiment that lacks it; a value already there is kept. The UI of MLflow 3.17 lays a page out
#: by its GenAI / model-training switch (``?workflowType=``, remembered per browser, GenAI by default)
#: rather than by this tag: the links of :mod:`backtest.tracking.ui` carry ``workflowType=machine_learning``.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

_DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
_SERVER_SCHEMES = ("http", "https", "databricks")
ENV_USERNAME = "MLFLOW_TRACKING_USERNAME"
ENV_PASSWORD = "MLFLOW_TRACKING_PASSWORD"
# http(s)://user[:password]@host...: the password is everything up to the LAST '@' that is followed by a
# host (a password that was not percent-encoded may hold '@' or '/').
_HTTP_USERINFO = re.compile(
    r"^(?P<scheme>https?)://(?P<user>[^:/@]*)(?::(?P<password>.*))?@(?P<host>[^@/?#\s]+)(?P<rest>(?:[/?#].*)?)$",
    re.IGNORECASE | re.DOTALL,
)


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
    tearsheet, plots, drift_report, pages : which reports the run writes and logs (``pages``: the signal
        and portfolio pages).
    fallback_uri : where a run goes when the store stops answering while it is recorded; None is the
        project's ``fallback/mlruns.db`` (:func:`backtest.tracking.fallback.fallback_uri`).
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
    pages: bool = True
    fallback_uri: str | None = None


def resolve_tracking_uri(uri: str | None, project_dir: Path | str) -> str:
    """Return an absolute, explicit MLflow tracking URI.

    Parameters
    ----------
    uri : the configured ``tracking.uri``; None or "" selects the project's SQLite store.
    project_dir : the project root; relative SQLite paths are resolved against it.

    Returns
    -------
    str : ``sqlite:////abs/path.db``, or ``uri`` unchanged for database stores and servers, except that
        an http(s) server URI loses its ``user:password@``: they are set as ``MLFLOW_TRACKING_USERNAME``
        / ``MLFLOW_TRACKING_PASSWORD`` in this process's environment, where MLflow reads them (see
        :func:`take_credentials`).

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
    if scheme in ("http", "https"):
        return take_credentials(uri)
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


def take_credentials(uri: str) -> str:
    """Move the credentials of an http(s) tracking URI into MLflow's environment variables.

    MLflow authenticates to a tracking server with ``MLFLOW_TRACKING_USERNAME`` and
    ``MLFLOW_TRACKING_PASSWORD`` (HTTP basic auth); it does not read them from the URI, and the URI is
    printed, logged and recorded. So ``http://user:password@host:5000`` becomes ``http://host:5000``
    and the (percent-decoded) user name and password are set in ``os.environ`` of this process (and the
    jobs it starts); they are never written anywhere. Credentials in the URI win over the variables.

    >>> take_credentials("http://127.0.0.1:5000")
    'http://127.0.0.1:5000'
    """
    match = _HTTP_USERINFO.match(uri)
    if match is None:
        return uri
    user, password = unquote(match.group("user")), match.group("password")
    plain = f"{match.group('scheme')}://{match.group('host')}{match.group('rest')}"
    for name, value in ((ENV_USERNAME, user), (ENV_PASSWORD, None if password is None else unquote(password))):
        if value is None:
            continue
        if os.environ.get(name) not in (None, value):
            logger.warning("tracking.uri carries credentials: they replace %s of the environment", name)
        os.environ[name] = value
    logger.info(
        "tracking.uri carries credentials for user %r: passed to MLflow through %s / %s (this process "
        "only, never recorded); the store is %s",
        user,
        ENV_USERNAME,
        ENV_PASSWORD,
        plain,
    )
    return plain


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
    Idempotent: an existing experiment is returned as is (its artifact location is kept); it only gains
    the :data:`EXPERIMENT_KIND_TAG` when it lacks one, so that the MLflow UI opens it as model training,
    and the headline view of its runs list (:data:`backtest.tracking.view.VIEW_TAG`) when it lacks this
    version's.

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


def _get_or_create_experiment(client: mlflow.MlflowClient, uri: str, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment_id = client.create_experiment(
                name,
                artifact_location=artifact_location,
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: headline_view_tag(now_ms())},
            )
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
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # made before the tag was set, or by another tool
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        logger.info("tagged MLflow experiment %r %s=%s", name, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    if not is_current(experiment.tags.get(VIEW_TAG)):  # made before the view, or by an older version
        client.set_experiment_tag(experiment.experiment_id, VIEW_TAG, headline_view_tag(now_ms()))
        logger.info("saved the headline view of MLflow experiment %r (%s)", name, VIEW_TAG)
    return experiment.experiment_id


def now_ms() -> int:
    """The time now in MLflow's unit, milliseconds since the epoch."""
    return int(time.time() * 1000)


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
    health = urllib.request.Request(f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/health")
    if os.environ.get(ENV_USERNAME):
        login = f"{os.environ[ENV_USERNAME]}:{os.environ.get(ENV_PASSWORD, '')}".encode()
        health.add_header("Authorization", "Basic " + base64.b64encode(login).decode("ascii"))
    try:
        with urllib.request.urlopen(health, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise TrackingError(
                f"The MLflow server at {redact_uri(uri)!r} refused the login (HTTP {exc.code}) of user "
                f"{os.environ.get(ENV_USERNAME)!r}. Expected credentials it accepts. Fix: set "
                f"{ENV_USERNAME} / {ENV_PASSWORD} in the environment (or give them in the URI, "
                "http://user:password@host:port)."
            ) from None
        logger.info("the MLflow server at %s answers /health with HTTP %s", redact_uri(uri), exc.code)
    except (urllib.error.URLError, OSError) as exc:
        raise TrackingError(
            f"The MLflow server at {redact_uri(uri)!r} does not answer ({exc}). Expected a running "
            "server. Fix: start one (make ui serves the project's store on 127.0.0.1:5000; python -m "
            "backtest.tracking.ui serve --uri sqlite:///<abs>/mlruns.db another store; make team-store a "
            "team's) or unset tracking.uri to use the local SQLite store."
        ) from exc


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "experiment"
