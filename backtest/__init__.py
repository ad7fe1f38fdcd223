"""Rolling, leakage-guarded backtests of cross-sectional stock rankers (see README.md)."""

from pathlib import Path

#: The project checkout: default store, cache, fallback store and the git tree of the provenance.
PROJECT_DIR = Path(__file__).resolve().parents[1]
