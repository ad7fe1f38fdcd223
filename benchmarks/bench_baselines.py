"""Benchmark: the baselines' scoring (best factor and linear ranker) on the main job's folds.

    .venv/bin/python benchmarks/bench_baselines.py

The default market and config (``conf/``, composed as the CLI composes them), ``features=all``, the main
job's 25 monthly folds; :func:`backtest.baselines.baseline_scores` is timed once, then called again
under tracemalloc for the peak of what it allocates (numpy arrays included), and the SHA-256 prefix of
each baseline's scores is printed, so that a change to how the ranks are computed can be checked to
leave the scores bit for bit the same. For a before/after pair, copy this script into a worktree of an
older commit and run it there (it imports the project it sits in; ``baseline_scores(matrix, labels,
folds)`` has kept its signature).

The recorded figures and score hashes are in benchmarks/README.md ("Baselines").
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(__file__))

from bench_transformer_backtest import build_parts

from backtest.baselines import baseline_scores
from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import plan_backtest
from backtest.features import build_features


def main() -> None:
    parts = build_parts({}, [], groups=("data", "features", "label", "portfolio"))
    panel = parts["data"].panel
    plan = plan_backtest(panel, label=parts["label"], schedule=parts["schedule"], portfolio=parts["portfolio"])
    matrix = build_features(panel, parts["features"], data_fingerprint=panel_fingerprint(panel))
    print(
        f"{len(plan.folds)} folds, matrix {matrix.values.shape} ({matrix.values.nbytes / 2**30:.2f} GiB); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    t0 = time.perf_counter()
    scores, choices = baseline_scores(matrix, plan.labels, plan.folds)
    seconds = time.perf_counter() - t0
    tracemalloc.start()  # a second call, traced (tracing slows it down)
    baseline_scores(matrix, plan.labels, plan.folds)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"baseline_scores: {seconds:.1f} s, traced peak {peak / 2**30:.2f} GiB")
    for name, s in scores.items():
        print(f"  {name:8} {len(s):,} scores, sha256 {hashlib.sha256(s.to_numpy().tobytes()).hexdigest()[:16]}")
    print(f"  factor choices: {', '.join(sorted(set(choices['feature'])))}")


if __name__ == "__main__":
    main()
