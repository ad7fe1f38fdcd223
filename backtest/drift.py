"""Drift: how feature importance moves across folds, and how feature values move between each fold's
training window and its test days. The numbers only: the heatmaps are drawn by
:mod:`backtest.reports.drift_charts` and the report page is written by :mod:`backtest.reports.drift`.

Importance drift
----------------
Input: ``importance`` : DataFrame (fold x feature) of LightGBM gain, one row per fold (index: fold
number, or the fold's first test date), NaN or missing = the feature was not used (gain 0). Gain grows
with the number of trees, so each fold is first turned into **shares** (gain / total gain of the fold).
A feature with zero gain in a fold is **unused** there: it gets no rank in that fold (it is not tied
for last place), so unused features never make rank changes, jumps or rank stability.
Outputs:

- ranks: each used feature's rank in its fold (1 = largest share; ties share the average rank), NaN
  where unused;
- top features per period (calendar year of the fold by default): mean share over the period's folds;
- rank stability: Spearman correlation of the shares of consecutive folds over the features used in
  both (1 = same order), with how many features entered and left the model;
- rank changes: each feature's rank in the first and last fold and its range over the folds that use
  it, sorted by the range (the features whose importance rank changed most first);
- importance jumps: a feature used in two consecutive folds whose rank moved by at least
  :data:`IMPORTANCE_JUMP_RANKS` (20) places and that ranks within the top :data:`IMPORTANCE_JUMP_TOP`
  (10) of one of the two folds: a top-10 feature that falls out of the top 30, or one that climbs into
  the top 10 from beyond 30 (the heatmap shows 30 rows). Moves deep in the tail (rank 150 to 190 among
  285 features) are noise of tree building and are not flagged. On the synthetic default market the
  model's importance is unstable from fold to fold, and several jumps per retrain are normal there (the
  main job's own drift report, ``reports/drift/drift_report.html`` of its run, shows the stability and
  the jumps); a stable signal gives far fewer.

Feature value drift
-------------------
Effect sizes of every feature between a reference sample (a training window) and a current sample (test
days), never a p-value: with thousands of rows a side a two-sample test rejects any shift at all (a
Kolmogorov-Smirnov p-value is below 1% once ``D`` exceeds about 0.03 at 6,000 rows a side), so it says
only that n is large. Each is read on its own scale, with these thresholds:

========  ===============================================================  ========  =====
measure   what it is                                                       moderate  large
========  ===============================================================  ========  =====
``psi``   population stability index over the reference's deciles (below)  0.1       0.25
``ks_d``  Kolmogorov-Smirnov statistic D: the largest gap between the two  0.1       0.2
          empirical distribution functions, a share of the rows
``smd``   standardized mean difference: (mean_cur - mean_ref) / the        0.2       0.5
          pooled standard deviation (``|smd|``; Cohen's small / medium)
========  ===============================================================  ========  =====

The flag is PSI's alone (above 0.25, "significant"), so that the report tells one story; ``ks_d`` and
``smd`` say whether a flagged shift moves the whole distribution (D) or its mean (SMD). PSI binning: the
edges are the deciles of
the **reference** (``n_bins - 1`` interior quantiles, numpy's linear interpolation; duplicates merged
for discrete features), bins are right-closed ``(edge[i-1], edge[i]]`` with open outer bins, and a bin
proportion of 0 is replaced by ``eps`` = 1e-4 so that the logarithm stays finite::

    PSI = sum_b (p_cur[b] - p_ref[b]) * ln(p_cur[b] / p_ref[b])

Usual reading: < 0.1 stable, 0.1-0.25 moderate shift, > 0.25 significant shift (flagged).

Per-fold PSI (:func:`psi_by_fold`): the reference of fold f is f's training window (the data its model
learned from), the current sample is f's test days (the days it scored). Each side is cut to at most
:data:`PSI_MAX_ROWS` evenly spaced rows (rows in (date, code) order, so every date keeps its share); at
10,000 reference and 6,000 current rows the PSI of two samples of one distribution is about
``(n_bins - 1) * (1/n_ref + 1/n_cur)`` = 0.002, far below the 0.1 of a moderate shift. A side with fewer
than :data:`PSI_MIN_VALUES` finite values gives NaN. Note what the comparison is: a few weeks of test
days against a two-year window. A feature whose level wanders slowly (a raw market cap, a 60-day
trend) differs between the two even in a stationary market; cross-sectionally normalized features
(``_cs_rank``, ``_cs_z``) do not, so a flag on them is the stronger signal.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from backtest.errors import DataContractError, preview
from backtest.memory import read_rows

logger = logging.getLogger(__name__)

PSI_EPS = 1e-4
PSI_MODERATE = 0.1
PSI_SIGNIFICANT = 0.25
#: Readings of the KS statistic D and of |SMD| (module docstring): a moderate and a large shift.
KS_D_MODERATE, KS_D_LARGE = 0.1, 0.2
SMD_MODERATE, SMD_LARGE = 0.2, 0.5
#: Rows of each side of a per-fold PSI (evenly spaced; see the module docstring for the noise floor).
PSI_MAX_ROWS = 10_000
#: Fewest finite values a side for a per-fold PSI (20 a decile bin); fewer give NaN (e.g. a last fold of
#: one or two test days on a small universe), never a flag.
PSI_MIN_VALUES = 200
#: An importance jump moves a used feature by at least this many rank places between consecutive folds...
IMPORTANCE_JUMP_RANKS = 20
#: ...and the feature ranks within this top in at least one of the two folds.
IMPORTANCE_JUMP_TOP = 10
#: The columns of a fold-window table (index: fold number): the reference (training) window and the
#: test days of each fold, inclusive; ``test_start`` is the fold's decision date.
FOLD_WINDOW_COLUMNS = ("train_start", "train_end", "test_start", "test_end")


# --------------------------------------------------------------------------------------------------
# Feature value drift
# --------------------------------------------------------------------------------------------------


def psi_bin_edges(reference: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """Interior bin edges of the PSI: the ``1/n_bins .. (n_bins-1)/n_bins`` quantiles of the finite
    reference values, duplicates removed (so a discrete feature gets fewer bins).

    >>> psi_bin_edges(np.array([1.0, 2.0, 3.0, 4.0]), n_bins=2)
    array([2.5])
    """
    _check_bins(n_bins)
    values = reference[np.isfinite(reference)]
    if values.size == 0:
        return np.empty(0)
    return np.unique(np.quantile(values, np.linspace(0.0, 1.0, n_bins + 1)[1:-1]))


def population_stability_index(
    reference: np.ndarray, current: np.ndarray, n_bins: int = 10, eps: float = PSI_EPS
) -> float:
    """PSI of ``current`` against ``reference`` with the reference's decile bins (module docstring).

    Parameters
    ----------
    reference : 1-D array, e.g. one feature over the training window; NaN / inf are ignored.
    current : 1-D array, the same feature over the test window; NaN / inf are ignored.
    n_bins : number of quantile bins of the reference (10 = deciles).
    eps : floor of a bin proportion.

    Returns
    -------
    float : >= 0; 0.0 when both samples fall in the bins in the same proportions; NaN when either
        sample has no finite value.

    Examples
    --------
    Two bins split at the reference median 2.5: reference 50% / 50%, current 25% / 75%:

    >>> round(population_stability_index(np.array([1., 2., 3., 4.]), np.array([1., 3., 4., 5.]), n_bins=2), 6)
    0.274653
    """
    reference = np.asarray(reference).ravel()
    current = np.asarray(current).ravel()
    return float(psi_per_column(reference[:, None], current[:, None], n_bins, eps)[0])


def psi_per_column(
    reference: np.ndarray, current: np.ndarray, n_bins: int = 10, eps: float = PSI_EPS, min_values: int = 1
) -> np.ndarray:
    """PSI of every column of ``current`` against the same column of ``reference``, vectorized.

    The same statistic as :func:`population_stability_index` (which calls this): each column is sorted
    once (NaN / inf last and ignored), the reference deciles are read off the sorted reference with
    numpy's linear interpolation (the values ``np.quantile`` gives), and the bin counts of both sides
    are binary searches of the edges in the sorted columns. A duplicated edge (a discrete feature)
    makes an empty bin on both sides, which adds exactly 0, as merging the edges would.

    Parameters
    ----------
    reference : array (n_ref_rows, n_features).
    current : array (n_cur_rows, n_features), the same columns.
    n_bins, eps : as in :func:`population_stability_index`.
    min_values : a column with fewer finite values on either side gets NaN.

    Returns
    -------
    float64 array (n_features,): NaN for a column without (``min_values``) finite values on either side.
    """
    _check_bins(n_bins)
    ref, n_ref = _sorted_columns(reference)
    cur, n_cur = _sorted_columns(current)
    if ref.shape[0] != cur.shape[0]:
        raise DataContractError(
            f"PSI: reference has {ref.shape[0]} columns, current {cur.shape[0]}; expected the same features."
        )
    edges = _sorted_quantiles(ref, n_ref, np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
    p_ref = _bin_shares(ref, n_ref, edges, eps)
    p_cur = _bin_shares(cur, n_cur, edges, eps)
    psi = np.sum((p_cur - p_ref) * np.log(p_cur / p_ref), axis=1)
    psi[(n_ref < max(min_values, 1)) | (n_cur < max(min_values, 1))] = np.nan
    return psi


def _check_bins(n_bins: int) -> None:
    if n_bins < 2:
        raise DataContractError(f"PSI: n_bins must be >= 2, received {n_bins}.")


def _sorted_columns(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(columns x rows) sorted ascending with the non-finite values moved to the end, and the number
    of finite values of each column."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise DataContractError(f"PSI: expected a 2-D (rows x features) matrix, received shape {matrix.shape}.")
    columns = np.array(matrix.T, dtype=np.result_type(matrix.dtype, np.float32), order="C")
    infinite = np.isinf(columns)
    if infinite.any():
        columns[infinite] = np.nan  # inf would sort among the values; NaN sorts last
    columns.sort(axis=1)
    return columns, columns.shape[1] - np.isnan(columns).sum(axis=1)


def _sorted_quantiles(columns: np.ndarray, counts: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.quantile(column[:count], q)`` (linear method) of each sorted column, in one pass.

    Mirrors numpy's arithmetic (``numpy.lib._function_base_impl._lerp``) so that the edges are the
    ones ``np.quantile`` returns; columns without values give NaN edges.
    """
    n = np.maximum(counts, 1)[:, None].astype(np.float64)
    virtual = (n - 1) * q[None, :]
    below = np.floor(virtual)
    at_top = virtual >= n - 1
    lower = np.where(at_top, n - 1, below).astype(np.intp)
    upper = np.where(at_top, n - 1, below + 1).astype(np.intp)
    gamma = virtual - np.where(at_top, -1.0, below)  # numpy: index -1 at the top (a == b there)
    rows = np.arange(columns.shape[0])[:, None]
    a, b = columns[rows, lower], columns[rows, upper]
    diff = b - a
    edges = a + diff * gamma
    high = gamma >= 0.5
    edges[high] = (b - diff * (1 - gamma))[high]
    edges[counts == 0] = np.nan
    return edges


