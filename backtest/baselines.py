"""Baselines on the model's own folds: what a model must beat before its result means anything.

Every backtest also runs, on the same schedule, purge, portfolio rules and costs as its model:

- ``equal_weight``: the benchmark of :func:`backtest.portfolio.simulate` (every tradable member);
- ``factor``: the best single feature of each fold, with its sign: the feature whose mean daily rank
  IC with the label over the fold's training and validation days is largest in absolute value, held
  with that sign on the fold's decision dates;
- ``linear``: a ridge regression of the label's cross-sectional rank on the features' cross-sectional
  ranks (centred; a missing value sits at the median), fitted per fold on the same days
  (:mod:`models.ranks`, the machinery the ``linear`` model shares).

Choosing and fitting read the label of exactly the rows the model trains and validates on
(:func:`backtest.leakage.fold_rows` of the fold, whose ``label_end`` the schedule purged to the fold's
cutoff and :func:`backtest.leakage.check_fold` checked): a baseline never sees a label that ends after
its fold's cutoff, and with the purge switched off (a leak demonstration) it leaks exactly as the
model does. Their metrics are logged as ``baseline_<name>_<metric>`` (:data:`BASELINE_METRICS`), with
the model's difference from the best factor and from the linear ranker (``model_minus_factor_*``,
``model_minus_linear_*``): Sharpe with a paired block-bootstrap interval, rank IC with its Newey-West
standard error.

::

    per fold, in date order:
               its new days --daily ranks--> R (rows x features, float32), label ranks y, daily rank IC
               train+valid rows --> mean daily rank IC of each column --> argmax |IC|, sign  (factor)
                                --> (R'R + alpha n I) beta = R'y                            (linear)
               decision rows    --> scores --> simulate --> headline metrics
               ranks no later fold reads are dropped (a training window of ranks is held at a time)
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from backtest.features.build import FeatureMatrix
from backtest.labels import Labels
from backtest.leakage import fold_rows
from backtest.memory import drop_pages
from backtest.metrics import ann_return, daily_ic, drop_best_months, headline_metrics, sharpe
from backtest.portfolio import PortfolioResult, PortfolioSpec, simulate
from backtest.splits import Fold
from backtest.statistics import hac_standard_error, paired_sharpe_difference
from models.ranks import RankedPanel, RidgeGram, day_numbers

log = logging.getLogger(__name__)

#: The baselines computed in every run (equal weight is the portfolio's own benchmark).
BASELINES: tuple[str, ...] = ("factor", "linear")

#: The headline metrics logged for each baseline, as ``baseline_<name>_<metric>``.
BASELINE_METRICS: tuple[str, ...] = (
    "sharpe",
    "sharpe_ex_best_month",
    "ann_return",
    "max_drawdown",
    "rank_ic_mean",
    "rank_ic_se",
    "icir",
    "turnover",
    "sharpe_ci_low",
    "sharpe_ci_high",
)


class RankedDays:
    """The ranks of the feature matrix, a run of days at a time, held while a fold still reads them.

    The folds read their days in order: :meth:`advance` ranks the days up to a fold's last row
    (:class:`RankedPanel` blocks of at most :data:`BLOCK_DAYS` days) and records their daily rank IC,
    :meth:`forget_before` drops the blocks no later fold reads. Every day is ranked once, and what is
    held is about one training window of ranks, not the panel's. ``ranks[rows]`` gathers ranked rows
    (float32, rows x features) for :class:`RidgeGram`.
    """

    #: days ranked in one block
    BLOCK_DAYS = 64

    def __init__(self, matrix: FeatureMatrix, fwd_return: pd.Series, known: np.ndarray, start: int) -> None:
        self.values, self.names = matrix.values, tuple(matrix.names)
        self.dates = matrix.index.get_level_values(0).values
        self.fwd = fwd_return.reindex(matrix.index).to_numpy(dtype=np.float64)
        self.known = known
        self.shape = matrix.values.shape
        self.day = day_numbers(self.dates)
        n_days = int(self.day[-1]) + 1 if len(self.day) else 0
        self.day_starts = np.searchsorted(self.day, np.arange(n_days + 1))
        #: per day and feature: the features' daily rank IC (NaN until the day is ranked)
        self.daily_ic = np.full((n_days, self.shape[1]), np.nan)
        #: the label's centred rank where the label is known (a row the model could train on), else NaN
        self.y = np.full(len(self.dates), np.nan)
        self.blocks: list[RankedPanel] = []
        #: rows before it are ranked (or dropped); ranking starts at row ``start`` (a day's first row)
        self.ranked_to = start

    def advance(self, stop: int) -> None:
        """Rank every day up to the day of row ``stop - 1``."""
        end = int(self.day_starts[self.day[stop - 1] + 1]) if stop > 0 else 0
        while self.ranked_to < end:
            row, first = self.ranked_to, int(self.day[self.ranked_to])
            cut = int(self.day_starts[min(first + self.BLOCK_DAYS, len(self.day_starts) - 1)])
            block = RankedPanel.rank(self.values, self.fwd, self.dates, self.names, row, min(cut, end))
            drop_pages(self.values, row, min(cut, end))  # the rows just ranked: a later block reads none
            ic = block.daily_rank_ic()
            self.daily_ic[first : first + len(ic)] = ic
            self.ranked_to = row + len(block.y)
            self.y[row : self.ranked_to] = np.where(self.known[row : self.ranked_to], block.y, np.nan)
            self.blocks.append(block)

    def forget_before(self, row: int) -> None:
        """Drop the blocks that end before ``row``."""
        self.blocks = [b for b in self.blocks if b.start + len(b.y) > row]

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        starts = np.array([b.start for b in self.blocks], dtype=np.int64)
        if not len(rows):
            return np.empty((0, self.shape[1]), dtype=np.float32)
        if not len(starts) or rows[0] < starts[0] or rows[-1] >= self.ranked_to:
            raise AssertionError(f"RankedDays: rows {rows[0]}..{rows[-1]} are not ranked or were dropped")
        which = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        for b in np.unique(which):
            sel = which == b
            out[sel] = self.blocks[b].X[rows[sel] - starts[b]]
        return out


@dataclass(frozen=True)
class FactorChoice:
    """The feature the factor baseline holds in one fold, its sign and its training rank IC."""

    fold: int
    feature: str
    sign: int
    train_rank_ic: float


def choose_factor(daily_ic: np.ndarray, days: np.ndarray, names: Sequence[str], fold: int) -> tuple[int, FactorChoice]:
    """The column with the largest absolute mean daily rank IC over ``days`` (the fold's training and
    validation days), and its sign."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column without a defined IC on these days
        mean = np.nanmean(daily_ic[days], axis=0)
    mean = np.where(np.isfinite(mean), mean, 0.0)
    j = int(np.argmax(np.abs(mean)))
    sign = 1 if mean[j] >= 0 else -1
    return j, FactorChoice(fold, names[j], sign, float(mean[j]))


