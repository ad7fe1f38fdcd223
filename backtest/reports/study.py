"""The study report of a sweep, its charts and pages: the numbers come from :mod:`backtest.comparison`.

:func:`write_study_report` writes a :class:`~backtest.comparison.StudyReport`
(:func:`~backtest.comparison.build_study_report`) as HTML (self-contained), markdown, CSV and PNG files
named in :data:`STUDY_REPORT_FILES`; every trial keeps one colour in every chart (:func:`trial_colors`).
"""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from backtest.comparison import (
    _TRIAL_COLUMNS,
    _VERDICT_BASELINE,
    _VERDICT_BETTER,
    _VERDICT_NONE,
    _VERDICT_WORSE,
    BENCHMARK_COLUMN,
    STATISTIC_LABELS,
    VERDICT_COLUMNS,
    StudyReport,
    study_summary,
)
from backtest.reports.files import STUDY_REPORT_FILES
from backtest.reports.plots import BENCHMARK_COLOR, new_figure, save_png
from backtest.reports.returns import wealth_curve
from backtest.reports.tables import DECIMALS, embedded_png, format_number, html_table, markdown_table, page_head
from backtest.statistics import PERIODS_PER_YEAR, PBOResult

logger = logging.getLogger(__name__)

__all__ = [
    "STUDY_REPORT_FILES",
    "trial_colors",
    "write_study_report",
]


# --------------------------------------------------------------------------------------------------
# Writing the report


def trial_colors(names: list[str]) -> dict[str, str]:
    """One fixed matplotlib tab10 colour per trial, by position (cycling after 10), plus the benchmark's
    grey (:data:`BENCHMARK_COLUMN`)."""
    palette = matplotlib.colormaps["tab10"].colors
    colors = {name: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, name in enumerate(names)}
    colors[BENCHMARK_COLUMN] = BENCHMARK_COLOR
    return colors


def _plot_equity(report: StudyReport, path: Path) -> Path:
    colors = trial_colors(report.trial_names)
    with new_figure((10, 5)) as figure:
        axes = figure.add_subplot()
        for name in report.returns.columns:
            is_bench = name == BENCHMARK_COLUMN
            axes.plot(
                wealth_curve(report.returns[name]),
                color=colors[name],
                linewidth=1.2 if is_bench else (1.8 if name == report.baseline else 1.1),
                linestyle="--" if is_bench else "-",
                label=f"{name} (baseline)" if name == report.baseline else name,
            )
        axes.axhline(1.0, color="black", linewidth=0.6)
        axes.set_ylabel("Wealth (1.0 at start)")
        axes.set_title(f"{report.title}: equity curves")
        axes.legend(loc="upper left", fontsize="small", ncol=2 if len(colors) > 6 else 1)
        figure.autofmt_xdate()
        figure.tight_layout()
        return save_png(figure, path)


def _plot_fold_rank_ic(report: StudyReport, folds: pd.DataFrame, path: Path) -> Path:
    """Each trial's rank IC per test fold, overlaid (one line per trial, the baseline thicker)."""
    colors = trial_colors(report.trial_names)
    with new_figure((10, 4)) as figure:
        axes = figure.add_subplot()
        for name in folds.columns:
            values = pd.to_numeric(folds[name], errors="coerce")
            axes.plot(
                [str(f) for f in folds.index],
                values.to_numpy(np.float64),
                marker="o",
                markersize=3,
                color=colors.get(name, "black"),
                linewidth=1.8 if name == report.baseline else 1.1,
                label=f"{name} (baseline, mean of folds {values.mean():+.4f})"
                if name == report.baseline
                else f"{name} (mean of folds {values.mean():+.4f})",
            )
        axes.axhline(0.0, color="black", linewidth=0.6)
        axes.set_xlabel("test fold")
        axes.set_ylabel("rank IC")
        axes.set_title(f"{report.title}: rank IC per fold")
        axes.legend(loc="upper left", fontsize="small", ncol=2 if len(folds.columns) > 6 else 1)
        figure.tight_layout()
        return save_png(figure, path)