def _bin_shares(columns: np.ndarray, counts: np.ndarray, edges: np.ndarray, eps: float) -> np.ndarray:
    """(columns x bins) share of each sorted column's values in the right-closed bins
    ``(edge[i-1], edge[i]]``, floored at ``eps``."""
    at_or_below = np.empty((columns.shape[0], edges.shape[1] + 2), dtype=np.int64)
    at_or_below[:, 0] = 0
    at_or_below[:, -1] = counts
    for j in range(columns.shape[0]):
        at_or_below[j, 1:-1] = columns[j, : counts[j]].searchsorted(edges[j], side="right")
    return np.maximum(np.diff(at_or_below, axis=1) / np.maximum(counts, 1)[:, None], eps)


def feature_value_drift(
    reference: np.ndarray,
    current: np.ndarray,
    names: Sequence[str],
    n_bins: int = 10,
    max_rows: int | None = None,
) -> pd.DataFrame:
    """Effect sizes of the shift of every feature between a reference and a current sample: PSI, the KS
    statistic D and the standardized mean difference (module docstring: their thresholds).

    Parameters
    ----------
    reference : float array (n_ref_rows, n_features), e.g. the training window's feature matrix.
    current : float array (n_cur_rows, n_features), e.g. the test window's feature matrix.
    names : the n_features feature names (column order).
    n_bins : PSI quantile bins of the reference.
    max_rows : when a matrix has more rows, use ``max_rows`` evenly spaced rows of it (deterministic;
        rows in (date, code) order keep every date represented). D sorts both samples:
        its cost: benchmarks/bench_tracking.py; None uses every row.

    Returns
    -------
    DataFrame indexed by ``feature`` (in ``names`` order): ``psi``, ``ks_d`` (scipy's ``ks_2samp``
    statistic), ``smd``, ``n_ref``, ``n_cur`` (finite values used), ``psi_level`` (``stable`` / ``moderate``
    / ``significant``). A feature without finite values on one side gets NaN; ``smd`` is NaN when both
    samples are constant.

    Raises
    ------
    DataContractError : arrays not 2-D, column counts that differ from each other or from ``names``.
    """
    reference = np.asarray(reference)
    current = np.asarray(current)
    names = list(names)
    if reference.ndim != 2 or current.ndim != 2:
        raise DataContractError(
            f"feature drift: expected 2-D (rows x features) matrices, received shapes {reference.shape} "
            f"and {current.shape}."
        )
    if not (reference.shape[1] == current.shape[1] == len(names)):
        raise DataContractError(
            f"feature drift: reference has {reference.shape[1]} columns, current {current.shape[1]}, names "
            f"{len(names)}; expected the same features in the same order. Fix: select the same columns."
        )
    if max_rows is not None:
        reference = reference[evenly_spaced(len(reference), max_rows)]
        current = current[evenly_spaced(len(current), max_rows)]
    psi = psi_per_column(reference, current, n_bins)
    rows = []
    for j, name in enumerate(names):
        ref = reference[:, j].astype(np.float64)
        cur = current[:, j].astype(np.float64)
        ref = ref[np.isfinite(ref)]
        cur = cur[np.isfinite(cur)]
        if ref.size == 0 or cur.size == 0:
            rows.append((name, np.nan, np.nan, np.nan, ref.size, cur.size))
            continue
        d = float(stats.ks_2samp(ref, cur, method="asymp").statistic)
        rows.append((name, float(psi[j]), d, standardized_mean_difference(ref, cur), ref.size, cur.size))
    table = pd.DataFrame(rows, columns=["feature", "psi", "ks_d", "smd", "n_ref", "n_cur"])
    table["psi_level"] = pd.cut(
        table["psi"],
        [-np.inf, PSI_MODERATE, PSI_SIGNIFICANT, np.inf],
        labels=["stable", "moderate", "significant"],
        right=False,
    ).astype(object)
    return table.set_index("feature")


