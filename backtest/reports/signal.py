"""The signal page of a run (``reports/signal.html``): what the scores say about the forward returns.

Every number is :func:`backtest.metrics.signal_analysis`'s (:class:`~backtest.metrics.SignalAnalysis`); this
module draws and lays them out, in the house style of :mod:`backtest.reports.plots`, as one self-contained
HTML file (charts embedded) that MLflow's artifact view shows whole:

- the daily rank IC at the label's horizon with its trailing 21-day mean;
- the mean rank IC of each calendar month (year x month heatmap);
- the IC decay: the mean rank IC against the forward return of each horizon, with its Newey-West interval
  (the label's row is the run's ``rank_ic_mean``);
- the mean forward return of each score decile, the deciles' compounded one-day returns, and the
  top-minus-bottom decile spread with its Newey-West standard error;
- the score rank autocorrelation (lag 1, 5, 10, 20 scored days);
- the rank IC within each industry.

A horizon ``h`` counts trading days from the decision day t to the exit, as the label does
(:data:`backtest.labels.FORWARD_HORIZONS`): the return runs from the open of t+1 to the open of t+h.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from backtest.metrics import SignalAnalysis
from backtest.reports.plots import (
    BENCHMARK_COLOR,
    HEATMAP_STYLE,
    NEGATIVE_COLOR,
    STRATEGY_COLOR,
    new_figure,
    png_bytes,
)
from backtest.reports.tables import PageSection, format_number, html_table, page_heading, run_mention, write_page


def write_signal_page(path: Path | str, analysis: SignalAnalysis, *, title: str, run_id: str | None = None) -> Path:
    """Write the signal page of ``analysis`` at ``path`` (its folder is created); returns ``path``.

    Parameters
    ----------
    path : the HTML file.
    analysis : the run's :func:`backtest.metrics.signal_analysis`.
    title : the run name; the heading adds the test period (decision dates).
    run_id : the MLflow run, named under the heading.
    """
    a = analysis
    h = a.horizon
    decay = a.ic_decay.loc[h]
    spread = a.spread.loc[h]
    n = len(a.quantile_mean)
    header = (
        f"{run_mention(title, run_id)}. Horizon h: trading days "
        f"from the decision day t to the exit, the forward return running from the open of t+1 to the open of t+h "
        f"(the label's is {h}). Rank IC at h = {h}: <b>{format_number(decay['rank_ic_mean'], '+.4f')}</b> &plusmn; "
        f"{format_number(decay['rank_ic_se'], '.4f')} (Newey-West s.e.) over {decay['n_days']:.0f} days; "
        f"top-minus-bottom quantile spread {format_number(spread['mean'], '+.3%')} (t = "
        f"{format_number(spread['t'], '+.2f')}); score rank autocorrelation at lag {a.rank_autocorrelation.index[0]}: "
        f"{format_number(a.rank_autocorrelation.iloc[0], '.3f')}."
    )
    sections = [
        PageSection(
            "Daily rank IC",
            f"Spearman correlation of the scores with the {h}-day forward return, each decision day; the line is "
            f"its trailing {a.rolling_days}-day mean.",
            _plot_daily_ic(a),
        ),
        PageSection("Rank IC by month", f"Mean daily rank IC (h = {h}) of each calendar month.", _plot_monthly(a)),
        PageSection(
            "IC decay",
            "Mean daily rank IC against the forward return of each horizon, with its 95% Newey-West interval "
            "(lags h - 1).",
            _plot_decay(a),
            html_table(_decay_display(a)),
        ),
        PageSection(
            "Forward returns by score decile",
            f"Left: mean forward return of each of the {n} score quantiles (1 = lowest scores) at h = {h}. Right: "
            f"each quantile held for one day (h = {min(a.quantile_mean.columns)}), equal weight, no costs, "
            "compounded. Table: the mean over days of each quantile's daily mean forward return, at every horizon.",
            _plot_quantiles(a),
            html_table(_quantile_display(a)),
        ),
        PageSection(
            "Top minus bottom decile",
            f"Daily mean forward return of decile {n} minus decile 1, its mean over days and its Newey-West "
            "standard error (lags h - 1).",
            None,
            html_table(_spread_display(a)),
        ),
        PageSection(
            "Score rank autocorrelation",
            "Mean daily correlation of the names' score ranks with their ranks that many trading days before "
            "(a high value at lag 1: a slow signal, little turnover from the scores themselves).",
            None,
            html_table(a.rank_autocorrelation.rename("rank autocorrelation").round(4).reset_index()),
        ),
    ]
    if a.ic_by_group is not None and len(a.ic_by_group):
        sections.append(
            PageSection(
                "Rank IC by industry",
                f"Mean daily rank IC (h = {h}) within each industry's names of the day, with its 95% Newey-West "
                "interval; names: the industry's mean number of scored names a day.",
                _plot_by_group(a),
                html_table(_group_display(a)),
            )
        )
    return write_page(path, page_heading(f"Signal: {title}", a.daily_rank_ic.index), header, sections)


def _plot_daily_ic(a: SignalAnalysis) -> bytes:
    ic = a.daily_rank_ic
    with new_figure((10, 3.8)) as figure:
        axes = figure.add_subplot()
        values = ic.fillna(0.0).to_numpy()
        colors = np.where(values >= 0, STRATEGY_COLOR, NEGATIVE_COLOR)
        axes.vlines(ic.index, 0.0, values, colors=colors, alpha=0.5, linewidth=1.2, label="daily")
        axes.plot(a.rolling_rank_ic, color="black", linewidth=1.3, label=f"{a.rolling_days}-day mean")
        axes.axhline(0.0, color="black", linewidth=0.6)
        mean = float(ic.mean())
        axes.axhline(mean, color=BENCHMARK_COLOR, linestyle="--", linewidth=1.0, label=f"mean {mean:+.4f}")
        axes.set_ylabel(f"rank IC (h = {a.horizon})")
        axes.legend(loc="upper left", fontsize="small", ncol=3)
        return png_bytes(figure, dated=True)


def _plot_monthly(a: SignalAnalysis) -> bytes:
    table = a.monthly_rank_ic
    values = table.to_numpy(np.float64)
    limit = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.1
    with new_figure((8, 1.4 + 0.35 * max(len(table), 1)), style=HEATMAP_STYLE) as figure:
        axes = figure.add_subplot()
        cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#eeeeee")
        image = axes.imshow(
            np.ma.masked_invalid(values), aspect="auto", cmap=cmap, vmin=-limit, vmax=limit, interpolation="nearest"
        )
        for row, col in zip(*np.nonzero(np.isfinite(values)), strict=True):
            axes.text(col, row, f"{values[row, col]:+.3f}", ha="center", va="center", fontsize=7)
        axes.set_xticks(range(12), labels=[f"{pd.Timestamp(2000, m, 1):%b}" for m in table.columns])
        axes.set_yticks(range(len(table)), labels=[str(y) for y in table.index])
        axes.tick_params(length=0)
        figure.colorbar(image, ax=axes, fraction=0.03, pad=0.02).set_label("mean rank IC")
        return png_bytes(figure)


def _plot_decay(a: SignalAnalysis) -> bytes:
    decay = a.ic_decay
    labels = [str(h) for h in decay.index]
    values = decay["rank_ic_mean"].to_numpy(np.float64)
    with new_figure((6, 3.5)) as figure:
        axes = figure.add_subplot()
        colors = [STRATEGY_COLOR if v >= 0 else NEGATIVE_COLOR for v in np.nan_to_num(values)]
        axes.bar(labels, np.nan_to_num(values), color=colors, yerr=_errors(decay), capsize=4)
        axes.axhline(0.0, color="black", linewidth=0.6)
        axes.set_xlabel("horizon h (trading days to the exit)")
        axes.set_ylabel("mean rank IC")
        return png_bytes(figure)


def _plot_quantiles(a: SignalAnalysis) -> bytes:
    mean = a.quantile_mean[a.horizon]
    wealth = a.quantile_wealth
    n = len(mean)
    with new_figure((11, 4)) as figure:
        left, right = figure.subplots(1, 2)
        values = mean.to_numpy(np.float64) * 1e4
        colors = [STRATEGY_COLOR if v >= 0 else NEGATIVE_COLOR for v in np.nan_to_num(values)]
        left.bar([str(q) for q in mean.index], np.nan_to_num(values), color=colors)
        left.axhline(0.0, color="black", linewidth=0.6)
        left.set_xlabel("score decile (1 = lowest)")
        left.set_ylabel(f"mean forward return, h = {a.horizon} (bp)")
        palette = matplotlib.colormaps["RdYlBu"]
        for q in wealth.columns:
            edge = q in (1, n)
            right.plot(
                wealth[q],
                color=palette((q - 1) / max(n - 1, 1)),
                linewidth=1.8 if edge else 0.9,
                label=str(q) if edge or n <= 5 else None,
            )
        right.axhline(1.0, color="black", linewidth=0.6)
        right.set_ylabel("wealth, each decile held one day")
        right.legend(title="decile", loc="upper left", fontsize="small")
        return png_bytes(figure, dated=True)


def _plot_by_group(a: SignalAnalysis) -> bytes:
    table = a.ic_by_group.iloc[::-1]
    values = table["rank_ic_mean"].to_numpy(np.float64)
    with new_figure((7, 1.2 + 0.22 * len(table))) as figure:
        axes = figure.add_subplot()
        colors = [STRATEGY_COLOR if v >= 0 else NEGATIVE_COLOR for v in np.nan_to_num(values)]
        axes.barh(
            [str(g) for g in table.index],
            np.nan_to_num(values),
            color=colors,
            xerr=_errors(table),
            capsize=2,
        )
        axes.axvline(0.0, color="black", linewidth=0.6)
        axes.set_xlabel(f"mean rank IC within the industry (h = {a.horizon})")
        axes.tick_params(axis="y", labelsize=7)
        return png_bytes(figure)


def _errors(table: pd.DataFrame) -> np.ndarray:
    """Error bars (2, rows) of a table's ``rank_ic_mean`` from its ``ci_low`` / ``ci_high``."""
    mean = table["rank_ic_mean"].to_numpy(np.float64)
    return np.nan_to_num(np.vstack([mean - table["ci_low"].to_numpy(), table["ci_high"].to_numpy() - mean]))


