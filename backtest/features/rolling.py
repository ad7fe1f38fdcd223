"""Trailing-window operators over the date axis of wide (date x code) matrices.

Every operator takes float64 arrays shaped ``(n_dates, n_codes)`` (row ``t`` = trading day ``t``, column
= one stock), treats each column on its own, and is causal: the value in row ``t`` is a function of rows
``<= t`` only. NaN is a missing observation (a stock not listed yet, a suspended day's volume).

Windows count rows, i.e. trading days of the panel's calendar. A window statistic is computed over the
valid (non-NaN) observations among the last ``window`` rows and is NaN when fewer than ``min_periods``
of them are valid (default: the whole window, as in pandas).

Two implementation rules keep the feature audit exact (``backtest.features.audit``): results never
depend on other columns (so adding or removing stocks cannot change a stock's values by a rounding
error), and every accumulation runs forward in time in a fixed order (so cutting the panel after day D
reproduces the values up to D bit for bit).
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter


def lag(x: np.ndarray, periods: int) -> np.ndarray:
    """The value ``periods`` rows earlier (``x[t - periods]``); NaN for the first rows.

    Only non-negative lags exist here: a negative one would read the future.
    """
    if periods < 0:
        raise ValueError(f"lag: periods must be >= 0 (a negative lag reads the future), got {periods}")
    out = np.full_like(x, np.nan)
    if periods == 0:
        out[:] = x
    elif periods < x.shape[0]:
        out[periods:] = x[:-periods]
    return out


def running_total(x: np.ndarray) -> np.ndarray:
    """Cumulative sum down the rows of each column (``np.cumsum(x, axis=0)``), added row by row.

    A loop over rows with vectorised adds across stocks is 2-3x faster than numpy's strided
    accumulate along axis 0, and adds in the same forward order.
    """
    out = np.empty_like(x)
    if len(x):
        out[0] = x[0]
    for i in range(1, x.shape[0]):
        np.add(out[i - 1], x[i], out=out[i])
    return out


def forward_fill(x: np.ndarray) -> np.ndarray:
    """Carry the last valid value of each column forward over NaNs (leading NaNs stay NaN)."""
    out = x.copy()
    missing = np.isnan(out)
    rows = np.flatnonzero(missing[1:].any(axis=1)) + 1
    for i in rows:
        np.copyto(out[i], out[i - 1], where=missing[i])
    return out


def _finite_and_zeroed(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(valid mask, x with invalid cells set to 0); non-finite values count as missing."""
    valid = np.isfinite(x)
    zeroed = x.copy()
    np.copyto(zeroed, 0.0, where=~valid)
    return valid, zeroed


def _window_count(valid: np.ndarray, window: int) -> np.ndarray:
    """Number of valid rows among the last ``window`` rows, per cell (int32)."""
    n = valid.shape[0]
    if n > 1 and not (valid[:-1] & ~valid[1:]).any():
        # common case (forward-filled prices): each column is valid from its first valid row on
        first = n - np.count_nonzero(valid, axis=0)  # valid rows form a suffix of each column
        return np.clip(np.arange(n, dtype=np.int32)[:, None] - first[None, :].astype(np.int32) + 1, 0, window)
    count = running_total(valid.astype(np.int32))
    out = count.copy()
    out[window:] -= count[:-window]
    return out


def _window_total(zeroed: np.ndarray, window: int) -> np.ndarray:
    total = running_total(zeroed)
    out = np.empty_like(total)
    out[:window] = total[:window]
    np.subtract(total[window:], total[:-window], out=out[window:])
    return out


