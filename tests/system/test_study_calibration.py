"""benchmarks/bench_study_calibration.py on a small market: the verdicts' error rates from planted truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_study_calibration.py"
#: 60 stocks over 2021-2022, half a year of test days (the tiny market of tests/small_backtest.py)
SMALL = [
    "data.n_stocks=60",
    "data.n_members=40",
    "data.start=2021-01-01",
    "data.end=2022-12-31",
    "backtest.test_start=2022-07-01",
    "backtest.train_window=100",
    "backtest.valid_days=10",
]
KEYS = ("false_positive_rate_aa", "false_positive_rate_volatility", "power_moneyflow", "power_industry")


@pytest.mark.slow
def test_the_calibration_counts_resolved_verdicts_over_market_seeds(tmp_path: Path) -> None:
    out, jsonl, runs = tmp_path / "calibration.json", tmp_path / "seeds.jsonl", tmp_path / "runs.jsonl"
    command = [sys.executable, str(SCRIPT), "--market-seeds", "2", "--threads", "2", "--set", *SMALL]
    subprocess.run(
        [*command, "--jsonl", str(jsonl), "--runs", str(runs), "--out", str(out)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    result = json.loads(out.read_text())
    assert result["n_market_seeds"] == 2 and 100 <= result["test_days"] <= 130
    seeds = {s["market_seed"]: s for s in result["seeds"]}
    assert sorted(seeds) == [1, 2]
    for seed in seeds.values():
        for comparison in ("aa", "volatility", "moneyflow", "industry"):
            row = seed[comparison]
            assert row["resolved"] == (row["p"] < 0.05) and row["worse"] == (row["resolved"] and row["diff"] < 0)
            assert row["se"] > 0 and row["days"] == seed["test_days"]
        # another model seed is another model: the A/A difference is not zero, but within its noise here
        assert seed["aa"]["diff"] != 0 and not seed["aa"]["resolved"]
    # market seed 1: dropping money flow costs 0.033 of daily rank IC with LambdaRank's default, which half a
    # year of test days does not resolve (the default market's two years do: benchmarks/README.md)
    assert seeds[1]["moneyflow"]["diff"] == pytest.approx(-0.0335, abs=5e-4) and seeds[1]["moneyflow"]["p"] > 0.05
    for key, comparison, counted in zip(
        KEYS, ("aa", "volatility", "moneyflow", "industry"), ("resolved",) * 2 + ("worse", "resolved")
    ):
        k = sum(s[comparison][counted] for s in seeds.values())
        assert result[key] == k / 2 and result[f"{key}_count"] == k
        low = 0.0 if k == 0 else beta.ppf(0.025, k, 2 - k + 1)
        high = 1.0 if k == 2 else beta.ppf(0.975, k + 1, 2 - k)
        assert np.isclose(result[f"{key}_ci_low"], low) and np.isclose(result[f"{key}_ci_high"], high)
    # the JSONL of finished seeds summarises to the same rates
    again = tmp_path / "again.json"
    subprocess.run(
        [*command, "--summarise", str(jsonl), "--out", str(again)], check=True, capture_output=True, cwd=ROOT
    )
    assert {k: json.loads(again.read_text())[k] for k in KEYS} == {k: result[k] for k in KEYS}
    # a later call with the same --runs file reruns no backtest and gives the same seeds
    assert len(runs.read_text().splitlines()) == 10
    resumed = tmp_path / "resumed.json"
    subprocess.run([*command, "--runs", str(runs), "--out", str(resumed)], check=True, capture_output=True, cwd=ROOT)
    assert len(runs.read_text().splitlines()) == 10
    assert json.loads(resumed.read_text())["seeds"] == result["seeds"]