def _plot_pbo(report: StudyReport, pbo: PBOResult, path: Path) -> Path:
    colors = trial_colors(report.trial_names)
    values = np.unique(pbo.logits)
    mids = (values[1:] + values[:-1]) / 2.0
    step = np.min(np.diff(values)) if len(values) > 1 else 1.0
    edges = np.r_[values[0] - step / 2.0, mids, values[-1] + step / 2.0]
    shown = [i for i in range(len(pbo.trials)) if (pbo.selected == i).any()]
    annual = np.sqrt(PERIODS_PER_YEAR)
    with new_figure((11, 4.5)) as figure:
        left, right = figure.subplots(1, 2)
        left.hist(
            [pbo.logits[pbo.selected == i] for i in shown],
            bins=edges,
            stacked=True,
            color=[colors[pbo.trials[i]] for i in shown],
            label=[pbo.trials[i] for i in shown],
        )
        left.axvline(0.0, color="black", linewidth=1.0)
        left.set_xlabel("logit of the IS-best trial's OOS rank (<= 0: overfit)")
        left.set_ylabel("combinations")
        left.set_title(f"PBO = {pbo.pbo:.3f} ({pbo.n_combinations:,} combinations, {pbo.n_blocks} blocks)")
        left.legend(title="IS best", fontsize="small", loc="upper left")
        is_sr, oos_sr = pbo.is_performance * annual, pbo.oos_performance * annual
        finite = np.isfinite(is_sr) & np.isfinite(oos_sr)
        right.scatter(
            is_sr[finite],
            oos_sr[finite],
            s=6,
            alpha=0.4,
            c=[colors[pbo.trials[i]] for i in pbo.selected[finite]],
        )
        if np.isfinite(pbo.degradation_slope) and finite.any():
            xs = np.linspace(is_sr[finite].min(), is_sr[finite].max(), 2)
            right.plot(
                xs,
                pbo.degradation_intercept * annual + pbo.degradation_slope * xs,
                color="black",
                linewidth=1.0,
                label=f"slope {pbo.degradation_slope:+.2f}",
            )
            right.legend(loc="upper left", fontsize="small")
        right.axhline(0.0, color="black", linewidth=0.6)
        right.set_xlabel("in-sample Sharpe of the IS-best trial (annualised)")
        right.set_ylabel("its out-of-sample Sharpe")
        right.set_title(f"Performance degradation (P[OOS loss] = {pbo.prob_oos_loss:.2f})")
        figure.tight_layout()
        return save_png(figure, path)


def _reading(report: StudyReport) -> str:
    """The report's one-paragraph plain reading."""
    dates = report.returns.index
    names = report.trial_names
    best = report.best_trial
    row = report.trials.loc[best]
    text = [
        f"{len(names)} trial(s) over {len(dates)} common trading days ({dates[0].date()} to {dates[-1].date()}); "
        f"{report.n_trials} counted as tried for the deflation.",
    ]
    verdicts = report.trials["verdict"].drop(report.baseline)
    if len(verdicts):
        counts = {v: int(verdicts.str.startswith(v).sum()) for v in (_VERDICT_BETTER, _VERDICT_WORSE, _VERDICT_NONE)}
        on = STATISTIC_LABELS[report.primary]
        fallback = int((report.trials["verdict_statistic"].drop(report.baseline) != report.primary).sum())
        text.append(
            f"Against the baseline {report.baseline}, on the paired {on} difference (Holm-adjusted over "
            f"{len(verdicts)} comparison(s), 5% family-wise): {counts[_VERDICT_BETTER]} better, "
            f"{counts[_VERDICT_WORSE]} worse, {counts[_VERDICT_NONE]} without a detectable difference"
            + (f" ({fallback} judged on the Sharpe difference alone, see the notes)." if fallback else ".")
        )
    text.append(
        f"The best Sharpe ratio is {best}'s ({row['sharpe']:+.2f}, 95% interval {row['sharpe_ci_low']:+.2f} to "
        f"{row['sharpe_ci_high']:+.2f}); its deflated Sharpe ratio is DSR = {row['dsr']:.3f}, the probability that "
        f"its true Sharpe exceeds {report.expected_max_sharpe:+.2f}, the best one expected from {report.n_trials} "
        "trials without skill (below 0.95 the win is not distinguishable from luck of the draw)."
    )
    if report.pbo is None:
        text.append("The probability of backtest overfitting was not computed (see the notes).")
    else:
        p = report.pbo
        text.append(
            f"The probability of backtest overfitting is PBO = {p.pbo:.3f}: in {p.pbo:.0%} of the "
            f"{p.n_combinations:,} ways of splitting the {p.n_blocks} blocks into in-sample and out-of-sample "
            "halves, the trial that was best in sample ranked at or below the median out of sample (0: the "
            "selection held up; 0.5: no better than picking at random)."
        )
    return " ".join(text)


