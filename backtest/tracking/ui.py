"""Browsing the store in MLflow's UI: a lean local server and the links to the latest study.

``make ui`` (``python -m backtest.tracking.ui serve [--port N]``) starts ``mlflow server`` on the project's store
(``sqlite:///<project>/mlruns.db``, artifacts in ``<project>/mlartifacts``) bound to 127.0.0.1, with one
worker and MLflow's job execution off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``: without it MLflow 3
also starts a huey job runner and its workers, about ten processes instead of two), waits until it
answers, and prints:

- the experiment's runs, in the model-training view (``workflowType=machine_learning``: MLflow 3.17's UI
  picks the GenAI or the model-training layout from that switch, which it keeps per browser, and opens
  GenAI by default), on the experiment's headline view (``viewStateShareKey=headline``: Sharpe, its
  interval and ex best month, rank IC and its s.e., DSR, the baselines' rank IC, the feature set and
  ``comparable``, sorted by Sharpe; :mod:`backtest.tracking.view`);
- for the latest sweep (a run tagged ``run_kind=sweep`` whose child runs carry its ``study`` tag): the
  compare-runs page of its runs, and the chart of their per-fold ``fold/rank_ic`` (step = fold), one line
  per run. (In the runs list the sweep's runs are nested under its parent run: expand its row with the
  ``+`` before its charts show them.)

``python -m backtest.tracking.ui urls`` prints the same links for a server that is already running.

The images that the compare-runs page shows side by side are drawn in :mod:`backtest.reports.plots` and
logged at each run's root by :meth:`backtest.tracking.TrackedRun.log_compare_images`; this module only
serves the UI and links into it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote, urlsplit

from backtest import PROJECT_DIR
from backtest.errors import ConfigError, TrackingError
from backtest.tracking.redaction import redact_uri
from backtest.tracking.store import resolve_tracking_uri
from backtest.tracking.view import VIEW_KEY, VIEW_URL_PARAM

logger = logging.getLogger(__name__)

UI_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
#: The UI's layout switch (``?workflowType=``): ``machine_learning`` shows runs, metrics and artifacts;
#: the default ``genai`` shows traces and evaluations.
WORKFLOW_TYPE = "machine_learning"
#: Environment of the server: job execution (a huey consumer and its workers, for GenAI jobs such as
#: trace scoring) off, no telemetry (no network here).
SERVER_ENV: Mapping[str, str] = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
#: Where ``mlflow server`` reads its backend store from when ``--backend-store-uri`` is not given.
BACKEND_STORE_ENV = "MLFLOW_BACKEND_STORE_URI"
#: The per-fold metric whose chart the links open (logged as ``fold/<name>`` with step = fold).
FOLD_METRIC = "fold/rank_ic"


# -- the server ------------------------------------------------------------------------------------


def artifacts_destination(uri: str, project_dir: Path | str = PROJECT_DIR) -> Path:
    """Where the server keeps the artifacts of experiments it creates: the ``mlartifacts`` folder of
    :func:`backtest.tracking.default_artifact_location` (next to a SQLite file, else in the project).

    >>> str(artifacts_destination("sqlite:////data/runs/mlruns.db"))
    '/data/runs/mlartifacts'
    """
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :]).parent / "mlartifacts"
    return Path(project_dir).resolve() / "mlartifacts"


def server_command(
    uri: str,
    *,
    port: int = DEFAULT_PORT,
    project_dir: Path | str = PROJECT_DIR,
    workers: int = 1,
    host: str = UI_HOST,
    artifacts: Path | str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``mlflow server`` command line for ``uri`` (a database store: SQLite, PostgreSQL, ...), which
    names no store: run it with :func:`server_env` ``(uri)``, whose ``MLFLOW_BACKEND_STORE_URI`` the server
    reads, so that the database URI (and its password) is on no process's command line, where any local
    user reads it (``ps``); the server passes it on to its workers in their environment too.

    Bound to ``host`` (127.0.0.1 by default: the store is not shared beyond this machine), one worker
    (``mlflow server`` defaults to four, slow on two cores); the artifacts it serves are kept in
    ``artifacts`` (default :func:`artifacts_destination`); ``extra_args`` are more ``mlflow server``
    options.

    Raises
    ------
    ConfigError : ``uri`` is an MLflow server already (``http(s)://``): open it in the browser instead.
    """
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("http", "https", "databricks", "", "file"):
        raise ConfigError(
            f"backtest.ui serves a database store (sqlite:///..., postgresql://...), received {uri!r}. "
            "Fix: an http(s) store is a running server already: open it in the browser."
        )
    return [
        sys.executable, "-m", "mlflow", "server",
        "--artifacts-destination", str(artifacts or artifacts_destination(uri, project_dir)),
        "--host", host,
        "--port", str(int(port)),
        "--workers", str(int(workers)),
        "--uvicorn-opts", "--no-access-log",  # the links printed at start stay readable
        *extra_args,
    ]  # fmt: skip


