"""Diagnosis: how the StockTransformer's training objective shapes what it learns, per epoch, on folds of
the default market.

    .venv/bin/python benchmarks/diagnose_transformer.py                                   # CPU: the MLP probe
    .venv/bin/python benchmarks/diagnose_transformer.py --arch default --device cuda      # the full network

For each loss of ``--losses`` and each fold of ``--folds`` (of ``conf/backtest/default.yaml``'s 25 on the
default synthetic market, ``features=all``, the default label), one ``StockTransformerRanker`` is
fitted on the fold's purged training days with its validation tail, as the engine fits it, and the
script records:

- per epoch, from the ranker's ``history``: the training loss, the training days' rank IC (64 days),
  the validation tail's rank IC, the gradient norm before clipping, the learning rate;
- on the fold's decision days (out of sample): the rank IC with the forward return, and the rank IC
  of the scores with the size of the move, ``|fwd - the day's median fwd|``. A ranker that orders
  expected returns has a move IC near 0; one that puts volatile stocks on top (both tails) has a
  large positive one.

``--arch mlp`` is the network on today's row (window 1, no cross-stock attention, no MoE, d_model 64,
one layer), which a 2-core CPU trains in about a minute a fold (``mlp_linear``: the same with the linear
path of today's row, ``architecture.linear_path``); ``today`` and ``window5`` are the default network
with a window of 1 and 5 days; ``--arch small`` is the CPU-sized
network of the tests' scale (window 10, d_model 32); ``--arch default`` is ``conf/model/stock_transformer.yaml``.
``--epochs`` epochs, no early stopping (``patience`` = epochs): the curves show every epoch.

Writes into ``--out`` (default ``experiments/models/diagnosis``): ``diagnosis.json`` (every number),
``curves.png`` (the per-epoch curves, mean over the folds, one line per loss) and ``diagnosis.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "benchmarks"))

from bench_transformer_backtest import default_market_features  # noqa: E402

from backtest.engine import _fold_sets, _ranking_data  # noqa: E402
from backtest.leakage import fold_rows  # noqa: E402
from backtest.metrics import daily_ic  # noqa: E402

MLP: dict[str, Any] = {"window": 1, "d_model": 64, "n_layers": 1, "scales": (1,), "cross_stock": False, "moe": False}
ARCHS: dict[str, dict[str, Any]] = {
    "mlp": MLP,
    "mlp_linear": MLP | {"linear_path": True},
    "today": {"window": 1, "scales": (1,)},  # the default network on today's row: no temporal window
    "window5": {"window": 5, "scales": (1, 5)},
    "small": {"window": 10, "d_model": 32, "n_layers": 1, "n_heads": 2, "cross_heads": 2, "scales": (5, 10)},
    "default": {},
}
CURVES = ("train_loss", "train_rank_ic", "valid_rank_ic", "grad_norm")


def move_ic(scores: pd.Series, fwd: pd.Series) -> float:
    """Mean daily Spearman correlation of the scores with ``|fwd - the day's median fwd|``."""
    size = (fwd - fwd.groupby(level=0).transform("median")).abs()
    return float(daily_ic(scores, size, "spearman").mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--losses", nargs="+", default=["listnet", "ranknet", "regression"])
    parser.add_argument("--folds", nargs="+", type=int, default=[0, 6, 12, 18])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="mlp")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--inputs",
        nargs="+",
        choices=["rank", "as_is"],
        default=["as_is"],
        help="what the network reads (model.training.inputs); the committed diagnosis/ used as_is",
    )
    parser.add_argument("--out", type=Path, default=PROJECT / "experiments" / "models" / "diagnosis")
    args = parser.parse_args()

    from models.stock_transformer import StockTransformerConfig
    from models.transformer_ranker import StockTransformerRanker, TransformerTrainingConfig

    started = time.perf_counter()
    parts, plan, matrix = default_market_features("stock_transformer")
    relevance = plan.labels.target.reindex(matrix.index)
    data, samples = _ranking_data(matrix, relevance, parts["label"].processing)
    fwd = plan.labels.fwd_return.reindex(matrix.index)
    index = matrix.index
    arch_cfg = parts["config"]["model"]["architecture"]
    arch_cfg = {k: v for k, v in arch_cfg.items() if not k.startswith("_")}
    arch = dataclasses.replace(StockTransformerConfig(**arch_cfg), **ARCHS[args.arch])
    print(f"market and features in {time.perf_counter() - started:.1f} s; {len(plan.folds)} folds", flush=True)

    for fold_no in args.folds:  # refused before any training: a fold whose labels are not known yet
        if not 0 <= fold_no < len(plan.folds):
            raise SystemExit(f"--folds: fold {fold_no} does not exist; the schedule has folds 0..{len(plan.folds) - 1}")
        predict_rows = fold_rows(plan.folds[fold_no], index)[2]
        if not fwd.iloc[predict_rows].notna().any():
            raise SystemExit(
                f"--folds: fold {fold_no} has no decision day with a known forward return; pick an earlier one"
            )
    from models.linear import LinearRanker

    linear_ic: dict[int, float] = {}  # the reference: the linear ranker on the same fold's rows
    for fold_no in args.folds:
        train, valid, predict_rows = _fold_sets(samples, data, plan.folds[fold_no])
        scores = pd.Series(LinearRanker().fit(train, valid).predict(data.take(predict_rows)), index=index[predict_rows])
        f = fwd.reindex(scores.index)
        linear_ic[fold_no] = float(daily_ic(scores[f.notna()], f[f.notna()], "spearman").mean())
    runs: list[dict[str, Any]] = []
    for loss, inputs in [(loss, inputs) for loss in args.losses for inputs in args.inputs]:
        setting = loss if len(args.inputs) == 1 else f"{loss}, {inputs} inputs"
        for fold_no in args.folds:
            fold = plan.folds[fold_no]
            training = TransformerTrainingConfig(
                loss=loss,
                max_epochs=args.epochs,
                patience=args.epochs,
                device=args.device,
                seed=args.seed,
                inputs=inputs,
            )
            ranker = StockTransformerRanker(arch, training)
            ranker.prepare(samples)
            train, valid, predict_rows = _fold_sets(samples, data, fold)
            t0 = time.perf_counter()
            ranker.fit(train, valid)
            scores = pd.Series(ranker.predict(data.take(predict_rows)), index=index[predict_rows])
            f = fwd.reindex(scores.index)
            ok = f.notna()
            run = {
                "loss": setting,
                "fold": fold_no,
                "seconds": time.perf_counter() - t0,
                "test_rank_ic": float(daily_ic(scores[ok], f[ok], "spearman").mean()),
                "linear_rank_ic": linear_ic[fold_no],
                "test_move_ic": move_ic(scores[ok], f[ok]),
                "best_epoch": ranker.last_fit["best_epoch"],
                "history": ranker.history,
            }
            runs.append(run)
            print(
                f"{setting:<11} fold {fold_no:>2}: test rank IC {run['test_rank_ic']:+.4f}, move IC "
                f"{run['test_move_ic']:+.3f}, best epoch {run['best_epoch']}, {run['seconds']:.0f} s",
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"arch": args.arch, "architecture": dataclasses.asdict(arch), "epochs": args.epochs, "device": args.device}
    (args.out / "diagnosis.json").write_text(json.dumps({**meta, "runs": runs}, indent=1, default=str))
    table = summarise(runs, args)
    (args.out / "diagnosis.md").write_text(table)
    print("\n" + table)
    plot(runs, args.out / "curves.png", args.arch)


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    frame = pd.DataFrame(runs)
    lines = [
        f"`benchmarks/diagnose_transformer.py --arch {args.arch} --epochs {args.epochs} --folds "
        f"{' '.join(map(str, args.folds))}` (device {args.device}, seed {args.seed}); out of sample, the "
        "fold's 20 decision days each, mean over the folds (s.e. over folds):",
        "",
        "| loss | test rank IC | s.e. | minus linear (s.e.) | move IC | best valid epoch | s/fold |",
        "|---|---|---|---|---|---|---|",
    ]

    def se(x: pd.Series) -> float:
        return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")

    for loss, g in frame.groupby("loss", sort=False):
        gap = g["test_rank_ic"] - g["linear_rank_ic"]
        lines.append(
            f"| {loss} | {g['test_rank_ic'].mean():+.4f} | {se(g['test_rank_ic']):.4f} | {gap.mean():+.4f} "
            f"({se(gap):.4f}) | {g['test_move_ic'].mean():+.3f} | {g['best_epoch'].mean():.1f} | "
            f"{g['seconds'].mean():.0f} |"
        )
    ref = frame.drop_duplicates("fold")["linear_rank_ic"]
    lines.append(f"| linear ranker (reference) | {ref.mean():+.4f} | {se(ref):.4f} | | | | |")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], path: Path, arch: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.4))
    for loss in dict.fromkeys(r["loss"] for r in runs):
        hist = [pd.DataFrame(r["history"]).set_index("epoch") for r in runs if r["loss"] == loss]
        for ax, key in zip(axes, CURVES):
            curve = pd.concat([h[key] for h in hist if key in h], axis=1)
            if key == "train_loss":  # losses of different objectives: relative to their first epoch
                curve = curve / curve.iloc[0]
            ax.plot(curve.index, curve.mean(axis=1), marker="o", ms=3, label=loss)
    titles = {
        "train_loss": "training loss / its first epoch",
        "train_rank_ic": "training rank IC (64 days)",
        "valid_rank_ic": "validation rank IC (20-day tail)",
        "grad_norm": "gradient norm before clipping",
    }
    for ax, key in zip(axes, CURVES):
        ax.set_title(titles[key], fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"StockTransformer ({arch}) on the default market: mean over folds", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
