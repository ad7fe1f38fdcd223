"""Benchmark: LambdaRank settings screened on the default market, judged by out-of-sample rank IC.

    .venv/bin/python benchmarks/bench_early_stopping.py --jobs 8 --threads 2 --out experiments/early_stopping
    .venv/bin/python benchmarks/bench_early_stopping.py --rehearse --only "whole-list lambdas (trunc 300)"

Each setting is a full rolling backtest through the engine on the main job's config, composed from
``conf/`` by Hydra's compose API and built by ``hydra.utils.instantiate(..., _convert_="all")`` as the
CLI builds it (:func:`bench_transformer_backtest.build_parts`): the default market (seed 42), the ``all``
feature set, the default label, schedule (25 monthly folds over 2024-2025), portfolio and costs, the
configured LambdaRank (``conf/model/lambdarank.yaml``), the baselines and, on this synthetic market, the
oracle. On top of the config come :data:`SCREENED` (the LambdaRank of the screen's time) and the setting's
own overrides (:data:`SETTINGS`), as Hydra overrides: a setting is what ``python -m backtest`` runs with
the same overrides. Settings run side by side in separate processes with ``--threads`` LightGBM threads
each, so on a machine of 2 x N cores N settings take about the time of one on 2 cores.

Writes ``screen.csv`` and ``screen.md`` into ``--out`` (the recorded results:
``experiments/early_stopping/``): per setting the mean daily rank IC over the test folds with its
Newey-West standard error, the difference from the best single factor with its error, Sharpe, Sharpe
without the best month, the median trees kept per fold and the wall time. ``--rehearse`` runs a small
market and a short schedule, to try the script in a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: The LambdaRank of the screen's time, under every setting: up to 300 rounds of whole-list pairs, early
#: stopping after 50 rounds and 0.8 of the features per tree (the configured defaults are now 30 fixed
#: rounds on sub-lists of 64 stocks, and 0.5).
SCREENED = (
    "model.config.num_boost_round=300 model.config.sublist_size=null "
    "model.config.early_stopping_rounds=50 model.config.feature_fraction=0.8"
)

#: name -> Hydra overrides, as on the command line of ``python -m backtest``. The names say each setting
#: in full; the first is the default before the whole-list lambdas (``model.config.truncation_level``).
SETTINGS: dict[str, str] = {
    "default (valid 20, NDCG@5, trunc 8)": "model.config.truncation_level=null",
    "valid 120, rank IC": (
        "model.config.truncation_level=null model.config.early_stopping_metric=rank_ic backtest.valid_days=120"
    ),
    "valid 120, rank IC, min 50 rounds": (
        "model.config.truncation_level=null model.config.early_stopping_metric=rank_ic "
        "model.config.min_rounds=50 backtest.valid_days=120"
    ),
    "whole-list lambdas (trunc 300)": "model.config.truncation_level=300",
    "trunc 300, valid 120, rank IC": (
        "model.config.truncation_level=300 model.config.early_stopping_metric=rank_ic backtest.valid_days=120"
    ),
    "trunc 300, fixed 100 rounds": (
        "model.config.truncation_level=300 model.config.early_stopping_rounds=null model.config.num_boost_round=100"
    ),
    "trunc 300, 7 leaves, 1000/leaf, fixed 200": (
        "model.config.truncation_level=300 model.config.early_stopping_rounds=null "
        "model.config.num_boost_round=200 model.config.num_leaves=7 model.config.min_data_in_leaf=1000"
    ),
    "trunc 300, lr 0.02, valid 120, rank IC, min 100": (
        "model.config.truncation_level=300 model.config.learning_rate=0.02 "
        "model.config.early_stopping_metric=rank_ic model.config.min_rounds=100 backtest.valid_days=120"
    ),
}

#: The config groups every setting runs on (the main job's defaults, named so that a new default does not
#: change the screen).
CHOICES = {
    "data": "synthetic",
    "features": "all",
    "label": "default",
    "model": "lambdarank",
    "backtest": "default",
    "portfolio": "equal",
}

#: ``--rehearse``: a small market and a short schedule (validation tails of at most 20 days).
REHEARSAL = (
    "data.n_stocks=60 data.n_members=40 data.start=2021-01-01 data.end=2022-12-31 "
    "backtest.train_window=100 backtest.test_start=2022-07-01 backtest.valid_days=20"
)

#: The metrics reported per setting.
METRICS = (
    "rank_ic_mean",
    "rank_ic_se",
    "baseline_factor_rank_ic_mean",
    "baseline_factor_rank_ic_se",
    "baseline_linear_rank_ic_mean",
    "baseline_linear_rank_ic_se",
    "model_minus_factor_rank_ic",
    "model_minus_factor_rank_ic_se",
    "sharpe",
    "sharpe_ex_best_month",
    "baseline_factor_sharpe",
    "baseline_factor_sharpe_ex_best_month",
    "baseline_linear_sharpe",
    "baseline_linear_sharpe_ex_best_month",
    "baseline_equal_weight_sharpe",
    "baseline_equal_weight_sharpe_ex_best_month",
    "oracle_rank_ic",
    "signal_capture",
)

#: The opening of screen.md (what the table is, how it was run).
HEADER = (
    "# LambdaRank settings on the default market\n\n"
    "`python benchmarks/bench_early_stopping.py --jobs N --threads T` (its docstring). Each row is a full "
    "rolling backtest through the engine on the main job's config composed by Hydra (conf/), with the setting's "
    "overrides: 25 monthly folds over 2024-2025, the `all` features, the default label, portfolio and costs, "
    "seed 42. Rank IC is the mean daily rank IC over the test folds with its Newey-West standard error; "
    "`model_minus_factor_*` is the difference from the best single factor on the same folds.\n\n"
)


def overrides(name: str, threads: int, rehearse: bool = False) -> dict[str, str]:
    """The Hydra overrides (key -> value) of setting ``name``: :data:`SCREENED`, the setting's own, the
    thread count and (``rehearse``) :data:`REHEARSAL`, a later value of a key winning.

    >>> overrides("trunc 300, fixed 100 rounds", 2)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'model.config.early_stopping_rounds': 'null', 'model.config.feature_fraction': '0.8',
     'model.config.truncation_level': '300', 'model.config.num_boost_round': '100', 'model.config.num_threads': '2'}
    """
    given = " ".join([SCREENED, SETTINGS[name], f"model.config.num_threads={threads}", REHEARSAL if rehearse else ""])
    return dict(override.split("=", 1) for override in given.split())


def build_setting(
    name: str,
    threads: int,
    rehearse: bool = False,
    groups: tuple[str, ...] = ("data", "features", "label", "portfolio"),
) -> dict[str, Any]:
    """The parts of setting ``name``, composed and instantiated as the CLI does (``build_parts``):
    ``groups`` built, with ``schedule``, ``model`` (a factory), ``seed`` and the resolved ``config``."""
    from bench_transformer_backtest import build_parts

    given = [f"{key}={value}" for key, value in overrides(name, threads, rehearse).items()]
    return build_parts(CHOICES, given, groups=groups)


def run_setting(name: str, threads: int, cache: str | None, rehearse: bool = False) -> dict[str, Any]:
    """One setting's full backtest; its metrics, median trees a fold, minutes and engine timings."""
    import numpy as np

    from backtest.data.fingerprint import panel_fingerprint
    from backtest.data.synthetic import oracle_scores
    from backtest.engine import EngineOptions, plan_backtest, run_backtest
    from models.base import check_label_processing

    t0 = time.perf_counter()
    parts = build_setting(name, threads, rehearse)
    market, label, factory = parts["data"], parts["label"], parts["model"]
    check_label_processing(factory(), label.processing)
    plan = plan_backtest(market.panel, label=label, schedule=parts["schedule"], portfolio=parts["portfolio"])
    result = run_backtest(
        plan,
        features=parts["features"],
        ranker_factory=factory,
        data_fingerprint=panel_fingerprint(market.panel),
        seed=parts["seed"],
        options=EngineOptions(feature_cache_dir=Path(cache) if cache else None),
        oracle=oracle_scores(market, label.holding_days),
    )
    out: dict[str, Any] = {"setting": name, **{k: result.metrics.get(k, float("nan")) for k in METRICS}}
    fm = result.fold_metrics
    out["trees_per_fold"] = float(np.median(fm["trees"])) if "trees" in fm else float("nan")
    out["minutes"] = (time.perf_counter() - t0) / 60
    out["timings"] = json.dumps({k: round(v, 1) for k, v in result.timings.items()})
    out["factors"] = ",".join(sorted(set(result.baselines.choices["feature"]))) if result.baselines else ""
    return out