def standardized_mean_difference(reference: np.ndarray, current: np.ndarray) -> float:
    """(mean of ``current`` - mean of ``reference``) / sqrt((var_ref + var_cur) / 2), variances with ddof=1;
    NaN when both samples are constant or either has fewer than two values.

    >>> standardized_mean_difference(np.array([0.0, 2.0]), np.array([1.0, 3.0]))  # a shift of 1, sd sqrt(2)
    0.7071067811865475
    """
    if len(reference) < 2 or len(current) < 2:
        return float("nan")
    pooled = math.sqrt((np.var(reference, ddof=1) + np.var(current, ddof=1)) / 2)
    return float((np.mean(current) - np.mean(reference)) / pooled) if pooled > 0 else float("nan")


def evenly_spaced(n_rows: int, max_rows: int) -> np.ndarray:
    """Positions of at most ``max_rows`` evenly spaced rows among ``n_rows`` (all when fewer), first and
    last included: ``linspace(0, n_rows - 1, max_rows)`` rounded.

    >>> evenly_spaced(10, 4).tolist(), evenly_spaced(3, 4).tolist()
    ([0, 3, 6, 9], [0, 1, 2])
    """
    if max_rows < 1:
        raise DataContractError(f"feature drift: max_rows must be >= 1 or None, received {max_rows}.")
    if n_rows <= max_rows:
        return np.arange(n_rows)
    return np.linspace(0, n_rows - 1, max_rows).round().astype(np.int64)


