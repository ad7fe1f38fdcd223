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

The loops are compiled with numba (``kernel``): each walks the rows forward in time with the stocks in
the inner loop, so a window statistic is one pass over contiguous memory.
"""

from __future__ import annotations

import numba
import numpy as np

#: compiles a loop kernel of the feature layer (cached on disk beside the module; numpy's float
#: semantics: x / 0 is inf or NaN, not an exception)
kernel = numba.njit(cache=True, nogil=True, error_model="numpy")


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

    A loop over rows with vectorised adds across stocks is faster than numpy's strided
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


@kernel
def _window_total(x: np.ndarray, window: int, min_periods: int, mean: bool) -> np.ndarray:
    """Sum (or mean) of the finite values among the last ``window`` rows, NaN below ``min_periods``.

    The sum is a difference of running totals: ``T[t] - T[t - window]``, ``T[t] = T[t-1] + x[t]``.
    """
    n, m = x.shape
    out = np.empty((n, m))
    total = np.zeros(m)
    count = np.zeros(m, dtype=np.int64)
    # the running totals of the last ``window`` rows; row t % window holds T[t - window] until row t
    past_total = np.zeros((window, m))
    past_count = np.zeros((window, m), dtype=np.int64)
    for t in range(n):
        r = t % window
        for j in range(m):
            v = x[t, j]
            ok = np.isfinite(v)
            if t == 0:
                s = v if ok else 0.0
                c = 1 if ok else 0
            else:
                s = total[j] + (v if ok else 0.0)
                c = count[j] + (1 if ok else 0)
            total[j] = s
            count[j] = c
            if t >= window:
                win, k = s - past_total[r, j], c - past_count[r, j]
            else:
                win, k = s, c
            past_total[r, j] = s
            past_count[r, j] = c
            if k < min_periods:
                out[t, j] = np.nan
            elif mean:
                out[t, j] = win / k
            else:
                out[t, j] = win
    return out


def rolling_sum(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Sum over the last ``window`` rows of the valid observations (NaN below ``min_periods``)."""
    _check_window(window, min_periods)
    return _window_total(_rows(x), window, window if min_periods is None else min_periods, False)


def rolling_mean(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Mean over the last ``window`` rows of the valid observations (NaN below ``min_periods``)."""
    _check_window(window, min_periods)
    return _window_total(_rows(x), window, window if min_periods is None else min_periods, True)


def _rows(x: np.ndarray) -> np.ndarray:
    """``x`` as the C-ordered float64 (dates x codes) matrix the kernels walk."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a (dates x codes) matrix, got shape {x.shape}")
    return x


_DEVIATION_KINDS = {"sq": 0, "cube": 1, "abs": 2, "cross": 3}


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
    fixed order for every cell, the newest first.
    """
    x = _rows(x)
    both = y is not None
    y = _rows(y) if both else x
    return _deviation_kernel(x, _rows(center), y, _rows(center_y) if both else x, window, _DEVIATION_KINDS[kind], both)


@kernel
def _deviation_kernel(x, center, y, center_y, window, kind, both):
    n, m = x.shape
    acc = np.zeros((n, m))
    for t in range(n):
        for k in range(min(window, t + 1)):
            s = t - k
            for j in range(m):
                v = x[s, j]
                w = y[s, j]
                ok = np.isfinite(v) and (not both or np.isfinite(w))
                d = ((v if ok else 0.0) - center[t, j]) * (1.0 if ok else 0.0)  # invalid rows add 0
                if kind == 0:
                    d = d * d
                elif kind == 1:
                    d = d * d * d
                elif kind == 2:
                    d = abs(d)
                else:
                    d = d * ((w if ok else 0.0) - center_y[t, j])
                acc[t, j] += d
    return acc


def rolling_std(
    x: np.ndarray,
    window: int,
    min_periods: int | None = None,
    ddof: int = 1,
    two_pass: bool = True,
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
        x = _rows(x)
        total = _window_total(x, window, 0, False)  # non-finite values (and squares) add 0
        squares = _window_total(x * x, window, 0, False)
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


@kernel
def _rolling_extreme(x: np.ndarray, window: int, min_periods: int, largest: bool) -> np.ndarray:
    """Largest (or smallest) finite value among the last ``window`` rows; NaN below ``min_periods``."""
    n, m = x.shape
    out = np.empty((n, m))
    best = np.empty(m)
    count = np.zeros(m, dtype=np.int64)
    for t in range(n):
        best[:] = -np.inf if largest else np.inf
        count[:] = 0
        for s in range(max(0, t - window + 1), t + 1):
            for j in range(m):
                v = x[s, j]
                if np.isfinite(v):
                    count[j] += 1
                    if (v > best[j]) if largest else (v < best[j]):
                        best[j] = v
        for j in range(m):
            out[t, j] = best[j] if count[j] >= min_periods else np.nan
    return out


def rolling_max(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Largest valid value over the last ``window`` rows."""
    _check_window(window, min_periods)
    return _rolling_extreme(_rows(x), window, window if min_periods is None else min_periods, True)


def rolling_min(x: np.ndarray, window: int, min_periods: int | None = None) -> np.ndarray:
    """Smallest valid value over the last ``window`` rows."""
    _check_window(window, min_periods)
    return _rolling_extreme(_rows(x), window, window if min_periods is None else min_periods, False)


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
    return _ewm_kernel(_rows(x), alpha, max(min_periods, 1))


@kernel
def _ewm_kernel(x: np.ndarray, alpha: float, min_periods: int) -> np.ndarray:
    # The first-order recursion of scipy's ``lfilter([alpha], [1, alpha - 1])`` (the same products and
    # sums), entered with the column's first valid value on every row before it and carried over
    # interior NaNs by the last valid input.
    n, m = x.shape
    beta = 1.0 - alpha
    out = np.empty((n, m))
    first = np.full(m, n)  # the first valid row of each column
    for j in range(m):
        for t in range(n):
            if not np.isnan(x[t, j]):
                first[j] = t
                break
    state = np.empty(m)
    last = np.empty(m)
    for j in range(m):
        last[j] = x[first[j], j] if first[j] < n else 0.0
        state[j] = beta * last[j]
    for t in range(n):
        for j in range(m):
            v = x[t, j]
            if not np.isnan(v):
                last[j] = v
            y = last[j] * alpha + state[j]
            state[j] = y * beta
            out[t, j] = y if t >= first[j] + min_periods - 1 else np.nan
    return out


def ewm_span_alpha(span: float) -> float:
    """The smoothing factor of an EMA with the given span, ``2 / (span + 1)``."""
    return 2.0 / (span + 1.0)


def _check_window(window: int, min_periods: int | None) -> None:
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if min_periods is not None and not 1 <= min_periods <= window:
        raise ValueError(f"min_periods must be in [1, window={window}], got {min_periods}")
