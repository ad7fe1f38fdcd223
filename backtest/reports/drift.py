"""The drift report: one page (markdown and self-contained HTML) with its CSV tables and heatmaps.

One story, told per fold: :func:`write_drift_report` names the run and its test period, opens with one
row per fold (its reference window and test days, its rank IC, how many features shifted, the importance
jumps into it: :func:`backtest.drift.fold_summary`), flags the features with PSI > :data:`PSI_SIGNIFICANT`
in a fold and the importance jumps, and draws two heatmaps (PNG files next to the report, embedded in its
HTML, linked from its markdown): PSI per feature and fold under each fold's rank IC, and importance rank
per feature and fold (the :data:`HEATMAP_FEATURES` features of largest mean share) under each fold's jump
count. The whole-period comparison (the first fold's training window against every test day) comes last,
labelled as what it is.

The numbers are computed in :mod:`backtest.drift`, the heatmaps drawn by
:mod:`backtest.reports.drift_charts`; this module lays them out and writes the files.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.drift import (
    IMPORTANCE_JUMP_RANKS,
    IMPORTANCE_JUMP_TOP,
    KS_D_LARGE,
    KS_D_MODERATE,
    PSI_MODERATE,
    PSI_SIGNIFICANT,
    SMD_LARGE,
    SMD_MODERATE,
    by_decision_date,
    fold_summary,
    importance_drift,
    psi_flags,
)
from backtest.reports.drift_charts import HEATMAP_FEATURES, plot_importance_rank_heatmap, plot_psi_heatmap
from backtest.reports.tables import date_label, html_table, markdown_table, page_head


@dataclass(frozen=True)
class DriftRun:
    """Which run a drift report is about.

    Attributes
    ----------
    run_name, run_id : the tracked run (either may be None).
    windows : :func:`backtest.drift.fold_windows`: each fold's reference (training) window and test days.
    """

    run_name: str | None = None
    run_id: str | None = None
    windows: pd.DataFrame | None = None

    @property
    def test_period(self) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """First and last test day over the folds; None without windows."""
        if self.windows is None or self.windows["test_start"].isna().all():
            return None
        return self.windows["test_start"].min(), self.windows["test_end"].max()


def write_drift_report(
    directory: Path | str,
    *,
    importance: pd.DataFrame | None = None,
    periods: pd.Series | Sequence[object] | None = None,
    value_drift: pd.DataFrame | None = None,
    fold_psi: pd.DataFrame | None = None,
    fold_rank_ic: pd.Series | None = None,
    run: DriftRun | None = None,
    top_n: int = 10,
    heatmap_features: int = HEATMAP_FEATURES,
    jump_ranks: int = IMPORTANCE_JUMP_RANKS,
    jump_top: int = IMPORTANCE_JUMP_TOP,
) -> list[Path]:
    """Write the drift report into ``directory``: CSV tables, heatmaps, ``drift_report.md`` and ``.html``.

    Parameters
    ----------
    directory : output folder (created).
    importance : fold x feature gain (see :func:`backtest.drift.importance_drift`), or None to skip that part.
    periods : period labels of the folds (see :func:`backtest.drift.importance_drift`).
    value_drift : output of :func:`backtest.drift.feature_value_drift` (optionally with more columns, e.g. ``fold``),
        or None to skip that part.
    fold_psi : fold x feature PSI (:func:`backtest.drift.psi_by_fold`, indexed by fold number), or None.
    fold_rank_ic : each fold's rank IC (the run's ``fold/rank_ic``), indexed by fold number, or None: drawn
        above the PSI heatmap and listed per fold.
    run : the run's name, id and fold windows; with windows, ``fold_psi`` is shown by decision date.
    top_n : rows shown per table in the markdown / HTML summary (the CSVs hold everything).
    heatmap_features : rows of each heatmap.
    jump_ranks, jump_top : importance jump thresholds (:func:`backtest.drift.importance_jumps`).

    Returns
    -------
    list of Path : the files written, in this order (those whose input was given):
    ``importance_shares.csv``, ``importance_ranks.csv``, ``importance_top_by_period.csv``,
    ``importance_rank_stability.csv``, ``importance_rank_changes.csv``, ``importance_jumps.csv``,
    ``importance_rank_heatmap.png``, ``psi_by_fold.csv``, ``psi_flags.csv``, ``psi_heatmap.png``,
    ``feature_value_drift.csv``, ``fold_summary.csv`` (with the fold windows), ``drift_report.md``,
    ``drift_report.html``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    run = run or DriftRun()
    written: list[Path] = []
    sections: list[_Section] = []

    def save(frame: pd.DataFrame, name: str, index: bool) -> None:
        path = directory / name
        frame.to_csv(path, index=index)
        written.append(path)

    flag_sections: list[_Section] = []
    figure_sections: list[_Section] = []
    drift_sections: list[_Section] = []
    drift = None
    if importance is not None:
        drift = importance_drift(importance, periods, top_n=max(top_n, 1), jump_ranks=jump_ranks, jump_top=jump_top)
        save(drift.shares, "importance_shares.csv", index=True)
        save(drift.ranks, "importance_ranks.csv", index=True)
        save(drift.top_by_period, "importance_top_by_period.csv", index=False)
        save(drift.rank_stability, "importance_rank_stability.csv", index=False)
        save(drift.rank_changes, "importance_rank_changes.csv", index=True)
        save(drift.jumps, "importance_jumps.csv", index=False)
        png, shown = plot_importance_rank_heatmap(
            drift, directory / "importance_rank_heatmap.png", n_features=heatmap_features
        )
        written.append(png)
        flag_sections.append(
            _Section(
                f"Importance jumps ({len(drift.jumps)})",
                f"A feature used in two consecutive folds whose rank moved by >= {jump_ranks} places, ranked within "
                f"the top {jump_top} in one of them; largest moves first (all in importance_jumps.csv). Features "
                "with zero gain in a fold have no rank there: they neither jump nor count in the rank stability.",
                drift.jumps.iloc[np.argsort(-drift.jumps["rank_change"].abs().to_numpy(), kind="stable")].head(
                    max(top_n, 30)
                ),
            )
        )
        figure_sections.append(
            _Section(
                "Importance rank per feature and fold",
                f"{len(shown)} features of largest mean gain share; number = rank among the fold's used features; "
                "grey = unused; red frame = a jump lands there.",
                None,
                png,
            )
        )
        stability = drift.rank_stability["spearman"]
        drift_sections += [
            _Section("Top features per period (mean gain share)", "", drift.top_by_period),
            _Section(
                "Rank stability between consecutive folds (Spearman over the features used in both)",
                f"mean {stability.mean():.3f}" if stability.notna().any() else "fewer than two comparable folds",
                drift.rank_stability,
            ),
            _Section("Features whose importance rank changed most", "", drift.rank_changes.head(top_n).reset_index()),
        ]
    if fold_psi is not None:
        dated = fold_psi
        if run.windows is not None:
            dated = by_decision_date(fold_psi, run.windows)
        save(fold_psi, "psi_by_fold.csv", index=True)
        flags = psi_flags(dated)
        save(flags, "psi_flags.csv", index=True)
        ic = None
        if fold_rank_ic is not None:
            ic = fold_rank_ic.reindex(fold_psi.index)
            ic.index = dated.index
        png, shown = plot_psi_heatmap(dated, directory / "psi_heatmap.png", rank_ic=ic, n_features=heatmap_features)
        written.append(png)
        flag_sections.insert(
            0,
            _Section(
                f"Features with PSI > {PSI_SIGNIFICANT} in a fold ({len(flags)} of {fold_psi.shape[1]})",
                "PSI of the fold's test days against its training window; < 0.1 stable, 0.1-0.25 moderate, "
                "> 0.25 significant.",
                flags.head(max(top_n, 30)).reset_index(),
            ),
        )
        figure_sections.insert(
            0,
            _Section(
                "PSI per feature and fold",
                f"{len(shown)} features with the largest PSI in any fold; the full table is psi_by_fold.csv."
                + (" Above: each fold's rank IC." if ic is not None else ""),
                None,
                png,
            ),
        )
    if value_drift is not None:
        save(value_drift, "feature_value_drift.csv", index=True)
        shown_drift = value_drift.sort_values("psi", ascending=False, na_position="last").head(top_n).reset_index()
        drift_sections.append(
            _Section(
                "Whole test period against the first fold's training window (largest PSI first)",
                "One comparison for the whole run, not per fold: every test day pooled against the first fold's "
                "training window. Shifts that differ from fold to fold partly cancel in the pool, so a feature "
                "flagged in a fold above can read as stable here; the per-fold PSI is the one to act on. "
                f"Effect sizes, no p-values (at thousands of rows any shift is 'significant'): psi < {PSI_MODERATE} "
                f"stable, up to {PSI_SIGNIFICANT} moderate, above significant; ks_d (Kolmogorov-Smirnov D, the "
                f"largest gap between the two distribution functions) moderate from {KS_D_MODERATE}, large from "
                f"{KS_D_LARGE}; smd (mean shift in pooled standard deviations) moderate from {SMD_MODERATE}, large "
                f"from {SMD_LARGE}.",
                shown_drift,
            )
        )
    if run.windows is not None:
        summary = fold_summary(run.windows, fold_psi=fold_psi, drift=drift, rank_ic=fold_rank_ic)
        save(summary, "fold_summary.csv", index=True)
        sections.append(
            _Section(
                "Per fold",
                "Each fold's reference is its own training window (the data its model learned from); the current "
                "sample is its test days (the days it scored); test_start is its decision date. rank_ic: the fold's "
                f"mean daily rank IC; psi_flagged: features with PSI > {PSI_SIGNIFICANT} against its training window "
                "(psi_median: over all features); jumps: importance jumps into the fold; rank_spearman: of the gain "
                "shares with the previous fold's (1 = the same order).",
                summary.reset_index(),
            )
        )
    sections += flag_sections + figure_sections + drift_sections
    md_path, html_path = directory / "drift_report.md", directory / "drift_report.html"
    md_path.write_text(_markdown(run, sections), encoding="utf-8")
    html_path.write_text(_html(run, sections), encoding="utf-8")
    return [*written, md_path, html_path]