def psi_by_fold(
    values: np.ndarray,
    dates: pd.DatetimeIndex | np.ndarray,
    windows: pd.DataFrame,
    names: Sequence[str],
    *,
    max_rows: int | None = PSI_MAX_ROWS,
    n_bins: int = 10,
    min_values: int = PSI_MIN_VALUES,
) -> pd.DataFrame:
    """PSI of every feature in every fold: the fold's training window against its test days.

    Parameters
    ----------
    values : feature matrix (n_rows, n_features), rows in date order (a ``FeatureMatrix``'s values).
    dates : the date of each row (sorted ascending).
    windows : :func:`fold_windows` table: indexed by fold, with ``train_start``, ``train_end`` (the
        reference) and ``test_start``, ``test_end`` (the current sample), inclusive.
    names : the feature names (column order).
    max_rows : each side is cut to at most this many evenly spaced rows of its window
        (:func:`evenly_spaced`); None uses every row.
    n_bins : PSI quantile bins of the reference.
    min_values : fewest finite values a side (:data:`PSI_MIN_VALUES`); fewer give NaN.

    Returns
    -------
    DataFrame (fold x feature) of PSI, indexed like ``windows`` (index name ``fold``); NaN for a
    feature with fewer than ``min_values`` finite values on one side (a fold of very few test days).

    Cost: mostly the column sorts of the 10,000 reference rows; the row selection is two binary
    searches per window. Thinning is what keeps it cheap.
    """
    values = np.asarray(values)
    names = list(names)
    if values.ndim != 2 or values.shape[1] != len(names):
        raise DataContractError(
            f"per-fold PSI: values of shape {values.shape} for {len(names)} feature names; expected "
            "(rows x features) with one name per column."
        )
    dates = pd.DatetimeIndex(dates)
    if len(dates) != len(values):
        raise DataContractError(f"per-fold PSI: {len(dates)} row dates for {len(values)} rows.")
    if not dates.is_monotonic_increasing:
        raise DataContractError("per-fold PSI: the rows must be in date order (a FeatureMatrix is).")
    missing = [c for c in FOLD_WINDOW_COLUMNS if c not in windows.columns]
    if missing:
        raise DataContractError(f"per-fold PSI: the fold windows lack the columns {preview(missing)}.")
    table = np.full((len(windows), len(names)), np.nan)
    day = dates.to_numpy(dtype="datetime64[ns]")
    for i, window in enumerate(windows.itertuples(index=False)):
        ref = _window_rows(day, window.train_start, window.train_end, max_rows)
        cur = _window_rows(day, window.test_start, window.test_end, max_rows)
        if len(ref) and len(cur):
            table[i] = psi_per_column(read_rows(values, ref), read_rows(values, cur), n_bins, min_values=min_values)
    return pd.DataFrame(table, index=windows.index.rename("fold"), columns=pd.Index(names, name="feature"))


