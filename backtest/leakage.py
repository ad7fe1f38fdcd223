"""The leakage guards' vocabulary and verdicts, defined once.

docs/design.md, "Leakage guards": a model that decides at day ``d`` may train only on samples whose
``label_end`` is at most ``cutoff(d)`` (``embargo`` trading days before ``d``), and every fold proves it.
This module holds what the engine, the tracking tags and the reports share about that proof:

- :class:`LeakageRecord`: one fold's evidence (cutoffs, the largest ``label_end`` used, purged counts);
- :func:`check_fold`: the rule itself, checked against ``label_end`` (raises :class:`LeakageError`);
- :func:`fold_rows`: which rows of a (date, code) table a fold trains, validates and predicts on;
- :data:`GUARD_STATUSES`, :func:`leak_guard_status` and :func:`not_comparable_reasons`: the verdicts
  that become the ``leak_guard``, ``feature_audit``, ``comparable`` (no reason) and ``comparable_reason``
  tags (the audit's own verdict is
  :attr:`backtest.features.audit.AuditReport.status`; a run without a report switched the audit off).

The verdicts (tag values)::

    leak_guard     passed    every fold purged from label_end and checked
                   failed    a purged fold trained on a label past its cutoff (the run raises)
                   disabled  the purge was switched off (backtest.purge=false, a leak demonstration)
    feature_audit  passed    past feature values did not change when the future was removed
                   failed    some did (the run raises, naming the features)
                   disabled  the audit was switched off (engine.audit_cutoffs=0)
    comparable     true only when both guards passed (nothing failed and nothing was switched off) and
                   the book could trade on at least MIN_TRADABLE_SHARE (90%) of the test days

A test day on which the book could trade is one on which at least ``top_k`` index members trade
(:attr:`backtest.portfolio.PortfolioResult.tradable_days`). A period that the market left mostly
untradable (suspensions, zero volume, missing prices) still yields a Sharpe ratio, but from the few
days that traded: its PSR and DSR count every day as an observation, so they claim evidence the days
did not give. ``comparable_reason`` says why a run is not comparable. A leak demonstration is tagged
``leak_demo=true`` besides; its leaky run is not comparable because its purge is off, and its purged
twin (``backtest.purge=true``) is comparable because its guards passed.

Examples
--------
>>> traded = dict(tradable_days=120, test_days=123)
>>> not_comparable_reasons("passed", "passed", **traded)
()
>>> len(not_comparable_reasons("passed", "disabled", **traded))
1
>>> (reason,) = not_comparable_reasons("passed", "passed", tradable_days=6, test_days=123)
>>> reason.split(":")[0]
'the book could trade on 6 of 123 test days (4.9%), fewer than the 90% a comparable run needs'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal, Protocol

import numpy as np
import pandas as pd

from backtest.errors import DataContractError, InsufficientHistoryError, LeakageError, preview

GuardStatus = Literal["passed", "failed", "disabled"]


class FoldDates(Protocol):
    """What the guards read of a fold (:class:`backtest.splits.Fold` is one): its dates and its record."""

    fold: int
    decision_date: pd.Timestamp
    predict_dates: pd.DatetimeIndex
    train_dates: pd.DatetimeIndex
    valid_dates: pd.DatetimeIndex
    record: LeakageRecord

    @property
    def cutoff(self) -> pd.Timestamp: ...


GUARD_STATUSES: tuple[str, ...] = ("passed", "failed", "disabled")

#: The least share of a run's test days (its return days) on which the top-k book could trade, for the
#: run to be comparable. Each test day counts as one observation in the Sharpe ratio's standard error,
#: the PSR and the DSR; a day on which nothing could trade is no observation, so with a share ``s`` of
#: tradable days the PSR's z statistic is overstated by about ``1 / sqrt(s)``: 5% at 90%, within the
#: noise of the Sharpe ratio itself, 41% at 50%, and 4.5 times for 6 days of 123. A real A-share
#: universe trades on practically every day (suspensions hit a few members, never the top k), so 90%
#: refuses no honest test period and catches a data export whose suspensions or volumes are broken.
MIN_TRADABLE_SHARE = 0.9

_NS = "datetime64[ns]"


@dataclass(frozen=True)
class LeakageRecord:
    """The leakage evidence of one fold: what was trained on, up to which ``label_end``, and the cutoff.

    ``leaky`` is True when a training or validation ``label_end`` lies after its cutoff; it can only be
    True when the purge was switched off (``purge=False``), because a purged fold that breaks the rule
    raises :class:`~backtest.errors.LeakageError` instead.
    """

    fold: int
    decision_date: pd.Timestamp
    cutoff: pd.Timestamp
    embargo: int
    purge: bool
    train_start: pd.Timestamp
    train_end: pd.Timestamp
    valid_start: pd.Timestamp | None
    valid_end: pd.Timestamp | None
    valid_cutoff: pd.Timestamp | None
    max_train_label_end: pd.Timestamp
    max_valid_label_end: pd.Timestamp | None
    n_train_samples: int
    n_valid_samples: int
    n_purged: int
    leaky: bool

    @property
    def leak_guard(self) -> GuardStatus:
        """The fold's verdict: ``"passed"``, ``"failed"`` or ``"disabled"`` (the purge was off)."""
        return leak_guard_status([self])

    def to_dict(self) -> dict[str, object]:
        """Plain-Python form (dates as ``YYYY-MM-DD`` strings) for JSON artifacts and tracking."""
        out: dict[str, object] = {}
        for key, value in asdict(self).items():
            out[key] = value.strftime("%Y-%m-%d") if isinstance(value, pd.Timestamp) else value
        out["leak_guard"] = self.leak_guard
        return out


