"""Statistics of daily return series: how sure a backtest's numbers are, and how much choosing the best
of several tried configurations overstates it.

- the return-series contract shared with :mod:`backtest.metrics`: :func:`returns_values` checks a series,
  :func:`annualised_sharpe` is the Sharpe ratio (``mean / std(ddof=1) * sqrt(252)``, risk-free 0);
- the probabilistic and deflated Sharpe ratio (:func:`psr`, :func:`dsr`, :func:`expected_max_sharpe`;
  Bailey & Lopez de Prado 2012, 2014);
- the stationary bootstrap (:func:`stationary_bootstrap_indices`; Politis & Romano 1994), the Sharpe
  ratio's interval (:func:`sharpe_ci`) and the paired Sharpe difference of two strategies over the same
  days (:func:`paired_sharpe_difference`);
- the Newey-West standard error of a mean of overlapping-label values (:func:`hac_standard_error`) and the
  normal interval it gives the mean (:func:`normal_interval`);
- the paired difference of two daily series over their common days (:func:`paired_mean_difference`: the
  daily rank IC or NDCG of a trial and its baseline), its p-value, Holm's step-down adjustment over a
  family of comparisons (:func:`holm_adjust`) and the power of a comparison (:func:`minimum_detectable_difference`,
  :func:`days_to_resolve`);
- the probability of backtest overfitting by combinatorially symmetric cross-validation
  (:func:`pbo_cscv`, :class:`PBOResult`; Bailey, Borwein, Lopez de Prado & Zhu 2015).

Conventions: simple daily returns indexed by date, no NaN, 252 periods per year, risk-free rate 0 (those
of :mod:`backtest.metrics`, which computes a run's headline metrics with these functions). Pure functions
of numpy / pandas objects; a generator is always passed in (``np.random.default_rng(seed)``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from backtest.errors import DataContractError, preview

PERIODS_PER_YEAR = 252
EULER_GAMMA = 0.5772156649015329
#: Mean block length (trading days) of the stationary bootstrap of the Sharpe ratio.
DEFAULT_BLOCK_LENGTH = 10

#: Most CSCV combinations :func:`pbo_cscv` computes (``n_blocks`` up to 22: C(22, 11) = 705,432).
MAX_COMBINATIONS = 1_000_000

#: Fewest trading days per CSCV block (:func:`cscv_blocks`): about a month; shorter blocks cut the period
#: into pieces too small to hold a regime.
MIN_BLOCK_DAYS = 20


# --------------------------------------------------------------------------------------------------
# The return-series contract


def returns_values(returns: pd.Series, name: str = "returns") -> np.ndarray:
    """The values of a daily return series, checked: float64 (n_days,).

    Raises ``DataContractError`` for anything but a Series, for NaN / inf values (fill days without a
    position with 0) and for returns below -100% (simple returns are expected, 0.01 = 1%).
    """
    if not isinstance(returns, pd.Series):
        raise DataContractError(
            f"{name} must be a pandas Series of daily returns indexed by date; received {type(returns).__name__}."
        )
    values = returns.to_numpy(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise DataContractError(
            f"{name} has {int(bad.sum())} NaN/inf values (e.g. on {preview(returns.index[bad], 3)}); a "
            "return series must be complete. Fill days without a position with 0 before computing metrics."
        )
    if (values < -1).any():
        raise DataContractError(f"{name} has returns below -100%; expected simple returns (0.01 = 1%).")
    return values


def annualised_sharpe(values: np.ndarray, periods_per_year: int = PERIODS_PER_YEAR) -> float:
    """``mean / std(ddof=1) * sqrt(periods_per_year)`` of checked values (:func:`returns_values`); NaN with
    fewer than 2 values or zero volatility."""
    if len(values) < 2:
        return float("nan")
    std = values.std(ddof=1)
    if not std > 0:
        return float("nan")
    return float(values.mean() / std * np.sqrt(periods_per_year))


# --------------------------------------------------------------------------------------------------
# Probabilistic and deflated Sharpe ratio (Bailey & Lopez de Prado)


def psr(returns: pd.Series, sharpe_benchmark: float = 0.0) -> float:
    """Probabilistic Sharpe ratio: the probability that the true Sharpe exceeds ``sharpe_benchmark``.

    ``PSR = Phi((SR - SR*) * sqrt(n - 1) / sqrt(1 - skew * SR + (kurt - 1) / 4 * SR^2))`` with the
    per-period (not annualised) ``SR = mean / std(ddof=1)``, ``skew`` and ``kurt`` (raw, 3 for a
    normal) the bias-corrected sample moments of pandas (Bailey & Lopez de Prado 2012). With
    ``sharpe_benchmark=0`` it equals ``quantstats.stats.probabilistic_sharpe_ratio``.

    Parameters
    ----------
    returns : Series of daily returns indexed by date
    sharpe_benchmark : float
        ``SR*``, per period (divide an annualised value by ``sqrt(252)``).
    """
    values = returns_values(returns)
    if len(values) < 4:
        return float("nan")
    std = values.std(ddof=1)
    if not std > 0:
        return float("nan")
    sr = values.mean() / std
    series = pd.Series(values)
    skew = float(series.skew())
    kurt = float(series.kurt()) + 3.0
    variance = 1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr**2
    if not variance > 0:
        return float("nan")
    return float(norm.cdf((sr - sharpe_benchmark) * np.sqrt(len(values) - 1) / np.sqrt(variance)))


def expected_max_sharpe(n_trials: int, trial_sharpe_var: float) -> float:
    """Expected maximum of ``n_trials`` Sharpe ratios with zero mean and variance ``trial_sharpe_var``.

    ``sqrt(V) * ((1 - g) * Phi^-1(1 - 1/N) + g * Phi^-1(1 - 1/(N e)))`` with ``g`` the Euler-Mascheroni
    constant; defined as 0 for ``N = 1`` or ``V = 0`` (one trial selects nothing). Units are those of
    ``trial_sharpe_var`` (its square root).
    """
    if n_trials < 1 or trial_sharpe_var < 0:
        raise DataContractError(
            f"expected_max_sharpe needs n_trials >= 1 and trial_sharpe_var >= 0; received "
            f"n_trials={n_trials}, trial_sharpe_var={trial_sharpe_var}."
        )
    if n_trials == 1 or trial_sharpe_var == 0:
        return 0.0
    quantiles = (1 - EULER_GAMMA) * norm.ppf(1 - 1 / n_trials) + EULER_GAMMA * norm.ppf(1 - 1 / (n_trials * np.e))
    return float(np.sqrt(trial_sharpe_var) * quantiles)


def dsr(
    returns: pd.Series,
    n_trials: int = 1,
    trial_sharpe_var: float = 0.0,
    periods_per_year: int = PERIODS_PER_YEAR,
) -> float:
    """Deflated Sharpe ratio: PSR against the Sharpe expected from the best of ``n_trials`` tries.

    ``DSR = psr(returns, SR0)`` with ``SR0 = expected_max_sharpe(n_trials, trial_sharpe_var /
    periods_per_year)`` (Bailey & Lopez de Prado 2014).

    Parameters
    ----------
    returns : Series of daily returns indexed by date, of the selected trial
    n_trials : int
        Number of (independent) configurations tried, the selected one included.
    trial_sharpe_var : float
        Variance across the trials of their **annualised** Sharpe ratios (the ``sharpe`` metric of
        each run, ``np.var(sharpes, ddof=1)``); converted to per-period units internally.

    Convention: ``n_trials=1`` (or zero variance) gives ``SR0 = 0``, i.e. ``dsr == psr`` vs 0.
    """
    sr0 = expected_max_sharpe(n_trials, trial_sharpe_var / periods_per_year)
    return psr(returns, sharpe_benchmark=sr0)


# --------------------------------------------------------------------------------------------------
# Stationary bootstrap: the Sharpe ratio's interval and the paired Sharpe difference


def stationary_bootstrap_indices(
    n: int, n_boot: int, rng: np.random.Generator, block_length: float = DEFAULT_BLOCK_LENGTH
) -> np.ndarray:
    """Index matrix (n_boot, n) of the stationary bootstrap (Politis & Romano 1994).

    Each resample is a chain of blocks of consecutive days (wrapping around the end) with random
    starts and geometric lengths of mean ``block_length``: the blocks keep the short-range
    autocorrelation of overlapping holding periods that an i.i.d. bootstrap would destroy.
    """
    if n < 1 or n_boot < 1 or block_length < 1:
        raise DataContractError(
            f"bootstrap needs n >= 1, n_boot >= 1, block_length >= 1; got {n}, {n_boot}, {block_length}."
        )
    new_block = rng.random((n_boot, n)) < 1.0 / block_length
    new_block[:, 0] = True
    starts = rng.integers(0, n, size=(n_boot, n))
    position = np.arange(n)[None, :]
    block_start = np.maximum.accumulate(np.where(new_block, position, 0), axis=1)  # (n_boot, n)
    start_value = np.take_along_axis(starts, block_start, axis=1)
    return (start_value + position - block_start) % n


def sharpe_ci(
    returns: pd.Series,
    rng: np.random.Generator,
    n_boot: int = 1000,
    block_length: float = DEFAULT_BLOCK_LENGTH,
    confidence: float = 0.95,
    periods_per_year: int = PERIODS_PER_YEAR,
) -> tuple[float, float]:
    """Percentile confidence interval of the annualised Sharpe ratio by stationary block bootstrap.

    Parameters
    ----------
    returns : Series of daily returns indexed by date
    rng : numpy Generator
        Pass a seeded generator (``np.random.default_rng(seed)``) for a reproducible interval.
    n_boot : int
        Number of resamples.
    block_length : float
        Mean block length in trading days (default 10: two weeks, longer than the 5-day holding
        period whose overlap makes daily returns autocorrelated).
    confidence : float
        Two-sided coverage (0.95 gives the 2.5% and 97.5% percentiles).

    Returns
    -------
    (low, high) : floats; NaN for fewer than 2 returns.
    """
    values = returns_values(returns)
    if len(values) < 2:
        return float("nan"), float("nan")
    idx = stationary_bootstrap_indices(len(values), n_boot, rng, block_length)
    samples = values[idx]  # (n_boot, n)
    std = samples.std(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(std > 0, samples.mean(axis=1) / std * np.sqrt(periods_per_year), np.nan)
    if not np.isfinite(ratios).any():  # every resample is flat (e.g. a book in cash throughout)
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.nanpercentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_sharpe_difference(
    returns: pd.Series,
    baseline: pd.Series,
    rng: np.random.Generator,
    n_boot: int = 1000,
    block_length: float = DEFAULT_BLOCK_LENGTH,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Annualised ``sharpe(returns) - sharpe(baseline)`` and its paired bootstrap percentile interval.

    Every resample draws one set of day indices (:func:`stationary_bootstrap_indices`,
    blocks of mean ``block_length`` days) and applies it to both series, so the noise they share (the
    market of the same days) cancels out of the difference: the interval is far narrower than the two
    Sharpe intervals side by side.

    Parameters
    ----------
    returns, baseline : Series of daily returns indexed by the same dates
        Different dates are refused (a difference of Sharpe ratios over different periods measures the
        periods, not the strategies); align them first: ``returns.align(baseline, join="inner")``.
    rng : seeded numpy Generator (reproducible interval).
    n_boot, block_length, confidence : as :func:`sharpe_ci`.

    Returns
    -------
    (difference, low, high) : floats; NaN where a Sharpe ratio is undefined (fewer than 2 days, flat).
    Resamples in which either series is flat are left out of the percentiles.

    Examples
    --------
    >>> days = pd.bdate_range("2024-01-01", periods=4)
    >>> a = pd.Series([0.01, -0.01, 0.02, 0.0], index=days)
    >>> paired_sharpe_difference(a, a, np.random.default_rng(0))
    (0.0, 0.0, 0.0)
    """
    for name, series in (("returns", returns), ("baseline", baseline)):
        if not isinstance(series, pd.Series):
            raise DataContractError(
                f"paired Sharpe difference: {name} must be a Series of daily returns indexed by date; received "
                f"{type(series).__name__}."
            )
    if not returns.index.equals(baseline.index):
        only_returns = returns.index.difference(baseline.index)
        only_baseline = baseline.index.difference(returns.index)
        raise DataContractError(
            "paired Sharpe difference: returns and baseline must cover the same dates in the same order; dates "
            f"only in returns: {len(only_returns)} ({preview(only_returns, 3)}), only in baseline: "
            f"{len(only_baseline)} ({preview(only_baseline, 3)}). Fix: returns.align(baseline, join='inner')."
        )
    if not 0.0 < confidence < 1.0:
        raise DataContractError(f"paired Sharpe difference: confidence must be in (0, 1); received {confidence}.")
    # the Sharpe ratios, each series checked (as metrics.sharpe does)
    difference = annualised_sharpe(returns_values(returns)) - annualised_sharpe(returns_values(baseline))
    nan = float("nan")
    if not np.isfinite(difference):
        return nan, nan, nan
    idx = stationary_bootstrap_indices(len(returns), n_boot, rng, block_length)
    diffs = _resampled_sharpe(returns.to_numpy(np.float64)[idx]) - _resampled_sharpe(baseline.to_numpy(np.float64)[idx])
    if not np.isfinite(diffs).any():
        return float(difference), nan, nan
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.nanpercentile(diffs, [tail, 100.0 - tail])
    return float(difference), float(low), float(high)


