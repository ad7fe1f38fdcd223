"""Benchmark: what the signal and portfolio pages add to the main job.

    .venv/bin/python benchmarks/bench_pages.py                  # the main job with its pages, then without
    .venv/bin/python benchmarks/bench_pages.py --repeat 2 experiment=smoke

Each case is the main job as a user runs it (:func:`e2e.run_main_job`: a fresh process from a cold feature
cache into its own store), with the pages (``tracking.pages=true``, the default) and without them
(``tracking.pages=false``), one after the other, ``--repeat`` times. Reported per run: wall and CPU seconds,
the 1-minute load average at its start, the seconds the run itself logs for writing the pages (``pages_s``:
their numbers, charts and HTML) with their share of the wall, and the seconds of the forward returns
(``forward_returns_s``, computed in both cases: they are logged beside the predictions whatever the pages).
On a shared machine the walls of two runs differ by more than the pages cost: ``pages_s`` beside the wall of
the same run is the figure to read.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from e2e import run_main_job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of both cases (e.g. experiment=smoke)")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (with, then without the pages)")
    args = parser.parse_args()
    print(f"{'case':<10}{'wall s':>9}{'CPU s':>9}{'load':>6}{'pages s':>9}{'share':>8}{'fwd ret s':>11}{'rank IC':>10}")
    for _ in range(args.repeat):
        for case, switch in (("pages", "true"), ("no pages", "false")):
            job = run_main_job([*args.overrides, f"tracking.pages={switch}"])
            if job.returncode:
                sys.exit(f"{case}: the main job failed (exit {job.returncode}):\n{job.output[-2000:]}")
            pages = job.stages.get("pages_s", 0.0)
            print(
                f"{case:<10}{job.wall_s:>9.1f}{job.cpu_s:>9.1f}{job.load:>6.1f}{pages:>9.2f}"
                f"{pages / job.wall_s:>8.1%}{job.stages.get('forward_returns_s', float('nan')):>11.2f}"
                f"{job.metrics.get('rank_ic_mean', float('nan')):>+10.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
