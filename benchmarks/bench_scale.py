"""Benchmark: how the main job's time and memory grow with the universe.

    .venv/bin/python benchmarks/bench_scale.py                 # 300, 1,000, 5,000 and 2,000 members (an hour)
    .venv/bin/python benchmarks/bench_scale.py --sizes 460:300:2018 1500:1000:2018 --out scale.json

Each size is ``n_stocks:n_members:first year`` of the synthetic market (to 2025-12-31; ``data=synthetic_all``
is 7500:5000), run through the main job (:func:`e2e.run_main_job`: a fresh process, cold cache, its own
SQLite store) on the main job's schedule (25 monthly folds over the two test years; ``--retrain-every``
changes it) and otherwise the defaults. Printed per size: wall time, peak RSS against the float32 feature
matrix, the stage timings and rank IC; then each stage's growth exponent, the slope of log(seconds) on
log(members) over the sizes from ``--exponent-from`` members up (1,000 by default).

``--dask-workers W --dask-threads T`` runs every size's folds on a ``distributed.LocalCluster`` of W worker
processes of T threads (``engine.backend=dask``; each fold's LightGBM on ``--fit-threads`` threads, T by
default, so that T x fit-threads x W matches the cores), started fresh for each size; the workers' peak
resident memory (their summed RSS, sampled every second) is printed beside the CLI's own.
benchmarks/README.md ("Scale") records them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from e2e import MainJob, run_main_job

SIZES = ["460:300:2018", "1500:1000:2018", "7500:5000:2018", "3000:2000:2018"]
STAGES = ("audit_s", "features_s", "binning_s", "folds_s", "baselines_s", "portfolio_s", "record_s")
#: on a LocalCluster, the engine's log lines (backtest/engine.py) of the stages before the first fold
DASK_STAGES = {
    "prepare_s": r"Dask: one worker prepared the ranker in ([\d.]+)s",
    "broadcast_s": r"Dask: samples, labels and index on every worker in ([\d.]+)s",
}


def exponents(rows: list[dict], first: int) -> dict[str, float]:
    """Each stage's (and the wall's) slope of log(seconds) on log(members), over the sizes of ``first`` up.

    >>> exponents([{"members": 1000, "wall_s": 10.0, "stages": {"folds_s": 5.0}},
    ...            {"members": 4000, "wall_s": 40.0, "stages": {"folds_s": 80.0}}], 1000)
    {'wall': 1.0, 'folds': 2.0}
    """
    used = [r for r in rows if r["members"] >= first]
    if len(used) < 2:
        return {}
    x = np.log([r["members"] for r in used])
    out = {"wall": float(np.polyfit(x, np.log([r["wall_s"] for r in used]), 1)[0])}
    for stage in STAGES:
        seconds = [r["stages"].get(stage, float("nan")) for r in used]
        if all(np.isfinite(seconds)) and min(seconds) > 0:
            out[stage[:-2]] = float(np.polyfit(x, np.log(seconds), 1)[0])
    return {k: round(v, 2) for k, v in out.items()}


#: the name of the log handler that keeps a worker's binning lines (:func:`_keep_worker_log`)
WORKER_LOG = "bench_scale"


def _keep_worker_log() -> None:
    """On a worker: keep the INFO lines of ``models`` (the binning's) for :func:`_worker_log`."""
    import logging

    handler = logging.Handler(logging.INFO)
    handler.set_name(WORKER_LOG)
    handler.lines = []  # type: ignore[attr-defined]
    handler.emit = lambda record: handler.lines.append(record.getMessage())  # type: ignore[attr-defined,method-assign]
    logger = logging.getLogger("models")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)


def _worker_log() -> str:
    import logging

    kept = [h for h in logging.getLogger("models").handlers if h.get_name() == WORKER_LOG]
    return "\n".join(line for h in kept for line in h.lines)  # type: ignore[attr-defined]


