"""The study's trials compared with its baseline: the numbers of a sweep's study report.

A sweep tries variants of a configuration (an ablation, a grid) on the same test period. Picking the
best of them overstates what the winner will do next: the report says how much, with three tools.

- **Deflated Sharpe ratio** (:func:`backtest.statistics.dsr`) of every trial against the best Sharpe
  expected from ``n_trials`` unskilled tries (failed trials count).
- **Probability of backtest overfitting** (:func:`backtest.statistics.pbo_cscv`, combinatorially symmetric
  cross-validation of Bailey, Borwein, Lopez de Prado & Zhu 2015): how often the trial that is best on one
  half of the period ranks at or below the median on the other half.
- **Paired comparison with a baseline**: the daily rank IC and NDCG differences of each trial and the
  baseline over the days both scored (:func:`backtest.statistics.paired_mean_difference`: Newey-West
  standard error, paired stationary-bootstrap interval) and the Sharpe difference
  (:func:`backtest.statistics.paired_sharpe_difference`); the verdict rests on ``primary`` (rank IC by
  default) with Holm's family-wise control over the trials (:func:`backtest.statistics.holm_adjust`), and
  says how small a difference the test could detect (:func:`backtest.statistics.minimum_detectable_difference`)
  and how many days an unresolved one would need (:func:`backtest.statistics.days_to_resolve`).

Everything here is a pure function of pandas objects: :func:`build_study_report` gathers a
:class:`StudyReport` from the numbers of :mod:`backtest.metrics` and :mod:`backtest.statistics`, and
:func:`study_summary` gives its study-wide numbers, JSON-ready; :mod:`backtest.reports.study` draws and
writes it.

Conventions: daily simple returns, 252 periods per year, risk-free 0 (those of :mod:`backtest.metrics`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from backtest import metrics as m
from backtest.errors import DataContractError, preview
from backtest.statistics import (
    ALPHA,
    COMPARISON_STATISTICS,
    MIN_BLOCK_DAYS,
    PBOResult,
    check_cscv_blocks,
    cscv_blocks,
    days_to_resolve,
    dsr,
    expected_max_sharpe,
    holm_adjust,
    interval_standard_error,
    minimum_detectable_difference,
    paired_mean_difference,
    paired_sharpe_difference,
    pbo_cscv,
    psr,
    seed_standard_error,
    sharpe_ci,
    two_sided_p,
)

logger = logging.getLogger(__name__)

__all__ = [
    "BENCHMARK_COLUMN",
    "COMPARISON_COLUMNS",
    "SEED_COLUMNS",
    "STATISTIC_LABELS",
    "TRIAL_RUN_METRICS",
    "StudyReport",
    "build_study_report",
    "study_summary",
]

#: Name of the equal-weight benchmark's column in :attr:`StudyReport.returns`.
BENCHMARK_COLUMN = "equal weight"

_VERDICT_BASELINE = "baseline"
_VERDICT_BETTER = "better than baseline"
_VERDICT_WORSE = "worse than baseline"
_VERDICT_NONE = "no detectable difference"
_VERDICT_UNDEFINED = "undetermined"
#: the words of each comparison statistic in the report
STATISTIC_LABELS = {"rank_ic": "rank IC", "ndcg": "NDCG", "sharpe": "Sharpe"}
#: columns of the daily series a run stores (``data/daily_ranking.parquet``) for each comparison statistic
_DAILY_COLUMN = {"rank_ic": "rank_ic", "ndcg": "ndcg"}


# --------------------------------------------------------------------------------------------------
# Paired comparison with a baseline


def _verdict(diff: float, p_holm: float, statistic: str, within_seeds: bool = False) -> str:
    """A trial's verdict: its difference from the baseline on ``statistic`` is resolved when the Holm-adjusted
    p-value is below :data:`~backtest.statistics.ALPHA` and, with seed replicates, the difference stands
    beyond the seed spread too (``within_seeds`` False).

    >>> _verdict(0.012, 0.002, "rank_ic")
    'better than baseline (rank IC, Holm p = 0.002)'
    >>> _verdict(0.012, 0.002, "rank_ic", within_seeds=True)
    'no detectable difference (rank IC, Holm p = 0.002, within the seed spread)'
    """
    if not (np.isfinite(diff) and np.isfinite(p_holm)):
        return f"{_VERDICT_UNDEFINED} ({STATISTIC_LABELS[statistic]} difference undefined)"
    resolved = p_holm < ALPHA and not within_seeds
    word = (_VERDICT_BETTER if diff > 0 else _VERDICT_WORSE) if resolved else _VERDICT_NONE
    p_text = "p < 0.001" if p_holm < 0.001 else f"p = {p_holm:.3f}"
    seeds = ", within the seed spread" if within_seeds and p_holm < ALPHA else ""
    return f"{word} ({STATISTIC_LABELS[statistic]}, Holm {p_text}{seeds})"


def _seed_standard_error(spread: pd.DataFrame | None, name: str, baseline: str, statistic: str) -> float:
    """:func:`~backtest.statistics.seed_standard_error` of the difference of two trials' seed means."""
    if spread is None or f"{statistic}_seed_sd" not in spread.columns:
        return float("nan")
    sides = [
        (float(spread.at[trial, f"{statistic}_seed_sd"]), float(spread.at[trial, "n_seeds"]))
        for trial in (name, baseline)
        if trial in spread.index and np.isfinite(float(spread.at[trial, "n_seeds"]))
    ]
    return seed_standard_error(*[x for side in sides for x in side]) if sides else float("nan")


