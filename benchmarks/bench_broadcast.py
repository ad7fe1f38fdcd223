"""Benchmark: the Dask broadcast that comes before a backtest's first fold.

    .venv/bin/python benchmarks/bench_broadcast.py --members 1000 --workers 8     # about 3 minutes on 2 cores

Runs the main job (``python -m backtest``'s config, ``data.n_members=M``, 1.5 M stocks) in this process
with its folds on a fresh ``distributed.LocalCluster`` of W single-thread workers, and stops it where the
engine has chosen what to ship (``backtest.engine._ship_to_workers``): prints the pickled size of the
samples, the data, the labels and the index, and the seconds of ``Client.scatter(..., broadcast=True)`` of
the four, the call joblib's Dask backend makes before the first fold. Dask broadcasts by copying each
object from worker to worker, so what a worker pickles when passing an object on decides the time.
``--timeout`` ends a broadcast that does not finish (the workers are stopped; the line says so). Hydra's
"Error executing job" line at the end is the stop, not a failure.
benchmarks/README.md ("Scale") records the figures.
"""

from __future__ import annotations

import argparse
import inspect
import pickle
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import backtest.engine as engine


class _Shipped(Exception):
    """Raised once the broadcast was timed: the main job stops there."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds the broadcast may take")
    args = parser.parse_args()

    from distributed import LocalCluster

    choose = engine._ship_to_workers

    def timed(client, samples, data):
        *shipped, folder = choose(client, samples, data)
        caller = inspect.currentframe().f_back.f_locals  # engine._run_folds: what it broadcasts besides
        labels, index = caller["labels"], caller["index"]
        for name, value in zip(("samples", "data", "labels", "index"), (*shipped, labels, index)):
            started = time.perf_counter()
            size = len(pickle.dumps(value, protocol=5))
            print(f"{name:8} pickled {size / 2**20:7.1f} MiB in {time.perf_counter() - started:5.2f} s", flush=True)
        done = threading.Event()
        timer = threading.Timer(args.timeout, lambda: done.is_set() or cluster.close())
        timer.start()
        started = time.perf_counter()
        try:
            client.scatter([*shipped, labels, index], broadcast=True)
            print(f"broadcast to {args.workers} workers: {time.perf_counter() - started:.1f} s", flush=True)
        except Exception as exc:  # the timeout closed the cluster under it
            print(f"broadcast not done after {time.perf_counter() - started:.0f} s ({type(exc).__name__})")
        finally:
            done.set()
            timer.cancel()
        raise _Shipped

    engine._ship_to_workers = timed
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit=0, dashboard_address=None) as cluster,
        tempfile.TemporaryDirectory(prefix="broadcast-") as tmp,
    ):
        sys.argv = [
            "backtest",
            f"data.n_stocks={args.members * 3 // 2}",
            f"data.n_members={args.members}",
            "engine.backend=dask",
            f"engine.scheduler={cluster.scheduler_address}",
            "engine.n_jobs=-1",
            f"engine.cache_dir={tmp}/cache",
            f"tracking.uri=sqlite:///{tmp}/mlruns.db",
            f"hydra.run.dir={tmp}/run",
            "tracking.tearsheet=false",
        ]
        from backtest.cli import main as backtest_main

        try:
            backtest_main()
        except (_Shipped, SystemExit):
            pass


if __name__ == "__main__":
    main()
