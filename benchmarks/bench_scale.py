"""Benchmark: how one backtest's time and memory grow with the universe and the history.

    .venv/bin/python benchmarks/bench_scale.py                 # the three sizes below (about 15 min on 2 cores)
    .venv/bin/python benchmarks/bench_scale.py --sizes 460:300:2018 1500:1000:2018

Each size is ``n_stocks:n_members:first year`` of the synthetic market (to 2025-12-31), run through the
main job (:func:`e2e.run_main_job`: a fresh process, cold cache, its own SQLite store) with quarterly
retraining every 120 days (``backtest.retrain_every=120``: 5 folds over the two test years) and otherwise the
defaults (``features=all``, the 500-day window, the whole-list LambdaRank, baselines on). Printed per
size: the folds, wall time, peak RSS and the stage timings; then
each stage's growth factor between the sizes. benchmarks/README.md ("Scale") records them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))

from e2e import run_main_job

SIZES = ["460:300:2018", "1500:1000:2018", "460:300:2021"]
STAGES = ("audit_s", "features_s", "binning_s", "folds_s", "baselines_s", "portfolio_s", "record_s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=SIZES, help="n_stocks:n_members:first_year")
    parser.add_argument("--retrain-every", type=int, default=120)
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        stocks, members, year = size.split(":")
        job = run_main_job(
            [
                f"data.n_stocks={stocks}",
                f"data.n_members={members}",
                f"data.start={year}-01-01",
                f"backtest.retrain_every={args.retrain_every}",
            ]
        )
        if job.returncode != 0:
            print(job.output[-3000:])
            raise SystemExit(f"{size}: exit {job.returncode}")
        rows.append((size, job))
        binned = re.search(r"BinnedPanel: (\d+) samples x (\d+) features binned in ([\d.]+)s", job.output)
        job.stages["binning_s"] = float(binned.group(3)) if binned else float("nan")  # inside folds_s
        samples, features = (int(binned.group(1)), int(binned.group(2))) if binned else (0, 0)
        stages = "  ".join(f"{k[:-2]} {job.stages.get(k, float('nan')):6.1f}" for k in STAGES)
        print(
            f"{size:>15}  folds {job.metrics['n_folds']:.0f}  wall {job.wall_s:6.1f} s  peak RSS "
            f"{job.peak_rss_gib:5.2f} GiB  samples {samples:,} ({samples * features * 4 / 2**30:.2f} GiB float32)  "
            f"load {job.load:.2f}  |  {stages}  "
            f"fit/fold {job.fold_mean('fit_seconds'):.1f} s  trees/fold {job.fold_mean('trees'):.0f}",
            flush=True,
        )
    base = rows[0][1]
    for size, job in rows[1:]:
        growth = "  ".join(
            f"{k[:-2]} x{job.stages.get(k, 0) / max(base.stages.get(k, 1e-9), 1e-9):.2f}" for k in STAGES
        )
        print(
            f"{size:>15} / {rows[0][0]}: wall x{job.wall_s / base.wall_s:.2f}  "
            f"RSS x{job.peak_rss_gib / base.peak_rss_gib:.2f}  |  {growth}"
        )


if __name__ == "__main__":
    main()