def _comparisons(
    frame: pd.DataFrame,
    names: list[str],
    baseline: str,
    daily: Mapping[str, pd.DataFrame | None],
    lags: Mapping[str, int],
    primary: str,
    n_boot: int,
    seed: int,
    notes: list[str],
    seed_spread: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per trial: its paired differences from the baseline (rank IC, NDCG, Sharpe), the verdict on
    ``primary`` with Holm's family-wise control over the trials (and, with seed replicates, beyond the seed
    spread), and the comparison's power."""
    rows: dict[str, dict[str, object]] = {}
    base_daily = daily.get(baseline)
    for position, name in enumerate(names):
        row: dict[str, object] = {}
        diff, low, high = paired_sharpe_difference(
            frame[name], frame[baseline], np.random.default_rng([seed, position, 1]), n_boot
        )
        se = interval_standard_error(low, high) if np.isfinite(low) and np.isfinite(high) else float("nan")
        z = diff / se if se > 0 else (0.0 if diff == 0 else float("nan"))
        row.update(sharpe_diff=diff, sharpe_diff_ci_low=low, sharpe_diff_ci_high=high, sharpe_diff_se=se)
        row.update(sharpe_diff_p=two_sided_p(z), sharpe_diff_days=len(frame))
        for offset, statistic in enumerate(("rank_ic", "ndcg"), start=2):
            column = _DAILY_COLUMN[statistic]
            own = daily.get(name)
            if base_daily is None or own is None or column not in own or column not in base_daily:
                values = dict.fromkeys(("", "_se", "_ci_low", "_ci_high", "_p", "_days"), float("nan"))
            else:
                n_lags = max(int(lags.get(name, 0)), int(lags.get(baseline, 0)))
                d = paired_mean_difference(
                    own[column], base_daily[column], n_lags, np.random.default_rng([seed, position, offset]), n_boot
                )
                values = {"": d.diff, "_se": d.se, "_ci_low": d.ci_low, "_ci_high": d.ci_high, "_p": d.p_value}
                values["_days"] = d.n_days
            row.update({f"{statistic}_diff{suffix}": value for suffix, value in values.items()})
        row["mde_rank_ic"] = float("nan") if name == baseline else minimum_detectable_difference(row["rank_ic_diff_se"])
        defined = name == baseline or primary == "sharpe" or np.isfinite(row[f"{primary}_diff_p"])
        statistic = primary if defined else "sharpe"  # a trial without the daily series: Sharpe alone
        row["verdict_statistic"] = statistic
        if name == baseline:  # compared with itself: differences 0, no test
            row.update({f"{stat}_diff_p": float("nan") for stat in COMPARISON_STATISTICS})
        row["p_value"] = row[f"{statistic}_diff_p"]
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table["p_holm"] = holm_adjust(table["p_value"].to_numpy(np.float64))
    verdicts, days, seed_errors = [], [], []
    for name, row in table.iterrows():
        statistic = row["verdict_statistic"]
        seed_se = _seed_standard_error(seed_spread, name, baseline, statistic)
        seed_errors.append(float("nan") if name == baseline else seed_se)
        if name == baseline:
            verdicts.append(_VERDICT_BASELINE)
            days.append(float("nan"))
            continue
        diff = row[f"{statistic}_diff"]
        within = bool(np.isfinite(seed_se) and abs(diff) <= norm.ppf(1 - ALPHA / 2) * seed_se)
        verdicts.append(_verdict(diff, row["p_holm"], statistic, within))
        unresolved = verdicts[-1].startswith(_VERDICT_NONE)
        days.append(
            days_to_resolve(diff, row[f"{statistic}_diff_se"], int(row[f"{statistic}_diff_days"]))
            if unresolved
            else float("nan")
        )
    table["verdict"], table["days_to_resolve"] = verdicts, days
    if seed_spread is not None:
        spread = seed_spread.reindex(names)
        table["n_seeds"] = spread["n_seeds"].fillna(1).astype(int).to_numpy()
        for column in ("rank_ic_seed_sd", "ndcg_seed_sd", "sharpe_seed_sd"):
            table[column] = spread[column].to_numpy(np.float64) if column in spread else np.nan
        table["seed_se"] = seed_errors
    fallback = [n for n in names if n != baseline and table.at[n, "verdict_statistic"] != primary]
    if fallback and primary != "sharpe":
        missing = [n for n in names if daily.get(n) is None]
        why = (
            f"{preview(missing)} {'was' if len(missing) == 1 else 'were'} recorded before the runs stored their "
            "daily rank IC and NDCG"
            if missing
            else "their daily series share too few days"
        )
        notes.append(
            f"No paired {STATISTIC_LABELS[primary]} difference for {preview(fallback)}: {why}; their verdicts rest "
            "on the Sharpe difference alone. Rerun the trials to compare them on the ranking."
        )
    differing = sorted({int(v) for v in lags.values()})
    if len(differing) > 1:
        notes.append(
            f"The trials' labels overlap differently (Newey-West lags {differing}); each paired difference uses "
            "the larger lags of its two runs."
        )
    return table