@dataclass(frozen=True, eq=False)
class BaselineRun:
    """One baseline's out-of-sample scores, its portfolio and its headline metrics."""

    name: str
    scores: pd.Series
    portfolio: PortfolioResult
    metrics: dict[str, float]


@dataclass(frozen=True, eq=False)
class Baselines:
    """The baselines of one backtest and the model's comparison with the best factor."""

    runs: dict[str, BaselineRun]
    choices: pd.DataFrame  # one row per fold: feature, sign, train_rank_ic (the factor baseline)
    metrics: dict[str, float]  # baseline_<name>_<metric> and model_minus_<factor|linear>_*
    seconds: float


def baseline_scores(
    matrix: FeatureMatrix, labels: Labels, folds: Sequence[Fold]
) -> tuple[dict[str, pd.Series], pd.DataFrame]:
    """Out-of-sample scores of each baseline on the folds' decision dates, and the factor choices.

    The ranks are computed fold by fold (:class:`RankedDays`), from the first day a fold trains on:
    the earlier rows (the features' warm-up history) are read by no fold.
    """
    dates = matrix.index.get_level_values(0).values
    # the label of a row counts only where the model could train on it: a labelled row (the same rows
    # the engine's training sets are taken from)
    known = labels.target.reindex(matrix.index).notna().to_numpy()
    # each fold's first row: the first row of its earliest day (no later fold reads a row before the
    # smallest of the later folds' firsts)
    earliest = [min(d.min() for d in (f.train_dates, f.valid_dates, f.predict_dates) if len(d)) for f in folds]
    firsts = np.searchsorted(dates, np.array(earliest, dtype="datetime64[ns]")).tolist()
    ranks = RankedDays(matrix, labels.fwd_return, known, start=min(firsts, default=0))
    # for each fold, the first row any later fold reads (the suffix minima of firsts)
    later_first = np.minimum.accumulate(np.array([*firsts, len(dates)])[::-1])[::-1][1:]
    out = {name: np.full(len(dates), np.nan) for name in BASELINES}
    gram = RidgeGram(ranks, ranks.y)
    choices = []
    for fold, later in zip(folds, later_first, strict=True):
        train, valid, predict = fold_rows(fold, dates)
        rows = np.sort(np.concatenate([train, valid]))
        rows = rows[known[rows]]
        ranks.advance(max((int(p[-1]) + 1 for p in (train, valid, predict) if len(p)), default=0))
        j, choice = choose_factor(ranks.daily_ic, np.unique(ranks.day[rows]), ranks.names, fold.fold)
        choices.append(choice)
        x = ranks[predict]
        out["factor"][predict] = choice.sign * x[:, j]
        out["linear"][predict] = x @ gram.solve(rows)
        ranks.forget_before(min(int(rows[0]) if len(rows) else len(dates), int(later)))
    scores = {}
    for name, values in out.items():
        s = pd.Series(values, index=matrix.index, name="score")
        scores[name] = s[np.isfinite(values)]
    table = pd.DataFrame([c.__dict__ for c in choices]).set_index("fold")
    return scores, table


