"""Shared fixtures: a seeded tiny synthetic market."""

from __future__ import annotations

import os

import pandas as pd
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from backtest.data.synthetic import SyntheticMarket, SyntheticMarketConfig, simulate_market  # noqa: E402

TINY = SyntheticMarketConfig(seed=7, n_stocks=60, n_members=40, start="2021-01-01", end="2022-12-31")


@pytest.fixture(scope="session")
def tiny_market() -> SyntheticMarket:
    """A small synthetic market: 60 stocks, 40 index members, 2021-2022 (about 485 trading days)."""
    return simulate_market(TINY)


@pytest.fixture(scope="session")
def tiny_panel(tiny_market: SyntheticMarket) -> pd.DataFrame:
    """The canonical panel of ``tiny_market``. Session-scoped: never modify it in place."""
    return tiny_market.panel
