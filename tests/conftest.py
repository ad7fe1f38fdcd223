"""Shared fixtures: a seeded tiny synthetic market; the project's configs composed as the CLI does."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from backtest.cli.compose import CONF_DIR
from backtest.data.synthetic import SyntheticMarket, simulate_market
from tests.small_backtest import MARKET

pytest_plugins = ["tests.sweep_trials"]  # the study report's sweeps, as fixtures


@pytest.fixture(scope="session")
def tiny_market() -> SyntheticMarket:
    """A small synthetic market: 60 stocks, 40 index members, 2021-2022 (about 485 trading days)."""
    return simulate_market(MARKET)


@pytest.fixture(scope="session")
def tiny_panel(tiny_market: SyntheticMarket) -> pd.DataFrame:
    """The canonical panel of ``tiny_market``. Session-scoped: never modify it in place."""
    return tiny_market.panel


def _compose_config(overrides: Sequence[str] = (), config_name: str | None = "config") -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


@pytest.fixture(scope="session")
def compose_config() -> Callable[..., DictConfig]:
    """``compose_config(overrides=(), config_name="config")``: a config composed from the project's
    ``conf/`` directory, as ``rankbacktest`` composes it.

    ``config_name`` may name one group option (``"label/default"``), or be ``None`` to compose only what
    the overrides add (``["+features=all"]``).
    """
    return _compose_config