def warm_cache(cache: str, threads: int, rehearse: bool = False) -> None:
    """Build the feature cache once, before the settings (which share the market and features) read it."""
    from backtest.data.fingerprint import panel_fingerprint
    from backtest.features.cache import load_or_build_features

    parts = build_setting(next(iter(SETTINGS)), threads, rehearse, groups=("data", "features"))
    panel = parts["data"].panel
    load_or_build_features(panel, parts["features"], Path(cache), data_fingerprint=panel_fingerprint(panel))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="setting names (default: all)")
    parser.add_argument("--cache", default=None, help="feature cache folder shared by the settings")
    parser.add_argument("--out", default=".")
    parser.add_argument("--rehearse", action="store_true", help="a small market and schedule (about a minute)")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before numpy, numba and LightGBM are loaded
    import pandas as pd

    names = args.only or list(SETTINGS)
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {unknown}; the settings: {list(SETTINGS)}")
    for name in names:  # a config mistake surfaces before any backtest starts
        build_setting(name, args.threads, args.rehearse, groups=())
    if args.cache:
        warm_cache(args.cache, args.threads, args.rehearse)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    order = {name: i for i, name in enumerate(names)}
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_setting, name, args.threads, args.cache, args.rehearse) for name in names]
        for future in as_completed(futures):  # the tables are rewritten as each setting finishes
            rows.append(future.result())
            table = pd.DataFrame(sorted(rows, key=lambda r: order[r["setting"]])).set_index("setting")
            table.to_csv(out / "screen.csv")
            show = table.drop(columns=["timings", "factors"])
            (out / "screen.md").write_text(HEADER + show.to_markdown(floatfmt="+.4f") + "\n")
            print(f"done: {rows[-1]['setting']} ({rows[-1]['minutes']:.1f} min)", flush=True)
    print(show.to_string(float_format=lambda v: f"{v:+.4f}"))
    print(table[["timings", "factors"]].to_string())


if __name__ == "__main__":
    main()
