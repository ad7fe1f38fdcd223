"""The code fingerprint: a hash of the source and package versions that can change a result.

It keys the fold checkpoints (scope ``"result"``) and the feature cache (scope ``"features"``), so that
changed code never resumes from, or loads, what older code computed; :mod:`backtest.provenance` records
it as the ``code_fingerprint`` tag. Plain file reads and package metadata; no git, no tracking library.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Literal

from backtest import PROJECT_DIR
from backtest.errors import ConfigError

CodeScope = Literal["result", "features"]

#: What each code fingerprint covers: source folders (their ``*.py`` files, recursively), the files and
#: folders inside them that are left out, and the packages whose versions are hashed with them.
#:
#: ``result`` keys the fold checkpoints: every module that can change a fold's scores or the metrics. Left
#: out are the modules that record, render or launch a result and compute none of its numbers: the
#: tracking package (the MLflow store), ``reports/`` (tearsheet, plots, drift report, summary, all drawn
#: from a finished result), ``cli/`` and ``record.py`` (composition and artifact logging; every value
#: they hand the engine is in the run key), ``cache.py`` (the cache command), ``provenance.py`` (tags),
#: this module and the ``__main__`` launchers; ``data/tushare_download.py`` only fetches files, which the
#: data fingerprint covers.
#: ``features`` keys the feature cache: the feature code and the data layer it reads the panel through
#: (tradability, wide grids, calendar), so a change to a model or to the engine keeps cached features.
CODE_SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "result": (
        ("backtest", "models"),
        (
            "backtest/tracking/",
            "backtest/reports/",
            "backtest/cli/",
            "backtest/record.py",
            "backtest/cache.py",
            "backtest/provenance.py",
            "backtest/code_fingerprint.py",
            "backtest/__main__.py",
            "backtest/data/tushare_download.py",
        ),
        ("numpy", "pandas", "scipy", "lightgbm", "torch"),
    ),
    "features": (
        ("backtest/features", "backtest/data"),
        ("backtest/data/tushare_download.py",),
        ("numpy", "pandas", "scipy"),
    ),
}


def package_versions(packages: Sequence[str]) -> dict[str, str]:
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
    base = PROJECT_DIR if root is None else Path(root)
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