def run_baselines(
    panel: pd.DataFrame,
    matrix: FeatureMatrix,
    labels: Labels,
    folds: Sequence[Fold],
    portfolio: PortfolioSpec,
    model: PortfolioResult,
    model_scores: pd.Series,
    *,
    seed: int = 0,
) -> Baselines:
    """Score, simulate and measure every baseline; compare the model with the best factor."""
    t0 = time.perf_counter()
    scores, choices = baseline_scores(matrix, labels, folds)
    lags = labels.ic_lags
    runs: dict[str, BaselineRun] = {}
    metrics: dict[str, float] = {}
    for name, s in scores.items():
        result = simulate(s, panel, portfolio, book=f"baseline {name}")
        fwd = labels.fwd_return.reindex(s.index)
        values = headline_metrics(
            result.returns,
            result.benchmark_returns,
            result.periods,
            scores=s,
            labels=fwd,
            turnover=result.annual_turnover,
            rng=np.random.default_rng(seed),
            ic_lags=lags,
        )
        runs[name] = BaselineRun(name, s, result, values)
        metrics.update({f"baseline_{name}_{k}": values[k] for k in BASELINE_METRICS})
    benchmark = model.benchmark_returns
    metrics.update(
        baseline_equal_weight_sharpe=sharpe(benchmark),
        baseline_equal_weight_ann_return=ann_return(benchmark),
        baseline_equal_weight_sharpe_ex_best_month=sharpe(drop_best_months(benchmark, 1)),
    )
    for name in VERDICT_BASELINES:
        metrics.update(model_minus(runs[name], model, model_scores, labels, seed=seed, lags=lags, name=name))
    seconds = time.perf_counter() - t0
    log.info(
        "baselines: best factor rank IC %+.4f, linear %+.4f (%.1f s)",
        metrics["baseline_factor_rank_ic_mean"],
        metrics["baseline_linear_rank_ic_mean"],
        seconds,
    )
    return Baselines(runs=runs, choices=choices, metrics=metrics, seconds=seconds)


def model_minus(
    baseline: BaselineRun,
    model: PortfolioResult,
    model_scores: pd.Series,
    labels: Labels,
    *,
    seed: int,
    lags: int,
    name: str,
) -> dict[str, float]:
    """The model's Sharpe and rank IC less the baseline's: the Sharpe difference with its paired
    stationary block-bootstrap 95% interval (the same resampled days for both), the rank IC difference
    (mean of the daily differences) with its Newey-West standard error."""
    a, b = model.returns.align(baseline.portfolio.returns, join="inner")
    diff, low, high = paired_sharpe_difference(a, b, np.random.default_rng(seed))
    fwd = labels.fwd_return
    known = fwd.reindex(model_scores.index).notna()
    if known.any():  # a test period shorter than the label horizon has no known label yet
        ic_model = daily_ic(model_scores[known], fwd.reindex(model_scores.index)[known], "spearman")
        ic_base = daily_ic(baseline.scores, fwd.reindex(baseline.scores.index), "spearman")
        d = (ic_model - ic_base).dropna()
    else:
        d = pd.Series(dtype=np.float64)
    return {
        f"model_minus_{name}_sharpe": diff,
        f"model_minus_{name}_sharpe_ci_low": low,
        f"model_minus_{name}_sharpe_ci_high": high,
        f"model_minus_{name}_rank_ic": float(d.mean()) if len(d) else float("nan"),
        f"model_minus_{name}_rank_ic_se": hac_standard_error(d, lags),
    }


