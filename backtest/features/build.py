"""Build the feature matrix of a panel: indicators, time aggregates and cross-sectional transforms.

::

    panel (date, code) --MarketData--> wide inputs (date x code, float64)
          --indicator.compute--> wide indicator --[_ma{w}]--> gather the output rows
          --raw / cs_rank / cs_z / ind_neu--> one float32 column of the FeatureMatrix

Each indicator is computed, transformed and written to the output before the next one starts, so the
memory held besides the output matrix is the wide inputs and one indicator at a time (the peak against
its 3x-the-matrix target: benchmarks/README.md, bench_features.py). The output may be a memory map of the
feature cache's file (``allocate``): it is then written a chunk of rows at a time and each chunk's pages
are dropped once written (:mod:`backtest.memory`), so the process does not hold the matrix while it builds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from backtest.code_fingerprint import code_fingerprint
from backtest.data import tradability
from backtest.data.fingerprint import panel_fingerprint
from backtest.data.panel import WideGrid
from backtest.errors import ConfigError, DataContractError, preview
from backtest.features.cross_section import DailyCrossSection
from backtest.features.inputs import MarketData, activity_min_periods
from backtest.features.registry import FEATURE_CODE_VERSION, FeatureRegistry, default_registry
from backtest.features.rolling import rolling_mean
from backtest.features.sets import FeatureColumn, FeaturePlan, FeatureSetSpec, plan_features
from backtest.memory import drop_pages, read_columns, row_chunks

log = logging.getLogger("backtest.features")

Rows = Literal["eligible", "all"]
#: makes the float32 feature matrix of a shape (n_rows, n_features)
Allocate = Callable[[tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class FeatureCube:
    """The [date, code, feature] view of a feature matrix (for sequence models such as the transformer).

    Attributes
    ----------
    dates : DatetimeIndex (n_dates), the days with at least one row.
    codes : Index (n_codes), the stocks with at least one row.
    values : float32 (n_dates, n_codes, n_features); NaN where the matrix has no row.
    present : bool (n_dates, n_codes); True where the matrix has a row (the mask for missing stocks).
    names : the feature names (last axis).
    """

    dates: pd.DatetimeIndex
    codes: pd.Index
    values: np.ndarray
    present: np.ndarray
    names: list[str]


@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """Features of the eligible (date, code) rows of a panel.

    Attributes
    ----------
    values : float32 (n_rows, n_features); NaN = missing (not enough history, suspended, undefined).
    names : feature names, one per column.
    index : MultiIndex (date, code) of the rows, sorted like the panel.
    fingerprint : hash of (data fingerprint, feature set, registry, row mode, FEATURE_CODE_VERSION and
        the feature code's fingerprint, ``code_fingerprint("features")``).
    """

    values: np.ndarray
    names: list[str]
    index: pd.MultiIndex
    fingerprint: str

    def __post_init__(self) -> None:
        if self.values.dtype != np.float32 or self.values.ndim != 2:
            raise ValueError(
                f"FeatureMatrix.values must be a 2-D float32 array, got {self.values.dtype} {self.values.shape}"
            )
        if self.values.shape != (len(self.index), len(self.names)):
            raise ValueError(
                f"FeatureMatrix: values {self.values.shape} do not match "
                f"{len(self.index)} rows x {len(self.names)} names"
            )
        if len(set(self.names)) != len(self.names):
            raise ValueError("FeatureMatrix: feature names must be unique")

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)

    def column(self, name: str) -> np.ndarray:
        """The values of one feature (a view, aligned with ``index``)."""
        return self.values[:, self._positions([name])[0]]

    def to_frame(self) -> pd.DataFrame:
        """A DataFrame copy indexed by (date, code) with one column per feature."""
        return pd.DataFrame(self.values, index=self.index, columns=pd.Index(self.names, name="feature"), copy=True)

    def select(self, names: list[str] | tuple[str, ...]) -> FeatureMatrix:
        """A matrix with only the given features, in this matrix's column order (e.g. the top-k set).

        The fingerprint changes with the selection.
        """
        pos = sorted(set(self._positions(list(names))))
        chosen = [self.names[p] for p in pos]
        digest = hashlib.blake2b(f"{self.fingerprint}|select|{','.join(chosen)}".encode(), digest_size=8).hexdigest()
        return FeatureMatrix(read_columns(self.values, pos), chosen, self.index, digest)

    def cube(self, features: list[str] | None = None) -> FeatureCube:
        """The [date, code, feature] view; ``features`` picks and orders the last axis (default all).

        Memory: n_dates x n_codes x n_features x 4 bytes (a new array).
        """
        names = list(self.names) if features is None else list(features)
        pos = self._positions(names)
        row, dates = pd.factorize(self.index.get_level_values(0), sort=True)
        col, codes = pd.factorize(self.index.get_level_values(1), sort=True)
        values = np.full((len(dates), len(codes), len(names)), np.nan, dtype=np.float32)
        values[row, col] = self.values[:, pos]
        present = np.zeros((len(dates), len(codes)), dtype=bool)
        present[row, col] = True
        return FeatureCube(pd.DatetimeIndex(dates, name="date"), pd.Index(codes, name="code"), values, present, names)

    def _positions(self, names: list[str]) -> list[int]:
        lookup = {n: i for i, n in enumerate(self.names)}
        missing = [n for n in names if n not in lookup]
        if missing:
            raise ConfigError(
                f"unknown feature name(s) {preview(missing)}; this matrix has {len(self.names)} features "
                f"({preview(self.names, 8)}). Fix the names (see FeatureMatrix.names)."
            )
        return [lookup[n] for n in names]


def feature_fingerprint(
    data_fingerprint: str, spec: FeatureSetSpec, registry: FeatureRegistry, rows: Rows = "eligible"
) -> str:
    """Hash identifying a feature matrix: data, feature set, registry, row mode and feature code.

    The feature code enters twice: as the hash of its source and packages (``code_fingerprint("features")``,
    so that any edit of the feature code misses the cache, and an edit elsewhere does not) and as the
    hand-kept ``FEATURE_CODE_VERSION`` (to retire cached features for a reason the source does not show).
    """
    payload = json.dumps(
        {
            "data": data_fingerprint,
            "spec": spec.as_dict(),
            "registry": registry.fingerprint(),
            "rows": rows,
            "code_version": FEATURE_CODE_VERSION,
            "code": code_fingerprint("features"),
        },
        sort_keys=True,
    )
    return hashlib.blake2b(payload.encode(), digest_size=16).hexdigest()


def build_features(
    panel: pd.DataFrame,
    spec: FeatureSetSpec | None = None,
    *,
    data_fingerprint: str | None = None,
    registry: FeatureRegistry | None = None,
    rows: Rows = "eligible",
    allocate: Allocate | None = None,
) -> FeatureMatrix:
    """Compute the feature matrix of ``panel`` for the feature set ``spec``.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), sorted and unique; the canonical panel
        (``backtest.data.schema``). Any subset of the optional columns works: indicators whose inputs
        are missing are dropped with one warning on the ``backtest.features`` logger.
    spec : the feature set (default: ``FeatureSetSpec()``, the ``all`` set).
    data_fingerprint : the panel's fingerprint (``backtest.data.fingerprint.panel_fingerprint``);
        computed here when not given.
    registry : the indicators to draw from (default: ``default_registry()``); pass an extended registry
        to build with extra indicators.
    rows : ``"eligible"`` (default): the rows of the day's universe (``in_universe`` True when the panel
        has it, else every row). ``"all"``: every panel row; cross-sectional columns are NaN for
        non-members (e.g. for sequence models that need a member's history before it joined).
    allocate : makes the float32 output of a given shape (default: ``np.empty``); the feature cache
        passes a memory map of its entry's file.

    Returns
    -------
    FeatureMatrix with ``values`` float32 (n_rows, n_features), rows in panel order.

    Warnings
    --------
    Every registered indicator is checked to be causal by ``audit_features`` (value at day t from data
    up to and including t). An indicator added through ``registry`` is only as causal as its code:
    audit it.
    """
    spec = spec or FeatureSetSpec()
    registry = registry or default_registry()
    if rows not in ("eligible", "all"):
        raise ConfigError(f"build_features: rows must be 'eligible' or 'all', got {rows!r}")
    check_panel(panel)
    plan = plan_features(spec, registry, panel.columns)
    message = plan.dropped_message()
    if message:
        log.warning(message)
    started = time.perf_counter()
    values, keep = compute_features(panel, plan, rows, allocate)
    fingerprint = feature_fingerprint(data_fingerprint or panel_fingerprint(panel), spec, registry, rows)
    log.info(
        "features %r: %d columns x %d rows (%.0f MB) in %.1f s",
        spec.name,
        values.shape[1],
        values.shape[0],
        values.nbytes / 2**20,
        time.perf_counter() - started,
    )
    return FeatureMatrix(values, plan.names, panel.index[keep], fingerprint)


def check_panel(panel: pd.DataFrame) -> None:
    """The minimal contract the feature builder relies on (the loaders validate the full one)."""
    if not isinstance(panel.index, pd.MultiIndex) or panel.index.nlevels != 2:
        raise DataContractError(
            f"features: expected a panel indexed by (date, code), got an index of type "
            f"{type(panel.index).__name__} with {panel.index.nlevels} level(s). Fix: panel.set_index(['date', 'code'])."
        )
    if "close" not in panel.columns:
        raise DataContractError(
            f"features: the panel has no `close` column (columns: {preview(list(panel.columns), 10)}); "
            "every feature set needs at least close."
        )
    if len(panel) == 0:
        raise DataContractError("features: the panel is empty")


def compute_features(
    panel: pd.DataFrame, plan: FeaturePlan, rows: Rows = "eligible", allocate: Allocate | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The float32 values of ``plan`` (in an array made by ``allocate``, default ``np.empty``) and the
    panel row positions they belong to.

    Returns
    -------
    values : float32 (n_rows, len(plan.columns)).
    keep : int array (n_rows,), positions of the rows in ``panel``.
    """
    grid = WideGrid.of(panel)
    market = MarketData(panel, grid)
    if len(market.cells) > 1 and not np.all(np.diff(market.cells) > 0):
        bad = np.flatnonzero(np.diff(market.cells) <= 0)[:3] + 1
        raise DataContractError(
            "features: the panel index must be sorted by (date, code) and unique; offending rows: "
            f"{preview([panel.index[i] for i in bad])}. Fix: panel.sort_index() and drop duplicate rows."
        )
    eligible = tradability.eligible(panel, grid).ravel()[market.cells]  # per panel row
    keep = np.flatnonzero(eligible) if rows == "eligible" else np.arange(len(panel))
    cells = market.cells[keep]  # flat grid cells of the output rows, increasing: a fast gather
    daily = DailyCrossSection.of(grid.row_pos[keep], eligible[keep], grid.shape[0])
    transforms: dict[str, Callable[[np.ndarray], np.ndarray]] = {"cs_rank": daily.rank_pct, "cs_z": daily.zscore}
    if any(col.transform == "ind_neu" for col in plan.columns):
        industry = np.ravel(market.industry).take(cells)
        transforms["ind_neu"] = lambda v: daily.industry_neutral(v, industry)
    columns_of: dict[str, list[FeatureColumn]] = {}
    for column in plan.columns:
        columns_of.setdefault(column.base, []).append(column)

    shape = (len(keep), len(plan.columns))
    values = np.empty(shape, dtype=np.float32) if allocate is None else allocate(shape)
    sink = _ColumnSink(values)
    written: list[str] = []
    for ind in plan.indicators:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            wide = np.asarray(ind.compute(market), dtype=np.float64)
        if wide.shape != grid.shape:
            raise ValueError(f"indicator {ind.name!r} returned shape {wide.shape}, expected {grid.shape}")
        for window, group in itertools.groupby(columns_of[ind.name], key=lambda col: col.window):
            source = wide if window is None else rolling_mean(wide, window, activity_min_periods(window))
            with np.errstate(over="ignore", invalid="ignore"):
                value32 = np.ravel(source).take(cells).astype(np.float32)
            value32[~np.isfinite(value32)] = np.nan  # inf (e.g. x / 0) and float32 overflow are missing
            for column in group:
                if column.transform == "raw":
                    sink.write(value32)
                else:  # transforms see exactly the stored raw values
                    sink.write(transforms[column.transform](value32))
                written.append(column.name)
        del wide
    sink.flush()
    assert written == plan.names, "columns are written in plan order"
    return values, keep


class _ColumnSink:
    """Writes columns into a C-ordered matrix through a column-major buffer (fast strided stores), a
    chunk of rows at a time; the pages of a file-backed matrix are dropped after each chunk.

    Each flush is a pass over every row of the matrix, so ``width`` columns a pass trade the buffer's memory
    (rows x width float32) against the passes: at 5,000 members (9.7 million rows, 285 columns) 96 columns
    take 3 passes and a 3.7 GB buffer, and the main job's feature stage 71.5 s instead of 110.8 s with 32
    (9 passes over the file's pages; benchmarks/README.md, "Scale")."""

    def __init__(self, out: np.ndarray, width: int = 96) -> None:
        self.out = out
        self.buf = np.empty((out.shape[0], min(width, max(out.shape[1], 1))), dtype=np.float32, order="F")
        self.filled = 0
        self.start = 0

    def write(self, column: np.ndarray) -> None:
        self.buf[:, self.filled] = column
        self.filled += 1
        if self.filled == self.buf.shape[1]:
            self.flush()

    def flush(self) -> None:
        if self.filled:
            cols = slice(self.start, self.start + self.filled)
            for rows in row_chunks(len(self.out), self.out.strides[0]):
                self.out[rows, cols] = self.buf[rows, : self.filled]
                drop_pages(self.out, rows.start, rows.stop)
            self.start += self.filled
            self.filled = 0