def run_on_local_cluster(
    overrides: list[str], workers: int, threads: int, fit_threads: int, timeout_s: float
) -> tuple[MainJob, float]:
    """The main job with its folds on a fresh LocalCluster of ``workers`` x ``threads`` (each fold's LightGBM on
    ``fit_threads``); returns it and the workers' peak summed RSS (GiB)."""
    import threading

    import psutil
    from distributed import Client, LocalCluster

    # no memory limit: a worker's resident memory counts the pages of the feature matrix it maps (or, when it
    # cannot see the cache file, the copy it is sent); Dask must neither spill nor pause it for them
    with (
        LocalCluster(n_workers=workers, threads_per_worker=threads, memory_limit=0, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        client.run(_keep_worker_log)
        peak, done = [0.0], threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                total = 0
                for pid in pids:
                    try:
                        total += psutil.Process(pid).memory_info().rss
                    except psutil.NoSuchProcess:
                        pass
                peak[0] = max(peak[0], total / 2**30)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        dask = ["engine.backend=dask", f"engine.scheduler={cluster.scheduler_address}", "engine.n_jobs=-1"]
        job = run_main_job([*overrides, *dask, f"model.config.num_threads={fit_threads}"], timeout_s=timeout_s)
        done.set()
        sampler.join()
        # one worker bins and the others read its bins (engine._prepare_once): the binning line comes from it
        job.output += "\n" + "\n".join(client.run(_worker_log).values())
    return job, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=SIZES, help="n_stocks:n_members:first_year")
    parser.add_argument("--retrain-every", type=int, default=None, help="default: the main job's (monthly)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides for every size")
    parser.add_argument("--exponent-from", type=int, default=1000, help="fit the exponents from this many members up")
    parser.add_argument("--out", type=Path, default=None, help="write the rows and exponents as JSON here")
    parser.add_argument("--dask-workers", type=int, default=0, help="folds on a LocalCluster of this many workers")
    parser.add_argument("--dask-threads", type=int, default=1, help="threads of each LocalCluster worker")
    parser.add_argument("--fit-threads", type=int, default=0, help="LightGBM threads a fold (--dask-threads)")
    args = parser.parse_args()
    fit_threads = args.fit_threads or args.dask_threads
    rows: list[dict] = []
    for size in args.sizes:
        stocks, members, year = size.split(":")
        overrides = [f"data.n_stocks={stocks}", f"data.n_members={members}", f"data.start={year}-01-01", *args.set]
        if args.retrain_every:
            overrides.append(f"backtest.retrain_every={args.retrain_every}")
        workers_peak = float("nan")
        if args.dask_workers:
            cluster = (args.dask_workers, args.dask_threads, fit_threads)
            job, workers_peak = run_on_local_cluster(overrides, *cluster, 4 * 3600)
        else:
            job = run_main_job(overrides, timeout_s=4 * 3600)
        if job.returncode != 0:
            print(job.output[-3000:])
            raise SystemExit(f"{size}: exit {job.returncode}")
        binned = re.search(r"BinnedPanel: (\d+) samples x (\d+) features binned in ([\d.]+)s", job.output)
        job.stages["binning_s"] = float(binned.group(3)) if binned else float("nan")  # inside folds_s
        samples, features = (int(binned.group(1)), int(binned.group(2))) if binned else (0, 0)
        for stage, line in DASK_STAGES.items() if args.dask_workers else ():
            found = re.search(line, job.output)
            job.stages[stage] = float(found.group(1)) if found else float("nan")  # inside folds_s
        matrix_gib = samples * features * 4 / 2**30
        row = {
            "size": size,
            "members": int(members),
            "wall_s": job.wall_s,
            "cpu_s": job.cpu_s,
            "peak_rss_gib": job.peak_rss_gib,
            "workers_peak_rss_gib": workers_peak,
            "dask": f"{args.dask_workers}x{args.dask_threads}, fits on {fit_threads}" if args.dask_workers else None,
            "matrix_gib": matrix_gib,
            "samples": samples,
            "features": features,
            "stages": job.stages,
            "stage_peaks_gib": job.stage_peaks_gib,
            "rank_ic": job.metrics.get("rank_ic_mean", float("nan")),
            "rank_ic_se": job.metrics.get("rank_ic_se", float("nan")),
            "n_folds": job.metrics.get("n_folds", float("nan")),
            "fit_s_per_fold": job.fold_mean("fit_seconds"),
            "load": job.load,
        }
        rows.append(row)
        shown = (*STAGES, *DASK_STAGES) if args.dask_workers else STAGES
        stages = "  ".join(f"{k[:-2]} {job.stages.get(k, float('nan')):6.1f}" for k in shown)
        print(
            f"{size:>15}  folds {row['n_folds']:.0f}  wall {job.wall_s:7.1f} s  peak RSS {job.peak_rss_gib:5.2f} GiB "
            f"({job.peak_rss_gib / matrix_gib if matrix_gib else float('nan'):.2f}x the {matrix_gib:.2f} GiB float32 "
            f"matrix of {samples:,} rows)"
            + (f"  workers {workers_peak:.2f} GiB" if args.dask_workers else "")
            + f"  rank IC {row['rank_ic']:+.4f}  load {job.load:.2f}  |  {stages}  "
            f"fit/fold {row['fit_s_per_fold']:.1f} s",
            flush=True,
        )
        if args.out:  # after every size, so a long sweep cut short keeps what finished
            args.out.write_text(json.dumps({"rows": rows, "exponents": exponents(rows, args.exponent_from)}, indent=2))
    slopes = exponents(sorted(rows, key=lambda r: r["members"]), args.exponent_from)
    if slopes:
        print(
            f"growth exponents from {args.exponent_from:,} members up: "
            + "  ".join(f"{k} {v:.2f}" for k, v in slopes.items())
        )


if __name__ == "__main__":
    main()
