"""The run summary printed at the end of a backtest: the tearsheet's table, then the evidence; and the
panel's, logged when its data is loaded (:func:`summarize_panel`).

The strategy / equal-weight (/ index) rows are :func:`backtest.reports.tearsheet.tearsheet_metrics`, the
same numbers the HTML tearsheet shows; the lines below them come from the run's headline metrics
(:func:`backtest.metrics.headline_metrics`: against equal weight, then the ``index_*`` keys against the
index), its guard verdicts and, for a run that is not comparable, why (:mod:`backtest.leakage`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from backtest.baselines import baseline_verdicts, comparison_table
from backtest.reports.tearsheet import PERCENT_ROWS, tearsheet_metrics

#: Rows of the tearsheet table shown in the summary, with the label printed for each.
SUMMARY_ROWS: Mapping[str, str] = {
    "Sharpe": "Sharpe",
    "Sortino": "Sortino",
    "CAGR": "annual return",
    "Cumulative Return": "cumulative return",
    "Volatility (ann.)": "annual volatility",
    "Max Drawdown": "max drawdown",
    "Sharpe ex best month": "Sharpe ex best month",
    "CAGR ex best month": "ann. return ex best month",
    "Sharpe ex best 3 months": "Sharpe ex best 3 months",
}


@dataclass(frozen=True)
class RunSummary:
    """What the summary says besides the returns: where the run is, what its guards said and why it is not
    comparable (``not_comparable``, :func:`backtest.leakage.not_comparable_reasons`; empty when it is)."""

    n_folds: int
    n_features: int
    ndcg_depth: int  # the depth of the headline ``ndcg``: the portfolio's top_k
    leak_guard: str
    feature_audit: str
    not_comparable: tuple[str, ...]
    run_id: str
    tearsheet_uri: str
    ui: str
    index: str | None = None  # what the index column is (``IndexReturns.description``)

    @property
    def comparable(self) -> bool:
        return not self.not_comparable


def summary_text(
    returns: pd.Series,
    benchmark: pd.Series,
    metrics: Mapping[str, float],
    run: RunSummary,
    index: pd.Series | None = None,
) -> str:
    """The summary of one backtest as text.

    Parameters
    ----------
    returns, benchmark : daily strategy and equal-weight returns over the test period.
    metrics : the run's headline metrics (``win_rate_vs_ew``, ``rank_ic_mean``, ``dsr``, ``index_beta``, ...).
    run : fold and feature counts, guard verdicts and where to look.
    index : the index benchmark's daily returns on the same dates, optional (a third column and a line of
        the ``index_*`` metrics).
    """
    table = tearsheet_metrics(returns, benchmark, index=index)
    period = f"{returns.index.min():%Y-%m-%d} .. {returns.index.max():%Y-%m-%d}"
    columns = {"Strategy": ("strategy", 12), "Benchmark": ("equal weight", 14)}
    if index is not None:
        columns["Index"] = ("index", 10)
    out = [
        f"\nbacktest {period}, {run.n_folds} folds, {run.n_features} features",
        f"{'':28}" + "".join(f"{name:>{width}}" for name, width in columns.values()),
    ]
    for row, label in SUMMARY_ROWS.items():
        fmt = "{:+.2%}" if row in PERCENT_ROWS else "{:+.2f}"
        cells = "".join(f"{fmt.format(table.loc[row, col]):>{width}}" for col, (_, width) in columns.items())
        out.append(f"{label:28}{cells}")
    m = metrics
    nan = float("nan")
    out += [
        f"{'win rate vs EW (periods)':28}{m.get('win_rate_vs_ew', nan):>12.1%}",
        f"{'excess annual return':28}{m.get('excess_ann_return', nan):>+12.2%}   vs equal weight",
        *index_lines(m, run.index if index is not None else None),
        f"{'turnover (annual)':28}{m.get('turnover', nan):>12.2f}",
        f"{'days blocked':28}{m.get('days_blocked', nan):>12.0f}   (the book was not the one chosen: "
        f"a pick not bought or a holding not sold, or a holding that did not trade)",
        f"{'days tradable':28}{m.get('days_tradable', nan):>12.0f}   of {len(returns)} (at least top_k members traded)",
        "",
        f"rank IC {m.get('rank_ic_mean', nan):+.4f} (ICIR {m.get('icir', nan):+.3f}), "
        f"NDCG@{run.ndcg_depth} {m.get('ndcg', nan):.4f}; "
        f"PSR {m.get('psr', nan):.3f}, {_dsr_text(m)}; "
        f"Sharpe 95% CI [{m.get('sharpe_ci_low', nan):+.2f}, {m.get('sharpe_ci_high', nan):+.2f}]",
        *baseline_lines(m),
        f"leak guard      {run.leak_guard}   feature audit {run.feature_audit}   "
        f"comparable {'yes' if run.comparable else 'NO'}",
        *(f"NOT COMPARABLE  {why}; its numbers must not be compared with other runs" for why in run.not_comparable),
        f"MLflow run      {run.run_id}",
        f"tearsheet       {run.tearsheet_uri}",
        f"open the UI     {run.ui}",
    ]
    return "\n".join(out)


def index_lines(metrics: Mapping[str, float], index: str | None) -> list[str]:
    """The strategy against the index (the ``index_*`` metrics), below the equal-weight line; none without
    an index."""
    if index is None:
        return []
    nan = float("nan")
    m = {k: metrics.get(k, nan) for k in ("index_excess_ann_return", "index_beta", "index_tracking_error")}
    return [
        f"{'':28}{m['index_excess_ann_return']:>+12.2%}   vs the index: beta {m['index_beta']:.2f}, tracking error "
        f"{m['index_tracking_error']:.2%}, information ratio {metrics.get('index_information_ratio', nan):+.2f}",
        f"{'':28}{'':12}   (index: {index})",
    ]


def _dsr_text(metrics: Mapping[str, float]) -> str:
    """``DSR 0.377``, or, for a job of a sweep, its provisional value (the study-wide one, ``dsr``, is
    logged when the sweep ends: a job sees only the trials finished before it)."""
    if "dsr" not in metrics and "dsr_provisional" in metrics:
        return f"DSR {metrics['dsr_provisional']:.3f} (provisional: the study's DSR comes when the sweep ends)"
    return f"DSR {metrics.get('dsr', float('nan')):.3f}"


def baseline_lines(metrics: Mapping[str, float]) -> list[str]:
    """The model against its baselines on the same folds (:func:`backtest.baselines.comparison_table`),
    the verdict against the best factor and, on a synthetic market, the signal captured."""
    table = comparison_table(metrics)
    if len(table) < 2:
        return []
    out = ["", f"{'same folds, purge, portfolio, costs':40}{'rank IC':>9}{'(s.e.)':>9}{'Sharpe':>8}{'ex best mo.':>12}"]
    for label, row in table.iterrows():
        se = f"({row['s.e.']:.4f})" if math.isfinite(row["s.e."]) else ""
        cells = [f"{row[c]:+.2f}" if math.isfinite(row[c]) else "" for c in ("Sharpe", "Sharpe ex best month")]
        ic = f"{row['rank IC']:+.4f}" if math.isfinite(row["rank IC"]) else ""
        out.append(f"{label:40}{ic:>9}{se:>9}{cells[0]:>8}{cells[1]:>12}".rstrip())
    out.extend(baseline_verdicts(metrics))
    if "signal_capture" in metrics:
        out.append(
            f"signal capture  {metrics['signal_capture']:.1%} of the oracle's rank IC (an upper bound from "
            'the generator\'s latent states; README "Baselines")'
        )
    return out


def summarize_panel(panel: pd.DataFrame, fingerprint: str) -> str:
    """The loaded panel in a few lines: rows, trading days and their span, stocks, index members per day
    (with ``in_universe``) and the data fingerprint; the main job logs it once the data is loaded."""
    dates = panel.index.get_level_values("date")
    codes = panel.index.get_level_values("code")
    lines = [
        f"rows            {len(panel):,}",
        f"trading days    {dates.nunique():,}  ({dates.min():%Y-%m-%d} .. {dates.max():%Y-%m-%d})",
        f"stocks          {codes.nunique():,}",
    ]
    if "in_universe" in panel.columns:
        per_day = panel["in_universe"].groupby(level="date").sum()
        lines.append(f"members per day {per_day.min()}..{per_day.max()} (median {per_day.median():.0f})")
    lines.append(f"fingerprint     {fingerprint}")
    return "\n".join(lines)
