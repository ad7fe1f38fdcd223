"""Performance and ranking metrics: pure functions over return series and (date, code) panels.

Conventions (all functions)
---------------------------
- ``returns`` : Series of simple daily returns indexed by date (e.g. ``PortfolioResult.returns``),
  no NaN. 252 periods per year, risk-free rate 0, compounded returns.
- ``sharpe = mean / std(ddof=1) * sqrt(252)``; ``sortino = mean / sqrt(sum(r[r<0]^2) / n) * sqrt(252)``;
  ``ann_vol = std(ddof=1) * sqrt(252)``; ``cum_return = prod(1 + r) - 1``;
  ``ann_return = (1 + cum_return) ** (252 / n) - 1``; ``max_drawdown`` = the lowest equity / running
  peak - 1 with the equity starting at 1 before the first return (a negative fraction, 0 if never
  under water). These equal quantstats 0.0.86's ``sharpe``, ``sortino``, ``volatility``, ``comp``,
  ``cagr(returns, periods=252)`` (which counts periods, not calendar years) and ``max_drawdown`` on
  the same series (tested to 1e-9).
- Against a benchmark on the same dates: ``excess_ann_return = ann_return(s) - ann_return(b)``;
  ``beta = cov(s, b) / var(b)``; ``tracking_error = std(s - b, ddof=1) * sqrt(252)``;
  ``information_ratio = mean(s - b) / std(s - b, ddof=1) * sqrt(252)`` (the Sharpe ratio of the active
  returns). ``benchmark`` is the equal-weight book (the default comparison); the ``index_*`` keys are the
  same against the index benchmark (:func:`index_metrics`, :mod:`backtest.benchmark`).
- Cross-sectional metrics take ``scores`` and ``labels`` as Series indexed by (date, code); they are
  aligned on their common keys and rows with a NaN on either side are dropped.

Headline keys are those of docs/design.md ("Headline MLflow metric keys"); :func:`headline_metrics`
returns them all (``n_folds`` is the engine's), NaN where the inputs for one were not given. Its
statistics (PSR, DSR, the Sharpe ratio's bootstrap interval, the Newey-West error of the rank IC) and the
return-series checks come from :mod:`backtest.statistics`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, DataContractError, preview
from backtest.portfolio import DEFAULT_TOP_K, PortfolioResult
from backtest.statistics import (
    DEFAULT_BLOCK_LENGTH,
    PERIODS_PER_YEAR,
    annualised_sharpe,
    dsr,
    hac_standard_error,
    normal_interval,
    psr,
    returns_values,
    sharpe_ci,
)

logger = logging.getLogger(__name__)

#: The headline metrics of a run, in order. Keys are names, never values: ``ndcg`` is the NDCG at the
#: portfolio's ``top_k`` whatever that depth is (the run records it as the param ``ndcg_depth``).
HEADLINE_KEYS: tuple[str, ...] = (
    "sharpe",
    "sortino",
    "ann_return",
    "cum_return",
    "ann_vol",
    "max_drawdown",
    "win_rate_vs_ew",
    "win_rate_vs_ew_daily",
    "excess_ann_return",
    "benchmark_ann_return",
    "benchmark_sharpe",
    "sharpe_ex_best_month",
    "ann_return_ex_best_month",
    "sharpe_ex_best_3_months",
    "ann_return_ex_best_3_months",
    "ic_mean",
    "rank_ic_mean",
    "rank_ic_se",
    "icir",
    "ndcg",
    "turnover",
    "psr",
    "dsr",
    "sharpe_ci_low",
    "sharpe_ci_high",
    "index_ann_return",
    "index_sharpe",
    "index_excess_ann_return",
    "index_beta",
    "index_tracking_error",
    "index_information_ratio",
    "index_max_drawdown",
)

#: The keys of :func:`index_metrics`, against the index benchmark (:mod:`backtest.benchmark`).
INDEX_KEYS: tuple[str, ...] = tuple(k for k in HEADLINE_KEYS if k.startswith("index_"))


# --------------------------------------------------------------------------------------------------
# Input checks


def _paired(strategy: pd.Series, benchmark: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    s = returns_values(strategy, "strategy returns")
    b = returns_values(benchmark, "benchmark returns")
    if not strategy.index.equals(benchmark.index):
        raise DataContractError(
            f"strategy and benchmark returns must share one date index; they have {len(strategy)} and "
            f"{len(benchmark)} dates. Use PortfolioResult.returns and .benchmark_returns together."
        )
    return s, b


# --------------------------------------------------------------------------------------------------
# Return-series metrics


def cum_return(returns: pd.Series) -> float:
    """Compounded total return ``prod(1 + r) - 1`` of a Series of daily returns indexed by date."""
    return float(np.prod(1.0 + returns_values(returns)) - 1.0)


def ann_return(returns: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised compounded return ``(1 + cum_return) ** (periods_per_year / n) - 1``.

    Equals ``quantstats.stats.cagr(returns, periods=periods_per_year)`` (0.0.86 counts periods, not
    calendar years). NaN for an empty series.

    >>> round(ann_return(pd.Series([0.01] * 126)), 6)  # 1.01 ** 252 - 1
    11.274002
    """
    values = returns_values(returns)
    if len(values) == 0:
        return float("nan")
    return float(np.prod(1.0 + values) ** (periods_per_year / len(values)) - 1.0)


