"""Benchmark: portfolio simulation and headline metrics on a two-year, 300-member synthetic market.

    .venv/bin/python benchmarks/bench_portfolio.py [--repeat 3]

Target (issue 5): ``simulate`` over 2 years x 300 stocks with weekly rebalancing well under 2 s. The
scores are random (speed does not depend on their quality). As a same-process baseline the script times
one plain pandas pass over the same panel (per-stock open-to-open returns with ``groupby().pct_change``),
so the ratios are comparable across noisy, shared machines.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from backtest.data.synthetic import SyntheticMarketConfig, simulate_market
from backtest.metrics import headline_metrics
from backtest.portfolio import PortfolioSpec, simulate


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    config = SyntheticMarketConfig(seed=1, n_stocks=460, n_members=300, start="2023-01-01", end="2024-12-31")
    panel = simulate_market(config).panel
    scores = pd.Series(np.random.default_rng(0).standard_normal(len(panel)), index=panel.index)
    n_days = panel.index.get_level_values("date").nunique()
    members = int(panel["in_universe"].groupby(level="date").sum().median())
    print(f"panel: {len(panel):,} rows, {n_days} days, {members} index members per day (median)")

    baseline = timed(lambda: panel["open"].groupby(level="code").pct_change(), args.repeat)
    print(f"baseline, groupby(code).pct_change of the open: {baseline:.3f} s")

    cases = {
        "weekly, equal weight (default)": PortfolioSpec(),
        "weekly, softmax capped at 35%": PortfolioSpec(weighting="softmax", max_weight=0.35),
        "daily rebalance, equal weight": PortfolioSpec(rebalance_every=1),
    }
    results = {}
    for name, spec in cases.items():
        seconds = timed(
            lambda name=name, spec=spec: results.__setitem__(name, simulate(scores, panel, spec)), args.repeat
        )
        target = "   [target < 2 s]" if spec == PortfolioSpec() else ""
        print(f"simulate, {name}: {seconds:.3f} s ({seconds / baseline:.1f}x baseline){target}")

    result = results["weekly, equal weight (default)"]
    seconds = timed(
        lambda: headline_metrics(
            result.returns,
            result.benchmark_returns,
            result.periods,
            turnover=result.annual_turnover,
            rng=np.random.default_rng(0),
        ),
        args.repeat,
    )
    print(f"headline_metrics incl. 1000-resample bootstrap: {seconds:.3f} s ({seconds / baseline:.1f}x baseline)")


if __name__ == "__main__":
    main()
