"""Benchmark: import a full-size Tushare export (the default synthetic market in Tushare's layout).

    .venv/bin/python benchmarks/bench_tushare.py [--repeat 3] [--n-stocks 460] [--start 2018-01-01]

The synthetic market is written as Tushare files (``panel_to_tushare``: daily, adj_factor-free, money
flow, daily_basic, stk_limit, index_weight, industry, trade_cal) in parquet and in CSV, then imported
with ``import_tushare``. Same-process baselines, so that the ratios are comparable across noisy
machines: ``pd.read_parquet`` of the same panel stored as one canonical parquet file (the I/O floor),
and ``read_panel`` of that file (the project's loader: read, canonicalize, validate). Targets: a parquet
import at most 10x the I/O floor and no slower than ``read_panel`` (the importer reads eight files, joins
them, adds suspension rows and validates). It also checks that the import round-trips the panel.
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data.loaders import read_panel
from backtest.data.synthetic import SyntheticMarketConfig, generate_market
from backtest.data.tushare import import_tushare, panel_to_tushare


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The median wall time of ``repeat`` calls of ``fn``, and its last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def sized_market(repeat: int) -> tuple[argparse.Namespace, pd.DataFrame]:
    """Parse ``--repeat --n-stocks --start --end`` and generate that synthetic market (the default's size)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--n-stocks", type=int, default=460)
    parser.add_argument("--start", default="2018-01-01")
    parser.add_argument("--end", default="2025-12-31")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = SyntheticMarketConfig(
        n_stocks=args.n_stocks, n_members=min(300, args.n_stocks * 2 // 3), start=args.start, end=args.end
    )
    return args, generate_market(config)


def main() -> None:
    args, panel = sized_market(repeat=3)
    tables = panel_to_tushare(panel)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "pq").mkdir()
        (root / "csv").mkdir()
        for key, table in tables.items():
            table.to_parquet(root / "pq" / f"{key}.parquet", index=False)
            table.to_csv(root / "csv" / f"{key}.csv", index=False)
        panel.to_parquet(root / "panel.parquet")
        size = {name: sum(p.stat().st_size for p in (root / name).iterdir()) / 2**20 for name in ("pq", "csv")}

        io_s, _ = median_time(lambda: pd.read_parquet(root / "panel.parquet"), args.repeat)
        base_s, _ = median_time(lambda: read_panel(root / "panel.parquet"), args.repeat)
        pq_s, imported = median_time(lambda: import_tushare(root / "pq"), args.repeat)
        csv_s, _ = median_time(lambda: import_tushare(root / "csv"), args.repeat)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    assert isinstance(imported, pd.DataFrame) and imported.index.equals(panel.index)
    trading = ~panel["is_suspended"].to_numpy()
    same = all(
        np.allclose(imported[c].to_numpy()[trading], panel[c].to_numpy()[trading], rtol=1e-12, equal_nan=True)
        for c in panel.columns
        if panel[c].dtype.kind == "f"
    )
    print(
        f"panel: {len(panel):,} rows, {panel.index.get_level_values('code').nunique()} stocks, "
        f"{panel.index.get_level_values('date').nunique()} days; round trip exact: {same}"
    )
    print(
        f"baseline pd.read_parquet(canonical panel): {io_s:.3f} s; read_panel(same file): {base_s:.3f} s "
        f"(medians of {args.repeat})"
    )
    print(
        f"import_tushare(parquet, {size['pq']:.1f} MiB): {pq_s:.3f} s = {pq_s / io_s:.1f}x read_parquet "
        f"[target <= 10x], {pq_s / base_s:.2f}x read_panel [target <= 1x]; {len(panel) / pq_s / 1e6:.2f} M rows/s"
    )
    print(
        f"import_tushare(csv, {size['csv']:.1f} MiB): {csv_s:.3f} s = {csv_s / io_s:.1f}x read_parquet, "
        f"{csv_s / base_s:.2f}x read_panel"
    )
    print(f"process peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
