"""Benchmark: how often a study's verdict is right, measured on the synthetic market's planted truth.

    .venv/bin/python benchmarks/bench_study_calibration.py [--market-seeds 20] [--workers 1] [--threads 2]
        [--set data.n_stocks=60 ...] [--out FILE.json]

For every market seed (``data.seed`` = 1, 2, ...; the default market's shape otherwise) five backtests
run through the engine on the same folds (LambdaRank, the default label, portfolio and schedule, model
seed 1 unless said): the baseline ``features=all``, and the four comparisons a study would make with it.

| comparison | trial | planted truth | counted as a detection |
|---|---|---|---|
| A/A | ``features=all`` with model seed 2 | no effect | any resolved difference |
| volatility | ``features=no_volatility`` | no effect: volatility never enters returns | any resolved difference |
| money flow | ``features=no_moneyflow`` | an effect: informed flow moves the next day's return | a resolved *worse* |
| industry | ``features=with_industry`` | an effect: the industry tilt flips with the regime | any resolved difference |

A difference is resolved by the study's own rule on its primary statistic (``backtest.comparison``): the
paired daily rank-IC difference over the common scored days, Newey-West standard error with the label's
overlap as lags (``ic_lags``), two-sided p below 5% (one trial against its baseline, so Holm's
adjustment leaves it as it is). Model seeds are not replicated here: the rates are those of a study run
with one seed, the default. The rates come with Clopper-Pearson 95% intervals over the market seeds.

Targets: false positives at most 5% (the interval must not exclude 5%); power on money flow at least 80%
at the default test length (two years, about 485 test days). ``--set backtest.test_start=...`` (with a
longer ``data.start`` / ``data.end``) measures another test length.

The JSON (``--out``) holds ``false_positive_rate_aa``, ``false_positive_rate_volatility``,
``power_moneyflow`` and ``power_industry``, each with ``_ci_low`` / ``_ci_high``, ``n_market_seeds`` and
``test_days``, then every seed's differences, standard errors and p-values. The engine runs without
MLflow (``backtest.engine.run_backtest``, as ``bench_transformer_backtest.py`` does), without the
feature audit and without the baselines, which do not change a verdict. ``--workers`` runs market seeds
in parallel processes, each with ``--threads`` LightGBM and numba threads.

The figures are in benchmarks/README.md ("Study calibration"); ``tests/test_study_calibration.py``
runs it on a small market.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the trials of one market seed: name -> (features option, model seed)
TRIALS: dict[str, tuple[str, int]] = {
    "baseline": ("all", 1),
    "aa": ("all", 2),
    "volatility": ("no_volatility", 1),
    "moneyflow": ("no_moneyflow", 1),
    "industry": ("with_industry", 1),
}
#: comparison -> (its JSON key, which resolved differences count: "any" or "worse")
RATES: dict[str, tuple[str, str]] = {
    "aa": ("false_positive_rate_aa", "any"),
    "volatility": ("false_positive_rate_volatility", "any"),
    "moneyflow": ("power_moneyflow", "worse"),
    "industry": ("power_industry", "any"),
}


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of ``k`` successes in ``n`` trials.

    >>> tuple(round(x, 4) for x in clopper_pearson(0, 20))
    (0.0, 0.1684)
    >>> tuple(round(x, 4) for x in clopper_pearson(17, 20))
    (0.6211, 0.9679)
    """
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


def one_backtest(market_seed: int, trial: str, overrides: list[str], cache: str) -> dict[str, Any]:
    """One trial's backtest on one market seed: its daily rank IC and Newey-West lags (JSON-ready)."""
    from bench_transformer_backtest import build_parts

    from backtest.engine import EngineOptions, plan_backtest, run_backtest

    started = time.perf_counter()
    features, model_seed = TRIALS[trial]
    data = build_parts({}, [f"data.seed={market_seed}", *overrides], groups=("data",))["data"]
    parts = build_parts({"features": features}, [f"seed={model_seed}", *overrides])
    plan = plan_backtest(data.panel, label=parts["label"], schedule=parts["schedule"], portfolio=parts["portfolio"])
    options = EngineOptions(feature_cache_dir=Path(cache), checkpoint_dir=None, audit_cutoffs=0, baselines=False)
    result = run_backtest(
        plan,
        features=parts["features"],
        ranker_factory=parts["model"],
        data_fingerprint=f"calibration-{market_seed}",
        options=options,
        seed=parts["seed"],
    )
    daily = result.daily_ranking["rank_ic"]
    return {
        "market_seed": market_seed,
        "trial": trial,
        "dates": [d.strftime("%Y-%m-%d") for d in daily.index],
        "rank_ic": [float(v) for v in daily.to_numpy()],
        "ic_lags": int(result.ic_lags),
        "rank_ic_mean": float(result.metrics["rank_ic_mean"]),
        "wall_s": time.perf_counter() - started,
    }


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The four comparisons of one market seed, from its five backtests (:func:`one_backtest`)."""
    import pandas as pd

    from backtest.statistics import ALPHA, paired_mean_difference

    def series(run: dict[str, Any]) -> pd.Series:
        return pd.Series(run["rank_ic"], index=pd.DatetimeIndex(run["dates"]), dtype=np.float64)

    seed = runs["baseline"]["market_seed"]
    base = series(runs["baseline"])
    out: dict[str, Any] = {"market_seed": seed, "wall_s": sum(r["wall_s"] for r in runs.values())}
    out["rank_ic_mean"] = {name: run["rank_ic_mean"] for name, run in runs.items()}
    for comparison in RATES:
        lags = max(runs[comparison]["ic_lags"], runs["baseline"]["ic_lags"])
        d = paired_mean_difference(series(runs[comparison]), base, lags, np.random.default_rng([seed, 7]), n_boot=200)
        resolved = bool(np.isfinite(d.p_value) and d.p_value < ALPHA)
        out[comparison] = {"diff": d.diff, "se": d.se, "p": d.p_value, "days": d.n_days, "resolved": resolved}
        out[comparison]["worse"] = resolved and d.diff < 0
    out["test_days"] = int(base.notna().sum())
    return out


def summarise(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rates over the market seeds, with their intervals (the JSON's head)."""
    n = len(seeds)
    out: dict[str, Any] = {"n_market_seeds": n, "test_days": int(np.median([s["test_days"] for s in seeds]))}
    for comparison, (key, counted) in RATES.items():
        k = sum(bool(s[comparison]["resolved" if counted == "any" else "worse"]) for s in seeds)
        low, high = clopper_pearson(k, n)
        out[key], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = k / n, low, high
        out[f"{key}_count"] = k
        diffs = np.array([s[comparison]["diff"] for s in seeds], dtype=float)
        ses = np.array([s[comparison]["se"] for s in seeds], dtype=float)
        out[f"{comparison}_mean_diff"] = float(np.nanmean(diffs))
        out[f"{comparison}_median_se"] = float(np.nanmedian(ses))
    return out


