"""Provenance: what a run's result depends on (data, features, code, packages) and its guard verdicts.

Plain values and a git query; no tracking library. :mod:`backtest.tracking` turns
:func:`provenance_tags` into the run's tags; the verdicts' vocabulary and the ``comparable`` rule come from
:mod:`backtest.leakage`, the code fingerprint from :mod:`backtest.code_fingerprint`.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from backtest.code_fingerprint import package_versions
from backtest.errors import ConfigError
from backtest.leakage import GUARD_STATUSES, GuardStatus, not_comparable_reasons

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
    code_fingerprint : :func:`backtest.code_fingerprint.code_fingerprint` of the process that computed
        the result.
    tradable_days, test_days : the test days on which the top-k book could trade, and all of them
        (:attr:`backtest.portfolio.PortfolioResult.tradable_days`); None for a run without a test period.
    """

    data_fingerprint: str
    feature_fingerprint: str
    leak_guard: GuardStatus
    feature_audit: GuardStatus
    leak_demo: bool = False
    code_fingerprint: str = ""
    tradable_days: int | None = None
    test_days: int | None = None

    def __post_init__(self) -> None:
        for name in ("leak_guard", "feature_audit"):
            value = getattr(self, name)
            if value not in GUARD_STATUSES:
                raise ConfigError(
                    f"Provenance.{name}: expected one of {', '.join(GUARD_STATUSES)}, received {value!r}."
                )

    @property
    def not_comparable(self) -> tuple[str, ...]:
        """Why the run is not comparable, empty when it is (:func:`backtest.leakage.not_comparable_reasons`)."""
        return not_comparable_reasons(
            self.leak_guard, self.feature_audit, tradable_days=self.tradable_days, test_days=self.test_days
        )

    @property
    def comparable(self) -> bool:
        """Both guards passed and the book could trade on enough test days (:attr:`not_comparable`)."""
        return not self.not_comparable


def git_state(project_dir: Path | str) -> tuple[str, str]:
    """Return ``(commit, dirty)`` of the git checkout at ``project_dir``.

    ``dirty`` is ``"true"`` when tracked files are modified or untracked, non-ignored files exist
    (SQLite journal files ``*.db-journal``, ``-wal``, ``-shm`` excepted); both are ``"unknown"``
    outside a git repository or without a git executable.
    """

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=project_dir, capture_output=True, text=True, timeout=20, check=True)
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


def provenance_tags(provenance: Provenance, project_dir: Path | str) -> dict[str, str]:
    """All provenance tags of a run, as strings.

    Returns
    -------
    dict : ``git_commit``, ``git_dirty``, ``mlflow.source.git.commit`` (shown by the UI),
        ``data_fingerprint``, ``feature_fingerprint``, ``leak_guard``, ``feature_audit``,
        ``comparable`` and ``leak_demo`` (``"true"``/``"false"``), ``comparable_reason`` (why not, when it
        is not), and ``pkg.<name>``.
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
        **package_versions(TRACKED_PACKAGES),
    }
    if provenance.not_comparable:
        tags["comparable_reason"] = "; ".join(provenance.not_comparable)
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit
    return tags


def _flag(value: bool) -> str:
    return "true" if value else "false"
