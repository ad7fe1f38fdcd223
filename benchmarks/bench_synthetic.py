"""Benchmark: generate a synthetic market; print time, peak memory and the planted effects.

    .venv/bin/python benchmarks/bench_synthetic.py [--repeat 3] [--facts-seeds 20]
    .venv/bin/python benchmarks/bench_synthetic.py --data synthetic_all --repeat 1 [--facts-seeds 5]

``--data NAME`` generates the market of ``conf/data/NAME.yaml`` (default ``synthetic``, the default market),
composed as the CLI composes it. Targets (issue: foundation): the default market under 15 s and 2 GB on 2
cores; ``data=synthetic_all`` (the whole market) well under 9 GiB. Peak memory is measured with tracemalloc
(Python and numpy allocations during generation) and as the process's peak RSS. As a same-process
baseline, the script also times reading the generated panel back from parquet, so the ratio
generate / read is comparable across noisy machines.

``--facts-seeds N`` adds the index's stylized facts (:func:`backtest.benchmark.stylized_facts`) of the
market and their spread over its seed and seeds 1..N-1: the measurement behind the bands of
``tests/data/test_synthetic.py``, and, with ``--data``, how they hold at another size.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from backtest.benchmark import STYLIZED_FACTS, stylized_facts
from backtest.cli.compose import CONF_DIR, DATA_KEYS_OF_THE_JOB
from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import (
    SyntheticMarketConfig,
    planted_effect_strengths,
    simulate_market,
)
from backtest.labels import LabelSpec


def market_config(data: str) -> SyntheticMarketConfig:
    """The synthetic market of the ``data`` group's option ``data`` (``conf/data/<data>.yaml``)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        node = OmegaConf.to_container(compose("config", overrides=[f"data={data}"]).data, resolve=True)
    target = node.pop("_target_")
    if target != "backtest.data.synthetic.synthetic_market":
        raise SystemExit(f"data={data} is not a synthetic market (its _target_ is {target})")
    for key in DATA_KEYS_OF_THE_JOB:
        node.pop(key, None)
    return SyntheticMarketConfig(**node)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="synthetic", help="the data config option (conf/data/NAME.yaml)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--facts-seeds", type=int, default=0, help="stylized facts over this many seeds")
    args = parser.parse_args()
    config = market_config(args.data)

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        market = simulate_market(config)
        times.append(time.perf_counter() - t0)
        del market
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    market = simulate_market(config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    panel = market.panel
    gen = statistics.median(times)
    print(
        f"data={args.data}: {config.n_stocks} stocks, {config.n_members} members, {config.start} .. {config.end}; "
        f"panel: {len(panel):,} rows x {panel.shape[1]} columns, "
        f"{np.unique(panel.index.codes[1]).size} stocks, fingerprint {panel_fingerprint(panel)}",
        flush=True,
    )
    print(f"generate (median of {args.repeat}): {gen:.2f} s")
    print(f"peak traced memory: {peak / 2**20:.0f} MiB; process peak RSS while generating: {rss:.0f} MiB")
    print()
    table = planted_effect_strengths(market, LabelSpec())
    print("| planted effect | mean daily rank IC vs T+1..T+5 open return | std err | days |")
    print("|---|---|---|---|")
    for name, row in table.iterrows():
        print(f"| {name} | {row['rank_ic']:+.3f} | {row['std_err']:.3f} | {row['days']:.0f} |")
    facts = stylized_facts(panel)

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "panel.parquet"
        panel.to_parquet(path)
        del market, panel  # one panel in memory at a time
        t0 = time.perf_counter()
        pd.read_parquet(path)
        read_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 2**20
    print()
    print(
        f"baseline, read the same panel from parquet ({size_mb:.1f} MiB): {read_s:.3f} s; "
        f"generate/read ratio {gen / read_s:.1f}x"
    )
    if args.facts_seeds:
        print_stylized_facts(facts, config, args.facts_seeds)


def print_stylized_facts(facts: dict[str, float], config: SyntheticMarketConfig, seeds: int) -> None:
    """The market's stylized ``facts`` and their 10th / 50th / 90th percentiles over ``seeds`` draws (its
    seed and seeds 1..seeds-1); review turnover also per index seat, which does not depend on the size."""
    draws = [facts]
    for seed in range(1, seeds):
        draws.append(stylized_facts(simulate_market(dataclasses.replace(config, seed=seed)).panel))
    table = pd.DataFrame(draws, columns=list(STYLIZED_FACTS))
    table["review_changes_per_seat"] = table["review_changes_mean"] / config.n_members
    q = table.quantile([0.1, 0.5, 0.9])
    print()
    print(f"| stylized fact | seed {config.seed} | 10th pct | median | 90th pct ({seeds} seeds) |")
    print("|---|---|---|---|---|")
    for name in table.columns:
        cells = [table[name].iloc[0], *(q.loc[p, name] for p in (0.1, 0.5, 0.9))]
        print(f"| {name} | " + " | ".join(f"{v:.4g}" for v in cells) + " |")


if __name__ == "__main__":
    main()
