"""Benchmark: the weekly-retraining backtest end to end, and the LightGBM levers on it.

    .venv/bin/python benchmarks/bench_weekly.py                        # fresh fits, then warm start (97 folds)
    .venv/bin/python benchmarks/bench_weekly.py --extra experiment=weekly --levers warm20 warm40 fresh
    .venv/bin/python benchmarks/bench_weekly.py --levers base trunc8 leaves15 --test-end 2024-06-30
    .venv/bin/python benchmarks/bench_weekly.py --schedule monthly --levers base es50_ff0.8   # the main job

Each case is the main job as a user runs it, ``python -m backtest backtest.retrain_every=5
backtest.train_window=730 [lever overrides]`` on the default market (``features=all``), from a cold
feature cache to the logged run (:func:`e2e.run_main_job`: a fresh process, its own store). Reported per
case: wall time, peak RSS, folds, trees per fold (``fold/trees``, the trees each fold's model keeps),
fit seconds per fold, the stage timings, and the out-of-sample rank IC with its HAC standard error (the
quality every lever is judged by: it must stay within one standard error of the base case's). Nothing is
projected. ``--schedule monthly`` runs the main job's own schedule instead (25 monthly folds), whose 485
test days judge a lever's rank IC more tightly than a shortened weekly run can. ``--test-end`` shortens
the test period (fewer folds) to screen levers faster; the base case runs with the same setting, so the
comparison stays paired.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from e2e import run_main_job

SCHEDULES = {"weekly": ["backtest.retrain_every=5", "backtest.train_window=730"], "monthly": []}
LEVERS: dict[str, list[str]] = {
    "base": [],
    "warm": ["model.config.warm_start=true"],
    "fresh": ["model.config.warm_start=false"],  # e.g. after --extra experiment=weekly (warm by default)
    "trunc8": ["model.config.truncation_level=null"],  # portfolio depth + 3
    "trunc50": ["model.config.truncation_level=50"],  # pairs of the top 50 positions with the whole list
    "leaves15": ["model.config.num_leaves=15"],
    "ff0.8": ["model.config.feature_fraction=0.8"],
    "es50_ff0.8": ["model.config.early_stopping_rounds=50", "model.config.feature_fraction=0.8"],  # the
    # defaults before early stopping after 10 rounds and half the features per tree
    "goss": ["+model.config.extra.data_sample_strategy=goss"],
    "bag_query": [
        "+model.config.extra.bagging_by_query=true",
        "+model.config.extra.bagging_fraction=0.5",
        "+model.config.extra.bagging_freq=1",
    ],
    "bin_sample": ["+model.config.extra.bin_construct_sample_cnt=50000"],
    "es20": ["model.config.early_stopping_rounds=20"],
    "es50": ["model.config.early_stopping_rounds=50"],
    "xendcg": ["+model.config.extra.objective=rank_xendcg"],  # a listwise objective, linear in the list length
    "warm20": ["model.config.warm_start=true", "model.config.warm_start_rounds=20"],
    "warm40": ["model.config.warm_start=true", "model.config.warm_start_rounds=40"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levers", nargs="+", default=["base", "warm"], choices=sorted(LEVERS))
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="weekly")
    parser.add_argument("--test-end", default=None, help="last test day (default: the data's last day)")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every case")
    args = parser.parse_args()
    common = SCHEDULES[args.schedule] + ([f"backtest.test_end={args.test_end}"] if args.test_end else []) + args.extra
    base = None
    print(
        f"{'case':10} {'wall s':>7} {'RSS GiB':>7} {'folds':>5} {'trees':>6} {'fit s/fold':>10} "
        f"{'rank IC':>8} {'s.e.':>7} {'vs base':>8} {'load':>5}  stages (s)"
    )
    for name in args.levers:
        job = run_main_job(common + LEVERS[name], timeout_s=5400)
        if job.returncode != 0:
            print(job.output[-3000:])
            raise SystemExit(f"{name}: exit {job.returncode}")
        ic, se = job.metrics["rank_ic_mean"], job.metrics["rank_ic_se"]
        base = base or job
        diff = (ic - base.metrics["rank_ic_mean"]) / base.metrics["rank_ic_se"]
        stages = " ".join(f"{k[:-2]} {v:.0f}" for k, v in job.stages.items() if k != "total_s")
        print(
            f"{name:10} {job.wall_s:7.1f} {job.peak_rss_gib:7.2f} {job.metrics['n_folds']:5.0f} "
            f"{job.fold_mean('trees'):6.1f} {job.fold_mean('fit_seconds'):10.2f} {ic:+8.4f} {se:7.4f} "
            f"{diff:+7.2f}se {job.load:5.2f}  {stages}",
            flush=True,
        )
        peaks = " ".join(f"{k} {v:.2f}" for k, v in job.stage_peaks_gib.items())
        print(f"{'':10} peak RSS so far after each stage (GiB): {peaks}", flush=True)


if __name__ == "__main__":
    main()
