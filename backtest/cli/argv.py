"""The command line before Hydra sees it: secrets are refused there, since Hydra saves every override.

Hydra writes the overrides in plain text into the run's ``.hydra/`` folder (``overrides.yaml``,
``config.yaml``). :func:`keep_secrets_off_the_command_line` takes an MLflow server's login out of
``tracking.uri`` (into MLflow's environment variables) and refuses any other secret, pointing to the
environment variable that should carry it.
"""

from __future__ import annotations

import re

from backtest.errors import ConfigError

_ENV_INTERPOLATION = re.compile(r"\s*['\"]?\$\{oc\.env:[^}]*\}['\"]?\s*")


def keep_secrets_off_the_command_line(argv: list[str]) -> tuple[list[str], ConfigError | None]:
    """Hydra writes every override in plain text into the run's ``.hydra/`` folder: refuse secrets there.

    ``tracking.uri=http://user:password@host`` is taken apart instead: the credentials go to MLflow's
    environment variables (``backtest.tracking.store.take_credentials``) and Hydra sees the plain URI.
    Any other override whose key names a secret (``+data.token=...``; an ``${oc.env:NAME}`` value is
    fine: it is saved unresolved) or whose value carries a password (``postgresql://u:pw@db``,
    ``?password=``) is refused. Returns the command line to hand to Hydra and the refusal, if any.
    """
    from backtest.tracking.redaction import is_secret_key, redact_uri

    out = list(argv)
    for i, text in enumerate(argv):
        if text.startswith("-") or "=" not in text:
            continue
        key, value = text.split("=", 1)
        key = key.lstrip("+~").split("@", 1)[0]
        if key == "tracking.uri" and re.match(r"(?i)https?://[^/?#]*@", value):
            from backtest.tracking.store import take_credentials

            out[i] = f"{text.split('=', 1)[0]}={take_credentials(value)}"
            continue
        if is_secret_key(key) and not _ENV_INTERPOLATION.fullmatch(value):
            return argv, ConfigError(
                f"the override {key}=... puts a secret on the command line; Hydra would save it in plain text in "
                "the run's .hydra/ folder (overrides.yaml, config.yaml)\n  fix: keep it in an environment variable "
                f"and read it from there, e.g. {text.split('=', 1)[0]}='${{oc.env:MY_SECRET}}' (saved unresolved); "
                "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server, TUSHARE_TOKEN for Tushare"
            )
        if redact_uri(value) != value:
            return argv, ConfigError(
                f"the override {redact_uri(text)} carries a password; Hydra would save it in plain text in the run's "
                ".hydra/ folder\n  fix: give the address without it and the password in the environment (PGPASSWORD "
                "or ~/.pgpass for PostgreSQL; MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server)"
            )
    return out, None