#: Rows of :func:`comparison_table`: the label shown and the metric prefix of each (the model's own
#: metrics have none; the oracle exists on synthetic markets only).
COMPARISON_ROWS: tuple[tuple[str, str], ...] = (
    ("model", ""),
    ("best single factor", "baseline_factor_"),
    ("linear (ridge on ranks)", "baseline_linear_"),
    ("equal weight", "baseline_equal_weight_"),
)


def comparison_table(metrics: Mapping[str, float]) -> pd.DataFrame:
    """The model against its baselines, read from a run's metrics (nothing recomputed): rank IC with its
    standard error, Sharpe and Sharpe without the best month; one row per :data:`COMPARISON_ROWS` entry
    present, then the oracle's rank IC where the run has one."""
    nan = float("nan")
    rows = []
    for label, prefix in COMPARISON_ROWS:
        if prefix and f"{prefix}sharpe" not in metrics:
            continue
        rows.append(
            {
                "": label,
                "rank IC": metrics.get(f"{prefix}rank_ic_mean", nan),
                "s.e.": metrics.get(f"{prefix}rank_ic_se", nan),
                "Sharpe": metrics.get(f"{prefix}sharpe", nan),
                "Sharpe ex best month": metrics.get(f"{prefix}sharpe_ex_best_month", nan),
            }
        )
    if "oracle_rank_ic" in metrics:
        rows.append(
            {
                "": "oracle (planted observable components)",
                "rank IC": metrics["oracle_rank_ic"],
                "s.e.": nan,
                "Sharpe": nan,
                "Sharpe ex best month": nan,
            }
        )
    return pd.DataFrame(rows).set_index("")


#: the baselines the model's difference is measured against (``model_minus_<name>_*``), in the order the
#: summary gives their verdicts, with the words each verdict uses
VERDICT_BASELINES: dict[str, str] = {"factor": "best factor", "linear": "linear ranker"}


def baseline_verdict(metrics: Mapping[str, float], name: str = "factor") -> str:
    """One line: the model's rank IC and Sharpe less the baseline ``name``'s (:data:`VERDICT_BASELINES`),
    and whether the rank IC difference is more than two standard errors from zero (empty when the run
    has no such difference)."""
    if f"model_minus_{name}_rank_ic" not in metrics:
        return ""
    what = VERDICT_BASELINES[name]
    d, se = metrics[f"model_minus_{name}_rank_ic"], metrics.get(f"model_minus_{name}_rank_ic_se", float("nan"))
    if not (np.isfinite(d) and np.isfinite(se) and se > 0):
        word = "undetermined"
    elif d > 2 * se:
        word = f"the model beats the {what}"
    elif d < -2 * se:
        word = f"the model LOSES to the {what}"
    else:
        word = f"no detectable difference from the {what}"
    nan = float("nan")
    sharpe_diff = [metrics.get(f"model_minus_{name}_sharpe{s}", nan) for s in ("", "_ci_low", "_ci_high")]
    return (
        f"model - {what}: rank IC {d:+.4f} (s.e. {se:.4f}; {word}), Sharpe {sharpe_diff[0]:+.2f} "
        f"[{sharpe_diff[1]:+.2f}, {sharpe_diff[2]:+.2f}] (paired block bootstrap, 95%)"
    )


def baseline_verdicts(metrics: Mapping[str, float]) -> list[str]:
    """:func:`baseline_verdict` against each of :data:`VERDICT_BASELINES` the run has."""
    return [line for line in (baseline_verdict(metrics, name) for name in VERDICT_BASELINES) if line]