def ann_vol(returns: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised volatility ``std(ddof=1) * sqrt(periods_per_year)``; NaN with fewer than 2 returns."""
    values = returns_values(returns)
    if len(values) < 2:
        return float("nan")
    return float(values.std(ddof=1) * np.sqrt(periods_per_year))


def sharpe(returns: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised Sharpe ratio ``mean / std(ddof=1) * sqrt(periods_per_year)``, risk-free 0.

    NaN with fewer than 2 returns or zero volatility.

    >>> round(sharpe(pd.Series([0.01, -0.01, 0.02, 0.0])), 6)  # 0.005 / 0.0129099 * sqrt(252)
    6.14817
    """
    values = returns_values(returns)
    return annualised_sharpe(values, periods_per_year)


def sortino(returns: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised Sortino ratio ``mean / sqrt(sum(r[r < 0]^2) / n) * sqrt(periods_per_year)``.

    The downside deviation divides by all ``n`` periods (as quantstats does). NaN without a loss.
    """
    values = returns_values(returns)
    if len(values) == 0:
        return float("nan")
    downside = np.sqrt(np.sum(np.minimum(values, 0.0) ** 2) / len(values))
    if not downside > 0:
        return float("nan")
    return float(values.mean() / downside * np.sqrt(periods_per_year))


def max_drawdown(returns: pd.Series) -> float:
    """Largest peak-to-trough loss of the equity curve, a negative fraction (0 if never under water).

    The equity starts at 1 before the first return, so a loss on day one counts.

    >>> max_drawdown(pd.Series([0.1, -0.5, 0.2]))
    -0.5
    """
    values = returns_values(returns)
    if len(values) == 0:
        return float("nan")
    equity = np.cumprod(1.0 + values)
    peak = np.maximum.accumulate(np.maximum(equity, 1.0))
    return float(min((equity / peak).min() - 1.0, 0.0))


def excess_ann_return(strategy: pd.Series, benchmark: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """``ann_return(strategy) - ann_return(benchmark)`` (difference of annualised returns)."""
    _paired(strategy, benchmark)
    return ann_return(strategy, periods_per_year) - ann_return(benchmark, periods_per_year)


def beta(strategy: pd.Series, benchmark: pd.Series) -> float:
    """``cov(s, b) / var(b)`` of the daily returns (both ddof=1); NaN with fewer than 2 days or a constant
    benchmark.

    >>> round(beta(pd.Series([0.02, -0.01, 0.03]), pd.Series([0.01, -0.01, 0.01])), 6)  # (7 / 30000) / (4 / 30000)
    1.75
    """
    s, b = _paired(strategy, benchmark)
    if len(s) < 2:
        return float("nan")
    var = b.var(ddof=1)
    if not var > 0:
        return float("nan")
    return float(np.cov(s, b, ddof=1)[0, 1] / var)


def tracking_error(strategy: pd.Series, benchmark: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised tracking error ``std(s - b, ddof=1) * sqrt(periods_per_year)`` of the daily active returns
    (the ``ann_vol`` of ``s - b``); NaN with fewer than 2 days."""
    s, b = _paired(strategy, benchmark)
    if len(s) < 2:
        return float("nan")
    return float((s - b).std(ddof=1) * np.sqrt(periods_per_year))


def information_ratio(strategy: pd.Series, benchmark: pd.Series, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """Annualised information ratio ``mean(s - b) / std(s - b, ddof=1) * sqrt(periods_per_year)``: the Sharpe
    ratio of the daily active returns (so ``mean(s - b) * 252`` over :func:`tracking_error`); NaN with fewer
    than 2 days or no tracking error."""
    s, b = _paired(strategy, benchmark)
    return annualised_sharpe(s - b, periods_per_year)


def index_metrics(strategy: pd.Series, index: pd.Series | None) -> dict[str, float]:
    """The ``index_*`` metrics (:data:`INDEX_KEYS`) of daily strategy returns against the index benchmark's
    on the same dates (:func:`backtest.benchmark.benchmark_index`); NaN when ``index`` is None.

    ``index_ann_return``, ``index_sharpe`` and ``index_max_drawdown`` are the index's own :func:`ann_return`,
    :func:`sharpe` and :func:`max_drawdown`; ``index_excess_ann_return`` is ``ann_return(strategy) -
    ann_return(index)`` as ``excess_ann_return`` is against equal weight; ``index_beta``
    (:func:`beta`), ``index_tracking_error`` (:func:`tracking_error`) and ``index_information_ratio``
    (:func:`information_ratio`) are of the daily returns.
    """
    if index is None:
        return dict.fromkeys(INDEX_KEYS, float("nan"))
    _paired(strategy, index)
    return {
        "index_ann_return": ann_return(index),
        "index_sharpe": sharpe(index),
        "index_excess_ann_return": excess_ann_return(strategy, index),
        "index_beta": beta(strategy, index),
        "index_tracking_error": tracking_error(strategy, index),
        "index_information_ratio": information_ratio(strategy, index),
        "index_max_drawdown": max_drawdown(index),
    }


def win_rate_vs_ew(period_returns: pd.DataFrame) -> float:
    """Fraction of rebalance periods in which the strategy beat the equal-weight benchmark.

    Parameters
    ----------
    period_returns : DataFrame, one row per rebalance period
        Columns ``strategy`` and ``benchmark``: compounded net returns of each period
        (``PortfolioResult.periods``). A tie is not a win.

    >>> win_rate_vs_ew(pd.DataFrame({"strategy": [0.02, -0.01, 0.0], "benchmark": [0.01, 0.0, 0.0]}))
    0.3333333333333333
    """
    missing = {"strategy", "benchmark"} - set(getattr(period_returns, "columns", []))
    if missing:
        raise DataContractError(
            f"period_returns must be a DataFrame with columns 'strategy' and 'benchmark' (one row per "
            f"rebalance period, e.g. PortfolioResult.periods); missing {sorted(missing)}."
        )
    s = period_returns["strategy"].to_numpy(np.float64)
    b = period_returns["benchmark"].to_numpy(np.float64)
    if len(s) == 0:
        return float("nan")
    return float(np.mean(s > b))


def win_rate_vs_ew_daily(strategy: pd.Series, benchmark: pd.Series) -> float:
    """Fraction of days on which the strategy's return beat the benchmark's (a tie is not a win)."""
    s, b = _paired(strategy, benchmark)
    if len(s) == 0:
        return float("nan")
    return float(np.mean(s > b))


def drop_best_months(returns: pd.Series, n_months: int = 1) -> pd.Series:
    """``returns`` without the days of its ``n_months`` best calendar months.

    Months are ranked by their compounded return ``prod(1 + r) - 1`` over the days of the series that
    fall in them (a tie goes to the earlier month).

    Parameters
    ----------
    returns : Series indexed by date (DatetimeIndex)
    n_months : int, >= 0

    Returns
    -------
    Series indexed by date, the remaining days in their original order.
    """
    returns_values(returns)
    if not isinstance(returns.index, pd.DatetimeIndex):
        raise DataContractError(
            f"drop_best_months needs returns indexed by a DatetimeIndex; received {type(returns.index).__name__}."
        )
    if n_months <= 0:
        return returns
    months = returns.index.to_period("M")
    monthly = (1.0 + returns).groupby(months).prod() - 1.0
    best = monthly.sort_values(ascending=False, kind="stable").index[:n_months]
    return returns[~months.isin(best)]


# --------------------------------------------------------------------------------------------------
# Cross-sectional ranking quality


def _aligned(scores: pd.Series, labels: pd.Series, what: str) -> pd.DataFrame:
    for name, obj in (("scores", scores), (what, labels)):
        if not isinstance(obj, pd.Series) or obj.index.nlevels != 2:
            raise DataContractError(
                f"{name} must be a Series indexed by (date, code); received {type(obj).__name__} with "
                f"{getattr(getattr(obj, 'index', None), 'nlevels', '?')} index level(s)."
            )
    frame = pd.concat({"score": scores, "label": labels}, axis=1, join="inner").dropna()
    if len(frame) == 0:
        raise DataContractError(
            f"scores and {what} have no (date, code) key with a value on both sides; check that they "
            "cover the same dates and codes."
        )
    return frame


def _has_pairs(scores: pd.Series, labels: pd.Series) -> bool:
    """Whether ``scores`` and ``labels`` share a (date, code) key with a value on both sides (True for
    inputs of the wrong kind, so that :func:`_aligned` names the problem)."""
    if not (isinstance(scores, pd.Series) and isinstance(labels, pd.Series)):
        return True
    return bool(len(pd.concat({"score": scores, "label": labels}, axis=1, join="inner").dropna()))


def _daily_pearson(frame: pd.DataFrame) -> pd.Series:
    days = frame.index.get_level_values(0)
    grouped = frame.groupby(days)
    centred = frame - grouped.transform("mean")
    sums = (
        pd.DataFrame(
            {
                "xy": centred["score"] * centred["label"],
                "xx": centred["score"] ** 2,
                "yy": centred["label"] ** 2,
            }
        )
        .groupby(days)
        .sum()
    )
    constant = (grouped.max() == grouped.min()).any(axis=1) | (grouped.size() < 2)
    ic = sums["xy"] / np.sqrt(sums["xx"] * sums["yy"])
    ic[constant.to_numpy()] = np.nan
    ic.index.name = "date"
    return ic


def daily_ic(scores: pd.Series, labels: pd.Series, method: str = "pearson") -> pd.Series:
    """Cross-sectional correlation of scores with labels on each day.

    Parameters
    ----------
    scores, labels : Series indexed by (date, code)
        Labels are the realised forward returns (or their cross-sectional transform) of each sample.
    method : {"pearson", "spearman"}
        ``pearson`` gives the IC, ``spearman`` (Pearson of average ranks) the rank IC.

    Returns
    -------
    Series indexed by date; NaN on days with fewer than 2 names or a constant side.
    """
    if method not in ("pearson", "spearman"):
        raise DataContractError(f"method must be 'pearson' or 'spearman'; received {method!r}.")
    frame = _aligned(scores, labels, "labels")
    if method == "spearman":
        frame = frame.groupby(level=0).rank(method="average")
    return _daily_pearson(frame)


def ic_mean(scores: pd.Series, labels: pd.Series) -> float:
    """Mean daily Pearson IC over the days where it is defined."""
    return float(daily_ic(scores, labels, "pearson").mean())


def rank_ic_mean(scores: pd.Series, labels: pd.Series) -> float:
    """Mean daily rank (Spearman) IC over the days where it is defined."""
    return float(daily_ic(scores, labels, "spearman").mean())


def icir(scores: pd.Series, labels: pd.Series) -> float:
    """Information ratio of the rank IC: ``mean / std(ddof=1)`` of the daily rank IC (not annualised)."""
    ic = daily_ic(scores, labels, "spearman").dropna()
    if len(ic) < 2 or not ic.std(ddof=1) > 0:
        return float("nan")
    return float(ic.mean() / ic.std(ddof=1))


def mean_daily_rank_ic(scores: np.ndarray, target: np.ndarray, day_starts: np.ndarray) -> float:
    """Mean daily rank IC of arrays already grouped by day (day g is rows ``day_starts[g]:day_starts[g+1]``).

    The array form of ``rank_ic_mean`` for a validation metric evaluated every boosting round: Spearman
    (Pearson of average ranks) per day, days with a constant side or fewer than 2 rows skipped; NaN when
    no day counts.

    >>> round(mean_daily_rank_ic(np.array([1., 2, 3, 3, 2, 1]), np.array([1., 2, 3, 1, 2, 3]), np.array([0, 3, 6])), 6)
    0.0
    """
    from scipy.stats import rankdata

    values = []
    for a, b in zip(day_starts[:-1], day_starts[1:]):
        if b - a < 2:
            continue
        x, y = rankdata(scores[a:b]), rankdata(target[a:b])
        x, y = x - x.mean(), y - y.mean()
        denom = np.sqrt((x * x).sum() * (y * y).sum())
        if denom > 0:
            values.append(float((x * y).sum() / denom))
    return float(np.mean(values)) if values else float("nan")


#: Gain names of :func:`relevance_gains` (LightGBM's ``label_gain`` and :func:`daily_ndcg` share them).
GAINS: tuple[str, ...] = ("linear", "exponential")

#: Levels a real-valued relevance (raw returns, percentile ranks) is graded into before NDCG: the
#: label's default 10 relevance bins (``conf/label/default.yaml``).
NDCG_GRADES = 10


def relevance_gains(gain: str | Sequence[float], n_levels: int) -> np.ndarray:
    """The gain of each relevance level ``0..n_levels-1``: the one definition of NDCG's gain.

    LambdaRank trains with it (``LambdaRankConfig.gains()`` is LightGBM's ``label_gain``) and
    :func:`daily_ndcg` / :func:`ndcg_at_k` evaluate with it, so a training and a reported NDCG that name
    the same gain weigh the levels the same way.

    Parameters
    ----------
    gain : ``"linear"`` (``g(l) = l``), ``"exponential"`` (``g(l) = 2**l - 1``, LightGBM's default
        ``label_gain``), or an explicit sequence of ``n_levels`` non-negative gains.
    n_levels : number of relevance levels (10 for the label's bins, 3 for three classes).

    Returns
    -------
    float64 (n_levels,), ``gains[l]`` = gain of level ``l``.

    Examples
    --------
    >>> relevance_gains("linear", 4)
    array([0., 1., 2., 3.])
    >>> relevance_gains("exponential", 4)
    array([0., 1., 3., 7.])
    """
    if isinstance(n_levels, bool) or not isinstance(n_levels, (int, np.integer)) or n_levels < 1:
        raise ConfigError(f"relevance_gains: expected n_levels >= 1, received {n_levels!r}.")
    levels = np.arange(n_levels, dtype=np.float64)
    if isinstance(gain, str):
        if gain == "linear":
            return levels
        if gain == "exponential":
            return np.exp2(levels) - 1.0
        raise ConfigError(
            f"NDCG gain: expected one of {', '.join(GAINS)} or a list of {n_levels} gains, received {gain!r}."
            "\n  fix: gain='linear' (the models' default) or gain='exponential'"
        )
    gains = np.asarray(gain, dtype=np.float64)
    if gains.shape != (n_levels,) or not np.isfinite(gains).all() or (gains < 0).any():
        raise ConfigError(
            f"NDCG gain: expected {n_levels} finite non-negative gains (one per relevance level), received "
            f"{preview(np.atleast_1d(gains).tolist())}.\n  fix: give one gain per level 0..{n_levels - 1}"
        )
    return gains


def _relevance_levels(frame: pd.DataFrame, day_codes: np.ndarray, code_codes: np.ndarray, grades: int) -> np.ndarray:
    """Integer relevance levels of ``frame["label"]``, int64 (n_rows,): the values themselves when they
    are whole numbers, else each day graded into ``grades`` bins (``backtest.labels``' bins rule)."""
    rel = frame["label"].to_numpy(np.float64)
    if np.array_equal(rel, np.round(rel)):
        if (rel < 0).any():
            raise DataContractError(
                "NDCG needs non-negative relevance levels; received negative whole numbers (-1 marks an "
                "unknown label in backtest.labels' bins). Drop unlabelled samples, or pass the label bins "
                "(0..9) or the real-valued label (graded per day)."
            )
        return rel.astype(np.int64)
    from backtest.labels import cross_sectional_target  # the one definition of the bins

    wide = np.full((int(day_codes.max()) + 1, int(code_codes.max()) + 1), np.nan)
    wide[day_codes, code_codes] = rel
    return cross_sectional_target(wide, "bins", grades)[day_codes, code_codes]


def daily_ndcg(
    scores: pd.Series,
    relevance: pd.Series,
    k: int = DEFAULT_TOP_K,
    gain: str | Sequence[float] = "linear",
    grades: int = NDCG_GRADES,
) -> pd.Series:
    """NDCG@k of each day's ranking by score.

    ``DCG@k = sum_{i < k} g(rel_i) / log2(i + 2)`` over the names sorted by score (descending; ties in
    code order, like LightGBM's stable sort of a (date, code)-sorted query), divided by the DCG of the
    ideal order; ``g`` is :func:`relevance_gains` of ``gain`` (``"linear"``: ``g(l) = l``, the default
    of both models; ``"exponential"``: ``2**l - 1``).

    Relevance is graded: non-negative whole numbers are the levels themselves (label bins 0..9, three
    classes 0..2). A real-valued relevance (raw forward returns, percentile ranks) is first graded per
    day into ``grades`` bins with ``backtest.labels``' ``"bins"`` rule, so the NDCG of a raw-return label
    equals that of its 10-bin label.

    Parameters
    ----------
    scores : Series indexed by (date, code)
    relevance : Series indexed by (date, code)
        Relevance levels (>= 0), or a real-valued label (graded per day).
    k : int, the depth: the names bought (``portfolio.top_k``, default :data:`backtest.portfolio.DEFAULT_TOP_K`).
    gain : a gain name of :func:`relevance_gains` or one gain per level.
    grades : levels a real-valued relevance is graded into.

    Returns
    -------
    Series indexed by date; NaN on days whose relevance is all 0 (LightGBM counts those as 1).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"NDCG depth: expected k >= 1, received {k!r}.")
    frame = _aligned(scores, relevance, "relevance")
    day_codes, days = pd.factorize(frame.index.get_level_values(0), sort=True)
    code_codes = pd.factorize(frame.index.get_level_values(1), sort=True)[0]
    levels = _relevance_levels(frame, day_codes, code_codes, grades)
    n_levels = int(levels.max()) + 1 if isinstance(gain, str) else len(gain)
    if levels.max() >= n_levels:
        raise DataContractError(
            f"NDCG: relevance reaches level {int(levels.max())} but {n_levels} gains were given; give one "
            "gain per level."
        )
    table = relevance_gains(gain, n_levels)
    gains = table[levels]
    rel = levels.astype(np.float64)

    def dcg(order: np.ndarray) -> np.ndarray:
        day_sorted = day_codes[order]
        first = np.r_[0, np.flatnonzero(np.diff(day_sorted)) + 1]
        starts = np.repeat(first, np.diff(np.r_[first, len(order)]))
        rank = np.arange(len(order)) - starts
        weight = np.where(rank < k, 1.0 / np.log2(rank + 2.0), 0.0)
        return np.bincount(day_sorted, gains[order] * weight, minlength=len(days))

    actual = dcg(np.lexsort((code_codes, -frame["score"].to_numpy(np.float64), day_codes)))
    ideal = dcg(np.lexsort((code_codes, -rel, day_codes)))
    with np.errstate(invalid="ignore", divide="ignore"):
        ndcg = np.where(ideal > 0, actual / ideal, np.nan)
    return pd.Series(ndcg, index=pd.DatetimeIndex(days, name="date"), name="ndcg")


def ndcg_at_k(
    scores: pd.Series,
    relevance: pd.Series,
    k: int = DEFAULT_TOP_K,
    gain: str | Sequence[float] = "linear",
    grades: int = NDCG_GRADES,
) -> float:
    """Mean of :func:`daily_ndcg` over the days where it is defined.

    The headline metric ``ndcg`` (and the per-fold ``ndcg``) is at depth ``k = portfolio.top_k`` (the
    stocks bought, recorded as the param ``ndcg_depth``; the models' configs train and early-stop at the
    same depth) with the gain the model trains on, ``ranker.ndcg_gain`` (``"linear"`` by default for both
    models, see :func:`relevance_gains`), on the label's relevance levels (a real-valued label graded per
    day into 10 bins).

    >>> idx = pd.MultiIndex.from_product([pd.to_datetime(["2024-01-02"]), ["a", "b", "c"]])
    >>> scores = pd.Series([3.0, 2.0, 1.0], index=idx)
    >>> relevance = pd.Series([1, 2, 0], index=idx)
    >>> round(ndcg_at_k(scores, relevance, k=2), 4)  # (1 + 2 / log2(3)) / (2 + 1 / log2(3))
    0.8597
    >>> round(ndcg_at_k(scores, relevance, k=2, gain="exponential"), 4)  # gains 1, 3, 0
    0.7967
    """
    return float(daily_ndcg(scores, relevance, k, gain, grades).mean())


def daily_ranking_quality(
    scores: pd.Series,
    labels: pd.Series,
    relevance: pd.Series,
    k: int = DEFAULT_TOP_K,
    gain: str | Sequence[float] = "linear",
) -> pd.DataFrame:
    """The daily series behind ``rank_ic_mean`` and ``ndcg``: one row per scored day with a known label.

    A study compares two runs day by day on these (``backtest.statistics.paired_mean_difference``), so
    each run stores them (``data/daily_ranking.parquet``).

    Parameters
    ----------
    scores, labels, relevance : Series indexed by (date, code): the out-of-sample scores, the realised
        forward returns and the relevance levels, as :func:`headline_metrics` takes them.
    k, gain : depth and gain of the NDCG (:func:`daily_ndcg`).

    Returns
    -------
    DataFrame indexed by ``date`` with columns ``rank_ic`` (:func:`daily_ic`, spearman) and ``ndcg``
    (:func:`daily_ndcg`); NaN where a day's value is undefined; no row when no scored sample has a known
    label yet. Their means are the run's ``rank_ic_mean`` and ``ndcg``.
    """
    empty = pd.Series(dtype=np.float64, index=pd.DatetimeIndex([], name="date"))
    ic = daily_ic(scores, labels, "spearman") if _has_pairs(scores, labels) else empty
    ndcg = daily_ndcg(scores, relevance, k, gain) if _has_pairs(scores, relevance) else empty
    frame = pd.concat({"rank_ic": ic, "ndcg": ndcg}, axis=1).sort_index().astype(np.float64)
    frame.index.name = "date"
    return frame


# --------------------------------------------------------------------------------------------------
# Tables and the headline dictionary


def per_year_table(strategy: pd.Series, benchmark: pd.Series) -> pd.DataFrame:
    """One row per calendar year of the return index.

    Returns
    -------
    DataFrame indexed by ``year`` (int) with columns ``n_days``, ``return``, ``benchmark_return``,
    ``excess_return`` (difference of the compounded returns of the year), ``sharpe``, ``ann_vol``,
    ``max_drawdown`` (within the year) and ``win_rate_vs_ew_daily``.
    """
    _paired(strategy, benchmark)
    rows = {}
    for year, days in strategy.groupby(strategy.index.year).groups.items():
        s, b = strategy.loc[days], benchmark.loc[days]
        rows[int(year)] = {
            "n_days": len(s),
            "return": cum_return(s),
            "benchmark_return": cum_return(b),
            "excess_return": cum_return(s) - cum_return(b),
            "sharpe": sharpe(s),
            "ann_vol": ann_vol(s),
            "max_drawdown": max_drawdown(s),
            "win_rate_vs_ew_daily": win_rate_vs_ew_daily(s, b),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "year"
    return table


def headline_metrics(
    strategy: pd.Series,
    benchmark: pd.Series,
    period_returns: pd.DataFrame,
    *,
    scores: pd.Series | None = None,
    labels: pd.Series | None = None,
    relevance: pd.Series | None = None,
    turnover: float | None = None,
    n_trials: int = 1,
    trial_sharpe_var: float = 0.0,
    rng: np.random.Generator | None = None,
    n_boot: int = 1000,
    block_length: float = DEFAULT_BLOCK_LENGTH,
    ndcg_depth: int = DEFAULT_TOP_K,
    ndcg_gain: str | Sequence[float] = "linear",
    ic_lags: int = 4,
    index: pd.Series | None = None,
) -> dict[str, float]:
    """All headline metrics of one backtest, keyed as in docs/design.md (plus a few extras).

    Parameters
    ----------
    strategy, benchmark : Series of daily net returns indexed by the same dates
        ``PortfolioResult.returns`` and ``.benchmark_returns``.
    period_returns : DataFrame with columns ``strategy`` and ``benchmark``
        One row per rebalance period (``PortfolioResult.periods``), for ``win_rate_vs_ew``.
    scores, labels : Series indexed by (date, code), optional
        Out-of-sample scores and realised forward returns, for ``ic_mean``, ``rank_ic_mean``, ``icir``.
    relevance : Series indexed by (date, code), optional
        Relevance levels for ``ndcg``.
    turnover : float, optional
        Annualised one-way turnover (``PortfolioResult.annual_turnover``).
    n_trials, trial_sharpe_var : int, float
        For ``dsr`` (see :func:`backtest.statistics.dsr`); the defaults make ``dsr == psr``.
    rng : numpy Generator, optional
        Seeded generator for ``sharpe_ci_low`` / ``sharpe_ci_high``; without one they are NaN.
    ndcg_depth, ndcg_gain : depth (the portfolio's ``top_k``) and gain of ``ndcg`` (:func:`ndcg_at_k`); the
        key does not depend on the depth.
    ic_lags : lags of ``rank_ic_se``, the Newey-West standard error of ``rank_ic_mean``
        (:func:`backtest.statistics.hac_standard_error`): the label horizon less one day (4 for the 5-day label).
    index : Series of the index benchmark's daily returns on the strategy's dates, optional
        (:func:`backtest.benchmark.benchmark_index`), for the ``index_*`` keys (:func:`index_metrics`).

    Returns
    -------
    dict[str, float] with every key of ``HEADLINE_KEYS`` (NaN where the inputs were not given or the value
    is undefined, e.g. IC and NDCG when no scored sample has a known label yet). Extras beyond docs/design.md:
    ``win_rate_vs_ew_daily``, ``benchmark_ann_return``, ``benchmark_sharpe``, ``sharpe_ci_low``,
    ``sharpe_ci_high``, ``rank_ic_se``. ``benchmark`` is the equal-weight book, the default comparison;
    the ``index_*`` keys compare with the index instead.
    """
    _paired(strategy, benchmark)
    nan = float("nan")
    out: dict[str, float] = {
        "sharpe": sharpe(strategy),
        "sortino": sortino(strategy),
        "ann_return": ann_return(strategy),
        "cum_return": cum_return(strategy),
        "ann_vol": ann_vol(strategy),
        "max_drawdown": max_drawdown(strategy),
        "win_rate_vs_ew": win_rate_vs_ew(period_returns),
        "win_rate_vs_ew_daily": win_rate_vs_ew_daily(strategy, benchmark),
        "excess_ann_return": excess_ann_return(strategy, benchmark),
        "benchmark_ann_return": ann_return(benchmark),
        "benchmark_sharpe": sharpe(benchmark),
    }
    for n_months, suffix in ((1, "month"), (3, "3_months")):
        rest = drop_best_months(strategy, n_months)
        out[f"sharpe_ex_best_{suffix}"] = sharpe(rest)
        out[f"ann_return_ex_best_{suffix}"] = ann_return(rest)
    # A test period whose labels are not known yet (shorter than the label horizon) has no IC or NDCG:
    # NaN, as documented, rather than the "no common key" error of the functions themselves.
    if scores is not None and labels is not None and _has_pairs(scores, labels):
        out["ic_mean"] = ic_mean(scores, labels)
        out["rank_ic_mean"] = rank_ic_mean(scores, labels)
        out["rank_ic_se"] = hac_standard_error(daily_ic(scores, labels, "spearman"), ic_lags)
        out["icir"] = icir(scores, labels)
    else:
        out.update(ic_mean=nan, rank_ic_mean=nan, rank_ic_se=nan, icir=nan)
    out["ndcg"] = (
        ndcg_at_k(scores, relevance, ndcg_depth, ndcg_gain)
        if scores is not None and relevance is not None and _has_pairs(scores, relevance)
        else nan
    )
    out["turnover"] = float(turnover) if turnover is not None else nan
    out["psr"] = psr(strategy)
    out["dsr"] = dsr(strategy, n_trials, trial_sharpe_var)
    if rng is not None:
        out["sharpe_ci_low"], out["sharpe_ci_high"] = sharpe_ci(strategy, rng, n_boot, block_length)
    else:
        out.update(sharpe_ci_low=nan, sharpe_ci_high=nan)
    out.update(index_metrics(strategy, index))
    assert set(out) == set(HEADLINE_KEYS), set(out) ^ set(HEADLINE_KEYS)
    return {key: out[key] for key in HEADLINE_KEYS}


# --------------------------------------------------------------------------------------------------
# The signal: rank IC over time and horizons, score quantiles, rank autocorrelation, IC by group
#
# ``forward`` frames are indexed by (date, code) like the scores and hold one forward return per horizon in
# the columns ``fwd_ret_<h>d`` (:func:`backtest.labels.forward_returns`: open(t+1) to open(t+h), the label's
# rule; the run's ``data/forward_returns.parquet``).

#: Trailing window (trading days) of the rolling mean of the daily rank IC: about a month.
IC_ROLLING_DAYS = 21
#: Score quantiles of the signal page and of the alphalens export: deciles.
SCORE_QUANTILES = 10
#: Lags (scored days) of the score rank autocorrelation.
AUTOCORRELATION_LAGS: tuple[int, ...] = (1, 5, 10, 20)


def score_quantiles(scores: pd.Series, n: int = SCORE_QUANTILES) -> pd.Series:
    """Each day's score quantile, 1 (lowest scores) to ``n``, as ``pandas.qcut(day, n, labels=False) + 1``
    assigns it (alphalens' ``factor_quantile``): the edges are the day's linear-interpolated quantiles, a
    score goes to the first bin whose upper edge it does not exceed, and a day whose edges repeat (ties
    spanning a whole quantile, fewer than two scores) has no quantiles (NaN).

    Parameters
    ----------
    scores : Series indexed by (date, code), unique; NaN scores get no quantile.
    n : number of quantiles (>= 2).

    Returns
    -------
    float64 Series on ``scores``' index.

    >>> idx = pd.MultiIndex.from_product([pd.to_datetime(["2024-01-02"]), list("abcdef")], names=["date", "code"])
    >>> score_quantiles(pd.Series([0.6, 0.1, 0.5, 0.2, 0.4, 0.3], index=idx), 3).tolist()
    [3.0, 1.0, 3.0, 1.0, 2.0, 2.0]
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ConfigError(f"score quantiles: expected an integer n >= 2, received {n!r}.")
    wide, rows, cols = _wide(scores)
    qs = np.linspace(0.0, 1.0, n + 1)
    np.putmask(qs, n * qs != np.arange(n + 1), np.nextafter(qs, 1.0))  # pandas.qcut's quantile levels
    finite = np.isfinite(wide)
    days = finite.any(axis=1)
    edges = np.full((len(wide), n + 1), np.nan)
    edges[days] = np.nanquantile(wide[days], qs, axis=1, method="linear").T
    bins = (wide[:, :, None] > edges[:, None, :]).sum(axis=2).astype(np.float64)  # searchsorted, side="left"
    bins[wide == edges[:, :1]] = 1.0  # the lowest score belongs to the first bin
    repeated = ~(np.diff(edges, axis=1) > 0).all(axis=1)
    bins[repeated[:, None] | ~finite] = np.nan
    return pd.Series(bins[rows, cols], index=scores.index, name="quantile")


def _wide(series: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (date, code) Series as a float64 (date x code) matrix, with the cell of each of its rows."""
    if not isinstance(series, pd.Series) or series.index.nlevels != 2:
        raise DataContractError(
            f"expected a Series indexed by (date, code); received {type(series).__name__} with "
            f"{getattr(getattr(series, 'index', None), 'nlevels', '?')} index level(s)."
        )
    rows, dates = pd.factorize(series.index.get_level_values(0), sort=True)
    cols, codes = pd.factorize(series.index.get_level_values(1), sort=True)
    wide = np.full((len(dates), len(codes)), np.nan)
    wide[rows, cols] = series.to_numpy(np.float64)
    return wide, rows, cols


def horizon_columns(forward: pd.DataFrame) -> dict[int, str]:
    """The forward-return columns of ``forward`` by horizon, shortest first.

    >>> horizon_columns(pd.DataFrame(columns=["fwd_ret_10d", "fwd_ret_2d", "industry"]))
    {2: 'fwd_ret_2d', 10: 'fwd_ret_10d'}
    """
    found = {}
    for column in forward.columns:
        text = str(column)
        if text.startswith("fwd_ret_") and text.endswith("d") and text[8:-1].isdigit():
            found[int(text[8:-1])] = text
    return dict(sorted(found.items()))


def quantile_daily_returns(quantiles: pd.Series, returns: pd.Series, n: int = SCORE_QUANTILES) -> pd.DataFrame:
    """Each day's mean forward return of the names in each score quantile.

    Parameters
    ----------
    quantiles : Series indexed by (date, code), :func:`score_quantiles` of every scored name of the day.
    returns : Series indexed by (date, code), the forward returns; names without one are left out.
    n : the number of quantiles.

    Returns
    -------
    DataFrame indexed by date, columns 1..n (NaN where a quantile has no known return that day).
    """
    frame = pd.DataFrame({"quantile": quantiles, "ret": returns.reindex(quantiles.index)}).dropna()
    table = frame.groupby([frame.index.get_level_values(0), frame["quantile"].astype(np.int64)])["ret"].mean()
    out = table.unstack().reindex(columns=range(1, n + 1))
    out.index.name, out.columns.name = "date", "quantile"
    return out


@dataclass(frozen=True)
class SignalAnalysis:
    """The numbers of a run's signal page (:func:`signal_analysis`).

    Attributes
    ----------
    horizon : the label's horizon (trading days to the exit), the page's main one.
    daily_rank_ic : Series by date, the rank IC at ``horizon`` (the run's ``data/daily_ranking.parquet``).
    rolling_days : the window of ``rolling_rank_ic`` (:data:`IC_ROLLING_DAYS`).
    rolling_rank_ic : the trailing ``rolling_days``-day mean of ``daily_rank_ic`` (NaN until the window is full).
    monthly_rank_ic : DataFrame year x month (1..12), the mean daily rank IC of each calendar month.
    ic_decay : DataFrame by horizon: ``rank_ic_mean``, ``rank_ic_se`` (Newey-West, lags ``h - 1``), its 95%
        interval ``ci_low`` / ``ci_high`` (:func:`backtest.statistics.normal_interval`), ``t``, ``n_days``;
        its ``horizon`` row is the run's ``rank_ic_mean`` and ``rank_ic_se``.
    quantile_mean : DataFrame quantile (1..n) x horizon: the mean over days of each quantile's daily mean
        forward return.
    quantile_wealth : DataFrame date x quantile: each quantile's daily mean forward return at the shortest
        horizon (``quantile_mean``'s first column: one day held), compounded from 1 (equal weight, no costs).
    spread : DataFrame by horizon: the top-minus-bottom quantile spread of forward returns, ``mean``,
        ``se`` (Newey-West, lags ``h - 1``), ``t``, ``n_days``.
    rank_autocorrelation : Series by lag (scored days): the mean daily correlation of the names' score
        ranks with their ranks ``lag`` days before.
    ic_by_group : DataFrame by group (industry): ``rank_ic_mean`` at ``horizon`` within the group,
        ``rank_ic_se``, ``n_days``, ``names`` (mean names per day); None without groups.
    """

    horizon: int
    daily_rank_ic: pd.Series
    rolling_days: int
    rolling_rank_ic: pd.Series
    monthly_rank_ic: pd.DataFrame
    ic_decay: pd.DataFrame
    quantile_mean: pd.DataFrame
    quantile_wealth: pd.DataFrame
    spread: pd.DataFrame
    rank_autocorrelation: pd.Series
    ic_by_group: pd.DataFrame | None


def signal_analysis(
    scores: pd.Series,
    forward: pd.DataFrame,
    horizon: int,
    *,
    groups: pd.Series | None = None,
    n_quantiles: int = SCORE_QUANTILES,
    rolling_days: int = IC_ROLLING_DAYS,
    lags: Sequence[int] = AUTOCORRELATION_LAGS,
) -> SignalAnalysis:
    """What a run's scores say about the forward returns, horizon by horizon (the signal page's numbers).

    Parameters
    ----------
    scores : Series indexed by (date, code), the out-of-sample scores.
    forward : DataFrame on the same rows, the forward returns ``fwd_ret_<h>d`` (:func:`horizon_columns`).
    horizon : the label's horizon; ``forward`` must hold it.
    groups : Series indexed by (date, code), the name's group (industry) on the day; None: no IC by group.
    n_quantiles, rolling_days, lags : quantiles, rolling window and autocorrelation lags.

    Every rank IC is :func:`daily_ic` (Spearman per day) and every standard error Newey-West with ``h - 1``
    lags (:func:`backtest.labels.newey_west_lags`), the rule of the run's ``rank_ic_se``.
    """
    from backtest.labels import newey_west_lags

    columns = horizon_columns(forward)
    if horizon not in columns:
        raise DataContractError(
            f"signal analysis: the forward returns hold horizons {list(columns)}, not the label's {horizon}. "
            "Fix: pass the run's forward returns (backtest.engine.forward_frame), which always hold it."
        )
    decay, daily = {}, {}
    for h, column in columns.items():
        returns = forward[column]
        ic = daily_ic(scores, returns, "spearman") if _has_pairs(scores, returns) else pd.Series(dtype=np.float64)
        daily[h] = ic
        se = hac_standard_error(ic, newey_west_lags(h))
        mean = float(ic.mean())
        low, high = normal_interval(mean, se)
        decay[h] = {
            "rank_ic_mean": mean,
            "rank_ic_se": se,
            "ci_low": float(low),
            "ci_high": float(high),
            "t": mean / se if se > 0 else np.nan,
            "n_days": ic.count(),
        }
    ic = daily[horizon]
    monthly = ic.groupby([ic.index.year, ic.index.month]).mean().unstack()
    monthly.index.name, monthly.columns.name = "year", "month"
    quantile = score_quantiles(scores, n_quantiles)
    quantiles = {h: quantile_daily_returns(quantile, forward[c], n_quantiles) for h, c in columns.items()}
    spread = {}
    for h, table in quantiles.items():
        gap = (table[n_quantiles] - table[1]).dropna()
        se = hac_standard_error(gap, newey_west_lags(h))
        mean = float(gap.mean()) if len(gap) else float("nan")
        spread[h] = {"mean": mean, "se": se, "t": mean / se if se > 0 else float("nan"), "n_days": len(gap)}
    shortest = quantiles[min(quantiles)]
    return SignalAnalysis(
        horizon=int(horizon),
        daily_rank_ic=ic.rename("rank_ic"),
        rolling_days=int(rolling_days),
        rolling_rank_ic=ic.rolling(rolling_days, min_periods=rolling_days).mean().rename("rank_ic_rolling"),
        monthly_rank_ic=monthly.reindex(columns=range(1, 13)),
        ic_decay=pd.DataFrame.from_dict(decay, orient="index").rename_axis("horizon"),
        quantile_mean=pd.DataFrame({h: t.mean() for h, t in quantiles.items()}).rename_axis(
            index="quantile", columns="horizon"
        ),
        quantile_wealth=(1.0 + shortest.fillna(0.0)).cumprod(),
        spread=pd.DataFrame.from_dict(spread, orient="index").rename_axis("horizon"),
        rank_autocorrelation=rank_autocorrelation(scores, lags),
        ic_by_group=None if groups is None else rank_ic_by_group(scores, forward[columns[horizon]], groups, horizon),
    )


def rank_autocorrelation(
    scores: pd.Series, lags: Sequence[int] = AUTOCORRELATION_LAGS, *, days: pd.DatetimeIndex | None = None
) -> pd.Series:
    """Mean over days of the correlation between the names' score ranks on a day and their ranks ``lag``
    trading days before, over the names scored on both days (alphalens' ``factor_rank_autocorrelation``:
    ranks within each day's whole cross-section, Pearson over the common names). A high value at lag 1
    means a slow book: little turnover from the signal itself.

    Parameters
    ----------
    scores : Series indexed by (date, code).
    lags : lags in trading days (>= 1).
    days : the trading days the lags count (a day of them without scores pairs with nothing); None: the
        days of ``scores``.

    Returns
    -------
    Series indexed by lag (``lag``), NaN for a lag without a pair of scored days.
    """
    wide, rows, _ = _wide(scores)
    scored = pd.DatetimeIndex(scores.index.get_level_values(0)).unique().sort_values()
    if days is not None:
        on_days = np.full((len(days), wide.shape[1]), np.nan)
        position = pd.DatetimeIndex(days).get_indexer(scored)
        on_days[position[position >= 0]] = wide[position >= 0]
        wide = on_days
    ranks = pd.DataFrame(wide).rank(axis=1).to_numpy()
    out = {}
    for lag in lags:
        if isinstance(lag, bool) or not isinstance(lag, (int, np.integer)) or lag < 1:
            raise ConfigError(f"rank autocorrelation: lags must be whole trading days >= 1, received {lag!r}.")
        pairs = _row_pearson(ranks[lag:], ranks[:-lag]) if lag < len(ranks) else np.array([])
        out[int(lag)] = float(np.nanmean(pairs)) if np.isfinite(pairs).any() else np.nan
    return pd.Series(out, name="rank_autocorrelation").rename_axis("lag")


def _row_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of ``a`` with the same row of ``b`` over the columns finite in both
    (NaN with fewer than 2 such columns or a constant side)."""
    both = np.isfinite(a) & np.isfinite(b)
    n = both.sum(axis=1)
    x, y = np.where(both, a, 0.0), np.where(both, b, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = np.where(both, x - x.sum(axis=1, keepdims=True) / n[:, None], 0.0)
        y = np.where(both, y - y.sum(axis=1, keepdims=True) / n[:, None], 0.0)
        r = (x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))
    return np.where(n >= 2, r, np.nan)


def rank_ic_by_group(scores: pd.Series, returns: pd.Series, groups: pd.Series, horizon: int) -> pd.DataFrame:
    """The rank IC within each group (industry): Spearman of score and forward return over the group's
    names of the day, as alphalens' ``mean_information_coefficient(by_group=True)`` computes it, then its
    mean over days, Newey-West standard error (lags ``horizon - 1``), days and mean names a day.

    Returns
    -------
    DataFrame indexed by group, columns ``rank_ic_mean``, ``rank_ic_se``, ``n_days``, ``names``, the 95%
    interval ``ci_low`` / ``ci_high`` (:func:`backtest.statistics.normal_interval`), sorted by
    ``rank_ic_mean`` (highest first); a group-day with fewer than 2 names or a constant side has no rank IC,
    and a group without any day that has one no row.
    """
    from backtest.labels import newey_west_lags

    frame = _aligned(scores, returns, "returns")
    frame["group"] = groups.reindex(frame.index).to_numpy()
    frame = frame.dropna()
    keys = [frame.index.get_level_values(0), frame["group"]]
    ranks = frame[["score", "label"]].groupby(keys, observed=True).rank(method="average")
    ic = _grouped_pearson(ranks, [ranks.index.get_level_values(0), frame["group"]])
    names = frame.groupby(keys, observed=True).size()
    rows = {}
    for group, daily in ic.groupby(level=1, observed=True):
        if not daily.notna().any():
            continue  # never two names on a day: no rank IC
        rows[group] = {
            "rank_ic_mean": float(daily.mean()),
            "rank_ic_se": hac_standard_error(daily.to_numpy(), newey_west_lags(horizon)),
            "n_days": int(daily.notna().sum()),
            "names": float(names.xs(group, level=1).mean()),
        }
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("group")
    table["ci_low"], table["ci_high"] = normal_interval(table["rank_ic_mean"], table["rank_ic_se"])
    return table.sort_values("rank_ic_mean", ascending=False, kind="stable")


def _grouped_pearson(frame: pd.DataFrame, keys: list) -> pd.Series:
    """Pearson correlation of ``frame``'s ``score`` and ``label`` within each group of ``keys`` (NaN with
    fewer than 2 rows or a constant side): the grouped form of :func:`_daily_pearson`."""
    grouped = frame.groupby(keys, observed=True)
    centred = frame - grouped.transform("mean")
    sums = (
        pd.DataFrame(
            {"xy": centred["score"] * centred["label"], "xx": centred["score"] ** 2, "yy": centred["label"] ** 2}
        )
        .groupby(keys, observed=True)
        .sum()
    )
    constant = (grouped.max() == grouped.min()).any(axis=1) | (grouped.size() < 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        ic = sums["xy"] / np.sqrt(sums["xx"] * sums["yy"])
    ic[constant.to_numpy()] = np.nan
    return ic


# --------------------------------------------------------------------------------------------------
# The book: costs, holdings, blocked trades, exposures against the universe

#: The industry bucket of a holding that has no score on the rebalance's decision day (it left the universe
#: and could not be sold).
NOT_SCORED = "(not scored)"


def returns_before_costs(returns: pd.Series, periods: pd.DataFrame) -> pd.Series:
    """The daily returns of the same book without its trading costs: on each rebalance's execution day the
    cost paid at the open (``cost``, a fraction of the pre-trade book, ``PortfolioResult.periods``) is given
    back, ``(1 + r) / (1 - cost) - 1``; the other days are unchanged (the book holds the same weights).

    >>> days = pd.bdate_range("2024-01-01", periods=3, name="date")
    >>> periods = pd.DataFrame({"execution_date": [days[0]], "cost": [0.01]})
    >>> returns_before_costs(pd.Series([-0.01, 0.02, 0.0], index=days), periods).round(6).tolist()
    [0.0, 0.02, 0.0]
    """
    missing = {"execution_date", "cost"} - set(getattr(periods, "columns", []))
    if missing:
        raise DataContractError(
            f"returns_before_costs needs the rebalance table (PortfolioResult.periods, data/periods.csv) with "
            f"columns execution_date and cost; missing {sorted(missing)}."
        )
    cost = pd.Series(periods["cost"].to_numpy(np.float64), index=pd.DatetimeIndex(periods["execution_date"]))
    cost = cost.groupby(level=0).sum().reindex(returns.index, fill_value=0.0)
    return ((1.0 + returns) / (1.0 - cost) - 1.0).rename(returns.name)


def holdings_count(positions: pd.DataFrame) -> pd.Series:
    """Names held on each return day (``PortfolioResult.positions``: columns ``date, code, weight``)."""
    held = positions[positions["weight"] > 0]
    return held.groupby("date").size().rename("holdings")


def blocked_by_rebalance(blocked: pd.DataFrame, decision_dates: pd.Index) -> pd.DataFrame:
    """Names that could not be traded as wished at each rebalance, by reason (``PortfolioResult.blocked``:
    ``limit_up``, ``limit_down``, ``suspended``); one row per decision date, 0 where none was blocked."""
    reasons = ["limit_up", "limit_down", "suspended"]
    counts = pd.crosstab(blocked["decision_date"], blocked["reason"]) if len(blocked) else pd.DataFrame()
    counts = counts.reindex(index=pd.DatetimeIndex(decision_dates, name="decision_date"), fill_value=0)
    return counts.reindex(columns=reasons + sorted(set(counts.columns) - set(reasons)), fill_value=0).astype(int)


def _book_at_rebalances(positions: pd.DataFrame, periods: pd.DataFrame) -> pd.DataFrame:
    """The post-trade book of each rebalance (its positions on the execution day), with the decision date:
    columns ``decision_date, code, weight``."""
    execution = pd.Series(periods.index, index=pd.DatetimeIndex(periods["execution_date"]), name="decision_date")
    book = positions[positions["date"].isin(execution.index) & (positions["weight"] > 0)]
    return pd.DataFrame(
        {
            "decision_date": execution.reindex(book["date"]).to_numpy(),
            "code": book["code"].to_numpy(),
            "weight": book["weight"].to_numpy(np.float64),
        }
    )


def industry_exposure(positions: pd.DataFrame, periods: pd.DataFrame, industry: pd.Series) -> pd.DataFrame:
    """The book's weight in each industry minus the universe's at every rebalance.

    Parameters
    ----------
    positions, periods : ``PortfolioResult.positions`` and ``.periods`` (the post-trade book of each
        rebalance is its positions on the execution day).
    industry : Series indexed by (date, code) over the scored names (the universe of each decision day).

    Returns
    -------
    DataFrame decision date x industry: book weight (a fraction of the book) minus the share of the day's
    scored names in the industry; a holding without a score that day counts under :data:`NOT_SCORED`; an
    industry neither the universe nor the book held at any rebalance has no column.
    """
    book = _book_at_rebalances(positions, periods)
    keys = pd.MultiIndex.from_arrays([pd.DatetimeIndex(book["decision_date"]), book["code"]])
    held = industry.reindex(keys).astype(object).fillna(NOT_SCORED).to_numpy()
    weights = pd.Series(book["weight"].to_numpy(), index=[book["decision_date"], held]).groupby(level=[0, 1]).sum()
    universe = industry.groupby(level=0).value_counts(normalize=True)
    universe = universe[universe.index.get_level_values(0).isin(periods.index)]
    weights.index.names = universe.index.names = ["decision_date", "industry"]
    active = weights.sub(universe.astype(np.float64), fill_value=0.0).unstack(fill_value=0.0)
    active = active.reindex(pd.DatetimeIndex(periods.index, name="decision_date"), fill_value=0.0)
    held = {*weights[weights > 0].index.get_level_values(1), *universe[universe > 0].index.get_level_values(1)}
    active = active.loc[:, [c for c in active.columns if c in held]]  # never in the universe nor the book: out
    active.columns = active.columns.astype(str)
    return active


def size_exposure(positions: pd.DataFrame, periods: pd.DataFrame, market_cap: pd.Series) -> pd.Series:
    """The book's size exposure at every rebalance: the weighted mean over its names of the cross-sectional
    z-score of log market cap among the day's scored names (mean 0, standard deviation 1 over the universe,
    so the universe's own exposure is 0; a holding without a cap that day is left out).

    Returns
    -------
    Series indexed by decision date: > 0 the book leans to large caps, < 0 to small caps.
    """
    log_cap = np.log(market_cap.where(market_cap > 0))
    by_day = log_cap.groupby(level=0)
    z = (log_cap - by_day.transform("mean")) / by_day.transform("std", ddof=0)
    book = _book_at_rebalances(positions, periods)
    keys = pd.MultiIndex.from_arrays([pd.DatetimeIndex(book["decision_date"]), book["code"]])
    frame = pd.DataFrame({"w": book["weight"].to_numpy(), "z": z.reindex(keys).to_numpy()}, index=keys).dropna()
    exposure = (frame["w"] * frame["z"]).groupby(level=0).sum() / frame["w"].groupby(level=0).sum()
    return exposure.reindex(pd.DatetimeIndex(periods.index, name="decision_date")).rename("size_exposure")


@dataclass(frozen=True)
class BookAnalysis:
    """The numbers of a run's portfolio page (:func:`book_analysis`).

    Attributes
    ----------
    periods : the rebalance table (``PortfolioResult.periods``, the run's ``data/periods.csv``).
    rebalance_stats : DataFrame: ``turnover``, ``cost``, ``benchmark_turnover``, ``benchmark_cost`` (rows) x
        ``mean``, ``median``, ``max`` over the rebalances.
    wealth : DataFrame by date, columns ``strategy`` (after costs), ``strategy_before_costs``
        (:func:`returns_before_costs`) and ``equal_weight`` (after costs), compounded from 1.
    holdings : Series by return day, names held (:func:`holdings_count`).
    blocked : DataFrame by decision date, blocked names by reason (:func:`blocked_by_rebalance`).
    blocked_days : bool Series by date, the book was not the one chosen (``PortfolioResult.blocked_days``).
    industry : decision date x industry active weights (:func:`industry_exposure`); None without industries.
    industry_mean : the mean of ``industry`` over rebalances, by industry, lowest first; None without industries.
    size : Series by decision date (:func:`size_exposure`); None without market caps.
    summary : Series of ``rebalances``, ``return_days``, ``ann_return`` (after costs),
        ``ann_return_before_costs``, ``cost_drag`` (their difference), ``holdings_mean``,
        ``rebalances_blocked``, ``days_blocked`` and ``size_mean`` (NaN without caps).
    """

    periods: pd.DataFrame
    rebalance_stats: pd.DataFrame
    wealth: pd.DataFrame
    holdings: pd.Series
    blocked: pd.DataFrame
    blocked_days: pd.Series
    industry: pd.DataFrame | None
    industry_mean: pd.Series | None
    size: pd.Series | None
    summary: pd.Series


def book_analysis(portfolio: PortfolioResult, forward: pd.DataFrame | None = None) -> BookAnalysis:
    """What the top-k book did (the portfolio page's numbers).

    Parameters
    ----------
    portfolio : the backtest's :class:`backtest.portfolio.PortfolioResult`.
    forward : the scored rows with ``industry`` and ``market_cap`` (``BacktestResult.forward_returns``), for
        the exposures against the universe; None or without a column: that exposure is None.
    """
    p = portfolio
    gross = returns_before_costs(p.returns, p.periods)
    wealth = (
        pd.DataFrame({"strategy": p.returns, "strategy_before_costs": gross, "equal_weight": p.benchmark_returns})
        .add(1.0)
        .cumprod()
    )
    known = set() if forward is None else {c for c in forward.columns if forward[c].notna().any()}
    industry = industry_exposure(p.positions, p.periods, forward["industry"]) if "industry" in known else None
    size = size_exposure(p.positions, p.periods, forward["market_cap"]) if "market_cap" in known else None
    holdings = holdings_count(p.positions).reindex(p.returns.index, fill_value=0)
    blocked = blocked_by_rebalance(p.blocked, p.periods.index)
    after, before = ann_return(p.returns), ann_return(gross)
    summary = {
        "rebalances": float(len(p.periods)),
        "return_days": float(len(p.returns)),
        "ann_return": after,
        "ann_return_before_costs": before,
        "cost_drag": before - after,
        "holdings_mean": float(holdings.mean()),
        "rebalances_blocked": float((blocked.sum(axis=1) > 0).sum()),
        "days_blocked": float(p.blocked_days.sum()),
        "size_mean": float(size.mean()) if size is not None else float("nan"),
    }
    columns = ["turnover", "cost", "benchmark_turnover", "benchmark_cost"]
    return BookAnalysis(
        periods=p.periods,
        rebalance_stats=p.periods[columns].astype(np.float64).agg(["mean", "median", "max"]).T,
        wealth=wealth,
        holdings=holdings,
        blocked=blocked,
        blocked_days=p.blocked_days,
        industry=industry,
        industry_mean=industry.mean().sort_values(kind="stable") if industry is not None else None,
        size=size,
        summary=pd.Series(summary, name="book"),
    )