def _not_comparable(report: StudyReport) -> list[str]:
    """One warning per trial whose run is tagged ``comparable=false``, with its ``comparable_reason``."""
    if "comparable" not in report.trials.columns:
        return []
    reasons = report.trials.get("comparable_reason", pd.Series("", index=report.trials.index))
    return [
        f"Not comparable: {name}: {reasons[name] or 'see its leak_guard and feature_audit tags'}. Its numbers "
        "must not be compared with the other trials'."
        for name, flag in report.trials["comparable"].items()
        if flag == "false"
    ]


def _interval(value: float, low: float, high: float, digits: int) -> str:
    """``+0.0134 [+0.0050, +0.0218]``; blank for an undefined value."""
    if not np.isfinite(value):
        return ""
    bounds = f" [{low:+.{digits}f}, {high:+.{digits}f}]" if np.isfinite(low) and np.isfinite(high) else ""
    return f"{value:+.{digits}f}{bounds}"


#: columns of ``trial_metrics`` about the run rather than its configuration: shown with the trials' numbers
_RUN_COLUMNS = ("minutes", "resumed_folds")
#: how the tables print a statistic (a Sharpe ratio, a rank IC and their differences, PSR, DSR, NDCG)
_STAT = f".{DECIMALS}f"
_SIGNED = f"+.{DECIMALS}f"
_NUMBER = f"{{:{_STAT}}}"  # a float cell of a table (the per-year returns and Sharpe ratios)


def _comparison_display(report: StudyReport) -> pd.DataFrame:
    """The trials table a person reads first: the verdict and the differences it rests on, the Sharpe
    difference beside it, the DSR and the comparison's power; one short row per trial."""
    t = report.trials
    primary = report.primary
    rows = []
    for name, row in t.iterrows():
        statistic = row["verdict_statistic"]
        on = f"{primary}_diff"
        if name == report.baseline:
            seeds = {"seeds (seed s.e. of the diff)": str(int(row["n_seeds"]))} if "n_seeds" in t.columns else {}
            rows.append({"trial": name, "verdict": _VERDICT_BASELINE, "DSR": format_number(row["dsr"], _STAT), **seeds})
            continue
        rows.append(
            {
                "trial": name,
                "verdict": row["verdict"],
                f"{STATISTIC_LABELS[primary]} diff [95% CI]": _interval(
                    row[on], row[f"{on}_ci_low"], row[f"{on}_ci_high"], DECIMALS
                ),
                "p (Holm)": ""
                if not np.isfinite(row["p_value"])
                else f"{row['p_value']:.3f} ({row['p_holm']:.3f})" + ("" if statistic == primary else " Sharpe"),
                "Sharpe diff [95% CI]": _interval(
                    row["sharpe_diff"], row["sharpe_diff_ci_low"], row["sharpe_diff_ci_high"], DECIMALS
                ),
                "DSR": format_number(row["dsr"], _STAT),
                "MDE rank IC": format_number(row["mde_rank_ic"], _STAT),
                "days to resolve": format_number(row["days_to_resolve"], ",.0f"),
                **(
                    {"seeds (seed s.e. of the diff)": f"{int(row['n_seeds'])} ({format_number(row['seed_se'], _STAT)})"}
                    if "n_seeds" in t.columns
                    else {}
                ),
            }
        )
    return pd.DataFrame(rows, columns=list(rows[-1])).fillna("")


