"""A warm-started backtest on the tiny market, with fold checkpoints, that can kill itself at a chosen
instant: the subprocess of the kill tests in ``tests/system/test_integrity.py``.

    python -m tests.system.checkpoint_job CHECKPOINT_DIR RESULT.npz [--kill POINT --fold K] [--code-fingerprint FP]

POINT is where the process sends itself SIGKILL while it checkpoints fold K:

- ``model_saved``: the ranker's state is written, the fold's outcome is not (the window of issue 10);
- ``mid_write``: half of the fold's checkpoint file is on disk (a temporary file, never renamed);
- ``before_replace``: the whole file is written, not yet renamed into place;
- ``after_replace``: the fold's checkpoint is in place, the run has not gone on.

Without ``--kill`` the run finishes and writes its scores and daily returns to RESULT.npz.
``--code-fingerprint`` pins the code fingerprint (which keys the checkpoints): the kill tests are about the
instant of the kill, and a working tree edited between the killed run and its rerun would otherwise,
rightly, resume nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import numpy as np

import backtest.checkpoints as checkpoints
import backtest.engine as engine
from backtest.data.fingerprint import panel_fingerprint
from backtest.data.synthetic import simulate_market
from backtest.engine import BacktestResult, EngineOptions, plan_backtest, run_backtest
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from models.lambdarank import LambdaRankRanker
from tests.small_backtest import MARKET, SCHEDULE, small_ranker

FEATURES = FeatureSetSpec(name="small", indicators=("ret_5d", "ret_20d", "vol_20d", "rsi_14"), windows=(5,))
KILL_POINTS = ("model_saved", "mid_write", "before_replace", "after_replace")


def warm_ranker() -> LambdaRankRanker:
    """LambdaRank continuing each fold's booster (a fresh fit every third fold)."""
    return small_ranker(warm_start=True, warm_start_rounds=10, full_refit_every=3)


def run(checkpoint_dir: Path | None) -> BacktestResult:
    """The job's backtest (also run in the test process for the uninterrupted reference)."""
    panel = simulate_market(MARKET).panel
    plan = plan_backtest(panel, label=LabelSpec(), schedule=RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec())
    return run_backtest(
        plan,
        features=FEATURES,
        ranker_factory=warm_ranker,
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(checkpoint_dir=checkpoint_dir, audit_cutoffs=0),
        seed=3,
    )


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, fold: int) -> None:
    """Make this process kill itself at ``point`` of checkpointing ``fold`` (see the module docstring)."""
    if point == "model_saved":
        real_save = LambdaRankRanker.save
        calls = []

        def save(self: LambdaRankRanker, path: str | Path) -> None:
            real_save(self, path)
            calls.append(path)
            if len(calls) == fold + 1:  # a fresh run saves fold 0, 1, ... in order
                _die()

        LambdaRankRanker.save = save  # type: ignore[method-assign]
        return
    target = f"fold_{fold:04d}"
    if point == "mid_write":
        real_savez = np.savez_compressed

        def savez(file: Path, **arrays: np.ndarray) -> None:
            real_savez(file, **arrays)
            if target in Path(file).name:
                with open(file, "r+b") as handle:
                    handle.truncate(Path(file).stat().st_size // 2)
                _die()

        checkpoints.np.savez_compressed = savez  # type: ignore[assignment]
        return
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        hit = Path(dst).name.startswith(target)
        if hit and point == "before_replace":
            _die()
        real_replace(src, dst)
        if hit and point == "after_replace":
            _die()

    checkpoints.os.replace = replace  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.system.checkpoint_job")
    parser.add_argument("checkpoint_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--kill", choices=KILL_POINTS)
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--code-fingerprint")
    args = parser.parse_args(argv)
    if args.code_fingerprint:
        pinned = args.code_fingerprint
        engine.code_fingerprint = lambda scope="result", root=None: pinned  # type: ignore[assignment]
    if args.kill:
        arm(args.kill, args.fold)
    result = run(args.checkpoint_dir)
    np.savez(args.result, scores=result.scores.to_numpy(), returns=result.portfolio.returns.to_numpy())
    print(f"resumed_folds={result.resumed_folds} folds={len(result.records)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
