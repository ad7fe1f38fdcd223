"""Secrets never reach the store: redaction of config values, URIs and tags, and MLflow-safe params.

A config leaf is redacted whole when its dotted key names a secret (:data:`SECRET_KEY_PATTERN`); any
other string keeps its text but loses URI passwords (``scheme://user:***@host``) and the values of
secret parameters (``?password=***``, ``pwd=***``). Params are the flattened resolved config
(:func:`flatten_config`), cut at MLflow's value limit.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

# MLflow's limits per value (mlflow.utils.validation).
MAX_PARAM_VALUE_CHARS = 6000
MAX_TAG_VALUE_CHARS = 8000

# A key names a secret when it contains one of the long words anywhere (``db_password``, ``tushareToken``,
# ``credentials``), or one of the short words ``pw``, ``pwd``, ``pass``, ``auth`` as a word of its own
# (``db.pw``, ``basic_auth``, ``dbPass``) so that ``author``, ``bypass`` or ``upward`` stay visible.
SECRET_KEY_PATTERN = re.compile(
    r"(?i:token|passw(?:or)?d|passphrase|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential"
    r"|authorization)"
    r"|(?:(?<![A-Za-z])(?i:pwd?|pass|auth)|(?<=[a-z])(?:Pwd?|Pass|Auth))(?![a-z])"
)
# scheme://user:password@host -> scheme://user:***@host (the user name stays: it says who logged in). A
# password may hold '/', '@' or spaces when it was not percent-encoded: the LAST '@' that is followed by
# a host (no '@' or space up to the next '/', '?', '#', quote or the end; none for a unix socket,
# ``postgresql://bob:pw@/mlflow?host=/run/pg``) separates it from the host. It
# never runs past a line end, a quote or another '://', so that a message quoting the URI keeps the rest.
_URI_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"`]*)"
    r":(?P<password>(?:(?!://)[^\n'\"`])+)"
    r"@(?P<host>[^@/?#\s'\"`]*)(?=[/?#\s'\"`,;)]|$)"
)
# key=value pairs of a query string (?password=x&pwd=y) or of a keyword DSN (host=db password=x).
_PARAMETER = re.compile(
    r"(?P<head>(?:^|(?<=[?&;\s]))(?P<key>[A-Za-z_][\w.\-]*)\s*=\s*)"
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^&;\s'\"`]+)"
)
REDACTED = "***"


def redact_uri(value: str) -> str:
    """Hide the passwords in ``value``: of every ``scheme://user:password@host`` and every secret
    ``key=value`` parameter (query string or keyword DSN; keys as :func:`is_secret_key`).

    >>> redact_uri("postgresql://bob:hunter2@db:5432/mlflow")
    'postgresql://bob:***@db:5432/mlflow'
    >>> redact_uri("postgresql://bob:p@ss/w rd@db:5432/mlflow?sslmode=require&pwd=x")
    'postgresql://bob:***@db:5432/mlflow?sslmode=require&pwd=***'
    """
    value = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}:{REDACTED}@{m.group('host')}", value)
    return _PARAMETER.sub(
        lambda m: f"{m.group('head')}{REDACTED}" if is_secret_key(m.group("key")) else m.group(0), value
    )


def is_secret_key(key: str) -> bool:
    """True when a (dotted) config key names a secret: token, password / passwd / pwd / pw / pass,
    passphrase, secret, api_key, access_key, private_key, credential(s), auth / authorization.

    >>> [is_secret_key(k) for k in ("db.pwd", "tracking.auth", "ssh.passphrase", "author", "engine.n_jobs")]
    [True, True, True, False, False]
    """
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
        text = param_text(value)
        if len(text) > max_chars:
            marker = f"...[+{len(text) - max_chars} chars]"
            logger.warning("param %s is %d chars long: cut to MLflow's limit of %d", key, len(text), max_chars)
            text = text[: max_chars - len(marker)] + marker
        flat[metric_key(key)] = text

    walk(redact_config(config), "")
    return flat


def param_text(value: Any) -> str:
    """A config value as an MLflow param's text: lists as JSON, a mapping (flattened elsewhere) as ``{}``."""
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), default=str, ensure_ascii=False)
    return str(value)


def metric_key(key: str) -> str:
    """Make ``key`` acceptable to MLflow (alphanumerics, ``_ - . / : space``; no ``..`` or ``//``)."""
    clean = re.sub(r"[^\w.\-/: ]", "_", key)
    clean = re.sub(r"/{2,}", "/", clean).strip("/")
    clean = re.sub(r"\.{2,}", ".", clean)
    return clean or "_"


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with a marker that says how many were cut."""
    if len(text) <= limit:
        return text
    marker = f"...[+{len(text) - limit} chars]"
    return text[: limit - len(marker)] + marker


def tag_values(tags: Mapping[str, Any]) -> dict[str, str]:
    """Tags as MLflow stores them: text, secrets redacted, each cut to MLflow's tag length."""
    out = {}
    for key, value in tags.items():
        text = REDACTED if is_secret_key(str(key)) else redact_uri(param_text(value))
        out[str(key)] = cut_text(text, MAX_TAG_VALUE_CHARS)
    return out
