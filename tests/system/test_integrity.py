"""The caches and checkpoints under real faults: changed code, damaged files, kills at any instant.

Each test injects its fault for real: a source file edited in a copy of the tree, a checkpoint truncated
or overwritten on disk, a backtest subprocess that receives SIGKILL while it checkpoints a fold.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import backtest.code_fingerprint as fingerprinting
from backtest.code_fingerprint import code_fingerprint
from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import BacktestResult, EngineOptions, plan_backtest, run_backtest
from backtest.labels import LabelSpec
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from tests.small_backtest import SCHEDULE, small_ranker
from tests.system import checkpoint_job

ROOT = Path(__file__).resolve().parents[2]
SCOPES = ("result", "features")


def _fingerprints(root: Path | None = None) -> dict[str, str]:
    return {scope: code_fingerprint.__wrapped__(scope, root) for scope in SCOPES}  # uncached


# --- the code fingerprint ----------------------------------------------------------------------------


def test_the_code_fingerprint_follows_only_the_code_that_can_change_a_result(tmp_path: Path) -> None:
    for package in ("backtest", "models"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = _fingerprints(tmp_path)
    assert before == _fingerprints(), "the fingerprint hashes file contents, not where the tree lies"
    # (file edited, result fingerprint changes, feature fingerprint changes)
    edits = [
        ("backtest/tracking/run.py", False, False),  # recording a result
        ("backtest/reports/summary.py", False, False),  # drawing it
        ("backtest/cli/compose.py", False, False),  # composing it
        ("backtest/code_fingerprint.py", False, False),  # hashing it
        ("models/lambdarank.py", True, False),  # a model: checkpoints go stale, cached features do not
        ("backtest/engine.py", True, False),
        ("backtest/portfolio.py", True, False),
        ("backtest/features/momentum.py", True, True),  # feature code: both
        ("backtest/data/tradability.py", True, True),
    ]
    for name, result_changes, features_change in edits:
        with open(tmp_path / name, "a") as source:
            source.write("\n# an edit\n")
        after = _fingerprints(tmp_path)
        assert (after["result"] != before["result"], after["features"] != before["features"]) == (
            result_changes,
            features_change,
        ), name
        before = after


def test_package_versions_enter_the_fingerprint_of_the_code_that_runs_on_them(monkeypatch) -> None:
    real = fingerprinting.package_versions
    base = _fingerprints()

    def upgraded(name: str):
        return lambda packages: {**real(packages), **({f"pkg.{name}": "99.0"} if name in packages else {})}

    monkeypatch.setattr(fingerprinting, "package_versions", upgraded("lightgbm"))
    lightgbm = _fingerprints()
    monkeypatch.setattr(fingerprinting, "package_versions", upgraded("numpy"))
    numpy = _fingerprints()
    assert lightgbm["result"] != base["result"] and lightgbm["features"] == base["features"]
    assert numpy["result"] != base["result"] and numpy["features"] != base["features"]


# --- damaged fold checkpoints ------------------------------------------------------------------------


def _backtest(panel: pd.DataFrame, checkpoint_dir: Path | None, factory=small_ranker) -> BacktestResult:
    plan = plan_backtest(panel, label=LabelSpec(), schedule=RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec())
    return run_backtest(
        plan,
        features=checkpoint_job.FEATURES,
        ranker_factory=factory,
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(checkpoint_dir=checkpoint_dir, audit_cutoffs=0),
        seed=3,
    )


def _assert_bitwise_equal(result: BacktestResult, reference: BacktestResult) -> None:
    assert result.scores.index.equals(reference.scores.index)
    assert result.scores.to_numpy().tobytes() == reference.scores.to_numpy().tobytes()
    assert result.portfolio.returns.to_numpy().tobytes() == reference.portfolio.returns.to_numpy().tobytes()
    assert result.metrics["sharpe"] == reference.metrics["sharpe"] or np.isnan(reference.metrics["sharpe"])


def _damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "junk":  # the same size, other bytes
        path.write_bytes(np.random.default_rng(0).bytes(len(raw)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flipped":  # one byte of the compressed scores changed: the zip's own CRC may not see it
        middle = len(raw) // 2
        path.write_bytes(raw[:middle] + bytes([raw[middle] ^ 0xFF]) + raw[middle + 1 :])


@pytest.fixture(scope="module")
def stateless_reference(tiny_panel) -> BacktestResult:
    return _backtest(tiny_panel, None)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "junk",
        pytest.param("empty", marks=pytest.mark.slow),
        pytest.param("flipped", marks=pytest.mark.slow),
    ],
)
def test_a_damaged_fold_checkpoint_is_recomputed_with_one_warning(
    how, tiny_panel, stateless_reference, tmp_path, caplog
) -> None:
    first = _backtest(tiny_panel, tmp_path)
    n = len(first.records)
    damaged = next(tmp_path.rglob("fold_0002.npz"))
    _damage(damaged, how)
    with caplog.at_level(logging.WARNING, logger="backtest.checkpoints"):
        rerun = _backtest(tiny_panel, tmp_path)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "backtest.checkpoints"]
    assert len(warnings) == 1 and "fold_0002.npz" in warnings[0].getMessage()
    assert rerun.resumed_folds == n - 1
    _assert_bitwise_equal(rerun, stateless_reference)
    again = _backtest(tiny_panel, tmp_path)  # the recomputed fold was checkpointed again, whole
    assert again.resumed_folds == n and again.resumed_from == again.code_fingerprint
    _assert_bitwise_equal(again, stateless_reference)


@pytest.fixture(scope="module")
def warm_reference() -> BacktestResult:
    """The warm-started job's backtest, uninterrupted and without checkpoints."""
    return checkpoint_job.run(None)