def _trials_display(report: StudyReport) -> pd.DataFrame:
    """The trials' own numbers, one short row each, the core columns first (the robustness a person reads
    before anything else: Sharpe with its interval and without the best month, rank IC, DSR, comparable);
    the CSV holds every column."""
    t = report.trials
    return pd.DataFrame(
        {
            "trial": t.index,
            "Sharpe [95% CI]": [
                _interval(r["sharpe"], r["sharpe_ci_low"], r["sharpe_ci_high"], DECIMALS) for _, r in t.iterrows()
            ],
            "ex best month": [format_number(v, _SIGNED) for v in t["sharpe_ex_best_month"]],
            "rank IC (s.e.)": [
                format_number(r["rank_ic_mean"], _SIGNED)
                + (f" ({r['rank_ic_se']:{_STAT}})" if np.isfinite(r["rank_ic_se"]) else "")
                for _, r in t.iterrows()
            ],
            "DSR": [format_number(v, _STAT) for v in t["dsr"]],
            **({"comparable": [{"false": "NO"}.get(v, v) for v in t["comparable"]]} if "comparable" in t else {}),
            "ann. return": [format_number(v, "+.1%") for v in t["ann_return"]],
            "max DD": [format_number(v, ".1%") for v in t["max_drawdown"]],
            "NDCG": [format_number(v, _STAT) for v in t["ndcg"]],
            "PSR": [format_number(v, _STAT) for v in t["psr"]],
            "turnover": [format_number(v, ".1f") for v in t["turnover"]],
            **({"minutes": [format_number(v, ".1f") for v in t["minutes"]]} if "minutes" in t else {}),
            **(
                {"resumed folds": [format_number(v, ".0f") for v in t["resumed_folds"]]} if "resumed_folds" in t else {}
            ),
        }
    )


def _short(value: object, width: int = 48) -> str:
    """A config value for a table cell: a long list as its length and first items, other long text cut.

    >>> _short('["ret_1d", "ret_5d", "vol_20d", "rsi_14", "mf_net_ma5", "mf_main_net_rate_ma5"]', 30)
    '6 items: ret_1d, ret_5d…'
    >>> _short("all")
    'all'
    """
    text = "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)
    if len(text) <= width:
        return text
    items = None
    try:
        parsed = json.loads(text)
        items = [str(v) for v in parsed] if isinstance(parsed, list) else None
    except ValueError:
        pass
    if items is not None:
        head = f"{len(items)} items: "
        shown = ""
        for item in items:
            candidate = f"{shown}, {item}" if shown else item
            if len(head) + len(candidate) > width:
                break
            shown = candidate
        return f"{head}{shown}…"
    return text[: width - 1] + "…"


def _config_display(report: StudyReport) -> pd.DataFrame | None:
    """The configuration that differs between the trials, cells shortened; None when nothing differs."""
    columns = [c for c in report.trials.columns if c not in (*_TRIAL_COLUMNS, *_RUN_COLUMNS, *VERDICT_COLUMNS)]
    if not columns:
        return None
    table = report.trials[columns].map(_short)
    return table.reset_index()


def _years_display(report: StudyReport, column: str) -> pd.DataFrame:
    table = report.years[column].unstack("series")[list(report.returns.columns)]
    return table.reset_index()


def _pbo_summary(pbo: PBOResult) -> pd.DataFrame:
    return pbo.selection_table()


