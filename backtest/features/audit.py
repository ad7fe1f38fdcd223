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

Cost: two builds over about ``warmup + horizon`` days per cutoff instead of the full history. Cutoffs
within ``GROUP_GAP`` trading days of each other share one reference build (from the group's first
cutoff's ``start`` to its last cutoff + ``horizon``), so a second cutoff next to the first costs about
one warm-up of truncated build instead of two warm-ups and a horizon.

Where the cutoffs fall (:func:`choose_cutoffs`)
-----------------------------------------------
A look-ahead can depend on where the cutoff falls: a month-end flag read from the next day's date, a
week-start feature that peeks at the next day, a back-fill that only reaches inside a suspension spell,
a rank among tomorrow's index members. Evenly spread cutoffs meet those positions by luck of the
calendar. :func:`choose_cutoffs` spends the cost of ``n`` single cutoffs on days that cover the
positions of :data:`SITUATIONS` (:func:`cutoff_situations`), in clusters of neighbouring days that
share their reference build, and reports which it covered (``AuditReport.covered``).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from backtest.data import tradability
from backtest.data.panel import WideGrid
from backtest.errors import ConfigError, FeatureAuditError, preview
from backtest.features.build import check_panel, compute_features
from backtest.features.registry import FeatureRegistry, default_registry
from backtest.features.sets import FeatureSetSpec, plan_features
from backtest.leakage import GuardStatus

log = logging.getLogger("backtest.features")

#: Trading days of future the reference build keeps after a cutoff (``audit_features(horizon=...)``).
AUDIT_HORIZON = 20
#: Cutoffs at most this many trading days apart share one reference build.
GROUP_GAP = 5

#: Positions of a cutoff day ``D`` that a look-ahead can hide behind (see :func:`cutoff_situations`).
SITUATIONS: tuple[str, ...] = (
    "month_end",  # D is the last trading day of its month
    "month_start",  # D is the first trading day of its month
    "week_end",  # D is the last trading day of its week
    "week_start",  # D is the first trading day of its week
    "suspension",  # a stock is inside a spell without trading: none on D nor on D + 1
    "suspension_end",  # a stock's spell ends on D: no trading on D, trading again on D + 1
    "reconstitution_eve",  # a stock joins or leaves the index on D + 1
    "reconstitution",  # a stock joins or leaves the index on D (in_universe differs from D - 1)
)


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
    rows_built : panel rows the audit's builds computed, reference and truncated builds together (what
        its time grows with).
    seconds : wall time of the audit.
    covered : situation of :data:`SITUATIONS` -> the first cutoff checked in that position.
    uncovered : situations the panel holds on some day but no checked cutoff was in (none in the period
        searched, or beyond the audit's budget: more cutoffs would cover them).
    absent : situations no day of the panel is in (no suspension, no ``in_universe`` column, ...).
    """

    passed: bool
    cutoffs: tuple[pd.Timestamp, ...]
    findings: tuple[AuditFinding, ...]
    n_features: int
    n_values_compared: int
    seconds: float
    rows_built: int = 0
    covered: Mapping[str, pd.Timestamp] = field(default_factory=dict)
    uncovered: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()

    @property
    def status(self) -> GuardStatus:
        """The ``feature_audit`` verdict of this audit: ``"passed"`` or ``"failed"`` (a run that switched
        the audit off has no report, and its verdict is ``"disabled"``)."""
        return "passed" if self.passed else "failed"

    @property
    def offending(self) -> list[str]:
        """Names of the features that failed at some cutoff, sorted."""
        return sorted({f.feature for f in self.findings})

    def coverage(self) -> str:
        """Which cutoff positions the audit covered, e.g. ``month_end 2024-05-31, ...; not covered: ...``."""
        text = ", ".join(f"{name} {day:%Y-%m-%d}" for name, day in self.covered.items()) or "none"
        text += f"; not covered: {', '.join(self.uncovered)}" if self.uncovered else ""
        return text + (f"; not in the data: {', '.join(self.absent)}" if self.absent else "")

    def summary(self) -> str:
        """One line for logs and run tags."""
        days = ", ".join(f"{c:%Y-%m-%d}" for c in self.cutoffs)
        if self.passed:
            return (
                f"feature audit passed: {self.n_features} features unchanged on {self.n_values_compared:,} values "
                f"when the future after {days} is removed ({self.seconds:.1f} s); positions covered: "
                f"{self.coverage()}"
            )
        worst = sorted(self.findings, key=lambda f: (-f.max_abs_diff, f.feature))
        detail = [
            f"{f.feature} at cutoff {f.cutoff:%Y-%m-%d}: max |diff| {f.max_abs_diff:.3g} on {f.n_mismatched} values"
            for f in worst
        ]
        return (
            f"feature audit FAILED: {len(self.offending)} feature(s) change when the data after the cutoff is "
            f"removed (look-ahead): {preview(self.offending, 20)}; worst: {preview(detail, 3)}; positions "
            f"covered: {self.coverage()}"
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
    horizon: int | None = AUDIT_HORIZON,
    warmup: int | None = None,
    margin: int = 10,
) -> AuditReport:
    """Check that the features of ``spec`` on days <= each cutoff do not depend on later data.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), the canonical panel.
    spec : the feature set (default: ``all``).
    cutoffs : days D to cut after; a day that is not a trading day is moved back to the last trading
        day before it. Default: ``choose_cutoffs(panel, 3, horizon=horizon)``, the cost of three
        cutoffs spent on the positions of :data:`SITUATIONS` anywhere in the panel.
    registry : the indicators (default: ``default_registry()``).
    horizon : trading days of future data the reference build keeps after D (None: all of it).
    warmup : trading days of history before D both builds start from (None: the set's longest
        lookback + ``margin``).
    margin : extra warm-up days in the default ``warmup``, so that every feature has values to compare.

    Returns
    -------
    AuditReport, with the situations its cutoffs covered. It is also logged (one line; a warning when
    it failed). Call ``report.raise_if_failed()`` to stop on failure.
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
        cutoffs = choose_cutoffs(panel, 3, horizon=horizon or AUDIT_HORIZON)
    warmup = plan.max_lookback + margin if warmup is None else warmup

    positions: set[int] = set()
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
        positions.add(p)

    checked: list[pd.Timestamp] = []
    findings: list[AuditFinding] = []
    compared = built = 0
    for group in cutoff_groups(sorted(positions)):
        # One reference build serves every cutoff of the group; each truncated build shares its start.
        start = max(0, group[0] - warmup)
        end = len(dates) - 1 if horizon is None else min(len(dates) - 1, group[-1] + horizon)
        lo = int(np.searchsorted(row_dates, dates[start], side="left"))
        hi = int(np.searchsorted(row_dates, dates[end], side="right"))
        reference, _ = compute_features(panel.iloc[lo:hi], plan, rows="all")
        built += hi - lo
        for p in group:
            mid = int(np.searchsorted(row_dates, dates[p], side="right"))
            truncated, _ = compute_features(panel.iloc[lo:mid], plan, rows="all")
            built += mid - lo
            ref = reference[: mid - lo]
            cutoff_day = pd.Timestamp(dates[p])
            checked.append(cutoff_day)
            compared += truncated.size
            if np.array_equal(ref.view(np.uint32), truncated.view(np.uint32)):
                continue  # bit-identical: the usual case, three times faster to see than value by value
            same = (ref == truncated) | (np.isnan(ref) & np.isnan(truncated))
            for j in np.flatnonzero(~same.all(axis=0)):
                bad = ~same[:, j]
                a, b = ref[bad, j].astype(np.float64), truncated[bad, j].astype(np.float64)
                diff = np.where(np.isnan(a) | np.isnan(b), np.inf, np.abs(a - b))
                first_row = lo + int(np.argmax(bad))
                findings.append(
                    AuditFinding(
                        plan.columns[j].name,
                        cutoff_day,
                        float(diff.max()),
                        int(bad.sum()),
                        pd.Timestamp(row_dates[first_row]),
                    )
                )
        del reference
    table = cutoff_situations(panel)
    held = table.any()
    at_cutoffs = table.loc[checked]
    covered = {name: at_cutoffs.index[at_cutoffs[name].to_numpy()][0] for name in SITUATIONS if at_cutoffs[name].any()}
    report = AuditReport(
        passed=not findings,
        cutoffs=tuple(checked),
        findings=tuple(findings),
        n_features=len(plan.columns),
        n_values_compared=compared,
        seconds=time.perf_counter() - started,
        rows_built=built,
        covered=covered,
        uncovered=tuple(name for name in SITUATIONS if held[name] and name not in covered),
        absent=tuple(name for name in SITUATIONS if not held[name]),
    )
    (log.info if report.passed else log.warning)(report.summary())
    return report


