"""Baselines on the model's own folds: what a model must beat before its result means anything.

Every backtest also runs, on the same schedule, purge, portfolio rules and costs as its model:

- ``equal_weight``: the benchmark of :func:`backtest.portfolio.simulate` (every tradable member);
- ``factor``: the best single feature of each fold, with its sign: the feature whose mean daily rank
  IC with the label over the fold's training and validation days is largest in absolute value, held
  with that sign on the fold's decision dates;
- ``linear``: a ridge regression of the label's cross-sectional rank on the features' cross-sectional
  ranks (centred; a missing value sits at the median), fitted per fold on the same days.

Choosing and fitting read the label of exactly the rows the model trains and validates on
(:func:`backtest.leakage.fold_rows` of the fold, whose ``label_end`` the schedule purged to the fold's
cutoff and :func:`backtest.leakage.check_fold` checked): a baseline never sees a label that ends after
its fold's cutoff, and with the purge switched off (a leak demonstration) it leaks exactly as the
model does. Their metrics are logged as ``baseline_<name>_<metric>`` (:data:`BASELINE_METRICS`), with
the model's difference from the best factor (``model_minus_factor_*``): Sharpe with a paired
block-bootstrap interval, rank IC with its Newey-West standard error.

::

    features --daily ranks (once)--> R (rows x features, float32), label ranks y
    per fold:  train+valid rows --> mean daily rank IC of each column --> argmax |IC|, sign  (factor)
                                --> (R'R + alpha n I) beta = R'y                            (linear)
               decision rows    --> scores --> simulate --> headline metrics
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
from backtest.features.cross_section import DailyCrossSection
from backtest.labels import Labels
from backtest.leakage import fold_rows
from backtest.metrics import (
    ann_return,
    daily_ic,
    drop_best_months,
    hac_standard_error,
    headline_metrics,
    paired_sharpe_difference,
    sharpe,
)
from backtest.portfolio import PortfolioResult, PortfolioSpec, simulate
from backtest.splits import Fold

log = logging.getLogger(__name__)

#: The baselines computed in every run (equal weight is the portfolio's own benchmark).
BASELINES: tuple[str, ...] = ("factor", "linear")

#: The headline metrics logged for each baseline, as ``baseline_<name>_<metric>``.
BASELINE_METRICS: tuple[str, ...] = (
    "sharpe", "sharpe_ex_best_month", "ann_return", "max_drawdown", "rank_ic_mean", "rank_ic_se", "icir",
    "turnover", "sharpe_ci_low", "sharpe_ci_high",
)

#: Ridge penalty of the linear baseline, relative to the mean variance of the centred rank columns
#: (1/12): the solved system is ``(R'R / n + alpha * 1/12 * I) beta = R'y / n``.
RIDGE_ALPHA = 0.1


@dataclass(frozen=True, eq=False)
class RankedPanel:
    """Each feature's and the label's cross-sectional percentile rank per day, centred at 0.

    ``X`` is float32 (rows x features) aligned with the feature matrix rows, NaN replaced by 0 (the
    median); ``y`` the label's centred rank, NaN where the label is unknown; ``day`` each row's day
    index. Ranking reads no label but ``y``'s own day.
    """

    X: np.ndarray
    y: np.ndarray
    day: np.ndarray
    dates: np.ndarray
    names: tuple[str, ...]

    @classmethod
    def of(cls, matrix: FeatureMatrix, fwd_return: pd.Series) -> RankedPanel:
        dates = matrix.index.get_level_values(0).values
        day = np.concatenate([[0], np.cumsum(dates[1:] != dates[:-1])]).astype(np.int64)
        n_days = int(day[-1]) + 1 if len(day) else 0
        section = DailyCrossSection.of(day, np.ones(len(day), dtype=bool), n_days)
        X = np.empty(matrix.values.shape, dtype=np.float32)
        for j in range(matrix.values.shape[1]):
            col = section.rank_pct(matrix.values[:, j]) - 0.5
            X[:, j] = np.nan_to_num(col, nan=0.0)
        y = section.rank_pct(fwd_return.reindex(matrix.index).to_numpy(dtype=np.float64)) - 0.5
        return cls(X=X, y=y, day=day, dates=dates, names=tuple(matrix.names))

    def daily_rank_ic(self) -> np.ndarray:
        """Per day and feature, the Pearson correlation of the centred ranks over the day's labelled rows
        (days x features, float64; NaN on a day without labels or with a constant side): the features'
        daily rank IC."""
        n_days = int(self.day[-1]) + 1 if len(self.day) else 0
        out = np.full((n_days, self.X.shape[1]), np.nan)
        known = np.flatnonzero(np.isfinite(self.y))
        if not len(known):
            return out
        day = self.day[known]
        starts = np.flatnonzero(np.r_[True, day[1:] != day[:-1]])
        count = np.diff(np.r_[starts, len(day)]).astype(np.float64)
        y = self.y[known]
        y = y - (np.add.reduceat(y, starts) / count)[np.repeat(np.arange(len(starts)), count.astype(int))]
        syy = np.add.reduceat(y * y, starts)
        owner = np.repeat(np.arange(len(starts)), count.astype(int))
        for lo in range(0, self.X.shape[1], 8):  # 8 columns at a time: the float64 temporaries stay small
            block = self.X[known, lo:lo + 8].astype(np.float64)
            block -= (np.add.reduceat(block, starts, axis=0) / count[:, None])[owner]
            sxy = np.add.reduceat(block * y[:, None], starts, axis=0)
            sxx = np.add.reduceat(block * block, starts, axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[day[starts], lo:lo + 8] = sxy / np.sqrt(sxx * syy[:, None])
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


def fit_ridge(X: np.ndarray, y: np.ndarray, alpha: float = RIDGE_ALPHA) -> np.ndarray:
    """Ridge coefficients of ``y`` on the centred rank columns ``X`` (rows with a known ``y``)."""
    gram = RidgeGram(X, y)
    return gram.solve(np.flatnonzero(np.isfinite(y)), alpha)


class RidgeGram:
    """``X'X`` and ``X'y`` of a set of rows, updated from one fold's rows to the next.

    Consecutive folds of a sliding window share most of their rows: the sums of the rows that entered
    are added and those of the rows that left subtracted (float64), which costs a few hundred rows'
    products instead of the whole window's. A set that shares fewer than half its rows with the last
    one is summed afresh.
    """

    #: rows summed at a time
    CHUNK = 16_384

    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        self.X, self.y = X, y
        self.rows = np.empty(0, dtype=np.int64)
        self.xx = np.zeros((X.shape[1], X.shape[1]))
        self.xy = np.zeros(X.shape[1])

    def _sums(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xx, xy = np.zeros_like(self.xx), np.zeros_like(self.xy)
        for lo in range(0, len(rows), self.CHUNK):  # a chunk at a time: a window's float64 copy is large
            part = rows[lo:lo + self.CHUNK]
            x = self.X[part].astype(np.float64)
            xx += x.T @ x
            xy += x.T @ self.y[part].astype(np.float64)
        return xx, xy

    def solve(self, rows: np.ndarray, alpha: float = RIDGE_ALPHA) -> np.ndarray:
        """Ridge coefficients on ``rows`` (sorted positions whose ``y`` is known)."""
        added = np.setdiff1d(rows, self.rows, assume_unique=True)
        removed = np.setdiff1d(self.rows, rows, assume_unique=True)
        if len(added) + len(removed) < len(rows) // 2:
            for part, sign in ((added, 1.0), (removed, -1.0)):
                if len(part):
                    xx, xy = self._sums(part)
                    self.xx += sign * xx
                    self.xy += sign * xy
        else:
            self.xx, self.xy = self._sums(rows)
        self.rows = rows
        n = max(len(rows), 1)
        system = self.xx / n
        system[np.diag_indices_from(system)] += alpha / 12.0
        return np.linalg.solve(system, self.xy / n)


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
    metrics: dict[str, float]  # baseline_<name>_<metric> and model_minus_factor_*
    seconds: float


def baseline_scores(matrix: FeatureMatrix, labels: Labels, folds: Sequence[Fold],
                    ranked: RankedPanel | None = None) -> tuple[dict[str, pd.Series], pd.DataFrame]:
    """Out-of-sample scores of each baseline on the folds' decision dates, and the factor choices."""
    ranked = ranked or RankedPanel.of(matrix, labels.fwd_return)
    daily = ranked.daily_rank_ic()
    # the label of a row counts only where the model could train on it: a labelled row (the same rows
    # the engine's training sets are taken from)
    known = labels.target.reindex(matrix.index).notna().to_numpy()
    y = np.where(known, ranked.y, np.nan)
    out = {name: np.full(len(matrix.index), np.nan) for name in BASELINES}
    gram = RidgeGram(ranked.X, y)
    choices = []
    for fold in folds:
        train, valid, predict = fold_rows(fold, ranked.dates)
        rows = np.sort(np.concatenate([train, valid]))
        rows = rows[known[rows]]
        j, choice = choose_factor(daily, np.unique(ranked.day[rows]), ranked.names, fold.fold)
        choices.append(choice)
        out["factor"][predict] = choice.sign * ranked.X[predict, j]
        out["linear"][predict] = ranked.X[predict] @ gram.solve(rows)
    scores = {}
    for name, values in out.items():
        s = pd.Series(values, index=matrix.index, name="score")
        scores[name] = s[np.isfinite(values)]
    table = pd.DataFrame([c.__dict__ for c in choices]).set_index("fold")
    return scores, table