def _pbo_text(pbo: PBOResult) -> str:
    sizes = sorted(set(pbo.block_sizes))
    size_text = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return (
        f"PBO = {pbo.pbo:.3f} with n_blocks = {pbo.n_blocks} ({size_text} days each) and n_combinations = "
        f"{pbo.n_combinations:,}. Performance degradation: OOS = {pbo.degradation_slope:.3f} x IS "
        f"{pbo.degradation_intercept:+.4f} (least squares over the combinations, per-day Sharpe of the IS-best "
        f"trial); probability of an OOS loss {pbo.prob_oos_loss:.3f}. A slope near -1 is mechanical here, not "
        "evidence of overfitting: CSCV's in-sample and out-of-sample halves are complements, so a trial's "
        "full-period mean return is the average of its two halves' and a half that did better in sample did "
        "worse out of sample by about as much. Read the PBO and the probability of an OOS loss, not the slope."
    )


def _comparison_text(report: StudyReport) -> str:
    on = STATISTIC_LABELS[report.primary]
    return (
        f"The verdicts rest on the paired {on} difference (study.primary = {report.primary}): the mean over the "
        "days both runs scored of the trial's daily value minus the baseline's, its Newey-West standard error "
        "(lags = the label horizon less one day, recorded with each run as ic_lags) and a paired "
        "stationary-bootstrap 95% interval (the same resampled days for both series). p is the two-sided "
        "normal p-value of diff / s.e.; Holm's step-down adjustment over the study's comparisons keeps the "
        "chance of any false better/worse at 5%. The Sharpe difference is shown beside it with its paired "
        "bootstrap interval. MDE rank IC: the smallest rank IC difference this test period detects with 80% "
        "power at 5% two-sided, 2.80 standard errors; days to resolve: for an unresolved difference, the "
        "test days at which the observed difference would be that detectable (the s.e. shrinking as "
        "1 / sqrt(days))."
        + (
            " Seed replicates: each trial's numbers are its seeds' means (returns, daily series); a difference "
            "counts only if it also stands beyond the seed spread, |diff| > 1.96 x sqrt(sd_trial^2 / n_trial + "
            "sd_baseline^2 / n_baseline) with sd the standard deviation of the seeds' values of the verdict "
            "statistic."
            if "n_seeds" in report.trials.columns
            else ""
        )
    )


