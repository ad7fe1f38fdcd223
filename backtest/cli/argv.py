"""The command line before Hydra sees it: secrets are refused there, since Hydra saves every override;
and the command line as a fix prints it.

Hydra writes the overrides in plain text into the run's ``.hydra/`` folder (``overrides.yaml``,
``config.yaml``). :func:`keep_secrets_off_the_command_line` takes an MLflow server's login out of
``tracking.uri`` (into MLflow's environment variables) and refuses any other secret, pointing to the
environment variable that should carry it. :func:`main_job_command` writes a command line to paste into
a shell as it is.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep
from hydra.errors import HydraException

from backtest.errors import ConfigError

_ENV_INTERPOLATION = re.compile(r"\s*['\"]?\$\{oc\.env:[^}]*\}['\"]?\s*")


def keep_secrets_off_the_command_line(argv: list[str]) -> tuple[list[str], ConfigError | None]:
    """Hydra writes every override in plain text into the run's ``.hydra/`` folder: refuse secrets there.

    ``tracking.uri=http://user:password@host`` is taken apart instead: the credentials go to MLflow's
    environment variables (``backtest.tracking.store.take_credentials``) and Hydra sees the plain URI.
    Any other override whose key names a secret (``+data.token=...``; an ``${oc.env:NAME}`` value is
    fine: it is saved unresolved) or whose value carries a password (``postgresql://u:pw@db``,
    ``?password=``) is refused, whether it sets, adds (``+``, ``++``) or sweeps the key, and so is a secret
    inside a mapping or list value (``++model.config.extra={password:x}``). Returns the command line to
    hand to Hydra and the refusal, if any.
    """
    from backtest.tracking.redaction import is_secret_key, redact_uri

    out = list(argv)
    for i, text in enumerate(argv):
        if text.startswith("-") or "=" not in text:
            continue
        written, value = text.split("=", 1)
        key = written.lstrip("+~").split("@", 1)[0]
        if key == "tracking.uri" and re.match(r"(?i)https?://[^/?#]*@", value):
            from backtest.tracking.store import take_credentials

            out[i] = f"{written}={take_credentials(value)}"
            continue
        for leaf_key, leaf in _leaves(key, _parsed_value(text, value)):
            if is_secret_key(leaf_key) and not _ENV_INTERPOLATION.fullmatch(leaf):
                prefix = written[: len(written) - len(written.lstrip("+~"))] or "+" * (leaf_key != key)
                return argv, ConfigError(
                    f"the override {key}=... puts a secret ({leaf_key}) on the command line; Hydra would save it in "
                    "plain text in the run's .hydra/ folder (overrides.yaml, config.yaml)\n  fix: keep it in an "
                    f"environment variable and read it from there, e.g. {prefix}{leaf_key}='${{oc.env:MY_SECRET}}' "
                    "(saved unresolved); MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server, "
                    "TUSHARE_TOKEN for Tushare"
                )
            if redact_uri(leaf) != leaf:
                return argv, ConfigError(
                    f"the override {written}=... carries a password ({leaf_key}={redact_uri(leaf)}); Hydra would save "
                    "it in plain text in the run's .hydra/ folder\n  fix: give the address without it and the "
                    "password in the environment (PGPASSWORD or ~/.pgpass for PostgreSQL; MLFLOW_TRACKING_USERNAME / "
                    "MLFLOW_TRACKING_PASSWORD for an MLflow server)"
                )
    return out, None


def _parsed_value(text: str, value: str) -> Any:
    """The value of the override ``text`` as Hydra reads it (a mapping, a list, a sweep's choices), or
    ``value`` as written when it does not parse (Hydra then refuses it before it writes anything)."""
    try:
        parsed = OverridesParser.create().parse_override(text).value()
    except HydraException:
        return value
    return list(parsed.list) if isinstance(parsed, ChoiceSweep) else parsed


def _leaves(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """Every text inside ``value`` with its dotted key (a list's items keep the list's key).

    >>> list(_leaves("model.config.extra", {"password": "x", "depth": 3, "urls": ["a"]}))
    [('model.config.extra.password', 'x'), ('model.config.extra.depth', '3'), ('model.config.extra.urls', 'a')]
    """
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(key, v)
    else:
        yield key, "" if value is None else str(value)


def main_job_command(args: Sequence[str], python: str | None = None) -> str:
    """``python -m backtest ARGS`` as one shell line that works as it is: each argument shell-quoted, and the
    interpreter this job runs on (``python`` when that is what PATH finds, else its path: relative to the
    current directory inside it, as a project's ``.venv/bin/python``).

    >>> main_job_command(["-m", "+study=volatility"], python="python")
    'python -m backtest -m +study=volatility'
    >>> main_job_command(["data.path=/data/my panel.parquet"], python=".venv/bin/python")
    ".venv/bin/python -m backtest 'data.path=/data/my panel.parquet'"
    """
    return shlex.join([python or _interpreter(), "-m", "backtest", *args])


def _interpreter() -> str:
    found = shutil.which("python")
    if found and os.path.abspath(found) == os.path.abspath(sys.executable):
        return "python"
    relative = os.path.relpath(sys.executable)
    return relative if not relative.startswith("..") else sys.executable