def _decay_display(a: SignalAnalysis) -> pd.DataFrame:
    d = a.ic_decay
    return pd.DataFrame(
        {
            "horizon h": [f"{h}{' (label)' if h == a.horizon else ''}" for h in d.index],
            "rank IC": d["rank_ic_mean"].map(lambda v: format_number(v, "+.4f")),
            "s.e.": d["rank_ic_se"].map(lambda v: format_number(v, ".4f")),
            "t": d["t"].map(lambda v: format_number(v, "+.2f")),
            "days": d["n_days"],
        }
    )


def _quantile_display(a: SignalAnalysis) -> pd.DataFrame:
    table = a.quantile_mean.map(lambda v: format_number(v, "+.3%"))
    table.columns = [f"h = {h}" for h in table.columns]
    return table.rename_axis("decile").reset_index()


def _spread_display(a: SignalAnalysis) -> pd.DataFrame:
    s = a.spread
    return pd.DataFrame(
        {
            "horizon h": s.index,
            "mean spread": s["mean"].map(lambda v: format_number(v, "+.3%")),
            "s.e.": s["se"].map(lambda v: format_number(v, ".3%")),
            "t": s["t"].map(lambda v: format_number(v, "+.2f")),
            "days": s["n_days"],
        }
    )


def _group_display(a: SignalAnalysis) -> pd.DataFrame:
    g = a.ic_by_group
    return pd.DataFrame(
        {
            "industry": g.index.astype(str),
            "rank IC": g["rank_ic_mean"].map(lambda v: format_number(v, "+.4f")),
            "s.e.": g["rank_ic_se"].map(lambda v: format_number(v, ".4f")),
            "days": g["n_days"],
            "names": g["names"].map(lambda v: format_number(v, ".1f")),
        }
    )
