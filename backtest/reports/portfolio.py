"""The portfolio page of a run (``reports/portfolio.html``): what the top-k book did and what it cost.

Every number is :func:`backtest.metrics.book_analysis`'s (:class:`~backtest.metrics.BookAnalysis`, from the
portfolio's rebalance table, positions and blocked trades, the run's ``data/periods.csv`` among them); this
module draws and lays them out as one self-contained HTML file (charts embedded):

- turnover and cost of every rebalance;
- the equity after costs, before costs (each rebalance's cost given back) and equal weight's;
- the names held each day and the names blocked at each rebalance (limit-up, limit-down, suspended), with
  the days on which the book was not the one chosen;
- the book's industry weights against the universe's (the day's scored names) and its size exposure (the
  weighted z-score of log market cap among them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import PercentFormatter

from backtest.metrics import BookAnalysis
from backtest.reports.plots import (
    BENCHMARK_COLOR,
    HEATMAP_STYLE,
    NEGATIVE_COLOR,
    STRATEGY_COLOR,
    new_figure,
    png_bytes,
)
from backtest.reports.tables import (
    PageSection,
    date_label,
    format_number,
    html_table,
    page_heading,
    run_mention,
    write_page,
)

#: Width (points) of the bars drawn at each rebalance (as lines: one artist for all of them, fast to draw).
_BAR = 3.0
#: Colours of the blocked reasons.
_REASON_COLORS = {"limit_up": "#e6550d", "limit_down": "#3182bd", "suspended": "#636363"}


def write_portfolio_page(path: Path | str, analysis: BookAnalysis, *, title: str, run_id: str | None = None) -> Path:
    """Write the portfolio page of ``analysis`` at ``path`` (its folder is created); returns ``path``.

    Parameters
    ----------
    path : the HTML file.
    analysis : the run's :func:`backtest.metrics.book_analysis`.
    title : the run name; the heading adds the test period (return days).
    run_id : the MLflow run, named under the heading.
    """
    a = analysis
    m = a.summary
    stats = a.rebalance_stats
    header = (
        f"{run_mention(title, run_id)}: {m['rebalances']:.0f} "
        f"rebalances over {m['return_days']:.0f} return days. Mean turnover a rebalance "
        f"{stats.loc['turnover', 'mean']:.1%}, "
        f"mean cost {stats.loc['cost', 'mean'] * 1e4:.1f} bp of the book; costs took <b>{m['cost_drag']:.2%}</b> a "
        f"year (annual return {m['ann_return_before_costs']:+.2%} before costs, {m['ann_return']:+.2%} after). Mean "
        f"names held {m['holdings_mean']:.2f}; {m['rebalances_blocked']:.0f} rebalances had a blocked name; the book "
        f"was not the one chosen on {m['days_blocked']:.0f} of {m['return_days']:.0f} days."
    )
    sections = [
        PageSection(
            "Equity with and without costs",
            "Wealth from 1: the strategy after costs, the same book with every rebalance's cost given back, and "
            "equal weight (after its own costs), log scale.",
            _plot_equity(a),
        ),
        PageSection(
            "Turnover and cost per rebalance",
            "One-way turnover of each rebalance (replacing the whole book is 100%) and its cost (commission, stamp "
            "duty, slippage) as a fraction of the book.",
            _plot_turnover(a),
            html_table(_rebalance_summary(a)),
        ),
        PageSection(
            "Holdings and blocked trades",
            "Names held each day; names that could not be traded as wished at each rebalance, by reason; shaded: "
            "days on which the book was not the one chosen (a blocked name, or a holding without a fresh price).",
            _plot_holdings(a),
            html_table(a.blocked.sum().rename("names blocked").rename_axis("reason").reset_index()),
        ),
    ]
    if a.industry is not None:
        sections.append(
            PageSection(
                "Industry exposure against the universe",
                "The book's weight in each industry minus the share of the day's scored names in it, at each "
                "rebalance (the post-trade book). Left: the mean over rebalances; right: through time.",
                _plot_industry(a),
            )
        )
    if a.size is not None:
        sections.append(
            PageSection(
                "Size exposure against the universe",
                "Weighted mean over the book of the z-score of log market cap among the day's scored names (the "
                "universe is 0; +1: the book sits one cross-sectional standard deviation towards large caps).",
                _plot_size(a),
            )
        )
    return write_page(path, page_heading(f"Portfolio: {title}", a.wealth.index), header, sections)


def _plot_equity(a: BookAnalysis) -> bytes:
    with new_figure((10, 4.5)) as figure:
        axes = figure.add_subplot()
        axes.plot(a.wealth["strategy"], color=STRATEGY_COLOR, linewidth=1.4, label="strategy, after costs")
        axes.plot(
            a.wealth["strategy_before_costs"],
            color=STRATEGY_COLOR,
            linewidth=1.0,
            linestyle="--",
            label="strategy, before costs",
        )
        axes.plot(a.wealth["equal_weight"], color=BENCHMARK_COLOR, linewidth=1.1, label="equal weight")
        axes.set_yscale("log")
        axes.axhline(1.0, color="black", linewidth=0.6)
        axes.set_ylabel("wealth (1.0 at start), log scale")
        axes.legend(loc="upper left", fontsize="small")
        return png_bytes(figure, dated=True)


def _plot_turnover(a: BookAnalysis) -> bytes:
    periods = a.periods
    dates = pd.DatetimeIndex(periods.index)
    with new_figure((10, 4.5)) as figure:
        top, bottom = figure.subplots(2, 1, sharex=True)
        top.vlines(dates, 0.0, periods["turnover"].to_numpy(np.float64), color=STRATEGY_COLOR, linewidth=_BAR)
        top.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        top.set_ylabel("turnover")
        top.set_ylim(bottom=0)
        bottom.vlines(dates, 0.0, periods["cost"].to_numpy(np.float64) * 1e4, color=NEGATIVE_COLOR, linewidth=_BAR)
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("cost (bp of the book)")
        bottom.set_xlabel("decision date")
        return png_bytes(figure, dated=True)


def _plot_holdings(a: BookAnalysis) -> bytes:
    blocked = a.blocked
    dates = pd.DatetimeIndex(blocked.index)
    with new_figure((10, 4.5)) as figure:
        top, bottom = figure.subplots(2, 1, sharex=True)
        top.step(a.holdings.index, a.holdings.to_numpy(), where="post", color=STRATEGY_COLOR, linewidth=1.2)
        shaded = a.blocked_days.reindex(a.holdings.index, fill_value=False).to_numpy(bool)
        top.fill_between(
            a.holdings.index, 0, 1, where=shaded, transform=top.get_xaxis_transform(), color="#fdd49e", alpha=0.6
        )
        top.set_ylabel("names held")
        top.set_ylim(bottom=0)
        base = np.zeros(len(blocked))
        for reason in blocked.columns:
            counts = blocked[reason].to_numpy(np.float64)
            color = _REASON_COLORS.get(reason, "#999999")
            bottom.vlines(dates, base, base + counts, color=color, linewidth=_BAR, label=reason)
            base += counts
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("names blocked")
        bottom.set_xlabel("decision date")
        bottom.legend(loc="upper left", fontsize="small", ncol=len(blocked.columns))
        return png_bytes(figure, dated=True)


def _plot_industry(a: BookAnalysis) -> bytes:
    active, mean = a.industry, a.industry_mean
    matrix = active[mean.index[::-1]].T.to_numpy(np.float64)  # industries (largest mean first) x rebalances
    limit = float(np.nanmax(np.abs(matrix))) if matrix.size else 0.1
    with new_figure((13, 1.5 + 0.2 * len(mean)), style=HEATMAP_STYLE) as figure:
        left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2.6]})
        values = mean.to_numpy(np.float64)
        left.barh(list(mean.index), values, color=[STRATEGY_COLOR if v >= 0 else NEGATIVE_COLOR for v in values])
        left.axvline(0.0, color="black", linewidth=0.6)
        left.xaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        left.set_xlabel("mean active weight")
        image = right.imshow(matrix, aspect="auto", cmap="RdBu", vmin=-limit, vmax=limit, interpolation="nearest")
        right.set_yticks(range(len(mean)), labels=list(mean.index[::-1]))
        step = max(len(active) // 12, 1)
        ticks = list(range(0, len(active), step))
        right.set_xticks(ticks, labels=[date_label(active.index[i]) for i in ticks], rotation=90)
        right.tick_params(length=0)
        figure.colorbar(image, ax=right, fraction=0.03, pad=0.02).set_label("active weight")
        return png_bytes(figure)


def _plot_size(a: BookAnalysis) -> bytes:
    size = a.size
    with new_figure((10, 3.2)) as figure:
        axes = figure.add_subplot()
        axes.plot(size.index, size.to_numpy(np.float64), color=STRATEGY_COLOR, marker="o", markersize=2, linewidth=1)
        axes.axhline(0.0, color="black", linewidth=0.6, label="universe")
        mean = float(size.mean())
        axes.axhline(mean, color=BENCHMARK_COLOR, linestyle="--", linewidth=1.0, label=f"mean {mean:+.2f}")
        axes.set_ylabel("size exposure (z of log cap)")
        axes.set_xlabel("decision date")
        axes.legend(loc="upper left", fontsize="small")
        return png_bytes(figure, dated=True)


def _rebalance_summary(a: BookAnalysis) -> pd.DataFrame:
    labels = {
        "turnover": ("turnover", ".1%", 1.0),
        "cost": ("cost (bp of the book)", ".1f", 1e4),
        "benchmark_turnover": ("equal weight's turnover", ".1%", 1.0),
        "benchmark_cost": ("equal weight's cost (bp)", ".1f", 1e4),
    }
    return pd.DataFrame(
        [
            {
                "per rebalance": label,
                **{stat: format_number(value * scale, fmt) for stat, value in a.rebalance_stats.loc[key].items()},
            }
            for key, (label, fmt, scale) in labels.items()
        ]
    )