def test_a_damaged_warm_start_checkpoint_refits_from_the_state_before_it(
    tiny_panel, warm_reference, tmp_path, caplog
) -> None:
    checkpoint_job.run(tmp_path)
    _damage(next(tmp_path.rglob("fold_0002.npz")), "truncated")
    with caplog.at_level(logging.WARNING, logger="backtest.checkpoints"):
        rerun = checkpoint_job.run(tmp_path)
    # fold 2 continues from fold 1's saved booster, fold 3 is read back, fold 4 continues from fold 3's
    assert rerun.resumed_folds == len(rerun.records) - 1
    assert sum(r.levelno >= logging.WARNING and r.name == "backtest.checkpoints" for r in caplog.records) == 1
    _assert_bitwise_equal(rerun, warm_reference)


# --- a warm-started run killed while it checkpoints ----------------------------------------------------


def _job(checkpoint_dir: Path, out: Path, *args: str) -> list[str]:
    """The job's command line; the code fingerprint pinned to this process's (see tests/system/checkpoint_job.py)."""
    return [
        sys.executable,
        "-m",
        "tests.system.checkpoint_job",
        str(checkpoint_dir),
        str(out),
        "--code-fingerprint",
        code_fingerprint(),
        *args,
    ]


def _units(checkpoint_dir: Path) -> list[str]:
    return sorted(p.name for p in checkpoint_dir.rglob("fold_*.npz"))


def _resume_and_compare(checkpoint_dir: Path, out: Path, reference: BacktestResult, resumed: int) -> None:
    done = subprocess.run(_job(checkpoint_dir, out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed_folds={resumed} " in done.stdout
    with np.load(out) as saved:
        assert saved["scores"].tobytes() == reference.scores.to_numpy().tobytes()
        assert saved["returns"].tobytes() == reference.portfolio.returns.to_numpy().tobytes()
    assert not list(checkpoint_dir.rglob(".fold_*")), "temporary files of the killed writer are cleared"


@pytest.mark.parametrize(
    ("point", "fold"),
    [
        ("model_saved", 4),  # the window of issue 10: model on disk, outcome not (a warm fold after one)
        pytest.param("model_saved", 1, marks=pytest.mark.slow),
        pytest.param("mid_write", 2, marks=pytest.mark.slow),
        pytest.param("before_replace", 4, marks=pytest.mark.slow),
        pytest.param("after_replace", 4, marks=pytest.mark.slow),
    ],
)
def test_a_warm_start_run_killed_while_checkpointing_a_fold_resumes_bitwise(
    point, fold, warm_reference, tmp_path
) -> None:
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "result.npz"
    killed = subprocess.run(
        _job(checkpoints, out, "--kill", point, "--fold", str(fold)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    whole = fold + 1 if point == "after_replace" else fold
    assert _units(checkpoints) == [f"fold_{i:04d}.npz" for i in range(whole)]
    _resume_and_compare(checkpoints, out, warm_reference, resumed=whole)


@pytest.mark.slow
@pytest.mark.parametrize("after_units", [1, 3, 5])
def test_a_warm_start_run_killed_from_outside_resumes_bitwise(after_units, warm_reference, tmp_path) -> None:
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "result.npz"
    job = subprocess.Popen(_job(checkpoints, out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(_units(checkpoints)) < after_units and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        job.send_signal(signal.SIGKILL)  # wherever the next fold is: fitting, predicting, writing
    finally:
        job.wait(timeout=60)
    assert job.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    whole = len(_units(checkpoints))
    assert whole >= after_units
    _resume_and_compare(checkpoints, out, warm_reference, resumed=whole)
