"""The study report of a sweep: several backtest trials over one test period, compared honestly.

A sweep tries variants of a configuration (an ablation, a grid) on the same test period. Picking the
best of them overstates what the winner will do next: this report says how much, with three tools.

- **Deflated Sharpe ratio** (:func:`backtest.statistics.dsr`) of every trial against the best Sharpe
  expected from ``n_trials`` unskilled tries (failed trials count).
- **Probability of backtest overfitting** (:func:`backtest.statistics.pbo_cscv`, combinatorially symmetric
  cross-validation of Bailey, Borwein, Lopez de Prado & Zhu 2015): how often the trial that is best on one
  half of the period ranks at or below the median on the other half.
- **Paired comparison with a baseline** (:func:`backtest.statistics.paired_sharpe_difference`): the Sharpe
  difference of each trial and the baseline with a stationary-bootstrap interval that resamples the same days for both.

Everything here is a pure function of pandas objects: :func:`build_study_report` gathers a
:class:`StudyReport` from the numbers of :mod:`backtest.metrics` and :mod:`backtest.statistics`,
:func:`write_study_report` writes it as HTML (self-contained), markdown, CSV and PNG files named in
:data:`STUDY_REPORT_FILES`.

Conventions: daily simple returns, 252 periods per year, risk-free 0 (those of :mod:`backtest.metrics`).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from backtest import metrics as m
from backtest.errors import DataContractError, preview
from backtest.reports.files import STUDY_REPORT_FILES
from backtest.reports.plots import BENCHMARK_COLOR, new_figure, save_png
from backtest.reports.returns import wealth_curve
from backtest.reports.tables import markdown_table, page_head
from backtest.statistics import (
    MIN_BLOCK_DAYS,
    PERIODS_PER_YEAR,
    PBOResult,
    check_cscv_blocks,
    cscv_blocks,
    dsr,
    expected_max_sharpe,
    paired_sharpe_difference,
    pbo_cscv,
    psr,
    sharpe_ci,
)

logger = logging.getLogger(__name__)

__all__ = [
    "BENCHMARK_COLUMN",
    "STUDY_REPORT_FILES",
    "StudyReport",
    "build_study_report",
    "study_summary",
    "trial_colors",
    "write_study_report",
]

#: Name of the equal-weight benchmark's column in :attr:`StudyReport.returns`.
BENCHMARK_COLUMN = "equal weight"

_VERDICT_BASELINE = "baseline"
_VERDICT_BETTER = "better than baseline (interval above 0)"
_VERDICT_WORSE = "worse than baseline (interval below 0)"
_VERDICT_NONE = "no detectable difference (interval spans 0)"
_VERDICT_UNDEFINED = "undetermined (a Sharpe ratio is undefined)"


# --------------------------------------------------------------------------------------------------
# Paired comparison with a baseline


def _verdict(low: float, high: float) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return _VERDICT_UNDEFINED
    if low > 0:
        return _VERDICT_BETTER
    if high < 0:
        return _VERDICT_WORSE
    return _VERDICT_NONE


# --------------------------------------------------------------------------------------------------
# The study report


@dataclass(frozen=True)
class StudyReport:
    """A sweep's trials compared on their common test period (:func:`build_study_report`).

    Attributes
    ----------
    title : report title.
    trials : one row per trial (index ``trial``, in the column order of the returns): ``sharpe``,
        ``sharpe_ci_low`` / ``sharpe_ci_high`` (stationary bootstrap), ``ann_return``, ``max_drawdown``,
        ``sharpe_ex_best_month``, ``ann_return_ex_best_month``, ``sharpe_ex_best_3_months``,
        ``ann_return_ex_best_3_months``, the :data:`TRIAL_RUN_METRICS` (``rank_ic_mean``, ``rank_ic_se``,
        ``baseline_factor_rank_ic_mean``, ``ndcg``, ``turnover``: from ``trial_metrics``, else NaN), ``psr``,
        ``dsr`` (study-wide: ``n_trials`` and the variance of the trials' Sharpes), ``diff_vs_baseline``
        (annualised Sharpe difference), ``diff_ci_low`` / ``diff_ci_high`` (paired bootstrap), ``verdict``,
        then the config columns of ``trial_metrics`` that differ between trials.
    years : one row per (``year``, ``series``) for every trial and the benchmark (:data:`BENCHMARK_COLUMN`):
        ``n_days``, ``return`` (compounded over the year), ``excess_return`` (minus the benchmark's),
        ``sharpe``, ``max_drawdown`` (within the year).
    returns : aligned daily returns, the trials then the benchmark column :data:`BENCHMARK_COLUMN`.
    pbo : :func:`backtest.statistics.pbo_cscv` of the trials, or None (fewer than 2 trials, or a period too
        short: see notes).
    n_trials : trials counted for the DSR (failed trials included).
    baseline : name of the baseline trial.
    expected_max_sharpe : annualised Sharpe expected from the best of ``n_trials`` unskilled trials.
    trial_sharpe_var : variance (ddof=1) of the trials' annualised Sharpe ratios (0 for one trial).
    notes : what the report changed or skipped (dates dropped by alignment, blocks reduced, PBO skipped).
    """

    title: str
    trials: pd.DataFrame
    years: pd.DataFrame
    returns: pd.DataFrame
    pbo: PBOResult | None
    n_trials: int
    baseline: str
    expected_max_sharpe: float
    trial_sharpe_var: float
    notes: tuple[str, ...]

    @property
    def trial_names(self) -> list[str]:
        """The trials, in order (the columns of :attr:`returns` without the benchmark)."""
        return [c for c in self.returns.columns if c != BENCHMARK_COLUMN]

    @property
    def best_trial(self) -> str:
        """The trial with the highest Sharpe ratio (the first on a tie; the baseline if none is defined)."""
        sharpes = self.trials["sharpe"]
        return str(sharpes.idxmax()) if sharpes.notna().any() else self.baseline


#: Columns of :attr:`StudyReport.trials` computed here (``trial_metrics`` supplies the rest).
_TRIAL_COLUMNS = (
    "sharpe",
    "sharpe_ci_low",
    "sharpe_ci_high",
    "ann_return",
    "max_drawdown",
    "sharpe_ex_best_month",
    "ann_return_ex_best_month",
    "sharpe_ex_best_3_months",
    "ann_return_ex_best_3_months",
    "rank_ic_mean",
    "rank_ic_se",
    "baseline_factor_rank_ic_mean",
    "ndcg",
    "turnover",
    "psr",
    "dsr",
    "diff_vs_baseline",
    "diff_ci_low",
    "diff_ci_high",
    "verdict",
)
#: The run metrics a study's trials table reads from each trial's run (the rest is computed from returns):
#: the rank IC with its standard error, the best single factor's rank IC on the same folds, the NDCG at the
#: trial's own ``top_k`` (one key whatever the depth, so a sweep over ``portfolio.top_k`` keeps it), turnover.
TRIAL_RUN_METRICS = ("rank_ic_mean", "rank_ic_se", "baseline_factor_rank_ic_mean", "ndcg", "turnover")


def _aligned_returns(returns: pd.DataFrame, benchmark: pd.Series, notes: list[str]) -> pd.DataFrame:
    if not isinstance(returns, pd.DataFrame):
        raise DataContractError(
            f"study report: returns must be a DataFrame of daily returns, dates x trials; received "
            f"{type(returns).__name__}."
        )
    if returns.shape[1] == 0:
        raise DataContractError("study report: returns has no trial (column); expected one column per trial.")
    if not isinstance(benchmark, pd.Series):
        raise DataContractError(
            f"study report: benchmark must be a Series of the equal-weight daily returns; received "
            f"{type(benchmark).__name__}."
        )
    for name, index in (("returns", returns.index), ("benchmark", benchmark.index)):
        if not isinstance(index, pd.DatetimeIndex):
            raise DataContractError(
                f"study report: {name} must be indexed by a DatetimeIndex; received {type(index).__name__}."
            )
        if index.has_duplicates:
            raise DataContractError(
                f"study report: {name} has duplicated dates ({preview(index[index.duplicated()], 3)})."
            )
    names = [str(c) for c in returns.columns]
    if len(set(names)) < len(names) or BENCHMARK_COLUMN in names:
        raise DataContractError(
            f"study report: trial names must be unique and differ from {BENCHMARK_COLUMN!r}; received {preview(names)}."
        )
    frame = returns.set_axis(names, axis=1).astype(np.float64)
    frame[BENCHMARK_COLUMN] = benchmark.astype(np.float64).reindex(frame.index)
    frame = frame.reindex(frame.index.union(benchmark.index)).sort_index()
    frame.index.name = "date"
    keep = np.isfinite(frame.to_numpy()).all(axis=1)
    if not keep.all():
        dropped = frame.index[~keep]
        notes.append(
            f"{len(dropped)} of {len(frame)} dates were dropped because a trial or the benchmark has no finite "
            f"return on them ({preview(dropped.date, 3)}); every figure uses the {int(keep.sum())} common dates."
        )
        frame = frame[keep]
    if len(frame) < 2:
        raise DataContractError(
            f"study report: the trials and the benchmark share {len(frame)} date(s) with a finite return; expected "
            "a test period of at least 2 common days. Check that they were run over the same test period."
        )
    return frame


def _config_columns(trial_metrics: pd.DataFrame, names: list[str]) -> list[str]:
    """Columns of ``trial_metrics`` that describe the config (not a metric) and differ between trials."""
    skip = set(m.HEADLINE_KEYS) | set(_TRIAL_COLUMNS)
    rows = trial_metrics.reindex(names)
    return [
        str(c)
        for c in trial_metrics.columns
        if str(c) not in skip and not str(c).startswith(("metrics.", "tags.")) and rows[c].nunique(dropna=False) > 1
    ]


def _metric_column(trial_metrics: pd.DataFrame, key: str) -> pd.Series | None:
    for column in (key, f"metrics.{key}"):
        if column in trial_metrics.columns:
            return pd.to_numeric(trial_metrics[column], errors="coerce")
    return None


def build_study_report(
    returns: pd.DataFrame,
    benchmark: pd.Series,
    *,
    title: str,
    trial_metrics: pd.DataFrame | None = None,
    n_trials: int | None = None,
    baseline: str | None = None,
    n_blocks: int = 16,
    n_boot: int = 1000,
    seed: int = 0,
) -> StudyReport:
    """Compare the trials of a sweep on their common test period.

    Parameters
    ----------
    returns : DataFrame, dates x trials
        Daily net returns of each trial (column names = trial names, unique, not
        :data:`BENCHMARK_COLUMN`). Trials and benchmark are aligned on their common dates: a date where
        any of them is missing or NaN is dropped from every series (recorded in ``notes``).
    benchmark : Series indexed by date, the equal-weight universe's daily return.
    title : report title.
    trial_metrics : DataFrame indexed by trial name, optional
        the :data:`TRIAL_RUN_METRICS` (``rank_ic_mean``, ``turnover``, ... or ``metrics.rank_ic_mean``,
        ``metrics.turnover``, ...) are read from it; its other columns that are not metrics (``metrics.*``,
        ``tags.*``, headline keys) and differ between the trials are copied as the trials' config (e.g.
        ``params.model.lr``).
    n_trials : trials counted for the DSR, default the number of columns; pass more when trials failed
        or were discarded (they were tried, so they deflate the winner). Not fewer than the columns.
    baseline : trial every other is compared with (default the first column).
    n_blocks : CSCV blocks (see :func:`backtest.statistics.pbo_cscv`). Lowered to the largest even number
        whose shortest block has :data:`~backtest.statistics.MIN_BLOCK_DAYS` days when the period is short
        (:func:`backtest.statistics.cscv_blocks`, noted); with fewer than
        ``2 * MIN_BLOCK_DAYS`` common days the PBO is skipped (noted).
    n_boot : bootstrap resamples of the Sharpe intervals and of the paired differences.
    seed : seeds every bootstrap: trial ``i``'s Sharpe interval uses ``default_rng([seed, i, 0])``, its
        paired difference ``default_rng([seed, i, 1])``, so a trial's numbers do not depend on the others.

    Returns
    -------
    StudyReport

    Raises
    ------
    DataContractError : no trial, returns / benchmark not dated, duplicated names or dates, fewer than 2
        common dates, unknown baseline, ``n_trials`` below the number of trials, a bad ``n_blocks``.
    """
    notes: list[str] = []
    frame = _aligned_returns(returns, benchmark, notes)
    names = [c for c in frame.columns if c != BENCHMARK_COLUMN]
    bench = frame[BENCHMARK_COLUMN]
    if n_trials is None:
        n_trials = len(names)
    if isinstance(n_trials, bool) or not isinstance(n_trials, (int, np.integer)) or n_trials < len(names):
        raise DataContractError(
            f"study report: n_trials must be an integer >= the {len(names)} trials given (failed trials may add "
            f"to it); received {n_trials!r}."
        )
    n_trials = int(n_trials)
    baseline = names[0] if baseline is None else str(baseline)
    if baseline not in names:
        raise DataContractError(f"study report: baseline {baseline!r} is not a trial; trials: {preview(names)}.")
    check_cscv_blocks(n_blocks)

    rows: dict[str, dict[str, object]] = {}
    for position, name in enumerate(names):
        r = frame[name]
        low, high = sharpe_ci(r, np.random.default_rng([seed, position, 0]), n_boot)
        row: dict[str, object] = {
            "sharpe": m.sharpe(r),
            "sharpe_ci_low": low,
            "sharpe_ci_high": high,
            "ann_return": m.ann_return(r),
            "max_drawdown": m.max_drawdown(r),
        }
        for n_months, suffix in ((1, "month"), (3, "3_months")):
            rest = m.drop_best_months(r, n_months)
            row[f"sharpe_ex_best_{suffix}"] = m.sharpe(rest)
            row[f"ann_return_ex_best_{suffix}"] = m.ann_return(rest)
        row.update({key: np.nan for key in TRIAL_RUN_METRICS}, psr=psr(r))
        diff, low, high = paired_sharpe_difference(
            r, frame[baseline], np.random.default_rng([seed, position, 1]), n_boot
        )
        row.update(diff_vs_baseline=diff, diff_ci_low=low, diff_ci_high=high)
        row["verdict"] = _VERDICT_BASELINE if name == baseline else _verdict(low, high)
        rows[name] = row
    trials = pd.DataFrame.from_dict(rows, orient="index")
    trials.index.name = "trial"

    sharpes = trials["sharpe"].astype(np.float64).dropna()
    var = float(sharpes.var(ddof=1)) if len(sharpes) >= 2 else 0.0
    trials["dsr"] = [dsr(frame[name], n_trials, var) for name in names]
    if n_trials > len(names):
        notes.append(
            f"The DSR counts {n_trials} trials, {n_trials - len(names)} more than the {len(names)} reported here "
            "(failed or discarded trials were tried too)."
        )

    if trial_metrics is not None:
        if not isinstance(trial_metrics, pd.DataFrame):
            raise DataContractError(
                f"study report: trial_metrics must be a DataFrame indexed by trial name; received "
                f"{type(trial_metrics).__name__}."
            )
        trial_metrics = trial_metrics.set_axis([str(i) for i in trial_metrics.index], axis=0)
        missing = [name for name in names if name not in trial_metrics.index]
        if missing:
            notes.append(
                f"trial_metrics has no row for {preview(missing)}: their rank IC, turnover and config are blank."
            )
        for key in TRIAL_RUN_METRICS:
            column = _metric_column(trial_metrics, key)
            if column is not None:
                trials[key] = column.reindex(names).to_numpy(np.float64)
        for column in _config_columns(trial_metrics, names):
            trials[column] = trial_metrics[column].reindex(names).to_numpy()
    trials = trials[[*_TRIAL_COLUMNS, *[c for c in trials.columns if c not in _TRIAL_COLUMNS]]]

    years = (
        pd.concat(
            {
                name: m.per_year_table(frame[name], bench)[
                    ["n_days", "return", "excess_return", "sharpe", "max_drawdown"]
                ]
                for name in frame.columns
            },
            names=["series", "year"],
        )
        .swaplevel()
        .sort_index(level="year", sort_remaining=False)
    )

    pbo: PBOResult | None = None
    if len(names) < 2:
        notes.append("PBO not computed: it needs at least 2 trials to select among, and this study has 1.")
    else:
        blocks = cscv_blocks(len(frame), int(n_blocks))
        if blocks == 0:
            notes.append(
                f"PBO not computed: {len(frame)} common days are too few for 2 CSCV blocks of at least "
                f"{MIN_BLOCK_DAYS} days each."
            )
        else:
            if blocks != n_blocks:
                notes.append(
                    f"CSCV blocks reduced from {n_blocks} to {blocks} so that each block holds at least "
                    f"{MIN_BLOCK_DAYS} of the {len(frame)} days."
                )
            pbo = pbo_cscv(frame[names], blocks)
    for note in notes:
        logger.info("study report %r: %s", title, note)
    return StudyReport(
        title=title,
        trials=trials,
        years=years,
        returns=frame,
        pbo=pbo,
        n_trials=n_trials,
        baseline=baseline,
        expected_max_sharpe=expected_max_sharpe(n_trials, var),
        trial_sharpe_var=var,
        notes=tuple(notes),
    )


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
        f"The best Sharpe ratio is {best}'s ({row['sharpe']:+.2f}, 95% interval {row['sharpe_ci_low']:+.2f} to "
        f"{row['sharpe_ci_high']:+.2f}); its deflated Sharpe ratio is DSR = {row['dsr']:.3f}, the probability that "
        f"its true Sharpe exceeds {report.expected_max_sharpe:+.2f}, the best one expected from {report.n_trials} "
        "trials without skill (below 0.95 the win is not distinguishable from luck of the draw).",
    ]
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
    verdicts = report.trials["verdict"].drop(report.baseline)
    if len(verdicts):
        counts = {v: int((verdicts == v).sum()) for v in (_VERDICT_BETTER, _VERDICT_WORSE, _VERDICT_NONE)}
        text.append(
            f"Against the baseline {report.baseline}, with paired bootstrap intervals of the Sharpe difference: "
            f"{counts[_VERDICT_BETTER]} better, {counts[_VERDICT_WORSE]} worse, {counts[_VERDICT_NONE]} without a "
            "detectable difference."
        )
    return " ".join(text)


def _trials_display(report: StudyReport) -> pd.DataFrame:
    return report.trials.reset_index()


def _years_display(report: StudyReport, column: str) -> pd.DataFrame:
    table = report.years[column].unstack("series")[list(report.returns.columns)]
    return table.reset_index()


def _comparison_display(report: StudyReport) -> pd.DataFrame:
    return report.trials[["sharpe", "diff_vs_baseline", "diff_ci_low", "diff_ci_high", "verdict"]].reset_index()


def _pbo_summary(pbo: PBOResult) -> pd.DataFrame:
    return pbo.selection_table()


def _pbo_text(pbo: PBOResult) -> str:
    sizes = sorted(set(pbo.block_sizes))
    size_text = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return (
        f"PBO = {pbo.pbo:.3f} with n_blocks = {pbo.n_blocks} ({size_text} days each) and n_combinations = "
        f"{pbo.n_combinations:,}. Performance degradation: OOS = {pbo.degradation_slope:.3f} x IS "
        f"{pbo.degradation_intercept:+.4f} (least squares over the combinations, per-day Sharpe of the IS-best "
        f"trial); probability of an OOS loss {pbo.prob_oos_loss:.3f}."
    )


def study_summary(report: StudyReport) -> dict[str, object]:
    """The study's own numbers besides the trials table (``study_summary.json``): title, period,
    trials, baseline, best trial, DSR's N and expected max Sharpe, PBO with its blocks and splits, notes."""
    dates = report.returns.index
    pbo = report.pbo
    return {
        "title": report.title,
        "start": f"{dates.min():%Y-%m-%d}",
        "end": f"{dates.max():%Y-%m-%d}",
        "n_days": int(len(dates)),
        "trials": list(report.trial_names),
        "baseline": report.baseline,
        "best_trial": report.best_trial,
        "n_trials": int(report.n_trials),
        "trial_sharpe_var": _finite_or_none(report.trial_sharpe_var),
        "expected_max_sharpe": _finite_or_none(report.expected_max_sharpe),
        "pbo": None if pbo is None else float(pbo.pbo),
        "pbo_blocks": None if pbo is None else int(pbo.n_blocks),
        "pbo_combinations": None if pbo is None else int(pbo.n_combinations),
        "notes": list(report.notes),
    }


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def write_study_report(directory: Path | str, report: StudyReport) -> list[Path]:
    """Write ``report`` into ``directory`` (created), file names from :data:`STUDY_REPORT_FILES`.

    ``study_report.html`` is self-contained (the PNGs embedded as base64): title, a plain reading (PBO,
    the best trial's DSR), the equity curves of every trial and the benchmark, the trials table, the
    per-year returns and Sharpe ratios, the PBO section (logit histogram, n_blocks, n_combinations), the
    baseline comparison and the notes. ``study_report.md`` holds the same tables and links the PNGs by
    file name. ``study_pbo.csv`` has one row per CSCV combination (only its header when the PBO was
    skipped, and ``study_pbo.png`` is then not written). Every trial keeps one tab10 colour in both charts.

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
    written += list(images.values())

    reading = _reading(report)
    sections: list[tuple[str, str, pd.DataFrame | None, str | None]] = [
        ("Equity curves", "", None, "equity"),
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
    sections.append(
        (
            f"Comparison with the baseline ({report.baseline})",
            "Annualised Sharpe difference with a paired stationary-bootstrap 95% interval (the same "
            "resampled days for both series).",
            _comparison_display(report),
            None,
        )
    )

    markdown = [f"# {report.title}", "", reading, ""]
    body = [
        page_head(report.title, "body{max-width:1200px}"),
        f"<h1>{html.escape(report.title)}</h1>",
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
            encoded = base64.b64encode(images[image].read_bytes()).decode("ascii")
            body.append(f"<img alt='{html.escape(heading)}' src='data:image/png;base64,{encoded}'>")
        if frame is not None:
            markdown += [markdown_table(frame), ""]
            body.append(frame.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=0, na_rep=""))
    if report.notes:
        markdown += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in report.notes) + "</ul>")
    body.append("</body></html>")

    path["markdown"].write_text("\n".join(markdown), encoding="utf-8")
    path["html"].write_text("\n".join(body), encoding="utf-8")
    written += [path["markdown"], path["html"]]
    logger.info("wrote %d study report files to %s", len(written), directory)
    return written
