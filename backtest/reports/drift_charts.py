"""The drift report's pictures: heatmaps of per-fold PSI and of importance ranks, as PNG files.

The numbers come from :mod:`backtest.drift` (per-fold PSI from :func:`~backtest.drift.psi_by_fold`,
ranks and jumps from :func:`~backtest.drift.importance_drift`); the style from
:mod:`backtest.reports.plots` (:data:`~backtest.reports.plots.HEATMAP_STYLE`). The report page
(:mod:`backtest.reports.drift`) embeds them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Rectangle

from backtest.drift import PSI_MODERATE, PSI_SIGNIFICANT, ImportanceDrift
from backtest.reports.plots import DPI, HEATMAP_STYLE, STRATEGY_COLOR, new_figure, save_png
from backtest.reports.tables import date_label

#: Rows (features) of each heatmap.
HEATMAP_FEATURES = 30
#: PSI colour classes: stable (< 0.05, < 0.1), moderate (< 0.25), significant (< 0.5, < 1, >= 1).
PSI_LEVELS = (0.0, 0.05, PSI_MODERATE, PSI_SIGNIFICANT, 0.5, 1.0)
_PSI_COLORS = ("#f7f7f7", "#d9e8f5", "#fdd49e", "#f03b20", "#bd0026", "#67000d")


def plot_psi_heatmap(
    psi: pd.DataFrame,
    path: Path | str,
    *,
    rank_ic: pd.Series | None = None,
    n_features: int = HEATMAP_FEATURES,
    dpi: int = DPI,
) -> tuple[Path, pd.DataFrame]:
    """Heatmap of PSI per feature (rows) and fold (columns), the ``n_features`` features with the
    largest PSI in any fold, largest first; cells above :data:`PSI_SIGNIFICANT` carry their value. With
    ``rank_ic``, each fold's rank IC is drawn as a bar above its column, so that a fold whose features
    moved can be read against how well it ranked.

    Parameters
    ----------
    psi : fold x feature PSI (index: fold labels, e.g. decision dates), folds in time order.
    path : the PNG to write.
    rank_ic : each fold's rank IC, indexed like ``psi`` (a fold without one gets no bar), or None.

    Returns
    -------
    (Path, DataFrame) : the file and the matrix drawn (features top to bottom x folds).
    """
    peak = psi.max(axis=0).sort_values(ascending=False, na_position="last", kind="stable")
    shown = list(peak.index[:n_features])
    drawn = psi[shown].T.astype(np.float64)  # features x folds
    matrix = drawn.to_numpy()
    cmap = ListedColormap(_PSI_COLORS[:-1]).with_extremes(over=_PSI_COLORS[-1], bad="#bdbdbd")
    norm = BoundaryNorm(PSI_LEVELS, cmap.N)
    title = (
        f"PSI per fold: training window vs test days ({len(shown)} of {psi.shape[1]} features, "
        f"largest PSI first; > {PSI_SIGNIFICANT} significant)"
    )
    width, height = _heatmap_size(matrix.shape)
    panel = _RANK_IC_INCHES if rank_ic is not None else 0.0
    title = _wrapped(title, width)
    with new_figure((width, height + panel), dpi=dpi, style=HEATMAP_STYLE) as figure:
        figure.set_layout_engine("constrained")  # the heatmap's columns stay under the rank IC's bars
        grid = figure.add_gridspec(2, 2, height_ratios=[max(panel, 1e-3), height], width_ratios=[1.0, 0.025])
        axes = figure.add_subplot(grid[1, 0])
        image = axes.imshow(np.ma.masked_invalid(matrix), aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
        for row, col in zip(*np.nonzero(np.nan_to_num(matrix) > PSI_SIGNIFICANT), strict=True):
            axes.text(col, row, f"{matrix[row, col]:.2f}", ha="center", va="center", color="white", fontsize=5.5)
        _label_axes(axes, shown, psi.index, title if rank_ic is None else "")
        if rank_ic is not None:
            _rank_ic_panel(figure.add_subplot(grid[0, 0], sharex=axes), rank_ic.reindex(psi.index), title)
        bar = figure.colorbar(image, cax=figure.add_subplot(grid[1, 1]), extend="max", ticks=PSI_LEVELS)
        bar.set_label("PSI (grey: no values)")
        return save_png(figure, path), drawn


#: Height of the rank-IC panel above the PSI heatmap, in inches.
_RANK_IC_INCHES = 1.3


def _rank_ic_panel(axes, rank_ic: pd.Series, title: str) -> None:
    """Each fold's rank IC as a bar over its heatmap column (positions 0..n-1), with the zero line."""
    values = rank_ic.to_numpy(dtype=np.float64)
    axes.bar(np.arange(len(values)), np.nan_to_num(values), width=0.7, color=STRATEGY_COLOR)
    axes.axhline(0.0, color="black", linewidth=0.6)
    axes.set_ylabel("rank IC")
    axes.set_title(title, fontsize=8.5, loc="left")
    axes.tick_params(axis="x", labelbottom=False, length=0)


