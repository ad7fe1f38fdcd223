"""The tiny synthetic market the tests run on in process, and the small backtest on it.

``MARKET`` is the market of the ``tiny_market`` / ``tiny_panel`` fixtures (``tests/conftest.py``) and of the
checkpoint job that the system tests run as a subprocess (``tests/system/checkpoint_job.py``).
``backtest(panel)`` is the engine's small run on it: a few indicators, a short rolling schedule and a small
LambdaRank on one thread, seeded; ``plan(panel)`` its plan (:func:`backtest.engine.plan_backtest`).
"""

from __future__ import annotations

import pandas as pd

from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import SyntheticMarketConfig
from backtest.engine import BacktestPlan, BacktestResult, EngineOptions, plan_backtest, run_backtest
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from models.lambdarank import LambdaRankConfig, LambdaRankRanker

#: 60 stocks, 40 index members, 2021-2022 (about 485 trading days)
MARKET = SyntheticMarketConfig(seed=7, n_stocks=60, n_members=40, start="2021-01-01", end="2022-12-31")
#: the keyword arguments of the small run's RollingSchedule (tests vary one of them)
SCHEDULE = dict(retrain_every=20, train_window=100, valid_days=10, embargo=2, test_start="2022-07-01")
FEATURES = FeatureSetSpec(
    name="small", indicators=("ret_5d", "ret_20d", "vol_20d", "mf_main_net_rate", "rsi_14"), windows=(5,)
)


def small_ranker(**kw) -> LambdaRankRanker:
    """LambdaRank with 30 rounds on one thread; ``kw`` adds or overrides LambdaRankConfig fields."""
    return LambdaRankRanker(LambdaRankConfig(num_boost_round=30, num_threads=1, min_data_in_leaf=40, **kw))


def plan(panel: pd.DataFrame, schedule: RollingSchedule | None = None) -> BacktestPlan:
    """The small run's plan on ``panel``: the default label and portfolio, ``SCHEDULE`` unless ``schedule``
    is given."""
    return plan_backtest(
        panel, label=LabelSpec(), schedule=schedule or RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec()
    )


def backtest(
    panel: pd.DataFrame, schedule: RollingSchedule | None = None, factory=small_ranker, **options
) -> BacktestResult:
    """The small run on ``panel`` (``SCHEDULE`` unless ``schedule`` is given); ``options`` are EngineOptions
    fields."""
    return run_backtest(
        plan(panel, schedule),
        features=FEATURES,
        ranker_factory=factory,
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(**options),
        seed=3,
    )
