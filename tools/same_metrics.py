"""Does a change keep the main job's numbers? Run ``python -m backtest`` at two revisions and compare.

Each revision is checked out into a temporary git worktree and runs the main job there (its own code,
a cold feature cache, no checkpoints, a store of its own), with the same overrides. Every recorded
metric and every per-fold metric history is then compared bit for bit, except wall times
(``fold/fit_seconds``). A renamed key is matched with ``--rename OLD=NEW``::

    .venv/bin/python tools/same_metrics.py 8f13b3b HEAD --rename ndcg_at_5=ndcg --rename fold/ndcg_at_5=fold/ndcg

Exit status 0 when every metric is equal, 1 when one differs or is missing, 2 when a run fails. Minutes
a run (the main job twice, one after the other).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ("fold/fit_seconds",)


def run_at(revision: str, overrides: list[str], scratch: Path) -> dict[str, list[float]]:
    """The main job's metrics at ``revision``: key -> its values by step (a headline metric has one)."""
    tree = scratch / f"tree-{revision}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
    try:
        store = f"sqlite:///{scratch}/{revision}.db"
        command = [
            sys.executable,
            "-m",
            "backtest",
            *overrides,
            f"engine.cache_dir={scratch}/cache-{revision}",
            f"tracking.uri={store}",
            f"hydra.run.dir={scratch}/run-{revision}",
        ]
        env = {**os.environ, "PYTHONPATH": str(tree), "MLFLOW_DISABLE_TELEMETRY": "true"}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{revision}: python -m backtest failed\n{done.stderr[-3000:]}", file=sys.stderr)
            sys.exit(2)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("rankbacktest").experiment_id])
    return {
        key: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
        for key in run.data.metrics
    }


def same(a: list[float], b: list[float]) -> bool:
    """Equal bit for bit, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> int:
    """Compare the two revisions' metrics; print each difference; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="-- OVERRIDES: for both runs")
    parser.add_argument("before", help="a git revision, e.g. a commit or main~3")
    parser.add_argument("after", nargs="?", default="HEAD", help="a git revision (default HEAD)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="a key renamed between them")
    argv = sys.argv[1:] if argv is None else argv
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []  # Hydra overrides for both runs
    args = parser.parse_args(argv[: len(argv) - len(overrides) - (1 if "--" in argv else 0)])
    renames = dict(r.split("=", 1) for r in args.rename)
    with tempfile.TemporaryDirectory(prefix="same-metrics-") as tmp:
        before = {renames.get(k, k): v for k, v in run_at(args.before, overrides, Path(tmp)).items()}
        after = run_at(args.after, overrides, Path(tmp))
    keys = sorted((set(before) | set(after)) - set(TIMINGS))
    differ = [k for k in keys if not same(before.get(k, []), after.get(k, []))]
    for key in differ:
        print(f"differs: {key}: {before.get(key, 'missing')} -> {after.get(key, 'missing')}")
    folds = sum(1 for k in keys if len(after.get(k, [])) > 1)
    print(
        f"{len(keys) - len(differ)} of {len(keys)} metrics identical ({folds} per-fold histories among them); "
        f"{args.before} -> {args.after}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