# --- where the cutoffs fall ---------------------------------------------------------------------------


def cutoff_situations(panel: pd.DataFrame) -> pd.DataFrame:
    """The positions of :data:`SITUATIONS` each trading day of ``panel`` is in, as a cutoff.

    Returns
    -------
    DataFrame of bool indexed by the panel's trading days, one column per situation. A day is in a
    stock situation (suspension, reconstitution) when at least one stock is. Not trading is the rule
    of :mod:`backtest.data.tradability` (suspended, zero volume), or a missing row inside the stock's
    listed life; index changes are read from ``in_universe`` between two rows of the stock (never
    when the panel has no such column). Positions that need the next day are False on the last day.

    Examples
    --------
    >>> dates = pd.bdate_range("2024-01-29", periods=5, name="date")  # Mon 29 Jan .. Fri 2 Feb
    >>> panel = pd.DataFrame({"close": 10.0, "volume": [1.0, 0.0, 0.0, 1.0, 1.0]},
    ...                      index=pd.MultiIndex.from_product([dates, ["600000.SH"]], names=["date", "code"]))
    >>> cutoff_situations(panel).astype(int)[["month_end", "week_start", "suspension", "suspension_end"]]
                month_end  week_start  suspension  suspension_end
    date
    2024-01-29          0           1           0               0
    2024-01-30          0           0           1               0
    2024-01-31          1           0           0               1
    2024-02-01          0           0           0               0
    2024-02-02          0           0           0               0
    """
    grid = WideGrid.of(panel)
    dates = grid.dates
    T = len(dates)
    out = pd.DataFrame(False, index=dates, columns=list(SITUATIONS))
    for period, first, last in (("M", "month_start", "month_end"), ("W", "week_start", "week_end")):
        key = dates.to_period(period).asi8
        change = np.ones(T + 1, dtype=bool)
        change[1:-1] = key[1:] != key[:-1]
        out[first] = change[:-1]
        out[last] = change[1:]
    out.iloc[-1, out.columns.get_loc("month_end")] = False  # the next day is unknown: not a known end
    out.iloc[-1, out.columns.get_loc("week_end")] = False

    present = grid.present()
    alive = np.maximum.accumulate(present, axis=0) & np.maximum.accumulate(present[::-1], axis=0)[::-1]
    traded = present & ~tradability.suspended(panel, grid)
    idle = alive & ~traded  # listed, not trading (suspended, zero volume or a missing row)
    if T > 1:
        out.iloc[:-1, out.columns.get_loc("suspension")] = (idle[:-1] & idle[1:]).any(axis=1)
        out.iloc[:-1, out.columns.get_loc("suspension_end")] = (idle[:-1] & traded[1:]).any(axis=1)
        if "in_universe" in panel.columns:
            member = tradability.eligible(panel, grid)
            change = (present[1:] & present[:-1] & (member[1:] != member[:-1])).any(axis=1)
            out.iloc[1:, out.columns.get_loc("reconstitution")] = change
            out.iloc[:-1, out.columns.get_loc("reconstitution_eve")] = change
    return out


