"""Benchmark: each stage's own peak resident memory in the main job (Linux only).

    .venv/bin/python benchmarks/bench_stage_memory.py                         # the main job, cold cache
    .venv/bin/python benchmarks/bench_stage_memory.py experiment=weekly       # any overrides of the CLI

Runs ``python -m backtest`` in this process, from a cold feature cache into a store of its own, with
``backtest.engine.release_freed_memory`` wrapped: at the end of each stage (features, binning, folds,
baselines) it prints the stage's own peak (``VmHWM``) and what is resident, then resets the high-water
mark (``/proc/self/clear_refs``) for the next stage; the last line, ``record``, is what follows the
baselines (the run's metrics, reports and artifacts written to the store). The first stage's peak
includes what comes before it: the panel (the synthetic market's generation) and the feature audit. The
engine itself logs the peak so far instead, since a reset would also reset what ``wait4`` reports to
``benchmarks/e2e.py``. benchmarks/README.md ("Memory") records them.
"""

from __future__ import annotations

import sys
import tempfile

import backtest.engine as engine
from backtest.cli import main as cli_main

_release = engine.release_freed_memory


def _resident_gib() -> dict[str, float]:
    with open("/proc/self/status") as f:
        kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmHWM", "VmRSS")}
    return {k: v / 2**20 for k, v in kib.items()}


def _release_and_reset(stage: str) -> None:
    now = _resident_gib()
    sys.stderr.flush()  # the folds' progress bar ends without a newline
    print(f"\nstage {stage:10} own peak {now['VmHWM']:.3f} GiB, resident at its end {now['VmRSS']:.3f} GiB", flush=True)
    _release(stage)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark


def main() -> None:
    engine.release_freed_memory = _release_and_reset
    with tempfile.TemporaryDirectory(prefix="stage-memory-") as tmp:
        sys.argv = [
            "backtest",
            *sys.argv[1:],
            f"engine.cache_dir={tmp}/cache",
            f"tracking.uri=sqlite:///{tmp}/mlruns.db",
            f"hydra.run.dir={tmp}/run",
        ]
        cli_main()
        _release_and_reset("record")


if __name__ == "__main__":
    main()
