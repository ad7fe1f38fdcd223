"""Benchmark: labels and the rolling schedule on the default synthetic market.

    .venv/bin/python benchmarks/bench_labels_splits.py [--repeat 5]

Targets (issue 3): ``make_labels`` on the default market (460 stocks, 2018-2025) under 2 s; all rolling
folds of the default schedule under 1 s. Each is also reported as a ratio to a same-process baseline (one
pandas ``groupby(code).shift`` of the open; the ``isin`` row selection the engine does per fold anyway):
compare the ratios across machines, not the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from backtest.data.synthetic import SyntheticMarketConfig, simulate_market
from backtest.labels import LabelSpec, make_labels
from backtest.splits import RollingSchedule


def timed(func: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median wall time of ``repeat`` calls and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    panel = simulate_market(SyntheticMarketConfig()).panel
    calendar = panel.index.get_level_values("date").unique()
    print(
        f"panel: {len(panel):,} rows, {panel.index.get_level_values('code').nunique()} stocks, "
        f"{len(calendar)} trading days"
    )

    base_s, _ = timed(lambda: panel.groupby(level="code")["open"].shift(-5), args.repeat)
    labels_s, labels = timed(lambda: make_labels(panel, LabelSpec()), args.repeat)
    print(f"baseline groupby(code).shift(-5) of open: {base_s:.3f} s")
    print(
        f"make_labels (bins, {len(labels):,} samples): {labels_s:.3f} s   "
        f"ratio {labels_s / base_s:.1f}x   [target < 2 s]"
    )

    schedule = RollingSchedule()
    folds_s, folds = timed(lambda: schedule.folds(calendar, labels.label_end), args.repeat)
    sample_dates = labels.index.get_level_values("date")
    select_s, _ = timed(lambda: [sample_dates.isin(f.train_dates) for f in folds], args.repeat)
    print(
        f"rolling schedule, {len(folds)} folds: {folds_s:.3f} s ({1e3 * folds_s / len(folds):.2f} ms a fold)   "
        f"[target < 1 s]; baseline, selecting each fold's training rows with isin: {select_s:.3f} s, "
        f"ratio {folds_s / select_s:.2f}x"
    )


if __name__ == "__main__":
    main()
