"""Small hand-built ranking problems for the model tests (no market simulation needed)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from backtest.labels import cross_sectional_target
from models.data import RankingData


def build_ranking_data(
    n_days: int = 60,
    n_stocks: int = 20,
    n_features: int = 4,
    signal: float = 1.0,
    seed: int = 0,
    n_bins: int = 10,
    start: str = "2024-01-01",
) -> tuple[RankingData, np.ndarray]:
    """Every stock on every (consecutive calendar) day; the label is ``signal * f0 + N(0, 1)`` noise.

    Returns the data, with relevance = the label's cross-sectional ``"bins"`` target, and the raw label
    (float64, aligned with the samples).
    """
    rng = np.random.default_rng(seed)
    days = np.datetime64(start, "D") + np.arange(n_days)
    dates = np.repeat(days.astype("datetime64[ns]"), n_stocks)
    codes = np.tile(np.array([f"{i:06d}.SZ" for i in range(n_stocks)]), n_days)
    X = rng.standard_normal((n_days * n_stocks, n_features)).astype(np.float32)
    label = signal * X[:, 0].astype(np.float64) + rng.standard_normal(len(X))
    rel = cross_sectional_target(label.reshape(n_days, n_stocks), "bins", n_bins).ravel()
    names = tuple(f"f{i}" for i in range(n_features))
    return RankingData(X=X, dates=dates, codes=codes, feature_names=names, relevance=rel), label


@pytest.fixture
def make_ranking_data() -> Callable[..., tuple[RankingData, np.ndarray]]:
    """Factory of small ranking problems: ``make_ranking_data(n_days=..., signal=...) -> (data, label)``."""
    return build_ranking_data
