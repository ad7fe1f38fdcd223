"""Feature audit by future-perturbation invariance: cutting the panel after day D must not change any
feature value on days <= D.

For each cutoff D the audit builds the features twice on the same stretch of history and compares::

    reference  panel rows with dates in [start, D + horizon]      (what the backtest sees)
    truncated  panel rows with dates in [start, D]                (the future removed)
    check      every feature value on every row dated <= D is bit-identical (NaN == NaN)

``start`` is ``warmup`` trading days before D (default: the longest lookback of the feature set plus a
margin, so every feature has values to compare near D); both builds share it, so recursive averages
(EMA, Wilder) that depend on where the data starts compare exactly. ``horizon`` trading days of future
are enough to expose a look-ahead that reaches at most that far (``shift(-1)``, a centered window, a
back-fill over a gap, statistics over "the whole sample", a rank among stocks that join the index
later); pass ``horizon=None`` to compare with the panel's full future.

Cost: two builds over about ``warmup + horizon`` days per cutoff instead of the full history.

Index membership and truncation
-------------------------------
Truncation removes the rows after D together with their ``in_universe`` flags. The cross-sectional
transforms read membership of day t only, so with a point-in-time ``in_universe`` they give identical
values on both sides; a transform that decides membership from later rows (e.g. "stocks that are ever
members") changes when the future is cut and is flagged. What truncation cannot see is a membership
column that was itself built with hindsight (today's constituent list applied to the past): its values
on days <= D are the same in both builds. Membership must be point in time at the source
(``backtest.data.membership.membership_from_snapshots``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, FeatureAuditError, preview
from backtest.features.build import check_panel, compute_features
from backtest.features.registry import FeatureRegistry, default_registry
from backtest.features.sets import FeatureSetSpec, plan_features

log = logging.getLogger("backtest.features")


@dataclass(frozen=True)
class AuditFinding:
    """A feature whose values on or before ``cutoff`` change when the data after it is removed.

    ``max_abs_diff`` is ``inf`` when a value appears or disappears (NaN on one side only).
    """

    feature: str
    cutoff: pd.Timestamp
    max_abs_diff: float
    n_mismatched: int
    first_date: pd.Timestamp


@dataclass(frozen=True)
class AuditReport:
    """Outcome of ``audit_features``.

    Attributes
    ----------
    passed : True when no value changed at any cutoff.
    cutoffs : the cutoff days checked (trading days of the panel).
    findings : one per (feature, cutoff) that changed.
    n_features : feature columns checked.
    n_values_compared : values compared over all cutoffs.
    seconds : wall time of the audit.
    """

    passed: bool
    cutoffs: tuple[pd.Timestamp, ...]
    findings: tuple[AuditFinding, ...]
    n_features: int
    n_values_compared: int
    seconds: float

    @property
    def offending(self) -> list[str]:
        """Names of the features that failed at some cutoff, sorted."""
        return sorted({f.feature for f in self.findings})

    def summary(self) -> str:
        """One line for logs and run tags."""
        days = ", ".join(f"{c:%Y-%m-%d}" for c in self.cutoffs)
        if self.passed:
            return (
                f"feature audit passed: {self.n_features} features unchanged on {self.n_values_compared:,} values "
                f"when the future after {days} is removed ({self.seconds:.1f} s)"
            )
        worst = sorted(self.findings, key=lambda f: (-f.max_abs_diff, f.feature))
        detail = [f"{f.feature} at cutoff {f.cutoff:%Y-%m-%d}: max |diff| {f.max_abs_diff:.3g} "
                  f"on {f.n_mismatched} values" for f in worst]
        return (
            f"feature audit FAILED: {len(self.offending)} feature(s) change when the data after the cutoff is "
            f"removed (look-ahead): {preview(self.offending, 20)}; worst: {preview(detail, 3)}"
        )

    def raise_if_failed(self) -> None:
        """Raise ``FeatureAuditError`` naming the offending features when the audit failed."""
        if not self.passed:
            raise FeatureAuditError(
                self.summary() + ". Fix: make these features use data up to and including day t only "
                "(no shift(-n), centered windows, back-fills or statistics over the whole sample), "
                "or leave them out of the feature set."
            )


def audit_features(
    panel: pd.DataFrame,
    spec: FeatureSetSpec | None = None,
    cutoffs: Sequence[str | pd.Timestamp] | None = None,
    *,
    registry: FeatureRegistry | None = None,
    horizon: int | None = 20,
    warmup: int | None = None,
    margin: int = 10,
) -> AuditReport:
    """Check that the features of ``spec`` on days <= each cutoff do not depend on later data.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), the canonical panel.
    spec : the feature set (default: ``all``).
    cutoffs : days D to cut after; a day that is not a trading day is moved back to the last trading
        day before it. Default: three days at 25%, 50% and 75% of the panel's calendar.
    registry : the indicators (default: ``default_registry()``).
    horizon : trading days of future data the reference build keeps after D (None: all of it).
    warmup : trading days of history before D both builds start from (None: the set's longest
        lookback + ``margin``).
    margin : extra warm-up days in the default ``warmup``, so that every feature has values to compare.

    Returns
    -------
    AuditReport. It is also logged (one line; a warning when it failed). Call
    ``report.raise_if_failed()`` to stop on failure.
    """
    started = time.perf_counter()
    spec = spec or FeatureSetSpec()
    registry = registry or default_registry()
    check_panel(panel)
    plan = plan_features(spec, registry, panel.columns)
    if horizon is not None and horizon < 1:
        raise ConfigError(f"audit_features: horizon must be >= 1 trading day or None, got {horizon}")
    row_dates = panel.index.get_level_values(0).to_numpy()
    dates = np.unique(row_dates)
    if cutoffs is None:
        cutoffs = [pd.Timestamp(dates[int(len(dates) * q)]) for q in (0.25, 0.5, 0.75)]
    warmup = plan.max_lookback + margin if warmup is None else warmup

    checked: list[pd.Timestamp] = []
    findings: list[AuditFinding] = []
    compared = 0
    for cutoff in cutoffs:
        day = pd.Timestamp(cutoff)
        p = int(np.searchsorted(dates, day.to_datetime64(), side="right")) - 1
        if p < 0:
            raise ConfigError(
                f"audit_features: cutoff {day:%Y-%m-%d} is before the panel's first day "
                f"{pd.Timestamp(dates[0]):%Y-%m-%d}; choose a cutoff inside the panel"
            )
        if p == len(dates) - 1:
            log.warning("feature audit: cutoff %s is the panel's last day; there is no future to remove, skipped", day)
            continue
        start = max(0, p - warmup)
        end = len(dates) - 1 if horizon is None else min(len(dates) - 1, p + horizon)
        lo = int(np.searchsorted(row_dates, dates[start], side="left"))
        mid = int(np.searchsorted(row_dates, dates[p], side="right"))
        hi = int(np.searchsorted(row_dates, dates[end], side="right"))
        reference, _ = compute_features(panel.iloc[lo:hi], plan, rows="all")
        truncated, _ = compute_features(panel.iloc[lo:mid], plan, rows="all")
        ref = reference[: mid - lo]
        cutoff_day = pd.Timestamp(dates[p])
        checked.append(cutoff_day)
        compared += truncated.size
        same = (ref == truncated) | (np.isnan(ref) & np.isnan(truncated))
        for j in np.flatnonzero(~same.all(axis=0)):
            bad = ~same[:, j]
            a, b = ref[bad, j].astype(np.float64), truncated[bad, j].astype(np.float64)
            diff = np.where(np.isnan(a) | np.isnan(b), np.inf, np.abs(a - b))
            first_row = lo + int(np.argmax(bad))
            findings.append(
                AuditFinding(plan.columns[j].name, cutoff_day, float(diff.max()), int(bad.sum()),
                             pd.Timestamp(row_dates[first_row]))
            )
        del reference, truncated, ref, same
    report = AuditReport(
        passed=not findings,
        cutoffs=tuple(checked),
        findings=tuple(findings),
        n_features=len(plan.columns),
        n_values_compared=compared,
        seconds=time.perf_counter() - started,
    )
    (log.info if report.passed else log.warning)(report.summary())
    return report