def _resampled_sharpe(samples: np.ndarray) -> np.ndarray:
    """Annualised Sharpe of each row of (n_boot, n) resamples; NaN for a flat row."""
    std = samples.std(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(std > 0, samples.mean(axis=1) / std * np.sqrt(PERIODS_PER_YEAR), np.nan)


# --------------------------------------------------------------------------------------------------
# Standard error of a serially correlated mean


def hac_standard_error(values: pd.Series | np.ndarray, lags: int) -> float:
    """Standard error of the mean of a serially correlated series (Newey-West, Bartlett weights).

    A daily rank IC against a label of horizon h overlaps its neighbours' label windows for h - 1 days,
    so ``lags = h - 1`` (4 for the default 5-day label); the plain ``std / sqrt(n)`` would understate the
    error about twofold. NaNs are dropped; NaN with fewer than ``lags + 2`` values.

    >>> round(hac_standard_error(np.array([1.0, -1.0] * 50), 0), 4)
    0.1
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < lags + 2:
        return float("nan")
    d = x - x.mean()
    var = float(d @ d) / n
    for lag in range(1, lags + 1):
        var += 2.0 * (1.0 - lag / (lags + 1)) * float(d[lag:] @ d[:-lag]) / n
    return float(np.sqrt(max(var, 0.0) / n))


# --------------------------------------------------------------------------------------------------
# Paired comparisons of daily series, their family-wise error and their power

#: The statistics a study comparison can rest its verdict on (``study.primary``): the paired daily rank IC
#: difference, the paired daily NDCG difference (at the portfolio depth), the paired Sharpe difference.
COMPARISON_STATISTICS = ("rank_ic", "ndcg", "sharpe")
#: Two-sided level and power of a comparison's verdict and of its minimum detectable difference.
ALPHA = 0.05
POWER = 0.80


@dataclass(frozen=True)
class PairedDifference:
    """The paired difference of two daily series over their common days (:func:`paired_mean_difference`).

    Attributes
    ----------
    diff : ``mean(series - baseline)`` over the common days.
    se : Newey-West standard error of that mean (:func:`hac_standard_error` of the daily differences).
    ci_low, ci_high : paired stationary-bootstrap percentile interval (the same resampled days for both).
    z : ``diff / se``.
    p_value : two-sided normal p-value of ``z``.
    n_days : the common days (both series defined).
    lags : the Newey-West lags used.
    """

    diff: float
    se: float
    ci_low: float
    ci_high: float
    z: float
    p_value: float
    n_days: int
    lags: int


def paired_mean_difference(
    series: pd.Series,
    baseline: pd.Series,
    lags: int,
    rng: np.random.Generator,
    n_boot: int = 1000,
    block_length: float = DEFAULT_BLOCK_LENGTH,
    confidence: float = 1.0 - ALPHA,
) -> PairedDifference:
    """Paired difference of the means of two daily series (a trial's daily rank IC and its baseline's).

    The days are those both series define (the common scored days; NaN days of either are left out).
    The standard error is Newey-West's over the daily differences with ``lags`` lags: a daily rank IC
    against a label of ``h`` days overlaps its neighbours' label windows, so ``lags = h - 1``, the rule
    the engine's own ``rank_ic_se`` uses (the run records it as the param ``ic_lags``). The interval is a
    paired stationary bootstrap: every resample draws one set of days
    (:func:`stationary_bootstrap_indices`) and applies it to both series, so the noise of the days they
    share cancels out of the difference.

    Parameters
    ----------
    series, baseline : Series indexed by date (the daily rank IC or NDCG of two runs).
    lags : int >= 0, Newey-West lags.
    rng : seeded numpy Generator (reproducible interval).
    n_boot, block_length, confidence : as :func:`sharpe_ci`.

    Returns
    -------
    PairedDifference; every number NaN with fewer than ``lags + 2`` common days.

    Examples
    --------
    >>> days = pd.bdate_range("2024-01-01", periods=6)
    >>> a = pd.Series([0.1, 0.0, 0.2, np.nan, 0.1, 0.3], index=days)
    >>> b = pd.Series([0.0, 0.0, 0.1, 0.2, 0.1, 0.1], index=days)
    >>> d = paired_mean_difference(a, b, 0, np.random.default_rng(0))
    >>> d.n_days, round(d.diff, 4), round(d.se, 4)  # differences 0.1, 0, 0.1, 0, 0.2 on 5 common days
    (5, 0.08, 0.0335)
    """
    for name, value in (("series", series), ("baseline", baseline)):
        if not isinstance(value, pd.Series):
            raise DataContractError(
                f"paired difference: {name} must be a Series indexed by date; received {type(value).__name__}."
            )
    if isinstance(lags, bool) or not isinstance(lags, (int, np.integer)) or lags < 0:
        raise DataContractError(
            f"paired difference: lags must be an integer >= 0 (the label horizon less one day); received {lags!r}."
        )
    if not 0.0 < confidence < 1.0:
        raise DataContractError(f"paired difference: confidence must be in (0, 1); received {confidence}.")
    both = pd.concat({"a": series, "b": baseline}, axis=1, join="inner").astype(np.float64)
    both = both[np.isfinite(both.to_numpy()).all(axis=1)]
    diffs = (both["a"] - both["b"]).to_numpy()
    n, nan = len(diffs), float("nan")
    se = hac_standard_error(diffs, int(lags))
    if not np.isfinite(se):
        return PairedDifference(nan, nan, nan, nan, nan, nan, n, int(lags))
    diff = float(diffs.mean())
    idx = stationary_bootstrap_indices(n, n_boot, rng, block_length)
    resampled = both["a"].to_numpy()[idx].mean(axis=1) - both["b"].to_numpy()[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(resampled, [tail, 100.0 - tail])
    z = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
    return PairedDifference(diff, se, float(low), float(high), float(z), two_sided_p(z), n, int(lags))


def two_sided_p(z: float) -> float:
    """Two-sided normal p-value of a z statistic: ``2 * (1 - Phi(|z|))`` (NaN for NaN).

    >>> round(two_sided_p(1.959964), 4)
    0.05
    """
    return float("nan") if np.isnan(z) else float(2.0 * norm.sf(abs(z)))


def interval_standard_error(low: float, high: float, confidence: float = 1.0 - ALPHA) -> float:
    """The standard error a two-sided interval implies under a normal approximation:
    ``(high - low) / (2 * z_{(1 + confidence) / 2})`` (how a bootstrap interval, such as the paired Sharpe
    difference's, gets a z statistic and a p-value).

    >>> round(interval_standard_error(-1.959964, 1.959964), 6)
    1.0
    """
    return float((high - low) / (2.0 * norm.ppf((1.0 + confidence) / 2.0)))


def normal_interval(
    mean: float | np.ndarray, se: float | np.ndarray, confidence: float = 1.0 - ALPHA
) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided normal interval ``mean -/+ z_{(1 + confidence) / 2} * se`` (elementwise): the interval a
    Newey-West standard error gives a mean.

    >>> low, high = normal_interval(0.05, 0.01)
    >>> round(float(low), 4), round(float(high), 4)
    (0.0304, 0.0696)
    """
    z = norm.ppf((1.0 + confidence) / 2.0)
    mean, se = np.asarray(mean, dtype=np.float64), np.asarray(se, dtype=np.float64)
    return mean - z * se, mean + z * se


def holm_adjust(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the family-wise error of several comparisons held at the level.

    Sort the ``m`` p-values ascending, ``p_(1) <= ... <= p_(m)``; the adjusted ``p~_(i) = max_{j <= i}
    min(1, (m - j + 1) p_(j))`` (Holm 1979). A comparison whose adjusted p-value is below the level ``alpha``
    is rejected at family-wise error ``alpha`` whatever the dependence between the comparisons (the trials of
    a study share their baseline). NaN p-values are left out of the family and stay NaN.

    >>> holm_adjust([0.01, 0.04, 0.03]).round(4).tolist()
    [0.03, 0.06, 0.06]
    >>> holm_adjust([0.2, float("nan")]).tolist()
    [0.2, nan]
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def _power_quantiles(alpha: float, power: float) -> float:
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise DataContractError(f"power: alpha and power must be in (0, 1); received {alpha}, {power}.")
    return float(norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power))


def minimum_detectable_difference(se: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference a two-sided test at level ``alpha`` detects with probability ``power``:
    ``(z_{1 - alpha/2} + z_{power}) * se`` (2.80 standard errors at 5% and 80%).

    >>> round(minimum_detectable_difference(0.01), 5)
    0.02802
    """
    return _power_quantiles(alpha, power) * float(se)


def seed_standard_error(sd_a: float, n_a: float, sd_b: float = float("nan"), n_b: float = 0) -> float:
    """The standard error that the model seeds' own disagreement puts on a difference of two seed means:
    ``sqrt(sd_a^2 / n_a + sd_b^2 / n_b)``, over the sides with a finite spread (``ddof=1`` standard
    deviations of their seeds' values); NaN when neither has one. A difference counts only beyond both
    this and the days' sampling error (docs/tracking.md, "Seed replicates").

    >>> round(seed_standard_error(0.004, 3, 0.003, 3), 5)
    0.00289
    >>> seed_standard_error(float("nan"), 1)
    nan
    """
    parts = [sd**2 / n for sd, n in ((sd_a, n_a), (sd_b, n_b)) if n > 0 and np.isfinite(sd)]
    return float(np.sqrt(sum(parts))) if parts else float("nan")


def days_to_resolve(diff: float, se: float, n_days: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Test days at which a difference of ``diff`` would be detected with probability ``power``.

    ``ceil(n_days * (minimum_detectable_difference(se) / |diff|)^2)``: the standard error shrinks as
    ``1 / sqrt(days)``, so the days grow with the square of the ratio of the detectable difference to the
    observed one. ``inf`` for a zero difference, NaN for an undefined one.

    >>> days_to_resolve(0.01, 0.01, 100)  # 100 * 2.8016^2 = 784.9
    785.0
    """
    if not (np.isfinite(diff) and np.isfinite(se)) or n_days < 1:
        return float("nan")
    if diff == 0:
        return float("inf")
    return float(math.ceil(n_days * (minimum_detectable_difference(se, alpha, power) / abs(diff)) ** 2))


# --------------------------------------------------------------------------------------------------
# Probability of backtest overfitting (CSCV)


@dataclass(frozen=True)
class PBOResult:
    """Outcome of combinatorially symmetric cross-validation (:func:`pbo_cscv`).

    The arrays hold one value per combination, in the order of
    ``itertools.combinations(range(n_blocks), n_blocks // 2)`` (the in-sample blocks).

    Attributes
    ----------
    pbo : fraction of combinations whose logit is <= 0 (the in-sample best trial at or below the
        out-of-sample median).
    logits : ``lambda = ln(omega / (1 - omega))``, float64 (n_combinations,).
    n_blocks : ``S``, the number of contiguous blocks the period was cut into.
    n_combinations : ``C(S, S/2)``.
    best_is_oos_rank : ``omega``, the relative out-of-sample rank (in (0, 1)) of the in-sample best.
    selected : position (column) of the in-sample best trial, int64 (n_combinations,).
    is_performance, oos_performance : the metric of the in-sample best trial in and out of sample
        (per-period Sharpe ratio by default, not annualised).
    degradation_slope, degradation_intercept : least-squares line ``oos = intercept + slope * is``
        through those pairs (NaN when the in-sample values do not vary). A slope well below 1 (often
        negative) means in-sample excellence does not carry over.
    prob_oos_loss : fraction of combinations whose in-sample best has a negative out-of-sample metric.
    trials : trial names (the columns of the returns).
    block_sizes : rows of each block, in time order.
    """

    pbo: float
    logits: np.ndarray
    n_blocks: int
    n_combinations: int
    best_is_oos_rank: np.ndarray
    selected: np.ndarray
    is_performance: np.ndarray
    oos_performance: np.ndarray
    degradation_slope: float
    degradation_intercept: float
    prob_oos_loss: float
    trials: tuple[str, ...]
    block_sizes: tuple[int, ...]

    def selection_counts(self) -> pd.Series:
        """How many combinations picked each trial as the in-sample best (every trial listed)."""
        counts = np.bincount(self.selected, minlength=len(self.trials))
        return pd.Series(counts, index=pd.Index(self.trials, name="trial"), name="selected_in_sample")

    def selection_table(self) -> pd.DataFrame:
        """One row per trial: ``trial``, ``selected_in_sample`` (combinations that picked it as the
        in-sample best), ``share`` of the combinations, and ``pbo_when_selected`` (the fraction of those
        whose logit is <= 0; NaN for a trial never selected)."""
        counts = self.selection_counts()
        return pd.DataFrame(
            {
                "trial": counts.index,
                "selected_in_sample": counts.to_numpy(),
                "share": counts.to_numpy() / self.n_combinations,
                "pbo_when_selected": [
                    float(np.mean(self.logits[self.selected == i] <= 0)) if counts.iloc[i] else np.nan
                    for i in range(len(counts))
                ],
            }
        )

    def combinations(self) -> pd.DataFrame:
        """One row per combination: ``is_blocks`` (space-separated block numbers), ``selected`` (trial
        name), ``is_metric``, ``oos_metric``, ``omega`` and ``logit``."""
        half = self.n_blocks // 2
        blocks = [" ".join(map(str, c)) for c in itertools.combinations(range(self.n_blocks), half)]
        frame = pd.DataFrame(
            {
                "is_blocks": blocks,
                "selected": np.asarray(self.trials, dtype=object)[self.selected],
                "is_metric": self.is_performance,
                "oos_metric": self.oos_performance,
                "omega": self.best_is_oos_rank,
                "logit": self.logits,
            }
        )
        frame.index.name = "combination"
        return frame


def check_cscv_blocks(n_blocks: object) -> int:
    """``n_blocks`` as an int, when it is an even integer >= 2 with at most :data:`MAX_COMBINATIONS`
    combinations; else ``DataContractError`` naming the fix."""
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 2 or n_blocks % 2:
        raise DataContractError(
            f"CSCV: n_blocks must be an even integer >= 2 (the period is split into two halves of n_blocks / 2 "
            f"blocks each); received {n_blocks!r}. The paper's default is 16."
        )
    n_combinations = math.comb(int(n_blocks), int(n_blocks) // 2)
    if n_combinations > MAX_COMBINATIONS:
        raise DataContractError(
            f"CSCV: n_blocks={n_blocks} gives {n_combinations:,} combinations, more than the {MAX_COMBINATIONS:,} "
            "computed here; use n_blocks <= 22 (16 is the paper's default)."
        )
    return int(n_blocks)


def _block_bounds(n_rows: int, n_blocks: int) -> np.ndarray:
    """Start row of each block and the end: ``numpy.array_split``'s rule (the first ``n_rows % n_blocks``
    blocks get one row more)."""
    sizes = np.full(n_blocks, n_rows // n_blocks)
    sizes[: n_rows % n_blocks] += 1
    return np.r_[0, np.cumsum(sizes)]


def _combination_matrix(n_blocks: int) -> np.ndarray:
    """0/1 float matrix (C(S, S/2), S): row c marks the in-sample blocks of combination c."""
    half = n_blocks // 2
    chosen = np.fromiter(
        itertools.chain.from_iterable(itertools.combinations(range(n_blocks), half)), dtype=np.int64
    ).reshape(-1, half)
    matrix = np.zeros((len(chosen), n_blocks))
    np.put_along_axis(matrix, chosen, 1.0, axis=1)
    return matrix


def _sharpe_from_sums(total: np.ndarray, centred: np.ndarray, centred_sq: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per-period Sharpe ``mean / std(ddof=1)`` from sums over the rows of each (combination, trial).

    ``total`` sums the raw returns (an all-zero half has mean exactly 0), ``centred`` and ``centred_sq``
    the returns minus their column mean over the whole period and their squares (the variance from
    them loses no precision to a large mean). A half whose variance is zero up to rounding is flat: its
    Sharpe is +inf / -inf by the sign of its mean, 0 for a zero mean.
    """
    n = n[:, None]
    mean = total / n
    var = (centred_sq - centred**2 / n) / (n - 1)
    flat = var <= 1e-12 * centred_sq / n
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = mean / np.sqrt(np.where(flat, 1.0, var))
    return np.where(mean == 0, 0.0, np.where(flat, np.copysign(np.inf, mean), ratio))


def pbo_cscv(
    returns: pd.DataFrame,
    n_blocks: int = 16,
    metric: Callable[[np.ndarray], np.ndarray] | None = None,
) -> PBOResult:
    """Probability of backtest overfitting by combinatorially symmetric cross-validation (CSCV).

    Bailey, Borwein, Lopez de Prado & Zhu (2015), "The probability of backtest overfitting":

    1. ``M`` is the (T days x N trials) matrix of daily returns. Its rows are cut into ``S = n_blocks``
       contiguous blocks of near-equal size: when ``T`` is not a multiple of ``S`` the first ``T mod S``
       blocks get one row more (``numpy.array_split``), so no day is dropped and the two halves of a
       split differ by at most ``S / 2`` rows.
    2. For each of the ``C(S, S/2)`` combinations of ``S/2`` blocks: in-sample (IS) = their rows,
       out-of-sample (OOS) = the other blocks' rows.
    3. The metric of every trial on IS and on OOS (default: per-period Sharpe ``mean / std(ddof=1)``
       per column; annualising would not change a rank). ``n*`` = the IS best (on a tie the first
       column).
    4. ``omega`` = rank of ``n*`` among the N OOS values / (N + 1), rank 1 = worst and N = best, ties
       get their average rank (``scipy.stats.rankdata(method="average")``); ``lambda = ln(omega / (1 -
       omega))``.
    5. ``PBO`` = fraction of combinations with ``lambda <= 0``: the mass of the logit distribution at
       and below 0 (the paper's integral up to 0). ``lambda = 0`` (``n*`` exactly at the OOS median,
       possible for an odd N or with ties) counts as overfit: selecting it did no better than chance.

    PBO near 0: the in-sample winner stays above the median out of sample; near 0.5: choosing by
    in-sample performance is as good as picking at random; above 0.5: the selection prefers trials that
    do worse than the others out of sample (overfitting to noise or to a regime).

    Parameters
    ----------
    returns : DataFrame, dates x trials
        Daily returns of each trial (column) on common dates, no NaN (align the trials on their common
        dates first: ``returns.dropna()``).
    n_blocks : even int >= 2, default 16 (the paper's)
        ``S``. Every split uses half of the rows in sample whatever ``S`` is; ``S`` sets how many distinct
        splits there are (``C(S, S/2)``: 2 for S=2, 70 for 8, 12,870 for 16) and how fine they are. More
        blocks give a smoother PBO estimate but shorter blocks, which interleave IS and OOS so finely that
        both halves sample the same regimes (and daily autocorrelation leaks across block edges): the
        two halves look alike and overfitting to a regime goes unseen. Keep blocks at least about a month
        long (:func:`cscv_blocks` gives the most blocks of :data:`MIN_BLOCK_DAYS` days). At most 22.
    metric : callable, optional
        Performance of every trial on a set of rows: takes a (rows x N) float array and returns N values,
        higher is better; NaN counts as the worst value. Default: per-period Sharpe, vectorised over all
        combinations (sums per block, then a 0/1 combination matrix product); a custom metric is called
        twice per combination.

    Returns
    -------
    PBOResult

    Raises
    ------
    DataContractError : fewer than 2 trials, odd or < 2 ``n_blocks``, fewer rows than blocks (or fewer
        than 4 rows), NaN or infinite returns.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> noise = pd.DataFrame(rng.normal(0.0, 0.01, size=(400, 4)), columns=list("abcd"))
    >>> skilled = noise.assign(a=noise["a"] + 0.01)  # trial a earns 1% a day more
    >>> result = pbo_cscv(skilled, n_blocks=8)
    >>> result.pbo, result.n_combinations, float(result.best_is_oos_rank[0])  # a: OOS best, 4 / 5
    (0.0, 70, 0.8)
    """
    if not isinstance(returns, pd.DataFrame):
        raise DataContractError(
            f"CSCV: returns must be a DataFrame of daily returns, dates x trials; received {type(returns).__name__}."
        )
    n_blocks = check_cscv_blocks(n_blocks)
    n_rows, n_trials = returns.shape
    if n_trials < 2:
        raise DataContractError(
            f"CSCV needs at least 2 trials (columns) to select among; received {n_trials}. The probability of "
            "backtest overfitting is undefined for a single trial."
        )
    if n_rows < max(n_blocks, 4):
        raise DataContractError(
            f"CSCV: {n_rows} rows cannot be cut into {n_blocks} blocks (each block needs a row and each half "
            f"two); use fewer blocks or a longer period."
        )
    values = returns.to_numpy(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        rows = returns.index[bad.any(axis=1)]
        raise DataContractError(
            f"CSCV: returns hold {int(bad.sum())} NaN/inf values on {len(rows)} dates ({preview(rows, 3)}). Align "
            "the trials on their common dates first (returns.dropna()), or fill days without positions with 0."
        )
    bounds = _block_bounds(n_rows, n_blocks)
    combos = _combination_matrix(n_blocks)  # (C, S)
    if metric is None:
        centred = values - values.mean(axis=0)
        block_total = np.add.reduceat(values, bounds[:-1], axis=0)  # (S, N)
        block_centred = np.add.reduceat(centred, bounds[:-1], axis=0)
        block_sq = np.add.reduceat(centred**2, bounds[:-1], axis=0)
        block_rows = np.diff(bounds).astype(np.float64)
        in_total, in_centred, in_sq = combos @ block_total, combos @ block_centred, combos @ block_sq
        in_rows = combos @ block_rows
        is_perf = _sharpe_from_sums(in_total, in_centred, in_sq, in_rows)
        oos_perf = _sharpe_from_sums(
            block_total.sum(axis=0) - in_total,
            block_centred.sum(axis=0) - in_centred,
            block_sq.sum(axis=0) - in_sq,
            n_rows - in_rows,
        )
    else:
        row_block = np.repeat(np.arange(n_blocks), np.diff(bounds))
        is_perf = np.empty((len(combos), n_trials))
        oos_perf = np.empty((len(combos), n_trials))
        for c, chosen in enumerate(combos.astype(bool)):
            in_sample = chosen[row_block]
            for out, rows in ((is_perf, in_sample), (oos_perf, ~in_sample)):
                value = np.asarray(metric(values[rows]), dtype=np.float64)
                if value.shape != (n_trials,):
                    raise DataContractError(
                        f"CSCV: the metric must return one value per trial, shape ({n_trials},); returned "
                        f"shape {value.shape}."
                    )
                out[c] = value
    is_perf = np.where(np.isnan(is_perf), -np.inf, is_perf)
    oos_perf = np.where(np.isnan(oos_perf), -np.inf, oos_perf)

    selected = np.argmax(is_perf, axis=1)
    picked = np.arange(len(combos))
    chosen_oos = oos_perf[picked, selected]
    below = (oos_perf < chosen_oos[:, None]).sum(axis=1)
    tied = (oos_perf == chosen_oos[:, None]).sum(axis=1)  # the selected trial included
    rank = below + (tied + 1) / 2.0  # average rank, 1 = worst
    omega = rank / (n_trials + 1)
    logits = np.log(omega / (1.0 - omega))

    chosen_is = is_perf[picked, selected]
    finite = np.isfinite(chosen_is) & np.isfinite(chosen_oos)
    slope = intercept = float("nan")
    if finite.sum() >= 2 and np.ptp(chosen_is[finite]) > 0:
        slope, intercept = (float(v) for v in np.polyfit(chosen_is[finite], chosen_oos[finite], 1))
    return PBOResult(
        pbo=float(np.mean(logits <= 0.0)),
        logits=logits,
        n_blocks=n_blocks,
        n_combinations=len(combos),
        best_is_oos_rank=omega,
        selected=selected.astype(np.int64),
        is_performance=chosen_is,
        oos_performance=chosen_oos,
        degradation_slope=slope,
        degradation_intercept=intercept,
        prob_oos_loss=float(np.mean(chosen_oos < 0.0)),
        trials=tuple(str(c) for c in returns.columns),
        block_sizes=tuple(int(s) for s in np.diff(bounds)),
    )


def cscv_blocks(n_rows: int, n_blocks: int, min_block_days: int = MIN_BLOCK_DAYS) -> int:
    """Largest even S <= ``n_blocks`` whose shortest block of ``n_rows`` holds ``min_block_days`` days (0 if
    none): the blocks :func:`pbo_cscv` can cut a period of ``n_rows`` days into.

    >>> cscv_blocks(295, 16), cscv_blocks(39, 16)  # 14 blocks of 21 days; 2 blocks would hold 19
    (14, 0)
    """
    for s in range(n_blocks, 1, -2):
        if n_rows // s >= min_block_days:
            return s
    return 0
