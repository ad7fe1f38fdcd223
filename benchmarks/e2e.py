"""One run of the main job as a user starts it (``python -m backtest OVERRIDES``), measured whole.

:func:`run_main_job` starts the CLI in a fresh process with a cold feature cache, no checkpoints to resume
from and a store of its own, and returns its wall time, its CPU time and its peak resident memory
(``wait4``'s ``ru_utime + ru_stime`` and ``ru_maxrss`` of that process), the stage timings the CLI logs
(:data:`backtest.cli.progress.STAGE_SECONDS`: plan, audit, features, folds, portfolio, baselines, record),
and the run read back from the store: its headline metrics and its per-fold metrics (``fold/trees``,
``fold/fit_seconds``, ...), and the peak resident memory so far at the end of each stage (the engine's
``memory:`` debug lines, :func:`backtest.engine.release_freed_memory`: features, binning, folds, baselines;
the first stage that shows the final peak set it). The benchmarks ``bench_weekly.py``, ``bench_scale.py``
and ``bench_pages.py`` are built on it; nothing here is projected.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from backtest import PROJECT_DIR
from backtest.cli.progress import STAGE_SECONDS

#: the engine's per-stage memory line (``release_freed_memory``)
STAGE_PEAK = re.compile(r"memory: (\w+) done, peak so far ([\d.]+) GiB")


@dataclass
class MainJob:
    overrides: list[str]
    wall_s: float
    peak_rss_gib: float
    returncode: int
    stages: dict[str, float] = field(default_factory=dict)
    stage_peaks_gib: dict[str, float] = field(default_factory=dict)  # stage -> peak RSS up to its end
    metrics: dict[str, float] = field(default_factory=dict)
    folds: dict[str, list[float]] = field(default_factory=dict)  # fold/<name> -> one value per fold
    load: float = 0.0  # 1-minute load average when it started
    cpu_s: float = 0.0  # user + system CPU seconds of the process and its children (wait4): less than the wall
    # says about a shared machine's other load
    output: str = ""

    def fold_mean(self, name: str) -> float:
        values = self.folds.get(f"fold/{name}", [])
        return sum(values) / len(values) if values else float("nan")


def run_main_job(overrides: list[str], *, timeout_s: float = 3600.0, keep: Path | None = None) -> MainJob:
    """Run ``python -m backtest *overrides`` from a cold cache into a store of its own; measure it."""
    with tempfile.TemporaryDirectory(prefix="e2e-", dir=keep) as tmp:
        store = f"sqlite:///{tmp}/mlruns.db"
        command = [
            sys.executable,
            "-m",
            "backtest",
            *overrides,
            f"engine.cache_dir={tmp}/cache",
            f"tracking.uri={store}",
            f"hydra.run.dir={tmp}/run",
            "hydra.verbose=backtest.engine",
        ]
        load = os.getloadavg()[0]
        log = open(f"{tmp}/out.log", "w+")
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_DIR,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
        log.close()
        job = MainJob(overrides, wall, usage.ru_maxrss / 2**20, proc.returncode, load=load, output=output)
        job.cpu_s = usage.ru_utime + usage.ru_stime
        for line in output.splitlines():
            if STAGE_SECONDS in line:
                job.stages = json.loads(line.split(STAGE_SECONDS, 1)[1])
            if found := STAGE_PEAK.search(line):
                job.stage_peaks_gib[found[1]] = float(found[2])
        if proc.returncode == 0:
            _read_back(job, store)
        return job


def _read_back(job: MainJob, store: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("rankbacktest")
    (run,) = client.search_runs([experiment.experiment_id])
    job.metrics = dict(run.data.metrics)
    for key in run.data.metrics:
        if key.startswith("fold/"):
            history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
            job.folds[key] = [m.value for m in history]


def main() -> None:
    """``e2e.py [--case OVERRIDES]...``: each case (Hydra overrides, space-separated; "" = the defaults) as one
    main job, one after the other; a line each: wall, peak RSS, stage seconds, rank IC, trees and fit a fold."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--case", action="append", default=None, help="overrides of one main job; repeatable")
    for case in parser.parse_args().case or [""]:
        job = run_main_job(case.split())
        if job.returncode:
            print(job.output[-3000:])
            raise SystemExit(f"{case!r}: exit {job.returncode}")
        print(
            f"{case or '(defaults)'}: wall {job.wall_s:.1f} s, peak RSS {job.peak_rss_gib:.2f} GiB, "
            f"load {job.load:.2f}, "
            f"rank IC {job.metrics.get('rank_ic_mean', float('nan')):+.4f}, trees/fold {job.fold_mean('trees'):.1f}, "
            f"fit/fold {job.fold_mean('fit_seconds'):.2f} s, stages {json.dumps(job.stages)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
