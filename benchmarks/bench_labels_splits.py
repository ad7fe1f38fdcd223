"""Benchmark: labels, the rolling schedule and CPCV on the default synthetic market.

    .venv/bin/python benchmarks/bench_labels_splits.py [--repeat 5]

Targets (issue 3): ``make_labels`` on the default market (460 stocks, 2018-2025) under 2 s; all rolling
folds of the default schedule under 1 s; all CPCV splits (6 groups, 2 test groups) under 2 s. Each is
also reported as a ratio to a same-process baseline (one pandas ``groupby(code).shift`` of the open; the
``isin`` row selection the engine does per fold anyway; the CPCV test masks alone): compare the ratios
across machines, not the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from backtest.data.synthetic import SyntheticMarketConfig, simulate_market
from backtest.labels import LabelSpec, make_labels
from backtest.splits import CombinatorialPurgedKFold, RollingSchedule


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
    print(f"panel: {len(panel):,} rows, {panel.index.get_level_values('code').nunique()} stocks, "
          f"{len(calendar)} trading days")

    base_s, _ = timed(lambda: panel.groupby(level="code")["open"].shift(-5), args.repeat)
    labels_s, labels = timed(lambda: make_labels(panel, LabelSpec()), args.repeat)
    print(f"baseline groupby(code).shift(-5) of open: {base_s:.3f} s")
    print(f"make_labels (bins, {len(labels):,} samples): {labels_s:.3f} s   "
          f"ratio {labels_s / base_s:.1f}x   [target < 2 s]")

    schedule = RollingSchedule()
    folds_s, folds = timed(lambda: schedule.folds(calendar, labels.label_end), args.repeat)
    sample_dates = labels.index.get_level_values("date")
    select_s, _ = timed(lambda: [sample_dates.isin(f.train_dates) for f in folds], args.repeat)
    print(f"rolling schedule, {len(folds)} folds: {folds_s:.3f} s ({1e3 * folds_s / len(folds):.2f} ms a fold)   "
          f"[target < 1 s]; baseline, selecting each fold's training rows with isin: {select_s:.3f} s, "
          f"ratio {folds_s / select_s:.2f}x")

    cv = CombinatorialPurgedKFold(n_groups=6, n_test_groups=2, embargo=2)
    cpcv_s, sizes = timed(lambda: [len(train) for train, _ in cv.split(labels.label_end)], args.repeat)
    groups = cv.groups(labels.label_end)
    mask_s, _ = timed(lambda: [np.isin(groups, g) for g in cv.test_group_sets()], args.repeat)
    print(f"CPCV {cv.get_n_splits()} splits over {len(labels):,} samples: {cpcv_s:.3f} s   [target < 2 s]; "
          f"baseline, the test masks alone: {mask_s:.3f} s, ratio {cpcv_s / mask_s:.1f}x; "
          f"training sizes {min(sizes):,}..{max(sizes):,}")


if __name__ == "__main__":
    main()