def cutoff_groups(positions: Sequence[int]) -> list[list[int]]:
    """Sorted cutoff positions (trading-day numbers) split where they are more than ``GROUP_GAP`` apart.

    >>> cutoff_groups([10, 11, 15, 40, 100, 104])
    [[10, 11, 15], [40], [100, 104]]
    """
    groups: list[list[int]] = []
    for p in positions:
        if groups and p - groups[-1][-1] <= GROUP_GAP:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def _audit_cost(positions: Sequence[int], horizon: int) -> tuple[int, int]:
    """The cost of auditing at ``positions``: (warm-ups built, further trading days built).

    A group of ``k`` cutoffs at offsets ``o_i`` from its first, spanning ``s`` days, builds a reference
    of ``warmup + s + horizon`` days and ``k`` truncated builds of ``warmup + o_i`` days: ``k + 1``
    warm-ups and ``horizon + s + sum(o_i)`` days. One lone cutoff: 2 warm-ups and ``horizon`` days.
    """
    warmups = days = 0
    for group in cutoff_groups(sorted(positions)):
        offsets = [p - group[0] for p in group]
        warmups += len(group) + 1
        days += horizon + offsets[-1] + sum(offsets)
    return warmups, days


def choose_cutoffs(
    panel: pd.DataFrame,
    n: int = 3,
    *,
    period: tuple[str | pd.Timestamp, str | pd.Timestamp] | None = None,
    horizon: int = AUDIT_HORIZON,
) -> list[pd.Timestamp]:
    """Cutoff days that cover the positions of :data:`SITUATIONS`, for the cost of ``n`` lone cutoffs.

    The budget is that of ``n`` cutoffs audited one by one: ``2 n`` warm-ups and ``n * horizon`` more
    trading days of builds (:func:`audit_features`; both parts must fit, so the cost is at most that
    of ``n`` lone cutoffs whatever the feature set's warm-up). Neighbouring cutoffs share a reference
    build (:func:`cutoff_groups`), so a cluster of days around a month end, a reconstitution or the
    end of a suspension costs little more than one cutoff per day. Days are added greedily, one or two
    neighbouring days at a time: the most situations not yet covered per warm-up spent (ties: more
    situations, fewer days built, then farthest from the days already chosen). When nothing more can
    be covered, the rest of the budget goes to lone cutoffs as far as possible from the chosen ones.

    Parameters
    ----------
    panel : DataFrame indexed by (date, code), the canonical panel.
    n : the budget, in lone cutoffs (0: none).
    period : (first, last) day to choose from (default: the whole panel); e.g. the test period.
    horizon : the audit's ``horizon``. Days with that much future after them are preferred; the
        panel's last day (no future) is never chosen.

    Returns
    -------
    The cutoff days, sorted. Situations the period does not hold stay uncovered (the report says so).
    """
    if n <= 0:
        return []
    table = cutoff_situations(panel)
    dates = table.index
    T = len(dates)
    first, last = (dates[0], dates[-1]) if period is None else (pd.Timestamp(period[0]), pd.Timestamp(period[1]))
    inside = np.flatnonzero((dates >= first) & (dates <= last) & (np.arange(T) <= T - 2))
    roomy = inside[inside <= T - 1 - horizon]
    candidates = roomy if len(roomy) else inside
    if len(candidates) == 0:
        return []
    situations = table.to_numpy()[candidates]  # (candidates, situations)
    # Moves: one day, or two days close enough to share a reference build (which can cover more per
    # build than either alone, e.g. a month's last day and the next month's first).
    moves = [(i,) for i in range(len(candidates))]
    moves += [
        (i, j)
        for i in range(len(candidates))
        for j in range(i + 1, min(len(candidates), i + GROUP_GAP + 1))
        if candidates[j] - candidates[i] <= GROUP_GAP
    ]
    reach = np.array([situations[list(m)].any(axis=0) for m in moves])  # (moves, situations)
    size = np.array([len(m) for m in moves])
    budget = (2 * n, n * horizon)
    chosen: list[int] = []
    covered = np.zeros(len(SITUATIONS), dtype=bool)

    def add(fill: bool) -> bool:
        base = _audit_cost(chosen, horizon) if chosen else (0, 0)
        gains = np.where(size == 1, 1, 0) if fill else (reach & ~covered).sum(axis=1)
        bound = gains / size  # a move of k days spends at least k warm-ups
        best, best_key = None, None
        for m in np.argsort(-bound, kind="stable"):
            if gains[m] == 0 or (best_key is not None and bound[m] < best_key[0]):
                break
            move, gain = moves[m], int(gains[m])
            days = [int(candidates[i]) for i in move]
            if any(p in chosen for p in days):
                continue
            cost = _audit_cost([*chosen, *days], horizon)
            if cost[0] > budget[0] or cost[1] > budget[1] or (fill and cost[0] - base[0] < 2):
                continue  # over the budget; filling adds lone cutoffs only, away from the chosen ones
            spread = min((abs(d - p) for d in days for p in chosen), default=0)
            key = (gain / (cost[0] - base[0]), gain, -(cost[1] - base[1]), spread)
            if best_key is None or key > best_key:
                best, best_key = m, key
        if best is None:
            return False
        chosen.extend(int(candidates[i]) for i in moves[best])
        covered[:] |= reach[best]
        return True

    while add(fill=False):
        pass
    while add(fill=True):
        pass
    return [dates[p] for p in sorted(chosen)]