def plot_importance_rank_heatmap(
    drift: ImportanceDrift, path: Path | str, *, n_features: int = HEATMAP_FEATURES, dpi: int = DPI
) -> tuple[Path, pd.DataFrame]:
    """Heatmap of each feature's importance rank (rows) per fold (columns): the ``n_features`` features
    of largest mean gain share, largest first. Grey: unused in that fold (no rank); a red frame marks
    the fold a jump lands in; above each column, the number of jumps into that fold (over every feature,
    drawn or not; none for the first fold).

    Returns
    -------
    (Path, DataFrame) : the file and the ranks drawn (features top to bottom x folds; NaN = unused).
    """
    order = drift.shares.mean(axis=0).sort_values(ascending=False, kind="stable")
    shown = list(order.index[:n_features])
    drawn = drift.ranks[shown].T.astype(np.float64)
    matrix = drawn.to_numpy()
    worst = max(2 * len(shown), 10)
    base = matplotlib.colormaps["viridis_r"]
    cmap = base.with_extremes(bad="#d9d9d9", over=base(1.0))
    title = (
        f"Importance rank per fold (top {len(shown)} of {drift.shares.shape[1]} features by mean gain share; "
        f"jump: >= {drift.jump_ranks} places within the top {drift.jump_top})"
    )
    size = _heatmap_size(matrix.shape)
    title = _wrapped(title, size[0])
    per_fold = drift.rank_stability.set_index("fold_to")["n_jumps"]
    jumps = ["" if fold not in per_fold.index else f"{per_fold[fold]:d}" for fold in drift.ranks.index]
    with new_figure((size[0], size[1] + 0.3), dpi=dpi, style=HEATMAP_STYLE) as figure:
        figure.set_layout_engine("constrained")
        axes = figure.add_subplot()
        image = axes.imshow(
            np.ma.masked_invalid(matrix), aspect="auto", cmap=cmap, vmin=1, vmax=worst, interpolation="nearest"
        )
        if matrix.size <= 2000:
            for row, col in zip(*np.nonzero(np.isfinite(matrix)), strict=True):
                value = matrix[row, col]
                axes.text(
                    col,
                    row,
                    f"{value:.0f}",
                    ha="center",
                    va="center",
                    fontsize=5.5,
                    color="black" if value < worst * 0.55 else "white",
                )
        position = {feature: i for i, feature in enumerate(shown)}
        folds = list(drift.ranks.index)
        for jump in drift.jumps.itertuples(index=False):
            if jump.feature in position:
                axes.add_patch(
                    Rectangle(
                        (folds.index(jump.fold_to) - 0.5, position[jump.feature] - 0.5),
                        1,
                        1,
                        fill=False,
                        edgecolor="#e31a1c",
                        linewidth=1.6,
                    )
                )
        _label_axes(axes, shown, drift.ranks.index, title)
        top = axes.secondary_xaxis("top")
        top.set_xticks(range(len(jumps)), labels=jumps)
        top.set_xlabel("importance jumps into the fold", fontsize=7)
        top.tick_params(length=0)
        bar = figure.colorbar(image, ax=axes, extend="max", fraction=0.03, pad=0.02)
        bar.set_label("rank among the fold's used features (1 = largest gain share; grey: unused)")
        bar.ax.invert_yaxis()
        return save_png(figure, path), drawn


def _heatmap_size(shape: tuple[int, int]) -> tuple[float, float]:
    """Inches (width, height) of a heatmap of ``shape`` (rows = features, columns = folds)."""
    rows, cols = shape
    return min(4.0 + 0.32 * cols, 32.0), 1.6 + 0.24 * max(rows, 1)


def _wrapped(title: str, width: float) -> str:
    """``title`` in lines that fit a figure ``width`` inches wide beside the feature names (8.5 pt type)."""
    return "\n".join(textwrap.wrap(title, max(int(width * 10), 40)))


def _label_axes(axes, features: Sequence[str], folds: pd.Index, title: str) -> None:
    axes.set_yticks(range(len(features)), labels=list(features))
    axes.set_xticks(range(len(folds)), labels=[date_label(f) for f in folds], rotation=90)
    axes.set_xlabel("fold (decision date)" if isinstance(folds, pd.DatetimeIndex) else "fold")
    axes.set_title(title, fontsize=8.5, loc="left")
    axes.tick_params(length=0)
