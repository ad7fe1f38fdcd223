"""Benchmark: the cost of one LightGBM round on a main-job fold, setting by setting.

    .venv/bin/python benchmarks/bench_rounds.py                  # every setting below (about 3 min on 2 cores)
    .venv/bin/python benchmarks/bench_rounds.py base trunc30
    .venv/bin/python benchmarks/bench_rounds.py base sub64 data.n_stocks=1500 data.n_members=1000   # another market

The default market and config (``conf/``, composed as the CLI composes them), the first fold of the main
job's schedule (500 days of 300 stocks, 285 features), binned once as the engine bins it; then each
setting fits that fold for 20 rounds without early stopping on the same bins (a ``sublist_size`` setting
bins its own panel, each day in its shuffled order, before the timing), and its milliseconds a round are
printed. benchmarks/README.md records them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from bench_transformer_backtest import build_parts

from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import _fold_sets, _ranking_data, plan_backtest
from backtest.features import build_features
from models.lambdarank import LambdaRankRanker

ROUNDS = 20
#: LambdaRankConfig fields changed from the default (none of them changes the bins)
SETTINGS: dict[str, dict] = {
    "base": {},
    "threads1": {"num_threads": 1},
    "trunc100": {"truncation_level": 100},
    "trunc50": {"truncation_level": 50},
    "trunc30": {"truncation_level": 30},
    "sub100": {"sublist_size": 100},
    "sub64": {"sublist_size": 64},
    "sub50": {"sublist_size": 50},
    "sub25": {"sublist_size": 25},
    "ff0.8": {"feature_fraction": 0.8},  # the default before 0.5
    "bag_query": {"extra": {"bagging_by_query": True, "bagging_fraction": 0.5, "bagging_freq": 1}},
    "goss": {"extra": {"data_sample_strategy": "goss"}},
    "leaves7": {"num_leaves": 7},
}


def main() -> None:
    overrides = [a for a in sys.argv[1:] if "=" in a]  # Hydra overrides of the market or the config
    names = [a for a in sys.argv[1:] if "=" not in a] or list(SETTINGS)
    parts = build_parts({}, overrides, groups=("data", "features", "label", "portfolio"))
    panel = parts["data"].panel
    plan = plan_backtest(panel, label=parts["label"], schedule=parts["schedule"], portfolio=parts["portfolio"])
    matrix = build_features(panel, parts["features"], data_fingerprint=panel_fingerprint(panel))
    data, samples = _ranking_data(matrix, plan.labels.target.reindex(matrix.index), parts["label"].processing)
    first = plan.folds[0]
    base = parts["model"]()
    base.prepare(samples, history_end=np.datetime64(first.train_dates[-1], "ns"))
    train, valid, _ = _fold_sets(samples, data, first)
    print(
        f"fold 0: {train.n_samples:,} samples x {train.n_features} features, {train.n_days} days; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for name in names:
        cfg = dataclasses.replace(base.config, num_boost_round=ROUNDS, early_stopping_rounds=None, **SETTINGS[name])
        ranker = LambdaRankRanker(cfg)
        if cfg.sublist_size is None:
            ranker.panel = base.panel  # the same bins: no setting here changes them
        else:  # the same bins, each day held in its shuffled order (binned here, outside the timing)
            ranker.prepare(samples, history_end=np.datetime64(first.train_dates[-1], "ns"))
        t0 = time.perf_counter()
        ranker.fit(train, valid)
        seconds = time.perf_counter() - t0
        print(f"{name:10} {ROUNDS} rounds {seconds:6.2f} s  {seconds / ROUNDS * 1000:5.0f} ms a round", flush=True)


if __name__ == "__main__":
    main()
