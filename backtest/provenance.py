"""Provenance: what a run's result depends on (data, features, code, packages) and its guard verdicts.

Plain values and a git query; no tracking library. :mod:`backtest.tracking` turns
:func:`provenance_tags` into the run's tags, and the verdicts come from :mod:`backtest.leakage`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from backtest.errors import ConfigError
from backtest.leakage import GUARD_STATUSES, GuardStatus, is_comparable

logger = logging.getLogger(__name__)

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

CodeScope = Literal["result", "features"]

#: What each code fingerprint covers: source folders (their ``*.py`` files, recursively), the files and
#: folders inside them that are left out, and the packages whose versions are hashed with them.
#:
#: ``result`` keys the fold checkpoints: every module that can change a fold's scores or the metrics. Left
#: out are the modules that record, render or launch a result and compute none of its numbers: the
#: tracking package (the MLflow store), ``reports/`` (tearsheet, plots, drift report, summary, all drawn
#: from a finished result), ``cli/`` and ``record.py`` (composition and artifact logging; every value
#: they hand the engine is in the run key), ``cache.py`` (the cache command), this module (tags) and the
#: ``__main__`` launchers; ``data/tushare_download.py`` only fetches files, which the data fingerprint covers.
#: ``features`` keys the feature cache: the feature code and the data layer it reads the panel through
#: (tradability, wide grids, calendar), so a change to a model or to the engine keeps cached features.
CODE_SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "result": (
        ("backtest", "models"),
        ("backtest/tracking/", "backtest/reports/", "backtest/cli/", "backtest/record.py", "backtest/cache.py",
         "backtest/provenance.py", "backtest/__main__.py", "backtest/data/tushare_download.py"),
        ("numpy", "pandas", "scipy", "lightgbm", "torch"),
    ),
    "features": (
        ("backtest/features", "backtest/data"),
        ("backtest/data/tushare_download.py",),
        ("numpy", "pandas", "scipy"),
    ),
}

from backtest import PROJECT_DIR as _PROJECT_DIR  # noqa: E402


@dataclass(frozen=True)
class Provenance:
    """What a run's result depends on, and the verdicts of its leakage guards.

    Attributes
    ----------
    data_fingerprint : hash of the loaded panel (the loader's fingerprint).
    feature_fingerprint : hash of data fingerprint + feature spec + feature code version.
    leak_guard : ``passed``, ``failed`` or ``disabled`` (purge / embargo from ``label_end``).
    feature_audit : ``passed``, ``failed`` or ``disabled`` (future-perturbation invariance of the features).
    leak_demo : the config declares this run a leakage demonstration (tag ``leak_demo``).
    code_fingerprint : :func:`code_fingerprint` of the process that computed the result.
    """

    data_fingerprint: str
    feature_fingerprint: str
    leak_guard: GuardStatus
    feature_audit: GuardStatus
    leak_demo: bool = False
    code_fingerprint: str = ""

    def __post_init__(self) -> None:
        for name in ("leak_guard", "feature_audit"):
            value = getattr(self, name)
            if value not in GUARD_STATUSES:
                raise ConfigError(
                    f"Provenance.{name}: expected one of {', '.join(GUARD_STATUSES)}, received {value!r}."
                )

    @property
    def comparable(self) -> bool:
        """:func:`backtest.leakage.is_comparable`: both guards passed, nothing switched off."""
        return is_comparable(self.leak_guard, self.feature_audit)


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


@functools.cache
def code_fingerprint(scope: CodeScope = "result", root: Path | str | None = None) -> str:
    """Hash of the source that can change a result, and of the result-relevant package versions.

    Computed once per process and scope (cheap: the ``*.py`` files are hashed, not the git
    commit, because a tree can be dirty). It keys the fold checkpoints (``"result"``) and the feature
    cache (``"features"``), so that changed code never resumes from, or loads, what older code computed;
    :data:`CODE_SCOPES` lists what each scope covers and what it leaves out, and why.

    Parameters
    ----------
    scope : ``"result"`` (engine, models, features, labels, portfolio, metrics, ...) or ``"features"``.
    root : the project directory holding ``backtest/`` and ``models/`` (default: this installation's).

    Returns
    -------
    str : 16 hex digits; the same for the same sources, Python minor version and package versions.
    """
    if scope not in CODE_SCOPES:
        raise ConfigError(f"code_fingerprint: scope must be one of {', '.join(CODE_SCOPES)}, received {scope!r}.")
    folders, left_out, packages = CODE_SCOPES[scope]
    base = _PROJECT_DIR if root is None else Path(root)
    digest = hashlib.blake2b(digest_size=8)
    for folder in folders:
        for path in sorted((base / folder).rglob("*.py")):
            name = path.relative_to(base).as_posix()
            if any(name == out or (out.endswith("/") and name.startswith(out)) for out in left_out):
                continue
            source = path.read_bytes()
            digest.update(f"{name}\0{len(source)}\0".encode())
            digest.update(source)
    versions = {**package_versions(packages), "python": ".".join(platform.python_version_tuple()[:2])}
    digest.update(repr(sorted(versions.items())).encode())
    return digest.hexdigest()


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
        "code_fingerprint": provenance.code_fingerprint,
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