def rolling_sum(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Sum over the last ``window`` rows of the valid observations (NaN below ``min_periods``)."""
    _check_window(window, min_periods)
    valid, zeroed = _finite_and_zeroed(x)
    out = _window_total(zeroed, window)
    out[_window_count(valid, window) < (window if min_periods is None else min_periods)] = np.nan
    return out


def rolling_mean(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Mean over the last ``window`` rows of the valid observations (NaN below ``min_periods``)."""
    _check_window(window, min_periods)
    valid, zeroed = _finite_and_zeroed(x)
    total = _window_total(zeroed, window)
    count = _window_count(valid, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.divide(total, count, out=total)
    out[count < (window if min_periods is None else min_periods)] = np.nan
    return out


_CHUNK_CELLS = 1 << 16  # rows are processed in blocks of about this many cells (cache-sized)


def _deviation_sum(
    x: np.ndarray,
    center: np.ndarray,
    window: int,
    kind: str,
    y: np.ndarray | None = None,
    center_y: np.ndarray | None = None,
) -> np.ndarray:
    """Sum over the last ``window`` rows of a power of the deviation from the window's center.

    ``kind``: ``"sq"`` sum (x - c)^2, ``"cube"`` sum (x - c)^3, ``"abs"`` sum |x - c|, ``"cross"``
    sum (x - c)(y - c_y). Rows where ``x`` (or ``y``) is NaN contribute 0. Two-pass, so a flat window
    gives an exact 0 (a cumulative-sum shortcut would leave rounding noise there). Lags are added in a
    fixed order for every cell; rows are processed in cache-sized blocks.
    """
    n, m = x.shape
    valid = np.isfinite(x) if y is None else np.isfinite(x) & np.isfinite(y)
    weight = valid.astype(np.float64)
    # rows [p, q) are all valid iff gaps[q] == gaps[p]: there the weights (all 1) need not be applied
    gaps = np.concatenate([[0], np.cumsum(~valid.all(axis=1))])
    x0 = x.copy()
    np.copyto(x0, 0.0, where=~valid)
    y0 = None
    if y is not None:
        y0 = y.copy()
        np.copyto(y0, 0.0, where=~valid)
    acc = np.zeros_like(x, dtype=np.float64)
    step = max(1, _CHUNK_CELLS // max(m, 1))
    tmp = np.empty((step, m))
    tmp_y = np.empty((step, m)) if y0 is not None else None
    for a in range(0, n, step):
        b = min(n, a + step)
        for k in range(min(window, b)):
            lo = max(a, k)
            t = tmp[: b - lo]
            np.subtract(x0[lo - k : b - k], center[lo:b], out=t)
            if gaps[b - k] != gaps[lo - k]:
                np.multiply(t, weight[lo - k : b - k], out=t)  # invalid observations contribute 0
            if kind == "sq":
                np.multiply(t, t, out=t)
            elif kind == "cube":
                np.power(t, 3, out=t)
            elif kind == "abs":
                np.abs(t, out=t)
            else:
                ty = tmp_y[: b - lo]  # type: ignore[index]
                np.subtract(y0[lo - k : b - k], center_y[lo:b], out=ty)  # type: ignore[index]
                np.multiply(t, ty, out=t)
            np.add(acc[lo:b], t, out=acc[lo:b])
    return acc


def rolling_std(
    x: np.ndarray, window: int, min_periods: int | None = None, ddof: int = 1, two_pass: bool = True,
    mean: np.ndarray | None = None,
) -> np.ndarray:
    """Standard deviation over the last ``window`` rows (pandas ``rolling(window).std(ddof)``).

    ``two_pass=False`` uses running sums of x and x^2 (several times faster). Only for series centered
    near zero, such as daily returns: on price levels the one-pass formula cancels catastrophically.
    ``mean``: ``rolling_mean(x, window, min_periods)`` when the caller has it (it is the two-pass centre;
    its NaN cells are those whose deviation is NaN anyway).
    """
    _check_window(window, min_periods)
    valid = np.isfinite(x)
    count = _window_count(valid, window)
    if two_pass:
        mean = rolling_mean(x, window, 1) if mean is None else mean
        squares = _deviation_sum(x, mean, window, "sq")
    else:
        _, zeroed = _finite_and_zeroed(x)
        total = _window_total(zeroed, window)
        squares = _window_total(zeroed * zeroed, window)
        with np.errstate(invalid="ignore", divide="ignore"):
            squares -= total * total / count
        np.maximum(squares, 0.0, out=squares)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = squares / (count - ddof)
    var[(count < (window if min_periods is None else min_periods)) | (count <= ddof)] = np.nan
    return np.sqrt(var)


def rolling_mad(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Mean absolute deviation from the window mean over the last ``window`` rows (as in CCI)."""
    _check_window(window, min_periods)
    mean = rolling_mean(x, window, 1)
    count = _window_count(np.isfinite(x), window)
    acc = _deviation_sum(x, mean, window, "abs")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = acc / count
    out[count < (window if min_periods is None else min_periods)] = np.nan
    return out


def rolling_trend(y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope of ``y`` on time (per row) over the last ``window`` rows, and its R^2.

    Needs a full window of valid values; R^2 is NaN for a flat window.
    """
    _check_window(window, None)
    if window < 2:
        raise ValueError("rolling_trend needs window >= 2")
    n = y.shape[0]
    x = np.arange(window, dtype=np.float64)  # oldest row of the window is x = 0
    sxx = float(((x - x.mean()) ** 2).sum())
    weights = (x - x.mean()) / sxx
    slope = np.zeros_like(y)
    for k in range(min(window, n)):  # row t - k sits at x = window - 1 - k
        slope[k:] += weights[window - 1 - k] * y[: n - k]
    mean = rolling_mean(y, window)
    syy = _deviation_sum(y, mean, window, "sq")
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = slope * slope * sxx / syy
    r2[syy <= 1e-14 * np.maximum(mean * mean * window, 1e-300)] = np.nan
    slope[np.isnan(mean)] = np.nan
    r2[np.isnan(mean)] = np.nan
    return slope, np.minimum(r2, 1.0)


def rolling_skew(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Bias-corrected sample skewness over the last ``window`` rows (pandas ``rolling.skew``).

    NaN when fewer than three observations or when the window is flat.
    """
    _check_window(window, min_periods)
    mean = rolling_mean(x, window, 1)
    count = _window_count(np.isfinite(x), window).astype(np.float64)
    m2 = _deviation_sum(x, mean, window, "sq")
    m3 = _deviation_sum(x, mean, window, "cube")
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.sqrt(count) * m3 / m2**1.5
        out = g * np.sqrt(count * (count - 1)) / (count - 2)
    # a (numerically) flat window has no defined skew
    flat = m2 <= 1e-14 * np.maximum(mean * mean * count, 1e-300)
    out[flat | (count < 3) | (count < (window if min_periods is None else min_periods))] = np.nan
    return out


def rolling_corr(x: np.ndarray, y: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Pearson correlation of ``x`` and ``y`` over the last ``window`` rows where both are valid."""
    _check_window(window, min_periods)
    both = np.isfinite(x) & np.isfinite(y)
    xv = np.where(both, x, np.nan)
    yv = np.where(both, y, np.nan)
    mx = rolling_mean(xv, window, 1)
    my = rolling_mean(yv, window, 1)
    sxy = _deviation_sum(xv, mx, window, "cross", yv, my)
    sxx = _deviation_sum(xv, mx, window, "sq")
    syy = _deviation_sum(yv, my, window, "sq")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = sxy / np.sqrt(sxx * syy)
    out[(sxx <= 0) | (syy <= 0)] = np.nan
    out[_window_count(both, window) < (window if min_periods is None else min_periods)] = np.nan
    return out


def _rolling_extreme(x: np.ndarray, window: int, min_periods: int | None, op: np.ufunc, fill: float) -> np.ndarray:
    """Trailing max/min by doubling spans: log2(window) passes instead of ``window``."""
    _check_window(window, min_periods)
    valid = np.isfinite(x)
    out = x.copy()
    np.copyto(out, fill, where=~valid)
    spare = np.empty_like(out)
    span = 1
    while span * 2 <= window:  # out[t] = extreme over [t - span + 1, t]
        spare[:span] = out[:span]
        op(out[span:], out[:-span], out=spare[span:])
        out, spare, span = spare, out, span * 2
    if span < window:  # cover [t - window + 1, t] with two overlapping power-of-two spans
        rest = window - span
        spare[:rest] = out[:rest]
        op(out[rest:], out[:-rest], out=spare[rest:])
        out = spare
    out[_window_count(valid, window) < (window if min_periods is None else min_periods)] = np.nan
    return out


def rolling_max(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Largest valid value over the last ``window`` rows."""
    return _rolling_extreme(x, window, min_periods, np.maximum, -np.inf)


def rolling_min(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Smallest valid value over the last ``window`` rows."""
    return _rolling_extreme(x, window, min_periods, np.minimum, np.inf)


def ewm_mean(x: np.ndarray, alpha: float, min_periods: int = 1) -> np.ndarray:
    """Recursive exponential moving average ``y[t] = alpha * x[t] + (1 - alpha) * y[t-1]``.

    Equal to pandas ``ewm(alpha=alpha, adjust=False, min_periods=min_periods).mean()`` on each column:
    the recursion starts at the column's first valid value (``y = x`` there) and the result is NaN until
    ``min_periods`` rows have passed since then. Interior NaNs are carried over by the last valid input
    (the series used here are forward-filled prices, which have none).

    Unlike the window operators this has infinite memory: the value at ``t`` depends on every row since
    the first valid one, so it depends on where the panel starts (never on what comes after ``t``).
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"ewm_mean: alpha must be in (0, 1], got {alpha}")
    n, m = x.shape
    valid = ~np.isnan(x)
    gaps = n > 1 and bool((valid[:-1] & ~valid[1:]).any())
    # first valid row of each column (without gaps the valid rows are a suffix: count them)
    first = np.where(valid.any(axis=0), valid.argmax(axis=0), n) if gaps else n - np.count_nonzero(valid, axis=0)
    filled = forward_fill(x) if gaps else x.copy()
    x0 = filled[np.minimum(first, n - 1), np.arange(m)] if n else np.zeros(m)
    x0[np.isnan(x0)] = 0.0
    for j in np.flatnonzero(first > 0).tolist():  # start the recursion at the first value (few columns)
        filled[: first[j], j] = x0[j]
    zi = ((1.0 - alpha) * x0)[None, :]
    out, _ = lfilter([alpha], [1.0, -(1.0 - alpha)], filled, axis=0, zi=zi)
    stop = first + max(min_periods, 1) - 1
    for j in np.flatnonzero(stop > 0).tolist():
        out[: stop[j], j] = np.nan
    return out


def ewm_span_alpha(span: float) -> float:
    """The smoothing factor of an EMA with the given span, ``2 / (span + 1)``."""
    return 2.0 / (span + 1.0)


def _check_window(window: int, min_periods: int | None) -> None:
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if min_periods is not None and not 1 <= min_periods <= window:
        raise ValueError(f"min_periods must be in [1, window={window}], got {min_periods}")
