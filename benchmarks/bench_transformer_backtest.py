"""Benchmark: the StockTransformer as a full rolling backtest through the engine, on one GPU.

    .venv/bin/python benchmarks/bench_transformer_backtest.py                       # transformer, then LambdaRank
    .venv/bin/python benchmarks/bench_transformer_backtest.py --models stock_transformer
    .venv/bin/python benchmarks/bench_transformer_backtest.py --folds 2 --set model.training.max_epochs=1

Shape: the main job's defaults with ``model=stock_transformer``: the default synthetic market (seed 42),
``features=all`` (285 columns), the default label (10 relevance bins) and portfolio (top 5, equal
weight), and ``conf/backtest/default.yaml``: monthly retraining over the two test years
(``RollingSchedule(retrain_every=20, train_window=500, valid_days=20, embargo=2)``, 25 folds), with the
feature audit on 3 cutoffs and the engine's baselines (best single factor, linear ranker) on the same
folds. ``backtest.engine.run_backtest`` is called directly, without MLflow; the specs are built from
``conf/`` by Hydra's compose and instantiate, as ``backtest/cli/compose.py`` builds them (on a GPU machine without
the project's environment, install the wheels of hydra-core, omegaconf, antlr4-python3-runtime (built
from its source distribution), pandas, python-dateutil, six, pyyaml, lightgbm, xxhash, exchange-calendars,
pyluach, toolz, korean-lunar-calendar and tzdata for its Python first; numba and scipy must be there).

Every model listed in ``--models`` runs on the same panel, folds and feature cache (a temporary
directory: the first model builds the features, the next ones load them). A model whose package is
missing (LightGBM, say) is reported as skipped.

Reported per model: the wall time of its backtest (with the engine's own split: plan, audit, features,
folds, portfolio, baselines), seconds per fold (the first one includes CUDA initialisation and any
compilation), epochs per fold, the out-of-sample rank IC with its standard error (Newey-West, 4 lags),
NDCG@5, Sharpe, and the best-factor and linear baselines' rank IC on the same folds. The total wall time
counts from before the market is generated to the end of the first model's backtest.
``--out FILE`` also writes every number as JSON.

The figures measured on an H200 are in benchmarks/README.md ("GPU").

Target: the transformer backtest, data generation and feature setup included, in at most 10 minutes on
one H200.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from backtest.data.fingerprint import panel_fingerprint  # noqa: E402
from backtest.data.synthetic import oracle_scores  # noqa: E402
from backtest.engine import EngineOptions, plan_backtest, run_backtest  # noqa: E402
from models.base import check_label_processing  # noqa: E402

CONF = PROJECT / "conf"


# --- the specs, composed from conf/ by Hydra as the CLI composes them ------------------------------


def build_parts(
    choices: dict[str, str], overrides: list[str], groups: tuple[str, ...] = ("features", "label", "portfolio")
) -> dict[str, Any]:
    """``groups`` built, with ``schedule``, ``model`` (a factory), ``seed`` and the resolved ``config``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from backtest.cli.compose import build, build_data

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[f"{g}={o}" for g, o in choices.items()] + overrides)

    parts = {g: build_data(cfg) if g == "data" else build(cfg[g]) for g in groups}
    parts.update(
        schedule=build(cfg.backtest),
        model=build(cfg.model, _partial_=True),
        seed=int(cfg.seed),
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    return parts


def default_market_features(model: str) -> tuple[dict[str, Any], Any, Any]:
    """The default market's parts for ``model`` (:func:`build_parts`), its backtest plan and its feature
    matrix (built in a temporary cache): what the per-fold probes of ``benchmarks/`` start from."""
    from backtest.features.cache import load_or_build_features

    parts = build_parts({"model": model}, [], groups=("data", "features", "label", "portfolio"))
    panel = parts["data"].panel
    plan = plan_backtest(panel, label=parts["label"], schedule=parts["schedule"], portfolio=parts["portfolio"])
    with tempfile.TemporaryDirectory() as tmp:
        fingerprint = panel_fingerprint(panel)
        matrix, _ = load_or_build_features(panel, parts["features"], Path(tmp), data_fingerprint=fingerprint)
    return parts, plan, matrix


# --- one backtest -------------------------------------------------------------------------------------


METRICS = (
    "rank_ic_mean",
    "rank_ic_se",
    "icir",
    "ndcg",
    "sharpe",
    "sharpe_ex_best_month",
    "ann_return",
    "oracle_rank_ic",
    "signal_capture",
    "baseline_factor_rank_ic_mean",
    "baseline_factor_rank_ic_se",
    "baseline_linear_rank_ic_mean",
    "baseline_linear_rank_ic_se",
    "model_minus_factor_rank_ic",
    "model_minus_factor_rank_ic_se",
    "model_minus_linear_rank_ic",
    "model_minus_linear_rank_ic_se",
    "baseline_factor_sharpe",
    "baseline_linear_sharpe",
)


def run_model(
    model: str, market: Any, panel: Any, data_fp: str, args: argparse.Namespace, cache_dir: Path
) -> dict[str, Any]:
    choices = {
        "model": model,
        "features": "all",
        "label": "default",
        "backtest": "default",
        "portfolio": "equal",
        "data": "synthetic",
    }
    first = model == args.models[0]
    overrides = [o for o in args.set if first or not o.startswith("model.")]
    parts = build_parts(choices, overrides)
    made: list[Any] = []

    def factory() -> Any:
        ranker = parts["model"]()
        made.append(ranker)
        return ranker

    check_label_processing(factory(), parts["label"].processing)
    t0 = time.perf_counter()
    plan = plan_backtest(panel, label=parts["label"], schedule=parts["schedule"], portfolio=parts["portfolio"])
    if args.folds:
        plan = dataclasses.replace(plan, folds=plan.folds[: args.folds])
    folds: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def on_fold(outcome: Any, n_folds: int) -> None:
        now = time.perf_counter()
        fit = getattr(made[-1], "last_fit", {}) or {}
        folds.append(
            {
                "fold": outcome.fold,
                "wall_s": now - last[0],
                "fit_predict_s": outcome.metrics["fit_seconds"],
                "rank_ic": outcome.metrics["rank_ic"],
                "epochs": fit.get("epochs"),
                "best_epoch": fit.get("best_epoch", fit.get("best_iteration")),
                "device": fit.get("device"),
            }
        )
        if args.history:  # the fold's per-epoch curves (a StockTransformer's; none for a booster)
            folds[-1]["history"] = list(getattr(made[-1], "history", []) or [])
        last[0] = now
        print(
            f"  fold {outcome.fold + 1:>2}/{n_folds}: {folds[-1]['fit_predict_s']:6.2f} s, rank IC "
            f"{outcome.metrics['rank_ic']:+.4f}, epochs/trees {folds[-1]['epochs'] or folds[-1]['best_epoch']}",
            flush=True,
        )

    options = EngineOptions(feature_cache_dir=cache_dir, checkpoint_dir=None, audit_cutoffs=args.audit_cutoffs)
    label = parts["label"]
    last[0] = time.perf_counter()
    result = run_backtest(
        plan,
        features=parts["features"],
        ranker_factory=factory,
        data_fingerprint=data_fp,
        options=options,
        seed=parts["seed"],
        on_fold=on_fold,
        oracle=oracle_scores(market, label.holding_days),
    )
    wall = time.perf_counter() - t0
    per_fold = np.array([f["fit_predict_s"] for f in folds])
    return {
        "model": model,
        "wall_s": wall,
        "timings": result.timings,
        "n_folds": len(folds),
        "fold_s_mean": float(per_fold.mean()),
        "fold_s_median": float(np.median(per_fold)),
        "fold_s_first": float(per_fold[0]),
        "fold_s_max": float(per_fold.max()),
        "fold_s_mean_after_first": float(per_fold[1:].mean()) if len(per_fold) > 1 else float("nan"),
        "metrics": {k: float(result.metrics[k]) for k in METRICS if k in result.metrics},
        "folds": folds,
        "n_features": len(result.feature_names),
        "ndcg_depth": result.ndcg_depth,
        "model_config": parts["config"]["model"],
        # the daily series behind rank_ic_mean and ndcg, and the linear baseline's daily rank IC: runs of
        # this script compare on them day by day (benchmarks/paired_runs.py)
        "daily": {
            "date": [f"{d:%Y-%m-%d}" for d in result.daily_ranking.index],
            "rank_ic": result.daily_ranking["rank_ic"].tolist(),
            "ndcg": result.daily_ranking["ndcg"].tolist(),
            **_baseline_daily_rank_ic(result),
        },
    }


def _baseline_daily_rank_ic(result: Any) -> dict[str, list[float]]:
    """The baselines' daily rank IC on the model's scored days (NaN where a baseline has none)."""
    from backtest.metrics import daily_ic

    if result.baselines is None:
        return {}
    fwd = result.labels.fwd_return
    days = result.daily_ranking.index
    out = {}
    for name, run in result.baselines.runs.items():
        known = fwd.reindex(run.scores.index).notna()
        ic = daily_ic(run.scores[known], fwd.reindex(run.scores.index)[known], "spearman")
        out[f"baseline_{name}_rank_ic"] = ic.reindex(days).tolist()
    return out


def report(res: dict[str, Any]) -> None:
    m, t = res["metrics"], res["timings"]
    print(f"\n{res['model']} ({res['n_folds']} folds, {res['n_features']} features):")
    print("  engine timings   " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))
    print(
        f"  per fold         mean {res['fold_s_mean']:.2f} s, median {res['fold_s_median']:.2f} s, first "
        f"{res['fold_s_first']:.2f} s, max {res['fold_s_max']:.2f} s"
    )
    print(
        f"  rank IC          {m['rank_ic_mean']:+.4f} (s.e. {m.get('rank_ic_se', float('nan')):.4f}), "
        f"NDCG@{res['ndcg_depth']} {m.get('ndcg', float('nan')):.4f}, Sharpe {m.get('sharpe', float('nan')):+.2f}"
    )
    for name in ("factor", "linear"):
        key = f"baseline_{name}_rank_ic_mean"
        if key in m:
            print(f"  {name:<16} rank IC {m[key]:+.4f} (s.e. {m.get(f'baseline_{name}_rank_ic_se', float('nan')):.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["stock_transformer", "lambdarank"],
        help="conf/model options, run in this order on the same folds",
    )
    parser.add_argument("--folds", type=int, default=0, help="run only the first N folds (0 = all)")
    parser.add_argument("--audit-cutoffs", type=int, default=3, help="the engine's feature audit (default 3)")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides, e.g. model.training.compile=default (model.* keys apply to the first model only)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--history", action="store_true", help="also write each fold's per-epoch training history (with --out)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}, GPU {gpu}, python {sys.version.split()[0]}", flush=True)
    started = time.perf_counter()
    parts = build_parts({}, [o for o in args.set if not o.startswith("model.")], groups=("data",))
    market = parts["data"]
    panel = market.panel
    data_fp = panel_fingerprint(panel)
    data_s = time.perf_counter() - started
    print(f"market generated in {data_s:.1f} s ({len(panel):,} rows)", flush=True)
    results: dict[str, Any] = {"torch": torch.__version__, "gpu": gpu, "data_s": data_s, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, model in enumerate(args.models):
            print(f"\n{model}:", flush=True)
            try:
                res = run_model(model, market, panel, data_fp, args, Path(tmp) / "features")
            except ImportError as exc:
                print(f"  skipped: {type(exc).__name__}: {exc}", flush=True)
                results["runs"].append({"model": model, "skipped": str(exc)})
                continue
            if i == 0:
                results["total_wall_s"] = time.perf_counter() - started
            results["runs"].append(res)
            report(res)
            if args.out:
                args.out.write_text(json.dumps(results, indent=2, default=str))
    if "total_wall_s" in results:
        print(
            f"\ntotal wall time of the first model's backtest, market generation and features included: "
            f"{results['total_wall_s']:.1f} s [target <= 600 s]"
        )
    done = [r for r in results["runs"] if "metrics" in r]
    if done:
        print(f"\n{'model':<22} {'rank IC':>8} {'s.e.':>7} {'factor':>8} {'linear':>8} {'s/fold':>7} {'wall s':>7}")
        for r in done:
            m = r["metrics"]
            print(
                f"{r['model']:<22} {m['rank_ic_mean']:+8.4f} {m.get('rank_ic_se', float('nan')):7.4f} "
                f"{m.get('baseline_factor_rank_ic_mean', float('nan')):+8.4f} "
                f"{m.get('baseline_linear_rank_ic_mean', float('nan')):+8.4f} {r['fold_s_mean']:7.2f} "
                f"{r['wall_s']:7.1f}"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
