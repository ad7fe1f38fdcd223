"""Benchmark: generate the default synthetic market; print time, peak memory and the planted effects.

    .venv/bin/python benchmarks/bench_synthetic.py [--repeat 3] [--facts-seeds 20]

Targets (issue: foundation): under 15 s and 2 GB on 2 cores. Peak memory is measured with tracemalloc
(Python and numpy allocations during generation) and as the process's peak RSS. As a same-process
baseline, the script also times reading the generated panel back from parquet, so the ratio
generate / read is comparable across noisy machines.

``--facts-seeds N`` adds the index's stylized facts (:func:`backtest.benchmark.stylized_facts`) of the
default market and their spread over seeds 42 and 1..N-1: the measurement behind the bands of
``tests/data/test_synthetic.py``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import pandas as pd

from backtest.benchmark import STYLIZED_FACTS, stylized_facts
from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import SyntheticMarketConfig, planted_effect_strengths, simulate_market
from backtest.labels import LabelSpec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--facts-seeds", type=int, default=0, help="stylized facts over this many seeds")
    args = parser.parse_args()

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        market = simulate_market(SyntheticMarketConfig())
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    market = simulate_market(SyntheticMarketConfig())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "panel.parquet"
        market.panel.to_parquet(path)
        t0 = time.perf_counter()
        pd.read_parquet(path)
        read_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 2**20

    panel = market.panel
    gen = statistics.median(times)
    print(
        f"panel: {len(panel):,} rows x {panel.shape[1]} columns, "
        f"{panel.index.get_level_values('code').nunique()} stocks, fingerprint {panel_fingerprint(panel)}"
    )
    print(f"generate (median of {args.repeat}): {gen:.2f} s   [target < 15 s]")
    print(f"peak traced memory: {peak / 2**20:.0f} MiB; process peak RSS: {rss:.0f} MiB   [target < 2048 MiB]")
    print(
        f"baseline, read the same panel from parquet ({size_mb:.1f} MiB): {read_s:.3f} s; "
        f"generate/read ratio {gen / read_s:.0f}x"
    )
    print()
    table = planted_effect_strengths(market, LabelSpec())
    print("| planted effect | mean daily rank IC vs T+1..T+5 open return | std err | days |")
    print("|---|---|---|---|")
    for name, row in table.iterrows():
        print(f"| {name} | {row['rank_ic']:+.3f} | {row['std_err']:.3f} | {row['days']:.0f} |")
    if args.facts_seeds:
        print_stylized_facts(market, args.facts_seeds)


def print_stylized_facts(default, seeds: int) -> None:
    """The default market's stylized facts and their 10th / 50th / 90th percentiles over ``seeds`` draws."""
    draws = [stylized_facts(default.panel)]
    for seed in range(1, seeds):
        draws.append(stylized_facts(simulate_market(SyntheticMarketConfig(seed=seed)).panel))
    table = pd.DataFrame(draws, columns=list(STYLIZED_FACTS))
    q = table.quantile([0.1, 0.5, 0.9])
    print()
    print(f"| stylized fact | default (seed 42) | 10th pct | median | 90th pct ({seeds} seeds) |")
    print("|---|---|---|---|---|")
    for name in STYLIZED_FACTS:
        cells = [table[name].iloc[0], *(q.loc[p, name] for p in (0.1, 0.5, 0.9))]
        print(f"| {name} | " + " | ".join(f"{v:.4g}" for v in cells) + " |")


if __name__ == "__main__":
    main()
