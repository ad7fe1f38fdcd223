"""Benchmark: full rolling LambdaRank backtests, and the main job from a cold cache.

    .venv/bin/python benchmarks/bench_backtest.py --folds 20      # the first 20 weekly folds of each mode
    .venv/bin/python benchmarks/bench_backtest.py                  # all ~97 weekly folds (long: the naive
                                                                   # loop alone takes the better part of an hour)
    .venv/bin/python benchmarks/bench_backtest.py --main-job       # `python -m backtest` with a cold cache
    .venv/bin/python benchmarks/bench_backtest.py --folds 8 --modes warm --profile   # where a fold's time goes

Shape (issue: the rolling backtest): the default synthetic market (300 members), `features=all` (285
columns), weekly retraining over the two test years, a three-year (730 trading days) sliding window with a
20-day validation tail. Three modes, measured in one process on the same folds:

- naive      a new ``lgb.Dataset`` per fold and a fresh 300-round fit with early stopping;
- binned     the engine: the panel is binned once, each fold trains on a ``Dataset.subset``, fresh fits;
- warm       the engine with warm start (+40 rounds on the previous booster, a full refit every 4th fold).

Features are computed once (outside the timed fold loop, as the engine does). Reported: seconds per fold,
the total for the folds run, and the ratios naive / binned and naive / warm.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import subprocess
import sys
import tempfile
import time

import numpy as np

from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import generate_market
from backtest.engine import _fold_sets, _ranking_data
from backtest.features.build import build_features
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec, make_labels
from backtest.splits import RollingSchedule
from models.lambdarank import LambdaRankConfig, LambdaRankRanker


def folds_run(mode: str, samples, data, folds) -> tuple[float, list[float]]:
    cfg = LambdaRankConfig(warm_start=(mode == "warm"))
    ranker = LambdaRankRanker(cfg)
    t0 = time.perf_counter()
    if mode != "naive":
        ranker.prepare(samples, history_end=np.datetime64(folds[0].train_dates[-1], "ns"))
    prep = time.perf_counter() - t0
    per_fold = []
    for fold in folds:
        t = time.perf_counter()
        train, valid, rows = _fold_sets(samples, data, fold)
        if mode == "naive":
            ranker = LambdaRankRanker(cfg)  # no prepare: a new Dataset for every fold
        ranker.fit(train, valid)
        ranker.predict(data.take(rows))
        per_fold.append(time.perf_counter() - t)
    return prep, per_fold


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folds", type=int, default=0, help="run only the first N folds (0 = all)")
    parser.add_argument("--modes", nargs="+", default=["naive", "binned", "warm"])
    parser.add_argument("--main-job", action="store_true", help="time `python -m backtest` from a cold cache")
    parser.add_argument("--profile", action="store_true", help="cProfile the fold loops; print the top functions")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    if args.main_job:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "backtest",
                    f"engine.cache_dir={tmp}/cache",
                    f"tracking.uri=sqlite:///{tmp}/mlruns.db",
                    f"hydra.run.dir={tmp}/run",
                ],
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - t0
        print(proc.stdout[-2500:])
        print(f"main job, cold cache: {wall:.0f} s (exit {proc.returncode})   [target <= 300 s]")
        return

    t0 = time.perf_counter()
    panel = generate_market()
    matrix = build_features(panel, FeatureSetSpec(), data_fingerprint=panel_fingerprint(panel))
    labels = make_labels(panel, LabelSpec())
    features_s = time.perf_counter() - t0
    schedule = RollingSchedule(retrain_every=5, train_window=730, valid_days=20, embargo=2)
    calendar = panel.index.get_level_values(0).unique()
    folds = schedule.folds(calendar, labels.label_end)
    if args.folds:
        folds = folds[: args.folds]
    data, samples = _ranking_data(matrix, labels.target.reindex(matrix.index))
    print(
        f"data + features + labels: {features_s:.1f} s (computed once); {len(folds)} weekly folds, "
        f"{samples.n_samples:,} labelled samples x {matrix.shape[1]} features"
    )

    totals = {}
    for mode in args.modes:
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        prep, per_fold = folds_run(mode, samples, data, folds)
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(8)
        totals[mode] = prep + sum(per_fold)
        print(
            f"{mode:7} one-off prep {prep:6.1f} s   per fold median {np.median(per_fold):6.2f} s   "
            f"total {totals[mode]:7.1f} s",
            flush=True,
        )
    if "naive" in totals:
        for mode in ("binned", "warm"):
            if mode in totals:
                print(f"naive / {mode}: {totals['naive'] / totals[mode]:.2f}x")
    n_all = len(schedule.folds(calendar, labels.label_end))
    for mode, total in totals.items():
        print(f"{mode:7} projected to all {n_all} folds: {total / len(folds) * n_all / 60:.1f} min")


if __name__ == "__main__":
    main()