def write_study_report(directory: Path | str, report: StudyReport) -> list[Path]:
    """Write ``report`` into ``directory`` (created), file names from :data:`STUDY_REPORT_FILES`.

    ``study_report.html`` is self-contained (the PNGs embedded as base64): title, a warning for each trial
    whose run is not comparable (tag ``comparable=false``, with its reason), a plain reading (the
    verdicts, the best trial's DSR, PBO), the comparison with the baseline first (one short row per trial:
    verdict, the primary statistic's difference with its interval and p-values, the Sharpe difference,
    DSR, power), the equity curves of every trial and the benchmark, the trials' rank IC per fold overlaid,
    the trials' own numbers, the per-year returns and Sharpe ratios, the PBO section (logit histogram,
    n_blocks, n_combinations), the configuration that differs between the trials last, and the notes.
    ``study_report.md`` holds the same tables and links the PNGs by file name. ``study_trials.csv`` holds
    every column of :attr:`StudyReport.trials`. ``study_pbo.csv`` has one row per CSCV combination (only
    its header when the PBO was skipped, and ``study_pbo.png`` is then not written);
    ``study_fold_rank_ic.png`` is written when the report has the folds' rank IC. Every trial keeps one
    tab10 colour in every chart.

    Returns
    -------
    list of Path : every file written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = {key: directory / name for key, name in STUDY_REPORT_FILES.items()}
    written: list[Path] = []

    report.trials.to_csv(path["trials"])
    report.years.to_csv(path["years"])
    combos = (
        report.pbo.combinations()
        if report.pbo is not None
        else pd.DataFrame(columns=["is_blocks", "selected", "is_metric", "oos_metric", "omega", "logit"])
    )
    combos.to_csv(path["pbo"], index=report.pbo is not None)
    path["summary"].write_text(json.dumps(study_summary(report), indent=2), encoding="utf-8")
    written += [path["trials"], path["years"], path["pbo"], path["summary"]]
    images = {"equity": _plot_equity(report, path["equity"])}
    if report.pbo is not None:
        images["pbo_plot"] = _plot_pbo(report, report.pbo, path["pbo_plot"])
    folds = report.fold_rank_ic
    if folds is not None and folds.notna().any().any():
        images["fold_rank_ic"] = _plot_fold_rank_ic(report, folds, path["fold_rank_ic"])
    written += list(images.values())

    reading = _reading(report)
    sections: list[tuple[str, str, pd.DataFrame | None, str | None]] = [
        (
            f"Comparison with the baseline ({report.baseline})",
            _comparison_text(report),
            _comparison_display(report),
            None,
        ),
        ("Equity curves", "", None, "equity"),
    ]
    if "fold_rank_ic" in images:
        sections.append(
            ("Rank IC per fold", "Each trial's mean daily rank IC in each test fold.", None, "fold_rank_ic")
        )
    sections += [
        (
            "Trials",
            f"n_trials = {report.n_trials} (for the DSR); expected max Sharpe of that many unskilled trials "
            f"{report.expected_max_sharpe:+.3f}; variance of the trials' Sharpe ratios "
            f"{report.trial_sharpe_var:.4g}.",
            _trials_display(report),
            None,
        ),
        (
            "Returns per calendar year",
            "Compounded over each year's common days.",
            _years_display(report, "return"),
            None,
        ),
        ("Sharpe ratio per calendar year", "", _years_display(report, "sharpe"), None),
    ]
    if report.pbo is not None:
        sections += [
            ("Probability of backtest overfitting (CSCV)", _pbo_text(report.pbo), _pbo_summary(report.pbo), "pbo_plot"),
        ]
    else:
        sections.append(
            (
                "Probability of backtest overfitting (CSCV)",
                "Not computed: " + "; ".join(n for n in report.notes if n.startswith("PBO")),
                None,
                None,
            )
        )
    config = _config_display(report)
    if config is not None:
        sections.append(
            ("Configuration", "What differs between the trials (study_trials.csv holds the full values).", config, None)
        )

    warnings = _not_comparable(report)
    markdown = [f"# {report.title}", "", *[f"**{w}**\n" for w in warnings], reading, ""]
    body = [
        page_head(report.title, "body{max-width:1200px}.warn{background:#fdecea;color:#c62828;padding:6px 10px}"),
        f"<h1>{html.escape(report.title)}</h1>",
        *[f"<p class='warn'>{html.escape(w)}</p>" for w in warnings],
        f"<p>{html.escape(reading)}</p>",
    ]
    for heading, note, frame, image in sections:
        markdown += [f"## {heading}", ""]
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            markdown += [note, ""]
            body.append(f"<p>{html.escape(note)}</p>")
        if image is not None:
            markdown += [f"![{heading}]({STUDY_REPORT_FILES[image]})", ""]
            body.append(embedded_png(images[image], heading))
        if frame is not None:
            markdown += [markdown_table(frame, _NUMBER), ""]
            names = next((c for c in ("trial", "year") if c in frame.columns and frame[c].is_unique), None)
            body.append(html_table(frame, _NUMBER, row_names=names))  # wide tables scroll under the names
    if report.notes:
        markdown += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in report.notes) + "</ul>")
    body.append("</body></html>")

    path["markdown"].write_text("\n".join(markdown), encoding="utf-8")
    path["html"].write_text("\n".join(body), encoding="utf-8")
    written += [path["markdown"], path["html"]]
    logger.info("wrote %d study report files to %s", len(written), directory)
    return written