def _worker_init(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = os.environ["NUMBA_NUM_THREADS"] = str(threads)
    logging.basicConfig(level=logging.WARNING)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--market-seeds", type=int, default=20, help="market seeds first..first+N-1")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="backtests run in parallel processes")
    parser.add_argument("--threads", type=int, default=2, help="LightGBM and numba threads of each process")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for every run")
    parser.add_argument("--jsonl", type=Path, default=None, help="append each finished market seed here")
    parser.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="append each finished backtest here; backtests already in it are not rerun",
    )
    parser.add_argument("--deadline-s", type=float, default=0.0, help="start no backtest after this many seconds")
    parser.add_argument("--summarise", type=Path, nargs="*", default=None, help="only summarise these JSONL files")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    _worker_init(args.threads)
    started = time.perf_counter()
    overrides = [f"model.config.num_threads={args.threads}", *args.set]
    if args.summarise is not None:
        results = [json.loads(line) for path in args.summarise for line in path.read_text().splitlines() if line]
    else:
        results = _run(args, overrides, started)
    if not results:
        sys.exit("no market seed finished: nothing to summarise")
    head = summarise(results)
    if args.summarise is None:  # how the seeds ran (a summary of JSONL files knows only the seeds' own walls)
        head.update(wall_s=time.perf_counter() - started, workers=args.workers, threads=args.threads)
        head["overrides"] = overrides
    print()
    print(f"{head['n_market_seeds']} market seeds, {head['test_days']} test days")
    for comparison, (key, counted) in RATES.items():
        print(
            f"{key:<32} {head[key]:.3f} [{head[f'{key}_ci_low']:.3f}, {head[f'{key}_ci_high']:.3f}] "
            f"({head[f'{key}_count']}/{head['n_market_seeds']} {'resolved' if counted == 'any' else 'resolved worse'}; "
            f"mean diff {head[f'{comparison}_mean_diff']:+.4f}, median s.e. {head[f'{comparison}_median_se']:.4f})"
        )
    if args.out:
        args.out.write_text(json.dumps({**head, "seeds": results}, indent=2))


def _run(args: argparse.Namespace, overrides: list[str], started: float) -> list[dict[str, Any]]:
    """Every (market seed, trial) backtest, ``--workers`` at a time; a seed's comparisons once its five are in."""
    tasks = [(seed, trial) for seed in range(args.first_seed, args.first_seed + args.market_seeds) for trial in TRIALS]
    done: dict[int, dict[str, dict[str, Any]]] = {}
    results: list[dict[str, Any]] = []
    if args.runs is not None and args.runs.exists():  # an earlier call's backtests: kept, not rerun
        for line in args.runs.read_text().splitlines():
            run = json.loads(line) if line.strip() else None
            if run is not None and (run["market_seed"], run["trial"]) in tasks:
                done.setdefault(run["market_seed"], {})[run["trial"]] = run
        tasks = [(seed, trial) for seed, trial in tasks if trial not in done.get(seed, {})]
        for seed in sorted(done):
            if len(done[seed]) == len(TRIALS):
                results.append(compare(done[seed]))
    with (
        tempfile.TemporaryDirectory() as cache,
        ProcessPoolExecutor(max(args.workers, 1), initializer=_worker_init, initargs=(args.threads,)) as pool,
    ):
        pending = {pool.submit(one_backtest, seed, trial, overrides, cache): (seed, trial) for seed, trial in tasks}
        for future in as_completed(pending):
            if args.deadline_s and time.perf_counter() - started > args.deadline_s:
                for other in pending:
                    other.cancel()  # those not started yet
            if future.cancelled():
                continue
            run = future.result()
            if args.runs is not None:
                with args.runs.open("a") as f:
                    f.write(json.dumps(run) + "\n")
            runs = done.setdefault(run["market_seed"], {})
            runs[run["trial"]] = run
            if len(runs) == len(TRIALS):
                results.append(compare(runs))
                _print_seed(results[-1])
                if args.jsonl:
                    with args.jsonl.open("a") as f:
                        f.write(json.dumps(results[-1]) + "\n")
    return results


def _print_seed(result: dict[str, Any]) -> None:
    cells = ", ".join(
        f"{c} {result[c]['diff']:+.4f} (s.e. {result[c]['se']:.4f}{', resolved' if result[c]['resolved'] else ''})"
        for c in RATES
    )
    print(f"market seed {result['market_seed']:>3}: {cells}; {result['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