def run_baselines(panel: pd.DataFrame, matrix: FeatureMatrix, labels: Labels, folds: Sequence[Fold],
                  portfolio: PortfolioSpec, model: PortfolioResult, model_scores: pd.Series, *,
                  seed: int = 0) -> Baselines:
    """Score, simulate and measure every baseline; compare the model with the best factor."""
    t0 = time.perf_counter()
    scores, choices = baseline_scores(matrix, labels, folds)
    lags = labels.horizon_days - 1
    runs: dict[str, BaselineRun] = {}
    metrics: dict[str, float] = {}
    for name, s in scores.items():
        result = simulate(s, panel, portfolio)
        fwd = labels.fwd_return.reindex(s.index)
        values = headline_metrics(result.returns, result.benchmark_returns, result.periods, scores=s, labels=fwd,
                                  turnover=result.annual_turnover, rng=np.random.default_rng(seed), ic_lags=lags)
        runs[name] = BaselineRun(name, s, result, values)
        metrics.update({f"baseline_{name}_{k}": values[k] for k in BASELINE_METRICS})
    benchmark = model.benchmark_returns
    metrics.update(baseline_equal_weight_sharpe=sharpe(benchmark),
                   baseline_equal_weight_ann_return=ann_return(benchmark),
                   baseline_equal_weight_sharpe_ex_best_month=sharpe(drop_best_months(benchmark, 1)))
    metrics.update(model_minus(runs["factor"], model, model_scores, labels, seed=seed, lags=lags, name="factor"))
    seconds = time.perf_counter() - t0
    log.info("baselines: best factor rank IC %+.4f, linear %+.4f (%.1f s)", metrics["baseline_factor_rank_ic_mean"],
             metrics["baseline_linear_rank_ic_mean"], seconds)
    return Baselines(runs=runs, choices=choices, metrics=metrics, seconds=seconds)