# ----------------------------------------------------------------------------------------------------
# Verdicts


def leak_guard_status(records: Iterable[LeakageRecord]) -> GuardStatus:
    """The ``leak_guard`` verdict of a set of folds: ``disabled`` when any fold ran without the purge,
    else ``failed`` when any is leaky, else ``passed``.

    >>> leak_guard_status([])
    'passed'
    """
    records = list(records)
    if any(not r.purge for r in records):
        return "disabled"
    return "failed" if any(r.leaky for r in records) else "passed"


def not_comparable_reasons(
    leak_guard: str, feature_audit: str, *, tradable_days: int | None, test_days: int | None
) -> tuple[str, ...]:
    """The one ``comparable`` rule: why a run is not comparable, empty when it is.

    A run is comparable when both guards passed (nothing failed, nothing switched off) and the book
    could trade on at least :data:`MIN_TRADABLE_SHARE` of its test days.

    Parameters
    ----------
    leak_guard, feature_audit : the guard verdicts (:data:`GUARD_STATUSES`).
    tradable_days, test_days : the test (return) days on which at least ``top_k`` index members traded,
        and all of them (:attr:`backtest.portfolio.PortfolioResult.tradable_days`); None for a run
        without a test period (its tags describe a run that is not a backtest).
    """
    for name, value in (("leak_guard", leak_guard), ("feature_audit", feature_audit)):
        if value not in GUARD_STATUSES:
            raise ValueError(f"{name}: expected one of {GUARD_STATUSES}, received {value!r}")
    reasons = []
    if leak_guard != "passed" or feature_audit != "passed":
        reasons.append(
            f"a leakage guard failed or was switched off (leak_guard={leak_guard}, feature_audit={feature_audit})"
        )
    if test_days is not None and tradable_days is not None and tradable_days < MIN_TRADABLE_SHARE * test_days:
        share = tradable_days / test_days if test_days else 0.0
        reasons.append(
            f"the book could trade on {tradable_days} of {test_days} test days ({share:.1%}), fewer than the "
            f"{MIN_TRADABLE_SHARE:.0%} a comparable run needs: on the others fewer than top_k index members traded"
        )
    return tuple(reasons)


# ----------------------------------------------------------------------------------------------------
# Which rows a fold uses


