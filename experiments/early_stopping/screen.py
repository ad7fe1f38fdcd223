"""Screen LambdaRank settings on the default market, judged by out-of-sample rank IC.

Each setting is a full rolling backtest through the engine: the default market (seed 42), the `all`
feature set, the default label, schedule (25 monthly folds over 2024-2025), portfolio and costs, the
baselines and, on this synthetic market, the oracle. Settings run side by side in separate processes
with ``--threads`` LightGBM threads each, so on a machine of 2 x N cores N settings take about the time
of one on 2 cores. Configs are read from ``conf/`` with PyYAML (no Hydra needed; the files used here hold
no interpolation) and the settings below override them.

    python experiments/early_stopping/screen.py --jobs 8 --threads 2 --out experiments/early_stopping

writes ``screen.csv`` and ``screen.md``: per setting the mean daily rank IC over the test folds with
its Newey-West standard error, the difference from the best single factor with its error, Sharpe,
Sharpe without the best month, the median trees kept per fold and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: The LambdaRank of the screen's time, under every setting: early stopping after 50 rounds and 0.8 of
#: the features per tree (the defaults are now 10 and 0.5: README "Speed on 2 cores").
SCREENED = {"early_stopping_rounds": 50, "feature_fraction": 0.8}

#: name -> (LambdaRankConfig overrides, RollingSchedule overrides). The names say each setting in full;
#: the first is the default before the whole-list lambdas (LambdaRankConfig.truncation_level).
SETTINGS: dict[str, tuple[dict, dict]] = {
    "default (valid 20, NDCG@5, trunc 8)": ({"truncation_level": None}, {}),
    "valid 120, rank IC": ({"truncation_level": None, "early_stopping_metric": "rank_ic"}, {"valid_days": 120}),
    "valid 120, rank IC, min 50 rounds": ({"truncation_level": None, "early_stopping_metric": "rank_ic",
                                           "min_rounds": 50}, {"valid_days": 120}),
    "whole-list lambdas (trunc 300)": ({"truncation_level": 300}, {}),
    "trunc 300, valid 120, rank IC": ({"truncation_level": 300, "early_stopping_metric": "rank_ic"},
                                      {"valid_days": 120}),
    "trunc 300, fixed 100 rounds": ({"truncation_level": 300, "early_stopping_rounds": None, "num_boost_round": 100},
                                    {}),
    "trunc 300, 7 leaves, 1000/leaf, fixed 200": ({"truncation_level": 300, "early_stopping_rounds": None,
                                                   "num_boost_round": 200, "num_leaves": 7, "min_data_in_leaf": 1000},
                                                  {}),
    "trunc 300, lr 0.02, valid 120, rank IC, min 100": ({"truncation_level": 300, "learning_rate": 0.02,
                                                         "early_stopping_metric": "rank_ic", "min_rounds": 100},
                                                        {"valid_days": 120}),
}


#: The opening of screen.md (what the table is, how it was run).
HEADER = (
    "# LambdaRank settings on the default market\n\n"
    "`python experiments/early_stopping/screen.py --jobs N --threads T` (module docstring). Each row is a full "
    "rolling backtest through the engine: 25 monthly folds over 2024-2025, the `all` features, the default label, "
    "portfolio and costs, seed 42. Rank IC is the mean daily rank IC over the test folds with its Newey-West "
    "standard error; `model_minus_factor_*` is the difference from the best single factor on the same folds. Run "
    "side by side on a 16-core machine (2, 3 or 8 LightGBM threads a setting, so `minutes` are not 2-core times); "
    "the first and fourth rows are bit-for-bit the figures of the same settings run on 2 cores through `python -m "
    "backtest`. Settings that did not finish in the time available are not listed: trunc 300 with valid 120 and "
    "rank IC; trunc 300 with 7 leaves and 1000 samples a leaf; trunc 300 with learning rate 0.02.\n\n"
)


def _yaml(group: str, name: str) -> dict:
    import yaml

    raw = yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())
    raw.pop("_target_", None)
    return raw


#: ``--rehearse``: a small market and a short schedule, to try the script in a minute
REHEARSAL = ({"n_stocks": 60, "n_members": 40, "start": "2021-01-01", "end": "2022-12-31"},
             {"train_window": 100, "test_start": "2022-07-01"})


def _market_params(rehearse: bool) -> dict:
    params = {k: v for k, v in _yaml("data", "synthetic").items() if k != "seed"}
    return {**params, **REHEARSAL[0]} if rehearse else params


def run_setting(name: str, threads: int, cache: str | None, rehearse: bool = False) -> dict:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import numpy as np

    from backtest.data.fingerprint import panel_fingerprint
    from backtest.data.synthetic import oracle_scores, synthetic_market
    from backtest.engine import EngineOptions, run_backtest
    from backtest.features.sets import FeatureSetSpec
    from backtest.labels import LabelSpec
    from backtest.portfolio import PortfolioSpec
    from backtest.splits import RollingSchedule
    from models.lambdarank import LambdaRankConfig, LambdaRankRanker

    model, schedule = SETTINGS[name]
    t0 = time.perf_counter()
    market = synthetic_market(**_market_params(rehearse), seed=42)
    if rehearse:
        schedule = {**schedule, **REHEARSAL[1], "valid_days": min(schedule.get("valid_days", 20), 20)}
    label = LabelSpec(**_yaml("label", "default"))
    features = _yaml("features", "all")
    features = FeatureSetSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in features.items()})
    config = LambdaRankConfig(**{"num_threads": threads, "seed": 42, **SCREENED, **model})
    folds_seen: list[int] = []

    def factory() -> LambdaRankRanker:
        return LambdaRankRanker(config)

    result = run_backtest(
        market.panel, features=features, label=label, schedule=RollingSchedule(**{**_yaml("backtest", "default"),
                                                                                  **schedule}),
        ranker_factory=factory, portfolio=PortfolioSpec(**_yaml("portfolio", "equal")),
        data_fingerprint=panel_fingerprint(market.panel), seed=42,
        options=EngineOptions(feature_cache_dir=Path(cache) if cache else None),
        oracle=oracle_scores(market, label.exit_offset - label.entry_offset),
        on_fold=lambda outcome, n: folds_seen.append(outcome.fold),
    )
    m = result.metrics
    keys = ("rank_ic_mean", "rank_ic_se", "baseline_factor_rank_ic_mean", "baseline_factor_rank_ic_se",
            "baseline_linear_rank_ic_mean", "baseline_linear_rank_ic_se", "model_minus_factor_rank_ic",
            "model_minus_factor_rank_ic_se", "sharpe", "sharpe_ex_best_month", "baseline_factor_sharpe",
            "baseline_factor_sharpe_ex_best_month", "baseline_linear_sharpe", "baseline_linear_sharpe_ex_best_month",
            "baseline_equal_weight_sharpe", "baseline_equal_weight_sharpe_ex_best_month", "oracle_rank_ic",
            "signal_capture")
    out = {"setting": name, **{k: m.get(k, float("nan")) for k in keys}}
    fm = result.fold_metrics
    out["trees_per_fold"] = float(np.median(fm["trees"])) if "trees" in fm else float("nan")
    out["minutes"] = (time.perf_counter() - t0) / 60
    out["timings"] = json.dumps({k: round(v, 1) for k, v in result.timings.items()})
    out["factors"] = ",".join(sorted(set(result.baselines.choices["feature"]))) if result.baselines else ""
    return out


def warm_cache(cache: str, rehearse: bool = False) -> None:
    from backtest.data.fingerprint import panel_fingerprint
    from backtest.data.synthetic import synthetic_market
    from backtest.features.cache import load_or_build_features
    from backtest.features.sets import FeatureSetSpec

    panel = synthetic_market(**_market_params(rehearse), seed=42).panel
    features = _yaml("features", "all")
    features = FeatureSetSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in features.items()})
    load_or_build_features(panel, features, Path(cache), data_fingerprint=panel_fingerprint(panel))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="setting names (default: all)")
    parser.add_argument("--cache", default=None, help="feature cache folder shared by the settings")
    parser.add_argument("--out", default=".")
    parser.add_argument("--rehearse", action="store_true", help="a small market and schedule (about a minute)")
    args = parser.parse_args()
    import pandas as pd

    names = args.only or list(SETTINGS)
    if args.cache:  # build the feature cache once before the settings read it
        warm_cache(args.cache, args.rehearse)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_setting, name, args.threads, args.cache, args.rehearse) for name in names]
        for future in as_completed(futures):  # the tables are rewritten as each setting finishes
            rows.append(future.result())
            order = {name: i for i, name in enumerate(names)}
            table = pd.DataFrame(sorted(rows, key=lambda r: order[r["setting"]])).set_index("setting")
            table.to_csv(out / "screen.csv")
            show = table.drop(columns=["timings", "factors"])
            (out / "screen.md").write_text(HEADER + show.to_markdown(floatfmt="+.4f") + "\n")
            print(f"done: {rows[-1]['setting']} ({rows[-1]['minutes']:.1f} min)", flush=True)
    print(show.to_string(float_format=lambda v: f"{v:+.4f}"))
    print(table[["timings", "factors"]].to_string())


if __name__ == "__main__":
    main()
