"""A team store: one MLflow server on PostgreSQL that every member's runs and sweeps go to.

``make team-store`` (``python -m backtest.tracking.team [--host H] [--port N] [--pgdata DIR]
[--artifacts DIR]``) starts

- the database: the PostgreSQL named by ``MLFLOW_BACKEND_STORE_URI`` (any PostgreSQL, in production;
  its password stays in the environment, never in a file of the project nor on a command line), or,
  without it, a local PostgreSQL from the ``pgserver`` wheel (``--pgdata``, default
  ``<project>/.team/pgdata``; it listens on a unix socket only), for a trial;
- ``mlflow server`` on it (one worker, job runner off), bound to 127.0.0.1 unless ``--host`` says
  otherwise, keeping the artifacts it is sent in ``--artifacts`` (default ``<project>/.team/mlartifacts``):
  clients upload them through the server (``mlflow-artifacts:/``), so they need no shared disk;

creates the experiment through the server, so that its artifacts are proxied, and prints what members
set to use it. Ctrl-C stops the server (and the local PostgreSQL). Before the server is reachable by
others, put authentication in front of it (README "Scaling out").
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from backtest import PROJECT_DIR
from backtest.errors import ConfigError, TrackingError
from backtest.tracking.redaction import redact_uri
from backtest.tracking.ui import DEFAULT_PORT, UI_HOST, UiServer, experiment_url, run_server

#: The environment variable of a production database (``postgresql://user:password@host:5432/mlflow``);
#: ``mlflow server`` reads the same one.
ENV_DATABASE = "MLFLOW_BACKEND_STORE_URI"
TEAM_DIR = PROJECT_DIR / ".team"
DATABASE = "mlflow"


@contextlib.contextmanager
def local_postgres(pgdata: Path | str) -> Iterator[str]:
    """A PostgreSQL from the ``pgserver`` wheel in ``pgdata`` (created on first use, kept after), with
    a database ``mlflow``; yields its SQLAlchemy URI (a unix socket in ``pgdata``) and stops the server
    on exit."""
    try:
        import pgserver
    except ImportError:
        raise ConfigError(
            "the local team store needs the pgserver wheel: .venv/bin/pip install -e '.[team]'\n"
            f"  or name an existing PostgreSQL: {ENV_DATABASE}=postgresql://USER@HOST/mlflow"
        ) from None
    Path(pgdata).mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(Path(pgdata).resolve(), cleanup_mode="stop")
    try:
        if DATABASE not in server.psql("SELECT datname FROM pg_database;"):
            server.psql(f"CREATE DATABASE {DATABASE};")
        yield server.get_uri(DATABASE).replace("postgresql://", "postgresql+psycopg2://", 1)
    finally:
        server.cleanup()


def database_uri(environ: dict[str, str] | os._Environ = os.environ) -> str | None:
    """The production database from :data:`ENV_DATABASE`, checked to be PostgreSQL; None when unset.

    >>> database_uri({"MLFLOW_BACKEND_STORE_URI": "postgresql://bob:pw@db/mlflow"})
    'postgresql://bob:pw@db/mlflow'
    >>> database_uri({})
    """
    uri = environ.get(ENV_DATABASE, "").strip()
    if uri and not uri.startswith("postgresql"):
        raise ConfigError(
            f"{ENV_DATABASE} must name a PostgreSQL database, received {redact_uri(uri)!r}\n"
            f"  fix: {ENV_DATABASE}=postgresql://USER:PASSWORD@HOST:5432/mlflow, or unset it "
            "for a local trial store"
        )
    return uri or None


def member_lines(server: UiServer, experiment: str) -> list[str]:
    """What a team member sets to log into the server, and where to look."""
    from backtest.tracking import prepare_store

    experiment_id = prepare_store(server.url, experiment)  # through the server: artifacts proxied
    return [
        f"team store: {server.url}  (experiment {experiment!r}: {experiment_url(server.url, experiment_id)})",
        "members run, on any machine that reaches it:",
        f"  export MLFLOW_TRACKING_URI={server.url}",
        "  .venv/bin/python -m backtest tracking=server                         # one run",
        "  .venv/bin/python -m backtest -m +study=volatility tracking=server    # a study",
    ]


def serve_team(
    *, host: str, port: int, pgdata: Path, artifacts: Path, experiment: str, allowed_hosts: str | None = None
) -> int:
    """Start the database (or use :data:`ENV_DATABASE`'s) and the server; wait until Ctrl-C."""
    production = database_uri()
    with contextlib.nullcontext(production) if production else local_postgres(pgdata) as uri:
        if production is None:
            print(f"local PostgreSQL in {pgdata} (a trial store; {ENV_DATABASE} names a production one)")
        extra = ("--allowed-hosts", allowed_hosts) if allowed_hosts else ()
        server = UiServer(uri, port=port, host=host, artifacts=artifacts, extra_args=extra)
        artifacts.mkdir(parents=True, exist_ok=True)
        return run_server(server, lambda s: member_lines(s, experiment))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m backtest.tracking.team``: the team store until Ctrl-C; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m backtest.tracking.team", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=UI_HOST, help="interface to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--pgdata",
        type=Path,
        default=TEAM_DIR / "pgdata",
        help=f"the local PostgreSQL's folder when {ENV_DATABASE} is unset",
    )
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=TEAM_DIR / "mlartifacts",
        help="where the server keeps the artifacts it is sent",
    )
    parser.add_argument(
        "--allowed-hosts",
        default=None,
        help="Host headers the server answers besides localhost and private IPs "
        "(mlflow server --allowed-hosts: mlflow.team.example,10.0.0.5:5000)",
    )
    parser.add_argument("--experiment", default="rankbacktest")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return serve_team(
            host=args.host,
            port=args.port,
            pgdata=args.pgdata,
            artifacts=args.artifacts.resolve(),
            experiment=args.experiment,
            allowed_hosts=args.allowed_hosts,
        )
    except (ConfigError, TrackingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
