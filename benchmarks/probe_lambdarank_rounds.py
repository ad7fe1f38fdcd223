"""Probe: LambdaRank's out-of-sample rank IC as a function of the number of trees, on folds of the default
market, without early stopping.

    .venv/bin/python benchmarks/probe_lambdarank_rounds.py                          # default, lr 0.1, truncation 30
    .venv/bin/python benchmarks/probe_lambdarank_rounds.py --variants default --folds 1 4 7

For each fold of ``--folds`` (of ``conf/backtest/default.yaml``'s 25 on the default synthetic market,
``features=all``, the default label) and each variant, one booster of ``max(--iterations)`` trees is
trained on the fold's purged training days with the parameters of ``conf/model/lambdarank.yaml``
(``LambdaRankConfig.lgb_params``, the variant's changes on top), and its scores of the fold's decision
days after each count of ``--iterations`` trees give a mean daily rank IC with the forward return. The
table is the mean over the folds: where the curve peaks is the number of trees a fold should keep,
against the 1-4 trees that early stopping on the 20-day validation tail often keeps.
The booster here is trained on the raw rows (not the engine's binned panel), one fold at a time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "benchmarks"))

from bench_transformer_backtest import default_market_features  # noqa: E402

from backtest.leakage import fold_rows  # noqa: E402
from backtest.metrics import daily_ic  # noqa: E402

VARIANTS = {
    "default": {},
    "lr0.1": {"learning_rate": 0.1},
    "truncation30": {"lambdarank_truncation_level": 30},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--folds", nargs="+", type=int, default=[1, 4, 7, 10, 13, 16, 19, 22])
    parser.add_argument("--iterations", nargs="+", type=int, default=[5, 10, 15, 20, 30, 40, 60])
    args = parser.parse_args()
    import lightgbm as lgb

    parts, plan, matrix = default_market_features("lambdarank")
    X, index = matrix.values, matrix.index
    rel = plan.labels.target.reindex(index).to_numpy()
    fwd = plan.labels.fwd_return.reindex(index)
    base = parts["model"]().config.lgb_params()
    base.update(metric="None")
    ics: dict[str, list[list[float]]] = {v: [] for v in args.variants}
    for fold_no in args.folds:
        fold = plan.folds[fold_no]
        train, _, predict = fold_rows(fold, index)
        train = train[np.isfinite(rel[train])]
        groups = np.unique(index.get_level_values(0)[train], return_counts=True)[1]
        data = lgb.Dataset(X[train], rel[train].astype(int), group=groups, params={"max_bin": base["max_bin"]})
        f = fwd.iloc[predict]
        known = f.notna().to_numpy()
        for variant in args.variants:
            t0 = time.perf_counter()
            booster = lgb.train({**base, **VARIANTS[variant]}, data, num_boost_round=max(args.iterations))
            row = []
            for n in args.iterations:
                s = pd.Series(booster.predict(X[predict], num_iteration=n), index=index[predict])
                row.append(float(daily_ic(s[known], f[known], "spearman").mean()))
            ics[variant].append(row)
            cells = " ".join(f"{n}:{v:+.3f}" for n, v in zip(args.iterations, row))
            print(f"{variant:<13} fold {fold_no:>2} ({time.perf_counter() - t0:4.0f} s)  {cells}", flush=True)
    print(f"\nmean rank IC over folds {args.folds}, by trees kept:")
    print(f"{'variant':<13} " + " ".join(f"{n:>7}" for n in args.iterations))
    for variant, rows in ics.items():
        print(f"{variant:<13} " + " ".join(f"{v:+7.4f}" for v in np.mean(rows, axis=0)))


if __name__ == "__main__":
    main()
