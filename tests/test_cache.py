"""`python -m backtest.cache`: users can see and clear the caches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import backtest.cache as cache_cli
from backtest.features.build import build_features
from backtest.features.cache import FeatureCache
from backtest.features.sets import FeatureSetSpec


def test_list_and_clear(tmp_path: Path, tiny_panel, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cache_cli, "CACHE_DIR", tmp_path)
    spec = FeatureSetSpec(name="tiny", indicators=("ret_5d",), windows=(5,))
    FeatureCache(tmp_path / "features").store(build_features(tiny_panel, spec), spec)
    (tmp_path / "checkpoints" / "run1").mkdir(parents=True)
    (tmp_path / "checkpoints" / "run1" / "fold_0000.npz").write_bytes(b"x")
    assert cache_cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "features (1 entries" in listed and "tiny" in listed and "run1  1 folds" in listed
    assert cache_cli.main(["clear"]) == 0
    assert "removed 2 cache entries" in capsys.readouterr().out
    assert FeatureCache(tmp_path / "features").entries() == []
    assert not (tmp_path / "checkpoints").exists()


def test_compile_fills_numbas_cache_so_that_a_build_compiles_nothing(tmp_path: Path) -> None:
    """`python -m backtest.cache compile` (the setup runs it) in one process; a later process that builds
    the default feature set on another market loads every kernel it calls from the cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "backtest.cache", "compile"], env=env, capture_output=True, text=True, check=True
    )
    assert "feature kernels compiled" in done.stdout
    build = """
import json, numba
from backtest.data.synthetic import SyntheticMarketConfig, generate_market
from backtest.features import FeatureSetSpec, build_features
from backtest.features import cross_section, rolling
panel = generate_market(SyntheticMarketConfig(seed=3, start="2022-06-01", end="2023-06-30", n_stocks=70, n_members=50))
build_features(panel, FeatureSetSpec())
kernels = {f"{m.__name__}.{n}": k for m in (rolling, cross_section) for n, k in vars(m).items()
           if isinstance(k, numba.core.registry.CPUDispatcher)}
stats = {n: [sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values())] for n, k in kernels.items()}
print(json.dumps(stats))
"""
    out = subprocess.run([sys.executable, "-c", build], env=env, capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(stats) == 7
    assert all(hits >= 1 and misses == 0 for hits, misses in stats.values()), stats  # loaded, none compiled