def _window_rows(day: np.ndarray, first: object, last: object, max_rows: int | None) -> np.ndarray:
    """Positions of the rows dated ``first .. last`` (inclusive), evenly thinned to ``max_rows``."""
    if pd.isna(first) or pd.isna(last):
        return np.empty(0, dtype=np.int64)
    lo = int(np.searchsorted(day, np.datetime64(pd.Timestamp(first), "ns"), side="left"))
    hi = int(np.searchsorted(day, np.datetime64(pd.Timestamp(last), "ns"), side="right"))
    if max_rows is None:
        return np.arange(lo, hi)
    return lo + evenly_spaced(hi - lo, max_rows)


def fold_windows(
    records: Sequence[Mapping[str, object]] | Sequence[object], test_dates: pd.DatetimeIndex | Sequence[object]
) -> pd.DataFrame:
    """Each fold's reference (training) window and test days.

    Parameters
    ----------
    records : the folds' leakage records (:class:`backtest.leakage.LeakageRecord`, or their
        ``to_dict()`` form as stored in ``guards/leakage_records.json``), in time order; read:
        ``fold``, ``decision_date``, ``train_start``, ``train_end``.
    test_dates : the decision dates of the test period (the dates that have scores).

    Returns
    -------
    DataFrame indexed by ``fold`` with :data:`FOLD_WINDOW_COLUMNS`: fold f's test days are the test
    dates from its decision date up to the day before the next fold's decision date (the last fold:
    up to the last test date). A fold without test days gets NaT test bounds.
    """
    test = pd.DatetimeIndex(pd.to_datetime(list(test_dates))).unique().sort_values()
    rows = [_record_fields(r) for r in records]
    decisions = [row["decision_date"] for row in rows]
    out = []
    for i, row in enumerate(rows):
        after = decisions[i + 1] if i + 1 < len(rows) else None
        days = test[(test >= row["decision_date"]) & ((test < after) if after is not None else True)]
        out.append(
            {
                "fold": int(row["fold"]),
                "train_start": row["train_start"],
                "train_end": row["train_end"],
                "test_start": days[0] if len(days) else pd.NaT,
                "test_end": days[-1] if len(days) else pd.NaT,
            }
        )
    frame = pd.DataFrame(out, columns=["fold", *FOLD_WINDOW_COLUMNS])
    for column in FOLD_WINDOW_COLUMNS:
        frame[column] = pd.to_datetime(frame[column]).astype("datetime64[ns]")
    return frame.set_index("fold")


