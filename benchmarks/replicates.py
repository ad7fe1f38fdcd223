r"""Seed replicates of full backtests, run as parallel processes (one GPU is shared by all of them).

    .venv/bin/python benchmarks/replicates.py --out-dir benchmarks/results/models --seeds 1 2 3 \\
        --job stock_transformer --job no_cross=stock_transformer_no_cross \\
        --job listnet=stock_transformer:model.training.loss=listnet --parallel 8 --deadline 540

Every job ``NAME=MODEL[:OVERRIDE,...]`` runs once per seed as its own process of
``benchmarks/bench_transformer_backtest.py --models MODEL --set seed=S data.seed=MARKET OVERRIDES``: the
same default market (``data.seed``, 42 unless ``--market-seed``) for every job, the model seed varied.
Each writes ``OUT_DIR/NAME_seedS.json`` with the run's daily rank IC and NDCG, its linear and best-factor
baselines' daily rank IC and (``--history``, on by default) every fold's per-epoch curves, and its log
``OUT_DIR/NAME_seedS.log``. ``benchmarks/paired_runs.py`` turns the files into paired differences.

At most ``--parallel`` processes run at once, in the order given (job by job, seed by seed). At
``--deadline`` seconds after the start the processes still running are ended, so what finished is kept
even when the whole set does not fit the time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
BENCH = PROJECT / "benchmarks" / "bench_transformer_backtest.py"


def parse_job(text: str) -> tuple[str, str, list[str]]:
    """``NAME=MODEL:a=1,b=2`` (or ``MODEL``, named after itself) -> (name, model, overrides)."""
    name, _, rest = text.partition("=") if "=" in text.split(":")[0] else (text.split(":")[0], "", text)
    model, _, overrides = rest.partition(":")
    return name, model or name, [o for o in overrides.split(",") if o]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", action="append", required=True, help="NAME=MODEL[:OVERRIDE,...]; repeatable")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="model seeds (default 1 2 3)")
    parser.add_argument("--market-seed", type=int, default=42, help="data.seed of every run (default 42)")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every job")
    parser.add_argument("--parallel", type=int, default=4, help="processes at once (default 4)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each process (default 1)")
    parser.add_argument("--deadline", type=float, default=0.0, help="end what still runs after this many seconds")
    parser.add_argument("--folds", type=int, default=0, help="only the first N folds of each run (0 = all)")
    parser.add_argument("--no-history", action="store_true", help="leave out the per-epoch curves")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()

    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    queue = []
    for text in args.job:
        name, model, overrides = parse_job(text)
        for seed in args.seeds:
            stem = f"{name}_seed{seed}"
            cmd = [sys.executable, str(BENCH), "--models", model, "--audit-cutoffs", "0", "--folds", str(args.folds)]
            cmd += ["--out"]
            cmd += [str(args.out_dir / f"{stem}.json"), "--set", f"seed={seed}", f"data.seed={args.market_seed}"]
            cmd += args.set + overrides + ([] if args.no_history else ["--history"])
            queue.append((stem, cmd))

    started = time.monotonic()
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    while queue or running:
        while queue and len(running) < args.parallel:
            stem, cmd = queue.pop(0)
            log = (args.out_dir / f"{stem}.log").open("w")
            running[stem] = (
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                time.monotonic(),
                log,
            )
            print(f"{time.monotonic() - started:6.0f} s  start {stem}", flush=True)
        time.sleep(2.0)
        for stem, (proc, t0, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                print(
                    f"{time.monotonic() - started:6.0f} s  done  {stem} (exit {proc.returncode}, "
                    f"{time.monotonic() - t0:.0f} s)",
                    flush=True,
                )
                del running[stem]
        if args.deadline and time.monotonic() - started > args.deadline:
            for stem, (proc, _, log) in running.items():
                proc.kill()
                log.close()
                print(f"{time.monotonic() - started:6.0f} s  ended {stem} at the deadline", flush=True)
            for stem, _ in queue:
                print(f"not started: {stem}", flush=True)
            break


if __name__ == "__main__":
    main()
