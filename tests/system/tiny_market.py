"""The tiny market as Hydra overrides: the one spelling that the system tests pass to ``python -m backtest``,
and :func:`main_job`, the one way they start it.

``TINY_MARKET`` shrinks the synthetic market (60 stocks, 40 index members, from 2023-06-01, tested from
2025-09-01) and keeps the feature cache and the fold checkpoints off; a test that runs a configured
experiment or study as it is adds only these. ``TINY`` is the main job made quick on that market: a short
schedule, a small LambdaRank on one thread, no tearsheet.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TINY_MARKET = [
    "data.n_stocks=60",
    "data.n_members=40",
    "data.start=2023-06-01",
    "backtest.test_start=2025-09-01",
    "engine.feature_cache=false",
    "engine.checkpoints=false",
]
#: the main job made quick on a small market: a short schedule and a small LambdaRank on one thread
TINY_SCHEDULE = [
    "backtest.train_window=80",
    "backtest.valid_days=10",
    "backtest.retrain_every=20",
    "model.config.num_boost_round=20",
    "model.config.min_data_in_leaf=30",
    "model.config.num_threads=1",
]
TINY = [*TINY_MARKET, *TINY_SCHEDULE, "tracking.tearsheet=false"]


def main_job(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m backtest ARGS`` in a fresh process started in ``tmp_path``, its run and sweep folders there,
    as a user sees it (``HYDRA_FULL_ERROR`` unset; ``env`` added to the environment); output captured."""
    full_env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    command = [sys.executable, "-m", "backtest", *args]
    command += [f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=600, cwd=tmp_path)