def model_minus(baseline: BaselineRun, model: PortfolioResult, model_scores: pd.Series, labels: Labels, *,
                seed: int, lags: int, name: str) -> dict[str, float]:
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
        f"model_minus_{name}_sharpe": diff, f"model_minus_{name}_sharpe_ci_low": low,
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
        rows.append({"": label, "rank IC": metrics.get(f"{prefix}rank_ic_mean", nan),
                     "s.e.": metrics.get(f"{prefix}rank_ic_se", nan), "Sharpe": metrics.get(f"{prefix}sharpe", nan),
                     "Sharpe ex best month": metrics.get(f"{prefix}sharpe_ex_best_month", nan)})
    if "oracle_rank_ic" in metrics:
        rows.append({"": "oracle (planted observable components)", "rank IC": metrics["oracle_rank_ic"],
                     "s.e.": nan, "Sharpe": nan, "Sharpe ex best month": nan})
    return pd.DataFrame(rows).set_index("")


def factor_verdict(metrics: Mapping[str, float]) -> str:
    """One line: the model's rank IC and Sharpe less the best factor's, and whether the rank IC
    difference is more than two standard errors from zero (empty when the run has no baselines)."""
    if "model_minus_factor_rank_ic" not in metrics:
        return ""
    d, se = metrics["model_minus_factor_rank_ic"], metrics.get("model_minus_factor_rank_ic_se", float("nan"))
    if not (np.isfinite(d) and np.isfinite(se) and se > 0):
        word = "undetermined"
    elif d > 2 * se:
        word = "the model beats the best factor"
    elif d < -2 * se:
        word = "the model LOSES to the best factor"
    else:
        word = "no detectable difference from the best factor"
    nan = float("nan")
    sharpe_diff = [metrics.get(f"model_minus_factor_sharpe{s}", nan) for s in ("", "_ci_low", "_ci_high")]
    return (f"model - best factor: rank IC {d:+.4f} (s.e. {se:.4f}; {word}), Sharpe {sharpe_diff[0]:+.2f} "
            f"[{sharpe_diff[1]:+.2f}, {sharpe_diff[2]:+.2f}] (paired block bootstrap, 95%)")
