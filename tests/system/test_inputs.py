"""Inputs that used to get past the checks, and secrets: each is injected for real and must end in a clear
project error (exit status 2 at the command line, no traceback) before any work, or be handled safely.

The command-line cases run ``python -m backtest`` in a subprocess; they are refused before the panel is
built, so each costs about the import time.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import backtest.engine as engine
from backtest.cli.argv import keep_secrets_off_the_command_line
from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import EngineOptions, plan_backtest, run_backtest
from backtest.errors import ConfigError, DataContractError, TrackingError
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from backtest.tracking.redaction import flatten_config, is_secret_key, redact_uri
from backtest.tracking.store import ENV_PASSWORD, ENV_USERNAME, _check_server, resolve_tracking_uri
from models.lambdarank import LambdaRankConfig, LambdaRankRanker
from tests.system.tiny_market import TINY, TINY_MARKET, main_job


def _refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, an ``error:`` line with a ``fix:`` line, no traceback; returns stderr."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "Traceback" not in err + proc.stdout and "HYDRA_FULL_ERROR" not in err, err
    assert err.count("error: ") == 1 and "\n  fix: " in err, err
    for word in words:
        assert word in err, (word, err)
    return err


# --------------------------------------------------------------------------------------------------
# Hydra's own composition errors exit 2 with one clear line


@pytest.mark.parametrize(
    "override,words",
    [
        ("backtest.retrain_evry=5", ["unknown config key backtest.retrain_evry", "fix: backtest.retrain_every=5"]),
        (
            "features=nope",
            ["unknown option features=nope", "no_volatility", " features=all ", "(or another option listed)"],
        ),
    ],
)
def test_a_composition_error_exits_2_in_one_line(tmp_path: Path, override: str, words: list[str]) -> None:
    err = _refused(main_job([override], tmp_path), *words)
    assert len(err.strip().splitlines()) == 2  # the error and its fix
    assert not (tmp_path / "run").exists()


def test_a_key_an_experiment_sets_names_the_experiment(tmp_path: Path) -> None:
    proc = main_job(
        ["experiment=smoke", "data=csv", "data.path=x.csv", "engine.feature_cache=false", "engine.checkpoints=false"],
        tmp_path,
    )
    _refused(
        proc,
        "data.n_stocks is set by experiment=smoke (conf/experiment/smoke.yaml)",
        "data=csv",
        "~data.n_stocks ~data.n_members ~data.start",
    )


@pytest.mark.parametrize(
    "override,words,fixed",
    [
        ("experiment=smok", ["unknown option experiment=smok", "leak_demo, smoke, weekly"], ["experiment=smoke"]),
        # a study runs as a sweep: the fix adds the -m it needs, so that it is one paste away
        ("+study=volatilty", ["unknown option +study=volatilty", "moneyflow"], ["-m", "+study=volatility"]),
    ],
)
def test_an_unknown_experiment_or_study_is_refused_with_the_command_that_works(
    tmp_path: Path, override: str, words: list[str], fixed: list[str]
) -> None:
    store = tmp_path / "x.db"
    err = _refused(main_job([*TINY, override, f"tracking.uri=sqlite:///{store}"], tmp_path), *words)
    assert len(err.strip().splitlines()) == 2  # the error and its fix
    assert not (tmp_path / "run").exists() and not store.exists()
    command = shlex.split(err.strip().splitlines()[1].removeprefix("  fix: "))
    assert os.path.samefile(shutil.which(command[0]) or command[0], sys.executable)  # this interpreter
    flag, override_fixed = (fixed[:-1], fixed[-1])
    assert command[1:] == [
        "-m",
        "backtest",
        *flag,
        *TINY,
        override_fixed,
        f"tracking.uri=sqlite:///{store}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    composed = [arg for i, arg in enumerate(command) if (i, arg) != (3, "-m")] + ["--cfg", "job"]  # not with -m
    shown = subprocess.run(composed, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0 and "error" not in shown.stderr, shown.stderr  # the fixed command composes


@pytest.mark.parametrize(
    "override,words",
    [
        ("seed=abc", ["seed: expected a number", "the text 'abc'", "fix: seed=42"]),
        ("data.n_stocks=abc", ["data.n_stocks: expected a number", "the text 'abc'", "fix: data.n_stocks=460"]),
        ("portfolio.top_k='5'", ["portfolio.top_k: expected a number", "the text '5'", "fix: portfolio.top_k=5"]),
        ("engine.checkpoints=yes", ["engine.checkpoints: expected true or false", "fix: engine.checkpoints=true"]),
    ],
)
def test_text_where_the_config_holds_a_number_is_refused_in_one_line(
    tmp_path: Path, override: str, words: list[str]
) -> None:
    store = tmp_path / "x.db"
    err = _refused(main_job([override, f"tracking.uri=sqlite:///{store}"], tmp_path), *words)
    assert len(err.strip().splitlines()) == 2  # the error and its fix
    assert not store.exists()


# --------------------------------------------------------------------------------------------------
# Engine options


@pytest.mark.parametrize("n_jobs", [0, -2, 1.5, True])
def test_n_jobs_other_than_minus_one_or_positive_is_refused(n_jobs) -> None:
    with pytest.raises(ConfigError, match=r"engine.n_jobs: expected -1 \(all cores\) or an integer >= 1(.|\n)*fix:"):
        EngineOptions(n_jobs=n_jobs)


def test_an_unknown_backend_is_refused_and_known_ones_pass() -> None:
    with pytest.raises(ConfigError, match=r"engine.backend: expected one of .*loky.*received 'lokky'(.|\n)*fix:"):
        EngineOptions(backend="lokky")
    for backend in ("loky", "threading", "multiprocessing"):
        EngineOptions(n_jobs=-1, backend=backend)


def _unwritable(tmp_path: Path, how: str) -> Path:
    """A cache directory this process cannot write: chmod'ed read-only, or a path under a regular file
    (which fails for root too, whom permissions do not stop)."""
    if how == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only directory; the 'under a file' case covers root")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    return blocker / "cache"


@pytest.mark.parametrize("how", ["read-only", "under a file"])
def test_an_unwritable_cache_is_refused_before_any_work(tmp_path: Path, how: str) -> None:
    root = _unwritable(tmp_path, how)
    try:
        with pytest.raises(
            ConfigError,
            match=r"engine.cache_dir: the feature cache directory .* cannot be written"
            r"(.|\n)*fix: engine.cache_dir=<a writable directory>",
        ):
            EngineOptions(feature_cache_dir=root / "features", checkpoint_dir=root / "checkpoints")
        with pytest.raises(ConfigError, match="checkpoint directory"):
            EngineOptions(checkpoint_dir=root / "checkpoints")
    finally:
        if how == "read-only":
            root.chmod(0o755)
    fine = tmp_path / "fine"
    EngineOptions(feature_cache_dir=fine / "features", checkpoint_dir=fine / "checkpoints")
    assert sorted(p.name for p in fine.iterdir()) == ["checkpoints", "features"]
    assert not any((fine / "features").iterdir())  # the probe file is gone


def test_an_unwritable_cache_exits_2_at_the_command_line(tmp_path: Path) -> None:
    root = _unwritable(tmp_path, "under a file")
    proc = main_job([f"engine.cache_dir={root}", f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"], tmp_path)
    _refused(proc, "cannot be written", "engine.feature_cache=false")
    assert not (tmp_path / "x.db").exists()  # refused before the store was touched


# --------------------------------------------------------------------------------------------------
# A supplied index benchmark (data.benchmark_path) that cannot serve, refused before the store is touched


@pytest.mark.parametrize(
    "content,words",
    [
        (None, ["data.benchmark_path: the benchmark file not found", "fix: data.benchmark_path="]),
        ("date,price\n2024-01-02,3300\n", ["the benchmark series needs one of the columns open, close"]),
        ("date,close\n2023-06-01,3300\n2023-06-02,3310\n", ["does not cover the backtest", "fix: give a close level"]),
    ],
)
def test_a_benchmark_file_that_cannot_serve_exits_2_before_any_work(
    tmp_path: Path, content: str | None, words: list[str]
) -> None:
    path = tmp_path / "csi300.csv"
    if content is not None:
        path.write_text(content)
    store = tmp_path / "x.db"
    proc = main_job([*TINY_MARKET, f"data.benchmark_path={path}", f"tracking.uri=sqlite:///{store}"], tmp_path)
    _refused(proc, *words)
    assert not store.exists()  # refused before the store was touched (and so before any model was fit)


@pytest.mark.parametrize("kind,words", [("fifo", ["a FIFO (named pipe)"]), ("device", ["a character device"])])
def test_a_data_path_that_is_not_a_regular_file_is_named_for_what_it_is(
    tmp_path: Path, kind: str, words: list[str]
) -> None:
    if kind == "fifo":
        path = tmp_path / "panel.csv"
        os.mkfifo(path)  # opening it to read would wait for a writer forever
    else:
        path = Path("/dev/zero")
    store = tmp_path / "x.db"
    proc = main_job(["data=csv", f"data.path={path}", f"tracking.uri=sqlite:///{store}"], tmp_path)
    err = _refused(proc, f"panel path {path} is ", *words, "not a regular file", "fix: data.path=")
    assert "not found" not in err
    assert not store.exists()


# --------------------------------------------------------------------------------------------------
# Universes the top-k book cannot trade in, refused before the audit and the features


FEATURES = FeatureSetSpec(name="small", indicators=("ret_5d", "vol_20d"), windows=(5,))


def _backtest(panel: pd.DataFrame, portfolio: PortfolioSpec, monkeypatch) -> None:
    def no_work(*args, **kwargs):
        raise AssertionError("expensive work started before the refusal")

    monkeypatch.setattr(engine, "audit_features", no_work)
    monkeypatch.setattr(engine, "build_features", no_work)
    monkeypatch.setattr(engine, "load_or_build_features", no_work)
    plan = plan_backtest(
        panel,
        label=LabelSpec(),
        schedule=RollingSchedule(retrain_every=20, train_window=100, valid_days=10, test_start="2022-07-01"),
        portfolio=portfolio,
    )
    run_backtest(
        plan,
        features=FEATURES,
        data_fingerprint=panel_fingerprint(panel),
        ranker_factory=lambda: LambdaRankRanker(LambdaRankConfig(num_boost_round=5, num_threads=1)),
    )


def test_a_test_period_in_which_nothing_trades_is_refused(tiny_panel: pd.DataFrame, monkeypatch) -> None:
    halted = tiny_panel.copy()
    halted.loc[halted.index.get_level_values("date") >= pd.Timestamp("2022-07-01"), "volume"] = 0.0
    with pytest.raises(DataContractError, match=r"no member trades on any day of the test period 2022-07-01 \.\. "):
        _backtest(halted, PortfolioSpec(), monkeypatch)


def test_top_k_at_least_the_universe_is_refused(tiny_panel: pd.DataFrame, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"portfolio.top_k=40 is at least the eligible universe: 40 members"):
        _backtest(tiny_panel, PortfolioSpec(top_k=40), monkeypatch)


def test_a_universe_of_one_member_is_refused(tiny_panel: pd.DataFrame, monkeypatch) -> None:
    first = tiny_panel.index.get_level_values("code").unique()[0]
    alone = tiny_panel.assign(in_universe=tiny_panel.index.get_level_values("code") == first)
    with pytest.raises(DataContractError, match="needs at least 2 members per day"):
        _backtest(alone, PortfolioSpec(top_k=1), monkeypatch)


# --------------------------------------------------------------------------------------------------
# Secrets: redaction, credentials in the tracking URI, secrets on the command line


@pytest.mark.parametrize(
    "raw,redacted",
    [
        ("postgresql://bob:pa/ss@db:5432/mlflow", "postgresql://bob:***@db:5432/mlflow"),
        ("postgresql://bob:p@ss@db:5432/mlflow", "postgresql://bob:***@db:5432/mlflow"),
        ("postgresql://bob:my pass@db:5432/mlflow", "postgresql://bob:***@db:5432/mlflow"),
        ("postgresql://bob:p@ss/w rd@db/mlflow?sslmode=require", "postgresql://bob:***@db/mlflow?sslmode=require"),
        ("mysql+pymysql://bob:hunter2@db/mlflow", "mysql+pymysql://bob:***@db/mlflow"),
        ("postgresql://bob:pw@/mlflow?host=/run/pg", "postgresql://bob:***@/mlflow?host=/run/pg"),  # unix socket
        ("postgresql://postgres:@/mlflow?host=/run/pg", "postgresql://postgres:@/mlflow?host=/run/pg"),  # none
        ("postgresql://db/mlflow?user=bob&pwd=s3cret", "postgresql://db/mlflow?user=bob&pwd=***"),
        (
            "http://h:5000/?passphrase=abc&auth=xyz&credential=c&x=1",
            "http://h:5000/?passphrase=***&auth=***&credential=***&x=1",
        ),
        ("host=db dbname=mlflow password='a b' user=bob", "host=db dbname=mlflow password=*** user=bob"),
        ("store 'postgresql://bob:pw@db/x' does not answer", "store 'postgresql://bob:***@db/x' does not answer"),
        ("http://127.0.0.1:5000/#/experiments/1", "http://127.0.0.1:5000/#/experiments/1"),
    ],
)
def test_redact_uri_hides_every_password(raw: str, redacted: str) -> None:
    assert redact_uri(raw) == redacted


@pytest.mark.parametrize(
    "key,secret",
    [
        ("db.pwd", True),
        ("ssh.passphrase", True),
        ("tracking.auth", True),
        ("tracking.credential", True),
        ("aws.credentials", True),
        ("http.authorization", True),
        ("db.pass", True),
        ("basic_auth", True),
        ("dbPwd", True),
        ("tushare.token", True),
        ("api-key", True),
        ("db.password", True),
        ("pw", True),
        ("db.pw", True),
        ("dbPw", True),
        ("model.config.extra.pw", True),
        ("passwd", True),
        ("apikey", True),
        ("secret", True),
        ("credentials", True),
        ("author", False),
        ("upward_drift", False),
        ("bypass", False),
        ("engine.audit_cutoffs", False),
        ("portfolio.top_k", False),
    ],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret
    assert (flatten_config({key: "v"})[key] == "***") is secret


def test_credentials_in_a_server_uri_go_to_mlflow_environment(monkeypatch) -> None:
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    uri = resolve_tracking_uri("http://bob:p%40ss/w rd@127.0.0.1:5000/prefix", "/tmp")
    assert uri == "http://127.0.0.1:5000/prefix"
    assert os.environ[ENV_USERNAME] == "bob" and os.environ[ENV_PASSWORD] == "p@ss/w rd"
    assert resolve_tracking_uri("https://mlflow.corp:443", "/tmp") == "https://mlflow.corp:443"


def test_a_credentialed_tracking_uri_on_the_command_line_is_taken_apart(monkeypatch) -> None:
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    argv, refused = keep_secrets_off_the_command_line(["-m", "tracking.uri=http://bob:hunter2@host:5000", "seed=1"])
    assert refused is None and argv == ["-m", "tracking.uri=http://host:5000", "seed=1"]
    assert os.environ[ENV_PASSWORD] == "hunter2"


class _LoginRequired(BaseHTTPRequestHandler):
    """A stand-in for a server behind basic auth: /health answers only with the right login."""

    login = "Basic " + base64.b64encode(b"bob:p@ss").decode()
    seen: list[str | None] = []

    def do_GET(self) -> None:  # http.server's name
        type(self).seen.append(self.headers.get("Authorization"))
        ok = self.headers.get("Authorization") == self.login
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b"OK" if ok else b"login required")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def login_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LoginRequired)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_server_check_logs_in_with_the_uri_credentials(login_server: str, monkeypatch) -> None:
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    _check_server(resolve_tracking_uri(f"http://bob:p%40ss@{login_server}", "/tmp"))  # answers: accepted
    assert _LoginRequired.seen[-1] == _LoginRequired.login
    with pytest.raises(TrackingError, match=r"refused the login \(HTTP 401\) of user 'bob'(.|\n)*MLFLOW_TRACKING"):
        _check_server(resolve_tracking_uri(f"http://bob:wrong@{login_server}", "/tmp"))


@pytest.mark.parametrize(
    "override", ["+data.token=abc123secret", "tracking.uri=postgresql://bob:abc123secret@db/mlflow"]
)
def test_a_secret_override_is_refused_before_hydra_writes_it(tmp_path: Path, override: str) -> None:
    proc = main_job(
        [override, f"tracking.uri=sqlite:///{tmp_path / 'x.db'}"] if "tracking.uri" not in override else [override],
        tmp_path,
    )
    err = _refused(proc, "fix: ", "environment")
    assert "abc123secret" not in err + proc.stdout
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not any("abc123secret" in p.read_text(errors="replace") for p in written), written
    assert not (tmp_path / "run").exists() and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize(
    "override",
    [
        "++model.config.extra={password:abc123secret}",
        "+model.config.extra={db:{pw:abc123secret}}",
        "+model.config.extra.pw=abc123secret",
        "++model.config.extra={dsn:'postgresql://bob:abc123secret@db/x'}",
    ],
)
def test_a_secret_in_an_added_key_or_a_nested_value_is_refused_before_hydra_writes_it(
    tmp_path: Path, override: str
) -> None:
    store = tmp_path / "x.db"
    err = _refused(main_job([*TINY, override, f"tracking.uri=sqlite:///{store}"], tmp_path), "fix: ", "environment")
    assert "abc123secret" not in err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not any("abc123secret" in p.read_text(errors="replace") for p in written), written
    assert not (tmp_path / "run").exists() and not store.exists()


def test_a_secret_read_from_the_environment_is_not_refused() -> None:
    argv = [
        "+data.token=${oc.env:MY_TOKEN}",
        "++model.config.extra={password:${oc.env:MY_TOKEN},num_leaves:7}",
        "data.path=/home/u/pass=1/p.csv",
        "seed=1",
    ]
    assert keep_secrets_off_the_command_line(argv) == (argv, None)
    for secret in ("tracking.password=x", "++db.pwd=x", "+tushare.api_key=x", "tracking.uri=http://h/?token=x"):
        _, refused = keep_secrets_off_the_command_line([secret])
        assert isinstance(refused, ConfigError) and "environment" in str(refused), secret


# --------------------------------------------------------------------------------------------------
# A real MLflow server behind a login (slow: the server takes about 10 s to start)


class _LoginProxy(BaseHTTPRequestHandler):
    """Basic auth in front of a real ``mlflow server``: 401 without the login, else forwarded."""

    upstream = ""
    login = "Basic " + base64.b64encode(b"bob:p@ss w/rd").decode()
    refused = 0
    forwarded = 0

    def _forward(self) -> None:
        if self.headers.get("Authorization") != self.login:
            type(self).refused += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        request = urllib.request.Request(self.upstream + self.path, data=body, method=self.command)
        for name in ("Content-Type", "Accept"):
            if self.headers.get(name):
                request.add_header(name, self.headers[name])
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, headers, payload = response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            status, headers, payload = exc.code, exc.headers, exc.read()
        type(self).forwarded += 1
        self.send_response(status)
        self.send_header("Content-Type", headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, *args) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LoginServer:
    """A real ``mlflow server`` on a SQLite store (``store``), reached through the login proxy at ``address``."""

    address: str
    store: str
    artifacts: Path


@pytest.fixture(scope="module")
def mlflow_behind_a_login(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginServer]:
    from backtest.tracking.ui import server_command, server_env

    root, port = tmp_path_factory.mktemp("login-server"), _free_port()
    server = subprocess.Popen(
        server_command(f"sqlite:///{root / 'server.db'}", port=port, artifacts=root / "artifacts"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=server_env(f"sqlite:///{root / 'server.db'}"),
    )
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _LoginProxy)
    _LoginProxy.upstream = f"http://127.0.0.1:{port}"
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        yield LoginServer(f"127.0.0.1:{proxy.server_address[1]}", f"sqlite:///{root / 'server.db'}", root / "artifacts")
    finally:
        proxy.shutdown()
        proxy.server_close()
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_a_server_behind_a_login_records_a_run_without_storing_the_password(
    mlflow_behind_a_login: LoginServer, tmp_path: Path, monkeypatch
) -> None:
    from backtest.tracking import Provenance, Tracker

    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    uri = f"http://bob:p%40ss w%2Frd@{mlflow_behind_a_login.address}"
    tracker = Tracker(uri, "login", project_dir=tmp_path)
    assert "p@ss" not in tracker.uri and "p%40ss" not in repr(tracker)
    with tracker.start_run("behind-a-login") as run:
        run.log_config({"tracking": {"uri": uri}, "seed": 1})
        run.log_provenance(Provenance("d0", "f0", leak_guard="passed", feature_audit="passed"))
        run.log_metrics({"sharpe": 0.5})
        run_id = run.run_id
    assert _LoginProxy.forwarded > 0
    stored = tracker.client.get_run(run_id)
    assert stored.info.status == "FINISHED" and stored.data.metrics["sharpe"] == 0.5
    everything = str(stored.data.params) + str(stored.data.tags)
    artifacts = mlflow_behind_a_login.artifacts
    everything += "".join(p.read_text(errors="replace") for p in artifacts.rglob("*") if p.is_file())
    assert "w rd" not in everything and "w%2Frd" not in everything and "w/rd" not in everything
    assert stored.data.params["tracking.uri"].startswith("http://bob:***@127.0.0.1:")
    # Without the login the same server refuses: the credentials were what let the run in.
    monkeypatch.setenv(ENV_PASSWORD, "wrong")
    with pytest.raises(TrackingError, match="refused the login"):
        Tracker(f"http://{mlflow_behind_a_login.address}", "login", project_dir=tmp_path)


@pytest.mark.slow
def test_sync_logs_in_with_the_credentials_of_its_uri_and_prints_no_password(
    mlflow_behind_a_login: LoginServer, tmp_path: Path
) -> None:
    from backtest.tracking import prepare_store

    fallback = f"sqlite:///{tmp_path / 'fallback.db'}"
    local = MlflowClient(fallback)
    pending = local.create_run(prepare_store(fallback, "pending"), tags={"pending_sync": "true"}, run_name="lost")
    local.log_metric(pending.info.run_id, "sharpe", 0.25)
    local.set_terminated(pending.info.run_id)
    env = {k: v for k, v in os.environ.items() if k not in (ENV_USERNAME, ENV_PASSWORD)}

    def sync(password: str) -> subprocess.CompletedProcess:
        target = f"http://bob:{password}@{mlflow_behind_a_login.address}"
        command = [sys.executable, "-m", "backtest.tracking", "sync", "--from", fallback, "--to", target]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    refused = sync("badpass123")  # the login is what the server checks: a wrong one is refused, unprinted
    assert refused.returncode == 2 and "refused the login" in refused.stderr, refused.stderr[-3000:]
    assert "badpass123" not in refused.stdout + refused.stderr
    done = sync("p%40ss w%2Frd")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 run(s) synced to http://127.0.0.1:" in done.stdout
    printed = done.stdout + done.stderr
    assert not [s for s in ("p@ss", "p%40ss", "w rd", "w%2Frd") if s in printed], printed
    server = MlflowClient(mlflow_behind_a_login.store)
    (synced,) = server.search_runs([server.get_experiment_by_name("pending").experiment_id])
    assert synced.data.tags["synced_from"] == pending.info.run_id and synced.data.metrics["sharpe"] == 0.25
    assert local.get_run(pending.info.run_id).data.tags["pending_sync"] == "false"
