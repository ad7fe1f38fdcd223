"""Fixtures of the feature tests (data and planted look-ahead features: ``feature_fixtures.py``)."""

from __future__ import annotations

import pandas as pd
import pytest

from backtest.features.registry import FeatureRegistry, default_registry
from tests.features.feature_fixtures import CUTOFF_POS, PLANTED, make_panel


@pytest.fixture(scope="session")
def panel() -> pd.DataFrame:
    """The hand-built panel of ``make_panel()``. Session-scoped: never modify it in place."""
    return make_panel()


@pytest.fixture(scope="session")
def cutoffs(panel: pd.DataFrame) -> list[pd.Timestamp]:
    dates = panel.index.get_level_values(0).unique()
    return [dates[p] for p in CUTOFF_POS]


@pytest.fixture(scope="session")
def leaky_registry() -> FeatureRegistry:
    """The library registry plus the five planted look-ahead features."""
    return default_registry().extended(*PLANTED)