def psi_artifact(psi: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """The stored form of a per-fold PSI table (``data/feature_psi.csv``): ``psi`` with each fold's
    window as index levels ``fold, train_start, train_end, test_start, test_end`` (the slices it was
    computed on), one column per feature. :func:`read_psi_artifact` reads it back."""
    levels = windows.loc[psi.index, list(FOLD_WINDOW_COLUMNS)].reset_index()
    levels["fold"] = psi.index.to_numpy()
    return psi.set_axis(pd.MultiIndex.from_frame(levels[["fold", *FOLD_WINDOW_COLUMNS]]), axis=0)


def read_psi_artifact(path: Path | str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read ``data/feature_psi.csv`` (:func:`psi_artifact`) back as (fold x feature PSI, fold windows).

    Raises
    ------
    DataContractError : a file without the fold and window columns.
    """
    head = ["fold", *FOLD_WINDOW_COLUMNS]
    frame = pd.read_csv(path)
    if list(frame.columns[: len(head)]) != head:
        raise DataContractError(
            f"per-fold PSI file {path}: expected the leading columns {', '.join(head)}, found "
            f"{preview(frame.columns[: len(head)])}."
        )
    windows = frame[head].set_index("fold")
    for column in FOLD_WINDOW_COLUMNS:
        windows[column] = pd.to_datetime(windows[column]).astype("datetime64[ns]")
    psi = frame.drop(columns=head).astype(np.float64)
    psi.index = windows.index
    psi.columns.name = "feature"
    return psi, windows


def _record_fields(record: Mapping[str, object] | object) -> dict[str, object]:
    get = record.get if isinstance(record, Mapping) else lambda key: getattr(record, key)
    try:
        return {
            "fold": get("fold"),
            "decision_date": pd.Timestamp(get("decision_date")),
            "train_start": pd.Timestamp(get("train_start")),
            "train_end": pd.Timestamp(get("train_end")),
        }
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise DataContractError(
            f"fold windows: a leakage record lacks fold / decision_date / train_start / train_end ({exc})."
        ) from None


def psi_flags(psi: pd.DataFrame, threshold: float = PSI_SIGNIFICANT) -> pd.DataFrame:
    """The features whose PSI exceeds ``threshold`` in at least one fold.

    Parameters
    ----------
    psi : fold x feature PSI (:func:`psi_by_fold`), folds in time order.
    threshold : flag PSI strictly above it (default: significant shift, 0.25).

    Returns
    -------
    DataFrame indexed by ``feature``: ``folds_flagged`` (count), ``folds`` (number of folds with a
    PSI), ``max_psi``, ``max_at`` (the fold of the largest PSI), ``first_flagged`` (the first fold above
    the threshold); sorted by ``folds_flagged`` then ``max_psi``, largest first.
    """
    above = psi > threshold
    flagged = above.columns[above.any(axis=0)]
    columns = ["folds_flagged", "folds", "max_psi", "max_at", "first_flagged"]
    if not len(flagged):
        return pd.DataFrame(columns=columns, index=pd.Index([], name="feature"))
    sub = psi[flagged]
    table = pd.DataFrame(
        {
            "folds_flagged": above[flagged].sum(axis=0).astype(int),
            "folds": sub.notna().sum(axis=0).astype(int),
            "max_psi": sub.max(axis=0),
            "max_at": sub.idxmax(axis=0),
            "first_flagged": above[flagged].idxmax(axis=0),
        }
    )
    table.index.name = "feature"
    return table.sort_values(["folds_flagged", "max_psi"], ascending=[False, False], kind="stable")


#: The columns of :func:`fold_summary` after the fold windows.
FOLD_SUMMARY_COLUMNS = ("rank_ic", "psi_flagged", "psi_median", "jumps", "rank_spearman")


def fold_summary(
    windows: pd.DataFrame,
    *,
    fold_psi: pd.DataFrame | None = None,
    drift: ImportanceDrift | None = None,
    rank_ic: pd.Series | None = None,
    threshold: float = PSI_SIGNIFICANT,
) -> pd.DataFrame:
    """One row per fold, the drift report's story: its windows, how well it ranked, how far its features
    moved from its training window, and how its model's importance moved from the previous fold's.

    Parameters
    ----------
    windows : :func:`fold_windows` (indexed by fold).
    fold_psi : fold x feature PSI (:func:`psi_by_fold`, indexed by fold), or None.
    drift : :func:`importance_drift` of the folds' gain, indexed by fold or by decision date (``windows``'
        ``test_start``), or None.
    rank_ic : each fold's mean daily rank IC (the run's ``fold/rank_ic``), indexed by fold, or None.
    threshold : the PSI above which a feature counts as shifted (:data:`PSI_SIGNIFICANT`).

    Returns
    -------
    DataFrame indexed by ``fold``: the window columns, then ``rank_ic``, ``psi_flagged`` (features with PSI
    above ``threshold``), ``psi_median`` (over the features), ``jumps`` (importance jumps into the fold:
    :func:`importance_jumps`) and ``rank_spearman`` (of the gain shares with the previous fold's); NaN where
    an input is missing, and for the first fold's ``jumps`` and ``rank_spearman`` (no previous fold).

    >>> days = lambda *d: pd.to_datetime(list(d))
    >>> windows = pd.DataFrame(
    ...     {"train_start": days("2024-01-02", "2024-02-01"), "train_end": days("2024-03-29", "2024-04-30"),
    ...      "test_start": days("2024-04-08", "2024-05-08"), "test_end": days("2024-05-07", "2024-06-07")},
    ...     index=pd.Index([0, 1], name="fold"))
    >>> psi = pd.DataFrame({"a": [0.05, 0.40], "b": [0.02, 0.30], "c": [0.01, 0.01]}, index=windows.index)
    >>> table = fold_summary(windows, fold_psi=psi, rank_ic=pd.Series([0.031, -0.012]))
    >>> table[["rank_ic", "psi_flagged", "psi_median"]]
          rank_ic  psi_flagged  psi_median
    fold
    0       0.031          0.0        0.02
    1      -0.012          2.0        0.30
    """
    out = windows.loc[:, list(FOLD_WINDOW_COLUMNS)].copy()
    out.index.name = "fold"
    nan = pd.Series(np.nan, index=out.index)
    out["rank_ic"] = rank_ic.reindex(out.index).astype(np.float64) if rank_ic is not None else nan
    if fold_psi is not None:
        psi = fold_psi.reindex(out.index)
        out["psi_flagged"] = (psi > threshold).sum(axis=1).where(psi.notna().any(axis=1)).astype(np.float64)
        out["psi_median"] = psi.median(axis=1)
    else:
        out["psi_flagged"] = out["psi_median"] = nan
    out["jumps"] = out["rank_spearman"] = nan
    if drift is not None:
        dated = isinstance(drift.ranks.index, pd.DatetimeIndex)
        label = pd.Series(out["test_start"].to_numpy() if dated else out.index.to_numpy(), index=out.index)
        steps = drift.rank_stability.set_index("fold_to")
        out["jumps"] = label.map(steps["n_jumps"]).astype(np.float64)
        out["rank_spearman"] = label.map(steps["spearman"]).astype(np.float64)
    return out


# --------------------------------------------------------------------------------------------------
# Importance drift
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportanceDrift:
    """Importance drift across folds (see the module docstring).

    Attributes
    ----------
    shares : DataFrame (fold x feature), each fold's gain share; rows sum to 1.
    ranks : DataFrame (fold x feature), rank among the fold's used features (1 = largest share,
        ties averaged); NaN where the feature is unused (zero gain).
    top_by_period : DataFrame with columns ``period``, ``rank``, ``feature``, ``share`` (mean share over
        the period's folds), the ``top_n`` features of each period.
    rank_stability : DataFrame with columns ``fold_from``, ``fold_to``, ``spearman`` (over the
        ``n_used`` features used in both folds; NaN below 3), ``n_used``, ``n_entered`` (used in
        ``fold_to`` only), ``n_left`` (used in ``fold_from`` only), ``n_jumps`` (importance jumps).
    rank_changes : DataFrame indexed by feature: ``rank_first``, ``rank_last`` (NaN when unused in
        that fold), ``rank_change`` (last - first; positive = lost importance), ``rank_best``,
        ``rank_worst``, ``rank_range`` (over the folds that use it), ``folds_used``, ``mean_share``;
        sorted by ``rank_range`` (largest first), then ``mean_share``.
    jumps : DataFrame with columns ``feature``, ``fold_from``, ``fold_to``, ``rank_from``, ``rank_to``,
        ``rank_change`` (to - from), one row per importance jump (module docstring), in fold order.
    jump_ranks, jump_top : the jump thresholds used.
    """

    shares: pd.DataFrame
    ranks: pd.DataFrame
    top_by_period: pd.DataFrame
    rank_stability: pd.DataFrame
    rank_changes: pd.DataFrame
    jumps: pd.DataFrame
    jump_ranks: int = IMPORTANCE_JUMP_RANKS
    jump_top: int = IMPORTANCE_JUMP_TOP


def importance_drift(
    importance: pd.DataFrame,
    periods: pd.Series | Sequence[object] | None = None,
    top_n: int = 10,
    *,
    jump_ranks: int = IMPORTANCE_JUMP_RANKS,
    jump_top: int = IMPORTANCE_JUMP_TOP,
) -> ImportanceDrift:
    """Measure how feature importance moves across folds.

    Parameters
    ----------
    importance : DataFrame (fold x feature) of non-negative gain, folds in time order; NaN = 0.
    periods : the period label of each fold (a Series indexed like ``importance``, or a sequence in
        row order), e.g. the calendar year of the fold's test window. None: the year of the index when
        it is a DatetimeIndex, else one period ``all``.
    top_n : features listed per period.
    jump_ranks, jump_top : an importance jump moves a feature used in both of two consecutive folds by
        at least ``jump_ranks`` places, and the feature ranks within the top ``jump_top`` of one of them.

    Returns
    -------
    ImportanceDrift

    Raises
    ------
    DataContractError : empty input, negative gain, or periods that do not match the folds.
    """
    if importance.empty:
        raise DataContractError("importance drift: the importance table is empty; expected fold x feature gain.")
    gain = importance.astype(np.float64).fillna(0.0)
    if (gain.to_numpy() < 0).any():
        bad = gain.columns[(gain < 0).any()]
        raise DataContractError(
            f"importance drift: gain must be >= 0, negative for {preview(bad)}. Expected LightGBM gain importance."
        )
    total = gain.sum(axis=1)
    unused = total.index[total <= 0]
    if len(unused):
        logger.warning("importance drift: folds %s have zero total gain; left out", preview(unused))
    shares = gain.loc[total > 0].div(total[total > 0], axis=0)
    labels = _period_labels(importance, periods).loc[shares.index]

    top_rows = []
    for period, block in shares.groupby(labels, sort=False):
        mean_share = block.mean(axis=0).sort_values(ascending=False, kind="stable").head(top_n)
        for rank, (feature, share) in enumerate(mean_share.items(), start=1):
            top_rows.append((period, rank, feature, float(share)))
    top_by_period = pd.DataFrame(top_rows, columns=["period", "rank", "feature", "share"])

    used = shares > 0
    ranks = shares.where(used).rank(axis=1, ascending=False, method="average")

    stability_rows = []
    for i in range(1, len(shares)):
        before, after = used.iloc[i - 1].to_numpy(), used.iloc[i].to_numpy()
        both = before & after
        rho = float("nan")
        if both.sum() >= 3:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", stats.ConstantInputWarning)
                rho = float(
                    stats.spearmanr(shares.iloc[i - 1].to_numpy()[both], shares.iloc[i].to_numpy()[both]).statistic
                )
        stability_rows.append(
            (
                shares.index[i - 1],
                shares.index[i],
                rho,
                int(both.sum()),
                int((after & ~before).sum()),
                int((before & ~after).sum()),
            )
        )
    rank_stability = pd.DataFrame(
        stability_rows, columns=["fold_from", "fold_to", "spearman", "n_used", "n_entered", "n_left"]
    )

    rank_changes = pd.DataFrame(
        {
            "rank_first": ranks.iloc[0],
            "rank_last": ranks.iloc[-1],
            "rank_change": ranks.iloc[-1] - ranks.iloc[0],
            "rank_best": ranks.min(axis=0),
            "rank_worst": ranks.max(axis=0),
            "rank_range": ranks.max(axis=0) - ranks.min(axis=0),
            "folds_used": used.sum(axis=0).astype(int),
            "mean_share": shares.mean(axis=0),
        }
    )
    rank_changes.index.name = "feature"
    rank_changes = rank_changes.sort_values(
        ["rank_range", "mean_share"], ascending=[False, False], kind="stable", na_position="last"
    )
    jumps = importance_jumps(ranks, jump_ranks=jump_ranks, jump_top=jump_top)
    per_step = jumps.groupby("fold_to").size() if len(jumps) else pd.Series(dtype=int)
    rank_stability["n_jumps"] = [int(per_step.get(to, 0)) for to in rank_stability["fold_to"]]
    return ImportanceDrift(shares, ranks, top_by_period, rank_stability, rank_changes, jumps, jump_ranks, jump_top)


def importance_jumps(
    ranks: pd.DataFrame, *, jump_ranks: int = IMPORTANCE_JUMP_RANKS, jump_top: int = IMPORTANCE_JUMP_TOP
) -> pd.DataFrame:
    """The importance jumps of a rank table (:attr:`ImportanceDrift.ranks`; NaN = unused).

    A jump: a feature ranked (used) in two consecutive folds, ``|rank_to - rank_from| >= jump_ranks``,
    and ``min(rank_from, rank_to) <= jump_top``. Unused features (NaN) never jump.

    >>> r = pd.DataFrame({"a": [1.0, 12.0], "b": [2.0, 1.0], "c": [np.nan, 2.0]}, index=[0, 1])
    >>> importance_jumps(r, jump_ranks=10, jump_top=5)[["feature", "rank_from", "rank_to"]].values.tolist()
    [['a', 1.0, 12.0]]
    """
    rows = []
    for i in range(1, len(ranks)):
        before, after = ranks.iloc[i - 1], ranks.iloc[i]
        change = after - before  # NaN unless used in both folds
        hit = (change.abs() >= jump_ranks) & (np.minimum(before, after) <= jump_top)
        for feature in change.index[hit.fillna(False).to_numpy(bool)]:
            rows.append(
                (
                    feature,
                    ranks.index[i - 1],
                    ranks.index[i],
                    float(before[feature]),
                    float(after[feature]),
                    float(change[feature]),
                )
            )
    return pd.DataFrame(rows, columns=["feature", "fold_from", "fold_to", "rank_from", "rank_to", "rank_change"])


def _period_labels(importance: pd.DataFrame, periods: pd.Series | Sequence[object] | None) -> pd.Series:
    if periods is None:
        if isinstance(importance.index, pd.DatetimeIndex):
            return pd.Series(importance.index.year, index=importance.index, name="period")
        logger.info("importance drift: no periods given and the folds are not dated; one period 'all'")
        return pd.Series("all", index=importance.index, name="period")
    if isinstance(periods, pd.Series):
        missing = importance.index.difference(periods.index)
        if len(missing):
            raise DataContractError(
                f"importance drift: periods has no label for folds {preview(missing)}. "
                "Expected a Series indexed like the importance table."
            )
        return periods.loc[importance.index].rename("period")
    labels = list(periods)
    if len(labels) != len(importance):
        raise DataContractError(
            f"importance drift: {len(labels)} period labels for {len(importance)} folds; expected one per fold."
        )
    return pd.Series(labels, index=importance.index, name="period")


def by_decision_date(table: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """``table`` (indexed by fold number) re-indexed by each fold's decision date (``test_start`` of
    :func:`fold_windows`), index name ``decision_date``.

    Raises
    ------
    DataContractError : a fold of ``table`` that ``windows`` does not know.
    """
    missing = table.index.difference(windows.index)
    if len(missing):
        raise DataContractError(f"drift report: no fold window for folds {preview(missing)}.")
    out = table.copy()
    out.index = pd.DatetimeIndex(windows.loc[table.index, "test_start"], name="decision_date")
    return out