@dataclass(frozen=True)
class _Section:
    heading: str
    note: str
    table: pd.DataFrame | None
    figure: Path | None = None


def _title(run: DriftRun) -> str:
    return "Feature drift report" + (f": {run.run_name}" if run.run_name else "")


def _header_lines(run: DriftRun) -> list[str]:
    lines = []
    if run.run_id:
        lines.append(f"MLflow run {run.run_id}")
    period = run.test_period
    if period is not None:
        n_folds = len(run.windows) if run.windows is not None else 0
        first, last = date_label(period[0]), date_label(period[1])
        lines.append(f"test period (decision dates) {first} .. {last}, {n_folds} folds")
    return lines


def _markdown(run: DriftRun, sections: list[_Section]) -> str:
    out = [f"# {_title(run)}", ""]
    header = _header_lines(run)
    if header:
        out += ["; ".join(header), ""]
    if not sections:
        out.append("No importance or feature values were given.")
    for section in sections:
        out += [f"## {section.heading}", ""] + ([section.note, ""] if section.note else [])
        if section.figure is not None:
            out += [f"![{section.heading}]({section.figure.name})", ""]
        if section.table is not None:
            out += [markdown_table(section.table) if len(section.table) else "(none)", ""]
    return "\n".join(out)


def _html(run: DriftRun, sections: list[_Section]) -> str:
    title = html.escape(_title(run))
    body = [page_head(_title(run), ".run{color:#555}"), f"<h1>{title}</h1>"]
    header = _header_lines(run)
    if header:
        body.append(f"<p class='run'>{html.escape('; '.join(header))}</p>")
    if not sections:
        body.append("<p>No importance or feature values were given.</p>")
    for section in sections:
        body.append(
            f"<h2>{html.escape(section.heading)}</h2>" + (f"<p>{html.escape(section.note)}</p>" if section.note else "")
        )
        if section.figure is not None:
            data = base64.b64encode(section.figure.read_bytes()).decode("ascii")
            body.append(f"<img alt='{html.escape(section.heading)}' src='data:image/png;base64,{data}'>")
        if section.table is not None:
            if not len(section.table):
                body.append("<p>(none)</p>")
                continue
            body.append(html_table(section.table))
    body.append("</body></html>")
    return "\n".join(body)
