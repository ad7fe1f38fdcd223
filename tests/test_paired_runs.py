"""Seed replicates of backtests and their paired comparison (benchmarks/replicates.py,
benchmarks/paired_runs.py): the job syntax, the seed means and spreads, and a verdict that needs a
difference beyond both the days' sampling error and the seed spread."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.statistics import hac_standard_error, seed_standard_error
from benchmarks import paired_runs, replicates

DAYS = pd.bdate_range("2024-01-02", periods=300)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stock_transformer", ("stock_transformer", "stock_transformer", [])),
        ("no_cross=stock_transformer_no_cross", ("no_cross", "stock_transformer_no_cross", [])),
        (
            "listnet=stock_transformer:model.training.loss=listnet,model.training.max_epochs=5",
            ("listnet", "stock_transformer", ["model.training.loss=listnet", "model.training.max_epochs=5"]),
        ),
        ("lambdarank:model.config.min_rounds=20", ("lambdarank", "lambdarank", ["model.config.min_rounds=20"])),
    ],
)
def test_a_job_names_its_model_and_overrides(text: str, expected: tuple) -> None:
    assert replicates.parse_job(text) == expected


def _write(folder: Path, name: str, seed: int, rank_ic: np.ndarray, linear: np.ndarray) -> None:
    run = {
        "model": name,
        "wall_s": 10.0,
        "fold_s_mean": 1.0,
        "metrics": {"rank_ic_mean": float(np.mean(rank_ic)), "rank_ic_se": 0.004, "sharpe": 1.0 + seed / 10},
        "daily": {
            "date": [f"{d:%Y-%m-%d}" for d in DAYS],
            "rank_ic": rank_ic.tolist(),
            "ndcg": [0.5] * len(DAYS),
            "baseline_linear_rank_ic": linear.tolist(),
            "baseline_factor_rank_ic": (linear - 0.02).tolist(),
        },
    }
    (folder / f"{name}_seed{seed}.json").write_text(json.dumps({"runs": [run]}))


def test_seed_means_spreads_and_paired_differences(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    linear = 0.05 + 0.1 * rng.standard_normal(len(DAYS))
    offsets = {1: -0.012, 2: -0.010, 3: -0.008}  # a model 0.01 below the linear ranker, seeds 0.002 apart
    for seed, offset in offsets.items():
        _write(tmp_path, "model", seed, linear + offset + 0.01 * rng.standard_normal(len(DAYS)), linear)
    frame = paired_runs.table(paired_runs.load([tmp_path]), ["linear", "factor"])
    row = frame.loc["model"]

    seed_values = [json.loads((tmp_path / f"model_seed{s}.json").read_text())["runs"][0] for s in offsets]
    ics = [r["metrics"]["rank_ic_mean"] for r in seed_values]
    assert row["seeds"] == 3
    assert row["rank_ic"] == pytest.approx(np.mean(ics))
    assert row["rank_ic_seed_sd"] == pytest.approx(np.std(ics, ddof=1))
    mean_daily = np.mean([r["daily"]["rank_ic"] for r in seed_values], axis=0)
    assert row["minus_linear"] == pytest.approx(np.mean(mean_daily - linear))
    assert row["minus_linear"] == pytest.approx(-0.010, abs=0.002)
    assert row["minus_linear_se"] == pytest.approx(hac_standard_error(mean_daily - linear, paired_runs.LAGS))
    assert row["minus_linear_seed_se"] == pytest.approx(seed_standard_error(row["rank_ic_seed_sd"], 3))
    assert row["minus_linear_verdict"] == "worse"  # about 16 s.e. of the days and 9 seed s.e. below
    assert row["minus_factor"] == pytest.approx(row["minus_linear"] + 0.02)
    assert row["minus_factor_verdict"] == "better"


def test_a_difference_within_the_seed_spread_is_unresolved(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    linear = 0.05 + 0.1 * rng.standard_normal(len(DAYS))
    for seed, offset in {1: -0.03, 2: +0.01, 3: +0.005}.items():  # mean -0.005, seeds 0.02 apart
        _write(tmp_path, "model", seed, linear + offset, linear)
    row = paired_runs.table(paired_runs.load([tmp_path]), ["linear"]).loc["model"]
    assert row["minus_linear"] == pytest.approx(-0.005)
    assert abs(row["minus_linear"] / row["minus_linear_se"]) > 1.96  # the days alone would resolve it
    assert abs(row["minus_linear"]) < 1.96 * row["minus_linear_seed_se"]
    assert row["minus_linear_verdict"] == "unresolved"


def test_an_unknown_reference_is_refused_with_the_names(tmp_path: Path) -> None:
    _write(tmp_path, "model", 1, np.full(len(DAYS), 0.05), np.full(len(DAYS), 0.04))
    with pytest.raises(SystemExit, match="no runs or baseline named 'ridge'.*model"):
        paired_runs.table(paired_runs.load([tmp_path]), ["ridge"])
