"""`python -m backtest.cache`: users can see and clear the caches."""

from __future__ import annotations

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