# --------------------------------------------------------------------------------------------------
# The study report


@dataclass(frozen=True)
class StudyReport:
    """A sweep's trials compared on their common test period (:func:`build_study_report`).

    Attributes
    ----------
    title : report title.
    trials : one row per trial (index ``trial``, in the column order of the returns). First the comparison
        with the baseline (:data:`COMPARISON_COLUMNS`): ``verdict`` and ``verdict_statistic`` (the statistic
        it rests on: ``primary``, or ``sharpe`` for a trial without the daily series), ``rank_ic_diff`` with
        ``_se`` (Newey-West), ``_ci_low`` / ``_ci_high`` (paired stationary bootstrap), ``_p`` and ``_days``
        (the common scored days), the same for ``ndcg_diff`` and ``sharpe_diff`` (annualised; its ``_se``
        is the normal approximation of its bootstrap interval), ``p_value`` (the verdict statistic's) and
        ``p_holm`` (Holm-adjusted over the trials), ``mde_rank_ic``, ``days_to_resolve`` and ``dsr``
        (study-wide: ``n_trials`` and the variance of the trials' Sharpes); then ``sharpe``,
        ``sharpe_ci_low`` / ``sharpe_ci_high`` (stationary bootstrap), ``ann_return``, ``max_drawdown``,
        ``sharpe_ex_best_month``, ``ann_return_ex_best_month``, ``sharpe_ex_best_3_months``,
        ``ann_return_ex_best_3_months``, the :data:`TRIAL_RUN_METRICS` (``rank_ic_mean``, ``rank_ic_se``,
        ``baseline_factor_rank_ic_mean``, ``ndcg``, ``turnover``: from ``trial_metrics``, else NaN), ``psr``;
        the :data:`VERDICT_COLUMNS` that ``trial_metrics`` has (``comparable``, ``comparable_reason``);
        last the config columns of ``trial_metrics`` that differ between trials.
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
    notes : what the report changed or skipped (dates dropped by alignment, blocks reduced, PBO skipped,
        trials without the daily series).
    primary : the statistic the verdicts rest on (:data:`~backtest.statistics.COMPARISON_STATISTICS`).
    fold_rank_ic : fold x trial rank IC of each test fold (None when not given).
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
    primary: str = "rank_ic"
    fold_rank_ic: pd.DataFrame | None = None

    @property
    def trial_names(self) -> list[str]:
        """The trials, in order (the columns of :attr:`returns` without the benchmark)."""
        return [c for c in self.returns.columns if c != BENCHMARK_COLUMN]

    @property
    def best_trial(self) -> str:
        """The trial with the highest Sharpe ratio (the first on a tie; the baseline if none is defined)."""
        sharpes = self.trials["sharpe"]
        return str(sharpes.idxmax()) if sharpes.notna().any() else self.baseline


#: The comparison with the baseline, first in :attr:`StudyReport.trials` (the study contract's names).
COMPARISON_COLUMNS = (
    "verdict",
    "verdict_statistic",
    "rank_ic_diff",
    "rank_ic_diff_se",
    "rank_ic_diff_ci_low",
    "rank_ic_diff_ci_high",
    "rank_ic_diff_p",
    "rank_ic_diff_days",
    "ndcg_diff",
    "ndcg_diff_se",
    "ndcg_diff_ci_low",
    "ndcg_diff_ci_high",
    "ndcg_diff_p",
    "ndcg_diff_days",
    "sharpe_diff",
    "sharpe_diff_se",
    "sharpe_diff_ci_low",
    "sharpe_diff_ci_high",
    "sharpe_diff_p",
    "sharpe_diff_days",
    "p_value",
    "p_holm",
    "mde_rank_ic",
    "days_to_resolve",
)
#: With seed replicates (``seed_spread``), after the comparison: each trial's seeds, the spread (ddof=1) of
#: its seeds' rank IC, NDCG and Sharpe, and the seed standard error of its verdict statistic's difference.
SEED_COLUMNS = ("n_seeds", "rank_ic_seed_sd", "ndcg_seed_sd", "sharpe_seed_sd", "seed_se")
#: Columns of :attr:`StudyReport.trials` computed here (``trial_metrics`` supplies the rest).
_TRIAL_COLUMNS = (
    *COMPARISON_COLUMNS,
    *SEED_COLUMNS,
    "dsr",
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
)
#: The run metrics a study's trials table reads from each trial's run (the rest is computed from returns):
#: the rank IC with its standard error, the best single factor's rank IC on the same folds, the NDCG at the
#: trial's own ``top_k`` (one key whatever the depth, so a sweep over ``portfolio.top_k`` keeps it), turnover.
TRIAL_RUN_METRICS = ("rank_ic_mean", "rank_ic_se", "baseline_factor_rank_ic_mean", "ndcg", "turnover")
#: The run tags a study's trials table copies from each trial's run whatever their values: ``comparable``
#: (``"true"`` / ``"false"``; blank for a run recorded before it was tagged) and ``comparable_reason`` (why
#: not, :func:`backtest.leakage.not_comparable_reasons`; blank for a comparable run or an older one).
VERDICT_COLUMNS = ("comparable", "comparable_reason")


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
    skip = set(m.HEADLINE_KEYS) | set(_TRIAL_COLUMNS) | set(VERDICT_COLUMNS)
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
    daily_ranking: Mapping[str, pd.DataFrame | None] | None = None,
    ic_lags: Mapping[str, int] | None = None,
    primary: str = "rank_ic",
    fold_rank_ic: pd.DataFrame | None = None,
    seed_spread: pd.DataFrame | None = None,
) -> StudyReport:
    """Compare the trials of a sweep on their common test period.

    Each trial is compared with the baseline on three paired differences: the daily rank IC and the daily
    NDCG (means over the days both runs scored, Newey-West standard error with the runs' ``ic_lags``,
    paired stationary-bootstrap interval) and the annualised Sharpe ratio (paired bootstrap interval).
    The verdict rests on ``primary``: the trials' two-sided p-values of it (``diff / se``, normal) are
    adjusted with Holm's step-down procedure (:func:`backtest.statistics.holm_adjust`) so that the chance
    of any false "better" or "worse" in the study stays at 5%; a trial whose daily series are missing
    (a run recorded before they were stored) is judged on the Sharpe difference instead, and a note says so.

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
        paired Sharpe, rank IC and NDCG differences ``default_rng([seed, i, 1])``, ``[seed, i, 2]`` and
        ``[seed, i, 3]``, so a trial's numbers do not depend on the others.
    daily_ranking : trial name -> DataFrame indexed by date with columns ``rank_ic`` and ``ndcg`` (a run's
        ``data/daily_ranking.parquet``), or None for a run that has none; optional.
    ic_lags : trial name -> the Newey-West lags of its daily series (the run's param ``ic_lags``: the label
        horizon less one day); a missing trial counts 0.
    primary : the statistic the verdicts rest on, one of :data:`~backtest.statistics.COMPARISON_STATISTICS`.
    fold_rank_ic : DataFrame fold x trial, optional: each test fold's rank IC (the runs' ``fold/rank_ic``),
        drawn overlaid.
    seed_spread : DataFrame indexed by trial, optional: with seed replicates (each trial run with several
        model seeds on one market, its returns and daily series the seeds' means), ``n_seeds`` and the
        standard deviations (ddof=1) of the seeds' ``rank_ic_seed_sd``, ``ndcg_seed_sd``, ``sharpe_seed_sd``.
        A difference then counts only if it also stands beyond the seed spread: ``|diff| > z_0.975 *
        seed_se`` with ``seed_se = sqrt(sd_t^2 / n_t + sd_b^2 / n_b)`` of the verdict statistic, the
        standard error the seeds' own variation puts on the difference of two seed means.

    Returns
    -------
    StudyReport

    Raises
    ------
    DataContractError : no trial, returns / benchmark not dated, duplicated names or dates, fewer than 2
        common dates, unknown baseline, ``n_trials`` below the number of trials, a bad ``n_blocks``, an
        unknown ``primary``.
    """
    if primary not in COMPARISON_STATISTICS:
        raise DataContractError(
            f"study report: primary must be one of {', '.join(COMPARISON_STATISTICS)}; received {primary!r}."
        )
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
        rows[name] = row
    comparisons = _comparisons(
        frame,
        names,
        baseline,
        dict(daily_ranking or {}),
        dict(ic_lags or {}),
        primary,
        n_boot,
        seed,
        notes,
        seed_spread,
    )
    trials = comparisons.join(pd.DataFrame.from_dict(rows, orient="index"))
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
        for column in VERDICT_COLUMNS:
            if column in trial_metrics.columns:
                trials[column] = trial_metrics[column].reindex(names).fillna("").astype(str).to_numpy()
        for column in _config_columns(trial_metrics, names):
            trials[column] = trial_metrics[column].reindex(names).to_numpy()
    ordered = [c for c in _TRIAL_COLUMNS if c in trials.columns]
    trials = trials[[*ordered, *[c for c in trials.columns if c not in _TRIAL_COLUMNS]]]

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
        primary=primary,
        fold_rank_ic=None if fold_rank_ic is None else fold_rank_ic.reindex(columns=names),
    )


# --------------------------------------------------------------------------------------------------
# The study's numbers besides the trials table


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
        "primary": report.primary,
        "verdict_statistic": {name: str(v) for name, v in report.trials["verdict_statistic"].items()},
        "comparisons": _comparison_summary(report),
        "best_trial": report.best_trial,
        "n_trials": int(report.n_trials),
        "trial_sharpe_var": _finite_or_none(report.trial_sharpe_var),
        "expected_max_sharpe": _finite_or_none(report.expected_max_sharpe),
        "pbo": None if pbo is None else float(pbo.pbo),
        "pbo_blocks": None if pbo is None else int(pbo.n_blocks),
        "pbo_combinations": None if pbo is None else int(pbo.n_combinations),
        "notes": list(report.notes),
    }


def _comparison_summary(report: StudyReport) -> dict[str, dict[str, object]]:
    """Each non-baseline trial's comparison columns, JSON-ready (NaN and inf as null)."""
    out = {}
    for name, row in report.trials.drop(index=report.baseline).iterrows():
        out[str(name)] = {
            key: (str(row[key]) if isinstance(row[key], str) else _finite_or_none(float(row[key])))
            for key in COMPARISON_COLUMNS
        }
    return out


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
