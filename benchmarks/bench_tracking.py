"""Benchmark: MLflow logging, drift statistics and report rendering.

    .venv/bin/python benchmarks/bench_tracking.py [--repeat 3] [--features 100] [--ref-rows 225000]

Each figure is a ratio against a baseline measured in the same process (the machines are shared and
noisy, absolute seconds are not comparable between runs):

- fold metrics: 24 folds x 60 keys = 1,440 points through ``TrackedRun.log_fold_metrics`` (batched)
  vs one ``MlflowClient.log_metric`` call per point (STACK.md: ~7 ms a call);
- params: 300 flattened params through ``TrackedRun.log_params`` vs one ``log_param`` call each;
- feature value drift: ``feature_value_drift`` (PSI + KS per feature) vs a straightforward pandas
  version (``qcut`` on the reference, ``cut`` + ``value_counts`` on the current sample, scipy KS);
  and with ``max_rows=50_000``;
- tearsheet: quantstats HTML vs the reduced fallback HTML (absolute seconds, for the run budget).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from backtest.drift import feature_value_drift
from backtest.reports.tearsheet import fallback_html, write_tearsheet
from backtest.tracking import Tracker


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def naive_drift(reference: np.ndarray, current: np.ndarray, names: list[str]) -> pd.DataFrame:
    """The obvious pandas version: quantile bins with qcut, counts with value_counts."""
    rows = []
    for j, name in enumerate(names):
        ref = pd.Series(reference[:, j]).dropna()
        cur = pd.Series(current[:, j]).dropna()
        _, edges = pd.qcut(ref, 10, retbins=True, duplicates="drop")
        edges[0], edges[-1] = -np.inf, np.inf
        p_ref = pd.cut(ref, edges).value_counts(normalize=True, sort=False).clip(lower=1e-4)
        p_cur = pd.cut(cur, edges).value_counts(normalize=True, sort=False).clip(lower=1e-4)
        psi = float(((p_cur - p_ref) * np.log(p_cur / p_ref)).sum())
        ks = stats.ks_2samp(ref, cur)
        rows.append((name, psi, ks.statistic, ks.pvalue))
    return pd.DataFrame(rows, columns=["feature", "psi", "ks_stat", "ks_pvalue"]).set_index("feature")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--ref-rows", type=int, default=225_000)
    parser.add_argument("--cur-rows", type=int, default=60_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: list[tuple[str, float, float, str]] = []

    with tempfile.TemporaryDirectory() as tmp:
        tracker = Tracker(f"sqlite:///{tmp}/bench.db", "bench", project_dir=tmp)
        folds = {fold: {f"m{j:02d}": fold * 0.01 + j for j in range(60)} for fold in range(24)}

        def batched_metrics() -> None:
            with tracker.start_run() as run:
                run.log_fold_metrics(folds)

        def per_call_metrics() -> None:
            with tracker.start_run() as run:
                for fold, values in folds.items():
                    for key, value in values.items():
                        tracker.client.log_metric(run.run_id, f"fold/{key}", value, step=fold)

        fast, slow = timed(batched_metrics, args.repeat), timed(per_call_metrics, 1)
        results.append(("fold metrics, 1,440 points", fast, slow, "log_metric per point"))

        config = {f"group{g}": {f"key{k}": k * 0.5 for k in range(30)} for g in range(10)}

        def batched_params() -> None:
            with tracker.start_run() as run:
                run.log_params(config)

        def per_call_params() -> None:
            with tracker.start_run() as run:
                for group, values in config.items():
                    for key, value in values.items():
                        tracker.client.log_param(run.run_id, f"{group}.{key}", str(value))

        fast, slow = timed(batched_params, args.repeat), timed(per_call_params, 1)
        results.append(("params, 300 keys", fast, slow, "log_param per key"))

    rng = np.random.default_rng(0)
    names = [f"f{j}" for j in range(args.features)]
    reference = rng.normal(size=(args.ref_rows, args.features)).astype(np.float32)
    current = (rng.normal(size=(args.cur_rows, args.features)) * 1.1 + 0.05).astype(np.float32)
    baseline = timed(lambda: naive_drift(reference, current, names), 1)
    ours = timed(lambda: feature_value_drift(reference, current, names), args.repeat)
    sub = timed(lambda: feature_value_drift(reference, current, names, max_rows=50_000), args.repeat)
    shape = f"{args.features} features, {args.ref_rows:,} vs {args.cur_rows:,} rows"
    results.append((f"value drift, {shape}", ours, baseline, "pandas qcut/cut + ks_2samp"))
    results.append(("value drift, max_rows=50,000", sub, baseline, "pandas qcut/cut + ks_2samp"))
    check = naive_drift(reference[:, :3], current[:, :3], names[:3])
    mine = feature_value_drift(reference[:, :3], current[:, :3], names[:3])
    assert np.allclose(check["psi"], mine["psi"], atol=1e-9), (check, mine)

    dates = pd.bdate_range("2023-01-02", periods=500, name="date")
    strategy = pd.Series(rng.normal(0.0006, 0.015, 500), index=dates)
    benchmark = pd.Series(rng.normal(0.0002, 0.012, 500), index=dates)
    with tempfile.TemporaryDirectory() as tmp:
        quantstats_s = timed(lambda: write_tearsheet(strategy, benchmark, Path(tmp) / "t.html"), args.repeat)
        fallback_s = timed(lambda: fallback_html(strategy, benchmark, "t"), args.repeat)
    results.append(("tearsheet (quantstats), 500 days", quantstats_s, fallback_s, "reduced fallback HTML"))

    print(f"{'what':<58} {'ours s':>8} {'baseline s':>10} {'speed-up':>9}  baseline")
    for what, ours_s, base_s, base_name in results:
        print(f"{what:<58} {ours_s:8.3f} {base_s:10.3f} {base_s / ours_s:8.1f}x  {base_name}")


if __name__ == "__main__":
    main()