def fold_rows(fold: FoldDates, dates: np.ndarray | pd.Index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the rows a fold trains on, validates on and predicts, in a table dated ``dates``.

    Parameters
    ----------
    fold : a fold of :class:`backtest.splits.RollingSchedule` (any :class:`FoldDates`).
    dates : the sample date of every row (datetime64 array), or an index whose first level is the date
        (a (date, code) MultiIndex or a DatetimeIndex).

    Returns
    -------
    (train, valid, predict) : int64 arrays of row positions. Every row of a date goes together, so
        each day stays a whole query group.
    """
    if isinstance(dates, pd.MultiIndex):
        dates = dates.get_level_values(0)
    values = np.asarray(dates).astype(_NS)

    def on(days: pd.DatetimeIndex) -> np.ndarray:
        return np.flatnonzero(np.isin(values, days.values.astype(_NS)))

    return on(fold.train_dates), on(fold.valid_dates), on(fold.predict_dates)


# ----------------------------------------------------------------------------------------------------
# label_end per sample date, and the rule


@dataclass(frozen=True, eq=False)
class LabelEnds:
    """``label_end`` reduced to one row per sample date: the latest label_end and the sample count."""

    dates: pd.DatetimeIndex
    end: np.ndarray  # datetime64[ns], latest label_end of each date
    counts: np.ndarray  # int64, samples of each date

    @classmethod
    def of(cls, label_end: pd.Series) -> LabelEnds:
        sample_dates = sample_dates_of(label_end)
        if not pd.api.types.is_datetime64_any_dtype(label_end.dtype):
            raise DataContractError(
                f"label_end must hold datetime64 trading days; got dtype {label_end.dtype}. "
                f"Pass Labels.label_end from make_labels()."
            )
        values = label_end.to_numpy().astype(_NS)
        if len(values) == 0:
            raise InsufficientHistoryError("label_end is empty: there are no labelled samples to split.")
        if np.isnat(values).any():
            raise DataContractError(
                f"label_end has {int(np.isnat(values).sum())} missing values. Samples without a complete "
                f"label window must be dropped, not kept with NaT (make_labels drops them)."
            )
        bad = np.flatnonzero(values <= sample_dates)
        if len(bad):
            raise DataContractError(
                f"label_end must be after each sample's date; {len(bad)} samples are not, e.g. "
                f"{preview([f'{day_label(sample_dates[i])} -> {day_label(values[i])}' for i in bad[:5]], 5)}."
            )
        starts = np.flatnonzero(np.r_[True, sample_dates[1:] != sample_dates[:-1]])
        return cls(
            dates=pd.DatetimeIndex(sample_dates[starts], name="date"),
            end=np.maximum.reduceat(values.view(np.int64), starts).view(_NS),
            counts=np.diff(np.r_[starts, len(values)]).astype(np.int64),
        )

    def as_series(self) -> pd.Series:
        return pd.Series(self.end, index=self.dates, name="label_end")


def sample_dates_of(label_end: pd.Series) -> np.ndarray:
    """The sample dates (level 0) of ``label_end`` as datetime64[ns], checked to be sorted."""
    if not isinstance(label_end, pd.Series):
        raise DataContractError(
            f"label_end must be a pandas Series indexed by date or (date, code); got {type(label_end).__name__}."
        )
    index = label_end.index
    level = index.get_level_values(0) if isinstance(index, pd.MultiIndex) else index
    if not pd.api.types.is_datetime64_any_dtype(level.dtype):
        raise DataContractError(
            f"label_end must be indexed by sample date (or (date, code)); its first index level has dtype "
            f"{level.dtype}. Pass Labels.label_end from make_labels()."
        )
    values = np.asarray(level.values).astype(_NS)
    down = np.flatnonzero(values[1:] < values[:-1])
    if len(down):
        i = int(down[0])
        raise DataContractError(
            f"label_end's sample dates must be sorted ascending; row {i + 1} ({day_label(values[i + 1])}) comes "
            f"after row {i} ({day_label(values[i])}). Sort it with label_end.sort_index()."
        )
    return values


def check_fold(fold: FoldDates, label_end: pd.Series) -> None:
    """Raise ``LeakageError`` if the fold trains or validates on a label that ends after its cutoff.

    Checks, against ``label_end`` (not against how the fold was built): every training ``label_end``
    <= ``fold.record.cutoff`` and, when there is a validation tail, <= ``fold.record.valid_cutoff``;
    every validation ``label_end`` <= the cutoff; no training or validation date on or after the
    decision date; no training date among the prediction dates.

    Parameters
    ----------
    fold : a fold (:class:`backtest.splits.Fold`)
    label_end : Series of datetime64 indexed by sample date or (date, code), sorted by date.

    Raises
    ------
    LeakageError
        Naming the fold, its decision date and cutoff, and the offending dates with their label_end.
    """
    problems = purge_violations(fold, LabelEnds.of(label_end))
    if problems:
        raise LeakageError(
            f"Fold {fold.fold} (decision {day_label(fold.decision_date)}, cutoff {day_label(fold.cutoff)} = "
            f"{fold.record.embargo} trading days of embargo before the decision) leaks: "
            + "; ".join(problems)
            + ". Keep purge=True; a hand-built fold must take training dates with "
            "label_end <= cutoff (and <= valid_cutoff when it has a validation tail)."
        )


def purge_violations(fold: FoldDates, ends: LabelEnds) -> list[str]:
    """The purge-rule breaches of ``fold`` against ``ends`` (empty when the fold is clean)."""
    record = fold.record
    known = ends.dates.values.astype(_NS)
    problems: list[str] = []

    def late(days: pd.DatetimeIndex, limit: pd.Timestamp, role: str, limit_name: str) -> None:
        values = days.values.astype(_NS)
        at = np.minimum(np.searchsorted(known, values), len(known) - 1)
        found = known[at] == values  # dates without samples cannot leak
        end = ends.end[at[found]]
        bad = np.flatnonzero(end > np.datetime64(limit, "ns"))
        if len(bad):
            problems.append(
                f"{len(bad)} {role} dates have label_end after the {limit_name} {day_label(limit)}: "
                + ", ".join(f"{day_label(values[found][i])} (label_end {day_label(end[i])})" for i in bad[:5])
                + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else "")
            )

    late(fold.train_dates, record.cutoff, "training", "cutoff")
    late(fold.valid_dates, record.cutoff, "validation", "cutoff")
    if record.valid_cutoff is not None and len(fold.valid_dates):
        late(fold.train_dates, record.valid_cutoff, "training", "validation cutoff")
    for role, days in (("training", fold.train_dates), ("validation", fold.valid_dates)):
        ahead = days[days >= fold.decision_date]
        if len(ahead):
            problems.append(
                f"{len(ahead)} {role} dates on or after the decision date: {preview(map(day_label, ahead))}"
            )
    shared = np.intersect1d(fold.train_dates.values.astype(_NS), fold.predict_dates.values.astype(_NS))
    if len(shared):
        problems.append(f"training dates that are also prediction dates: {preview(map(day_label, shared))}")
    return problems


def day_label(value: object) -> str:
    """A trading day as ``YYYY-MM-DD`` (the form every guard message uses)."""
    return pd.Timestamp(value).strftime("%Y-%m-%d")
