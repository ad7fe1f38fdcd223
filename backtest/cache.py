"""See and clear the project's caches: ``python -m backtest.cache [list|clear] [features|checkpoints|all]``,
and fill numba's: ``python -m backtest.cache compile`` (the setup runs it).

The feature cache (``.cache/features``) holds feature matrices keyed by data fingerprint, feature set and
the feature code's fingerprint; the checkpoints (``.cache/checkpoints``) hold finished folds of backtests,
keyed by everything a fold depends on including the code fingerprint
(:func:`backtest.code_fingerprint.code_fingerprint`), so that a killed run resumes (their format:
:mod:`backtest.checkpoints`). Every entry carries a
checksum checked on load: a damaged one is discarded with a warning and recomputed. Both are safe to
delete at any time; entries of older code are never read again, and ``clear`` removes them.

The feature kernels are compiled by numba on their first call and kept in its on-disk cache (next to
their source, in ``__pycache__``; numba compiles them again when the source changes). ``compile`` fills
that cache by building every feature of a small synthetic market, which calls each kernel with the
argument types a real build does, so that no run pays the compilation or keeps the compiler's memory
(the peaks with and without it: benchmarks/README.md, "Memory").
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from backtest import PROJECT_DIR
from backtest.checkpoints import fold_units
from backtest.features.cache import FeatureCache

CACHE_DIR = PROJECT_DIR / ".cache"


def cache_paths(root: Path | str | None = None) -> tuple[Path, Path]:
    """(feature cache, fold checkpoints) directories under ``root`` (default: the project's ``.cache``)."""
    root = CACHE_DIR if root is None else Path(root)
    return root / "features", root / "checkpoints"


def compile_kernels() -> float:
    """Compile every feature kernel into numba's on-disk cache (see the module docstring); the seconds
    it took (a fraction of a second when the cache is already filled)."""
    from backtest.data.synthetic import SyntheticMarketConfig, generate_market
    from backtest.features.build import build_features
    from backtest.features.sets import FeatureSetSpec

    t0 = time.perf_counter()
    panel = generate_market(SyntheticMarketConfig(start="2024-01-01", end="2024-12-31", n_stocks=40, n_members=20))
    build_features(panel, FeatureSetSpec(name="every_kernel", exclude=(), industry_neutral=True))
    return time.perf_counter() - t0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    """``python -m backtest.cache {list,clear,compile}``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m backtest.cache", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["list", "clear", "compile"], nargs="?", default="list")
    parser.add_argument("which", choices=["features", "checkpoints", "all"], nargs="?", default="all")
    args = parser.parse_args(argv)
    if args.action == "compile":
        print(f"feature kernels compiled into numba's cache in {compile_kernels():.1f} s")
        return 0
    feature_dir, checkpoints = cache_paths()
    features = FeatureCache(feature_dir)
    if args.action == "list":
        print(f"cache directory: {CACHE_DIR}")
        if args.which in ("features", "all"):
            entries = features.entries()
            print(f"features ({len(entries)} entries, {sum(e.size_bytes for e in entries) / 2**20:.0f} MiB):")
            for e in entries:
                print(
                    f"  {e.key}  {e.feature_set:16} {e.n_rows:>9,} x {e.n_features:<4} "
                    f"{e.size_bytes / 2**20:8.1f} MiB  {e.created:%Y-%m-%d %H:%M}"
                )
        if args.which in ("checkpoints", "all"):
            runs = sorted(p for p in checkpoints.glob("*") if p.is_dir()) if checkpoints.exists() else []
            print(f"checkpoints ({len(runs)} runs):")
            for run in runs:
                n = len(fold_units(run))
                print(f"  {run.name}  {n} folds  {_size(run) / 2**20:.1f} MiB")
        return 0
    removed = 0
    if args.which in ("features", "all"):
        removed += features.clear()
    if args.which in ("checkpoints", "all") and checkpoints.exists():
        removed += sum(1 for p in checkpoints.glob("*") if p.is_dir())
        shutil.rmtree(checkpoints)
    print(f"removed {removed} cache entries from {CACHE_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