def ui_command(uri: str, project_dir: Path | str = PROJECT_DIR) -> str:
    """How to browse the store ``uri`` in MLflow's UI, as one line to print: a server's own address; for a
    database store the command that serves it (:func:`serve`: :func:`server_command` run with
    :func:`server_env`), its URI shell-quoted, ``make ui`` for the project's own store.

    >>> ui_command("http://mlflow.team:5000")
    'http://mlflow.team:5000'
    >>> ui_command("sqlite:////data/runs/mlruns.db", project_dir="/work/project")
    'python -m backtest.tracking.ui serve --uri sqlite:////data/runs/mlruns.db'
    >>> ui_command("sqlite:////work/project/mlruns.db", project_dir="/work/project")
    'make ui'
    """
    if urlsplit(uri).scheme.lower() in ("http", "https", "databricks"):
        return redact_uri(uri)
    if uri == resolve_tracking_uri(None, project_dir):
        return "make ui"
    return f"python -m backtest.tracking.ui serve --uri {shlex.quote(redact_uri(uri))}"  # pasted into a shell


def server_env(uri: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of :func:`server_command`: ``environ`` (default: this process's) with :data:`SERVER_ENV`
    on top and the store ``uri`` in :data:`BACKEND_STORE_ENV` (never on a command line)."""
    env = dict(os.environ if environ is None else environ)
    env.update(SERVER_ENV)
    env[BACKEND_STORE_ENV] = uri
    return env


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (psutil), sorted; [] when ``pid`` is gone."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return sorted([pid, *(child.pid for child in children)])


@dataclass
class UiServer:
    """A local ``mlflow server`` on ``uri``; a context manager that stops it (and its children) on exit::

    with UiServer("sqlite:////tmp/x/mlruns.db", port=5123) as server:
        print(server.url, server.processes())  # http://127.0.0.1:5123 [pid of mlflow server, of uvicorn]
    """

    uri: str
    port: int = DEFAULT_PORT
    project_dir: Path | str = PROJECT_DIR
    log_path: Path | None = None
    host: str = UI_HOST
    artifacts: Path | str | None = None  # None: artifacts_destination(uri, project_dir)
    extra_args: Sequence[str] = ()  # more mlflow server options
    process: subprocess.Popen | None = field(default=None, init=False)
    _output: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """Where this machine reaches the server (127.0.0.1 when it listens on every interface)."""
        return f"http://{UI_HOST if self.host in ('0.0.0.0', '::') else self.host}:{self.port}"

    def start(self, timeout_s: float = 120.0) -> UiServer:
        """Start the server and wait until ``/health`` answers.

        Raises
        ------
        TrackingError : the port is taken, or the server exited or did not answer within ``timeout_s``; a
            one-line message with the fix, the store's password redacted.
        """
        if _answers(f"{self.url}/health"):
            raise TrackingError(
                f"Something already answers on {self.url}. Fix: stop it, or pick another port (UI_PORT=5001)."
            )
        command = server_command(
            self.uri,
            port=self.port,
            project_dir=self.project_dir,
            host=self.host,
            artifacts=self.artifacts,
            extra_args=self.extra_args,
        )
        self._output = open(self.log_path, "ab") if self.log_path else None
        self.process = subprocess.Popen(
            command, env=server_env(self.uri), stdout=self._output, stderr=self._output, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.stop()
                why = f"its log {self.log_path} says why" if self.log_path else "its output above says why"
                raise TrackingError(
                    redact_uri(
                        f"mlflow server on {self.uri} exited with code {code} before answering on {self.url} "
                        f"({why}). Fix: free port {self.port} or pick another (--port), and check that "
                        "the store is reachable."
                    )
                )
            if _answers(f"{self.url}/health"):
                return self
            time.sleep(0.5)
        self.stop()
        raise TrackingError(
            redact_uri(
                f"mlflow server on {self.uri} did not answer on {self.url}/health within {timeout_s:.0f} s. "
                "Fix: check that the store is reachable, then start it again."
            )
        )

    def processes(self) -> list[int]:
        """The server's process ids: ``mlflow server`` and everything it started."""
        return process_tree(self.process.pid) if self.process is not None else []

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the server's process group (``mlflow server`` forwards it to uvicorn), SIGKILL
        after ``timeout_s``. Idempotent."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait(timeout_s)
            _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group, if any
        if self._output is not None:
            self._output.close()
            self._output = None

    def __enter__(self) -> UiServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the server was started in its own session: its group id is its pid
    except (ProcessLookupError, PermissionError):
        pass


def free_port(host: str = UI_HOST) -> int:
    """A TCP port that nothing listens on at ``host`` now (the system's choice), for a server of one's own."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _answers(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


# -- the links -------------------------------------------------------------------------------------


def experiment_url(base_url: str, experiment_id: str) -> str:
    """The experiment's runs list in the model-training view, opened on its headline view (the columns of
    :mod:`backtest.tracking.view`, sorted by Sharpe).

    >>> experiment_url("http://127.0.0.1:5000", "1")
    'http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=headline'
    """
    return (
        f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType={WORKFLOW_TYPE}"
        f"&{VIEW_URL_PARAM}={VIEW_KEY}"
    )


def compare_url(base_url: str, run_ids: Sequence[str], experiment_ids: Sequence[str]) -> str:
    """The compare-runs page of ``run_ids`` (the UI's ``/compare-runs?runs=[...]&experiments=[...]``,
    JSON lists, percent-encoded so that a terminal keeps the link whole).

    >>> compare_url("http://127.0.0.1:5000", ["a1", "b2"], ["1"])
    'http://127.0.0.1:5000/#/compare-runs?runs=%5B%22a1%22%2C%22b2%22%5D&experiments=%5B%221%22%5D&workflowType=machine_learning'
    """
    return (
        f"{base_url.rstrip('/')}/#/compare-runs?runs={_json_param(run_ids)}"
        f"&experiments={_json_param(experiment_ids)}&workflowType={WORKFLOW_TYPE}"
    )


def metric_url(base_url: str, run_ids: Sequence[str], experiment_ids: Sequence[str], metric: str) -> str:
    """The chart page of one metric over its steps for ``run_ids``, one line per run (the UI's
    ``/metric/?runs=[...]&metric="key"&...``: for ``fold/<name>`` the x axis is the fold number).

    >>> metric_url("http://h", ["a"], ["1"], "fold/rank_ic")  # doctest: +ELLIPSIS
    'http://h/#/metric/?runs=%5B%22a%22%5D&metric=%22fold%2Frank_ic%22&experiments=%5B%221%22%5D&plot_metric_keys=...'
    """
    return (
        f"{base_url.rstrip('/')}/#/metric/?runs={_json_param(run_ids)}&metric={_json_param(metric)}"
        f"&experiments={_json_param(experiment_ids)}&plot_metric_keys={_json_param([metric])}"
        f"&plot_layout={_json_param({})}&x_axis=step&y_axis_scale=linear&line_smoothness=1&show_point=true"
        f"&deselected_curves={_json_param([])}&last_linear_y_axis_range={_json_param([])}"
        f"&workflowType={WORKFLOW_TYPE}"
    )


def run_url(base_url: str, experiment_id: str, run_id: str, artifact: str | None = None) -> str:
    """A run's page: its artifacts tab, opened at ``artifact`` when given.

    >>> run_url("http://127.0.0.1:5000", "1", "ab", "reports/tearsheet.html")
    'http://127.0.0.1:5000/#/experiments/1/runs/ab/artifactPath/reports/tearsheet.html?workflowType=machine_learning'
    """
    base = f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return (f"{base}/artifactPath/{artifact}" if artifact else f"{base}/artifacts") + f"?workflowType={WORKFLOW_TYPE}"


def run_charts_url(base_url: str, experiment_id: str, run_id: str) -> str:
    """A run's page at its metric charts: the per-fold metrics (``fold/<name>``) over the folds.

    >>> run_charts_url("http://127.0.0.1:5000", "1", "ab")
    'http://127.0.0.1:5000/#/experiments/1/runs/ab/model-metrics?workflowType=machine_learning'
    """
    return (
        f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}/model-metrics?workflowType={WORKFLOW_TYPE}"
    )


def _json_param(value: object) -> str:
    return quote(json.dumps(value, separators=(",", ":")), safe="")


@dataclass(frozen=True)
class Study:
    """A sweep's parent run and its child runs (oldest first)."""

    name: str
    parent_run_id: str
    parent_status: str
    run_ids: tuple[str, ...]
    run_names: tuple[str, ...]


@dataclass(frozen=True)
class UiLinks:
    """Where to look in the UI: the experiment, and the latest study when there is one."""

    base_url: str
    experiment: str
    experiment_id: str | None
    study: Study | None

    @property
    def experiment_url(self) -> str | None:
        return None if self.experiment_id is None else experiment_url(self.base_url, self.experiment_id)

    @property
    def compare_url(self) -> str | None:
        if self.study is None or self.experiment_id is None:
            return None
        return compare_url(self.base_url, self.study.run_ids, [self.experiment_id])

    @property
    def fold_chart_url(self) -> str | None:
        """The study's ``fold/rank_ic`` per fold, one line per run."""
        if self.study is None or self.experiment_id is None:
            return None
        return metric_url(self.base_url, self.study.run_ids, [self.experiment_id], FOLD_METRIC)

    def lines(self) -> list[str]:
        """What ``make ui`` prints."""
        if self.experiment_id is None:
            return [f"experiment {self.experiment!r}: not in this store yet (run a backtest: make run)"]
        out = [f"experiment {self.experiment!r} (backtests by Sharpe): {self.experiment_url}"]
        if self.study is None:
            out.append("latest study: none yet (a sweep makes one: .venv/bin/python -m backtest -m ...)")
            return out
        study = self.study
        out += [
            f"latest study {study.name!r} (sweep run {study.parent_run_id}, {study.parent_status}, "
            f"{len(study.run_ids)} runs: {', '.join(study.run_names)}):",
            f"  compare runs: {self.compare_url}",
            f"  {FOLD_METRIC} per fold: {self.fold_chart_url}",
        ]
        return out


def study_filter(study: str) -> str:
    """The runs-list search of a study's runs.

    >>> study_filter("top_k")
    "tags.study = 'top_k' and tags.run_kind = 'backtest'"
    """
    quoted = study.replace("\\", "\\\\").replace("'", "\\'")
    return f"tags.study = '{quoted}' and tags.run_kind = 'backtest'"


def latest_study(client: object, experiment_id: str, *, max_sweeps: int = 20) -> Study | None:
    """The latest sweep of the experiment that has child runs: its parent run (``run_kind=sweep``) and
    the runs nested under it (or, for runs copied without their nesting, the ``backtest`` runs with its
    ``study`` tag). None when the experiment has no such sweep."""
    sweeps = client.search_runs(  # type: ignore[attr-defined]
        [experiment_id],
        filter_string="tags.run_kind = 'sweep'",
        max_results=max_sweeps,
        order_by=["attributes.start_time DESC"],
    )
    for parent in sweeps:
        children = _search_all(client, experiment_id, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        name = parent.data.tags.get("study")
        if not children and name:
            children = _search_all(client, experiment_id, study_filter(name))
        if children:
            children.sort(key=lambda run: (run.info.start_time or 0, run.info.run_id))
            return Study(
                name=name or parent.info.run_name or parent.info.run_id,
                parent_run_id=parent.info.run_id,
                parent_status=parent.info.status,
                run_ids=tuple(run.info.run_id for run in children),
                run_names=tuple(run.info.run_name or run.info.run_id for run in children),
            )
    return None


def _search_all(client: object, experiment_id: str, filter_string: str) -> list:
    runs: list = []
    page_token = None
    while True:
        page = client.search_runs(  # type: ignore[attr-defined]
            [experiment_id], filter_string=filter_string, max_results=1000, page_token=page_token
        )
        runs.extend(page)
        page_token = page.token
        if not page_token:
            return runs


def ui_links(uri: str, experiment: str, base_url: str) -> UiLinks:
    """The links of ``experiment`` in the store ``uri``, for a UI served at ``base_url``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None or found.lifecycle_stage != "active":
        return UiLinks(base_url, experiment, None, None)
    return UiLinks(base_url, experiment, found.experiment_id, latest_study(client, found.experiment_id))


# -- command line ----------------------------------------------------------------------------------


def _default_port() -> int:
    value = os.environ.get("UI_PORT", "")
    return int(value) if value.strip() else DEFAULT_PORT


def _store(uri: str | None, experiment: str) -> str:
    from backtest.tracking import prepare_store, resolve_tracking_uri

    resolved = resolve_tracking_uri(uri, PROJECT_DIR)
    prepare_store(resolved, experiment, project_dir=PROJECT_DIR)  # the schema, the experiment, its kind tag
    return resolved


def serve(uri: str | None, experiment: str, port: int) -> int:
    """Start the server on the store (the project's by default), print the links, and wait until Ctrl-C
    (or SIGTERM)."""
    resolved = _store(uri, experiment)
    return run_server(UiServer(resolved, port=port), lambda server: ui_links(resolved, experiment, server.url).lines())


def run_server(server: UiServer, lines: Callable[[UiServer], Sequence[str]]) -> int:
    """Start ``server``, print its address and ``lines(server)``, and wait until Ctrl-C or SIGTERM
    (0) or until the server exits (1)."""
    destination = server.artifacts or artifacts_destination(server.uri, server.project_dir)
    print(f"starting mlflow server on {redact_uri(server.uri)} (artifacts in {destination}) ...", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(f"MLflow UI: {server.url}  ({len(server.processes())} processes; Ctrl-C stops it)")
        for line in lines(server):
            print(line)
        sys.stdout.flush()
        while server.process is not None and server.process.poll() is None:
            time.sleep(1.0)
        print("mlflow server stopped", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m backtest.tracking.ui serve|urls``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m backtest.tracking.ui", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "start a local MLflow UI on the store and print its links"),
        ("urls", "print the links for a UI already running on --port"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--port", type=int, default=_default_port(), help="default: $UI_PORT or 5000")
        sub.add_argument("--uri", default=None, help="tracking store; default: the project's sqlite store")
        sub.add_argument("--experiment", default="rankbacktest")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return serve(args.uri, args.experiment, args.port)
        resolved = _store(args.uri, args.experiment)
        for line in ui_links(resolved, args.experiment, f"http://{UI_HOST}:{args.port}").lines():
            print(line)
        return 0
    except (ConfigError, TrackingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
