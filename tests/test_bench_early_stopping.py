"""The early-stopping screen (benchmarks/bench_early_stopping.py) runs the configured LambdaRank: every
setting composes from conf/ by Hydra, and its model is the main job's with the setting's overrides only."""

from __future__ import annotations

import dataclasses

import hydra
import pytest
import yaml

from benchmarks import bench_early_stopping as screen


@pytest.fixture
def configured(compose_config):
    """The main job's LambdaRank config, composed and built as the CLI does."""
    cfg = compose_config([f"{group}={option}" for group, option in screen.CHOICES.items()])
    return hydra.utils.instantiate(cfg.model, _convert_="all", _partial_=True)().config


@pytest.mark.parametrize("name", list(screen.SETTINGS))
def test_each_setting_is_the_configured_model_with_its_overrides(name: str, configured) -> None:
    parts = screen.build_setting(name, 2, groups=())
    model = parts["model"]()
    wanted = screen.overrides(name, 2)
    fields = {k.removeprefix("model.config."): yaml.safe_load(v) for k, v in wanted.items() if k.startswith("model.")}
    assert model.config == dataclasses.replace(configured, **fields)
    assert parts["schedule"].valid_days == int(wanted.get("backtest.valid_days", 20))
    assert parts["config"]["model"]["config"]["seed"] == parts["seed"] == 42


def test_rehearsal_shrinks_the_market_and_the_validation_tail() -> None:
    parts = screen.build_setting("valid 120, rank IC", 2, rehearse=True, groups=())
    assert parts["config"]["data"]["n_stocks"] == 60 and parts["schedule"].valid_days == 20
