"""Seed means, seed spreads and paired daily differences of backtests written by
``benchmarks/bench_transformer_backtest.py --out`` (for example through ``benchmarks/replicates.py``).

    .venv/bin/python benchmarks/paired_runs.py benchmarks/results/models   # each against the linear ranker
    .venv/bin/python benchmarks/paired_runs.py benchmarks/results/models --against stock_transformer --against factor

Files are grouped by name: ``NAME_seedS.json`` is seed ``S`` of ``NAME``. For each name the table gives
the seeds' mean rank IC and Sharpe with their spread (standard deviation over seeds, ``ddof=1``), and
for each reference its paired difference:

- the daily rank IC of the name (the mean over its seeds, day by day) minus the reference's over the
  days both scored, with its Newey-West standard error (lags: the label's horizon less one day, 4) and
  paired stationary-bootstrap interval (:func:`backtest.statistics.paired_mean_difference`);
- the seed standard error of that difference (:func:`backtest.statistics.seed_standard_error`);
- a verdict as a study gives it: resolved when ``|z| > 1.96`` and the difference exceeds 1.96 seed
  standard errors (no family-wise correction: the table is read one comparison at a time).

A reference is another name of the files, or ``linear`` / ``factor``: the engine's same-fold baselines
recorded in every file (deterministic, so one series for all seeds), unless a name of the files is
called so. ``--markdown`` prints the table for a README.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from backtest.statistics import (  # noqa: E402
    ALPHA,
    minimum_detectable_difference,
    paired_mean_difference,
    seed_standard_error,
)

LAGS = 4  # the default label: T+1 to T+5, overlapping its neighbours for 4 days
Z = 1.959963984540054  # the two-sided 5% quantile


def load(paths: list[Path]) -> dict[str, dict[int, dict[str, Any]]]:
    """``{name: {seed: run}}`` from the files (or folders of files) given."""
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    runs: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for f in files:
        match = re.fullmatch(r"(.+)_seed(\d+)", f.stem)
        name, seed = (match.group(1), int(match.group(2))) if match else (f.stem, 0)
        data = json.loads(f.read_text())
        done = [r for r in data.get("runs", []) if "daily" in r]
        if done:
            runs[name][seed] = done[0] | {"file": f.name}
    return dict(runs)


def daily(run: dict[str, Any], column: str) -> pd.Series:
    d = run["daily"]
    return pd.Series(d[column], index=pd.to_datetime(d["date"]), dtype=np.float64)


def seed_mean(seeds: dict[int, dict[str, Any]], column: str = "rank_ic") -> pd.Series:
    """The day-by-day mean over the seeds of a daily series."""
    return pd.concat([daily(r, column) for r in seeds.values()], axis=1).mean(axis=1)


def reference(name: str, runs: dict[str, dict[int, dict[str, Any]]]) -> tuple[pd.Series, float, int]:
    """A reference's daily rank IC, its seed spread of the mean rank IC and its number of seeds."""
    if name in runs:
        values = [r["metrics"]["rank_ic_mean"] for r in runs[name].values()]
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
        return seed_mean(runs[name]), sd, len(values)
    if name in ("linear", "factor"):
        any_run = next(iter(next(iter(runs.values())).values()))
        return daily(any_run, f"baseline_{name}_rank_ic"), float("nan"), 0
    raise SystemExit(f"paired_runs: no runs or baseline named {name!r}; names: {sorted(runs)}, linear, factor")


def table(runs: dict[str, dict[int, dict[str, Any]]], against: list[str]) -> pd.DataFrame:
    rows = []
    for name, seeds in runs.items():
        ic = [r["metrics"]["rank_ic_mean"] for r in seeds.values()]
        sharpe = [r["metrics"].get("sharpe", np.nan) for r in seeds.values()]
        row: dict[str, Any] = {
            "name": name,
            "seeds": len(seeds),
            "rank_ic": float(np.mean(ic)),
            "rank_ic_seed_sd": float(np.std(ic, ddof=1)) if len(ic) > 1 else np.nan,
            "rank_ic_se": float(np.mean([r["metrics"]["rank_ic_se"] for r in seeds.values()])),
            "sharpe": float(np.mean(sharpe)),
            "sharpe_seed_sd": float(np.std(sharpe, ddof=1)) if len(sharpe) > 1 else np.nan,
            "s_per_fold": float(np.mean([r["fold_s_mean"] for r in seeds.values()])),
            "wall_s": float(np.mean([r["wall_s"] for r in seeds.values()])),
        }
        for ref in against:
            if ref == name:
                continue
            ref_daily, ref_sd, ref_n = reference(ref, runs)
            d = paired_mean_difference(seed_mean(seeds), ref_daily, LAGS, np.random.default_rng(0))
            s_se = seed_standard_error(row["rank_ic_seed_sd"], len(seeds), ref_sd, ref_n)
            resolved = d.p_value < ALPHA and not (np.isfinite(s_se) and abs(d.diff) <= Z * s_se)
            row.update(
                {
                    f"minus_{ref}": d.diff,
                    f"minus_{ref}_se": d.se,
                    f"minus_{ref}_ci": f"[{d.ci_low:+.4f}, {d.ci_high:+.4f}]",
                    f"minus_{ref}_seed_se": s_se,
                    f"minus_{ref}_mde": minimum_detectable_difference(d.se),
                    f"minus_{ref}_days": d.n_days,
                    f"minus_{ref}_verdict": ("better" if d.diff > 0 else "worse") if resolved else "unresolved",
                }
            )
        rows.append(row)
    return pd.DataFrame(rows).set_index("name")


def markdown(frame: pd.DataFrame, against: list[str]) -> str:
    head = ["ranker", "seeds", "rank IC (seed sd)", "s.e."] + [f"minus {a} (s.e.; seed s.e.)" for a in against]
    head += ["Sharpe (seed sd)", "s a fold"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in frame.iterrows():
        cells = [name, str(r["seeds"]), f"{r['rank_ic']:+.4f} ({r['rank_ic_seed_sd']:.4f})", f"{r['rank_ic_se']:.4f}"]
        for a in against:
            if f"minus_{a}" not in r or not np.isfinite(r[f"minus_{a}"]):
                cells.append("")
                continue
            text = f"{r[f'minus_{a}']:+.4f} ({r[f'minus_{a}_se']:.4f}; {r[f'minus_{a}_seed_se']:.4f})"
            cells.append(f"**{text}**" if r[f"minus_{a}_verdict"] != "unresolved" else text)
        cells += [f"{r['sharpe']:+.2f} ({r['sharpe_seed_sd']:.2f})", f"{r['s_per_fold']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+", help="JSON files or folders of them")
    parser.add_argument("--against", action="append", default=None, help="reference (default: linear); repeatable")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    runs = load(args.paths)
    if not runs:
        raise SystemExit(f"paired_runs: no finished runs in {[str(p) for p in args.paths]}")
    against = args.against or ["linear"]
    frame = table(runs, against)
    if args.markdown:
        print(markdown(frame, against))
        print("\nbold: resolved (|z| > 1.96 and beyond 1.96 seed standard errors); Newey-West lags 4")
    else:
        with pd.option_context("display.width", 250, "display.max_columns", 50):
            print(frame.T.to_string())


if __name__ == "__main__":
    main()
