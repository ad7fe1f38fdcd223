"""The rolling schedule of purged splits over trading dates, with the purge derived from ``label_end``.

The purge rule (docs/design.md, "Timing convention"): a model that decides after the close of day ``d`` may
train on a sample ``(t, code)`` only if

    label_end(t, code) <= cutoff(d) = the trading day ``embargo`` trading days before d

(``cutoff = d`` when ``embargo = 0``: a label that ends at the open of d is known at d's close). The
horizon is never typed in: it is whatever ``label_end`` (from :func:`backtest.labels.make_labels`) says.
Inside a training window the validation tail used for early stopping is separated the same way: its
first date ``v0`` plays the role of a decision date, so training labels must satisfy
``label_end <= valid_cutoff`` = the trading day ``embargo`` days before ``v0``, and validation labels
must satisfy ``label_end <= cutoff(d)``.

Splits work on trading dates, never on panel rows. The rolling schedule takes or leaves all samples of a
date together; when a date holds samples with different ``label_end`` values, the latest one decides (a
conservative purge; labels from ``make_labels`` share one ``label_end`` per date).

``label_end`` inputs are Series indexed by sample date, or by (date, code), sorted by date; their values
are trading days (datetime64). ``dates`` inputs are the trading calendar: sorted, unique.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, DataContractError, InsufficientHistoryError, preview
from backtest.leakage import (
    LabelEnds,
    LeakageRecord,
    check_fold,
    day_label,
    fold_rows,
    purge_violations,
)

log = logging.getLogger(__name__)

WINDOWS: tuple[str, ...] = ("sliding", "expanding")

#: ``test_start: null`` means the last this-many calendar years of the loaded data.
DEFAULT_TEST_YEARS: int = 2

_NS = "datetime64[ns]"


# ----------------------------------------------------------------------------------------------------
# Folds


@dataclass(frozen=True, eq=False)
class Fold:
    """One retraining of a rolling backtest.

    Attributes
    ----------
    fold : int, the fold number (0-based, in time order).
    decision_date : Timestamp, the first prediction date; the model decides after its close.
    predict_dates : DatetimeIndex, the decision dates this model serves, until the next retrain.
    train_dates : DatetimeIndex, the sample dates of the training part.
    valid_dates : DatetimeIndex, the sample dates of the early-stopping validation tail (may be empty).
    record : LeakageRecord, the fold's cutoffs and evidence.
    """

    fold: int
    decision_date: pd.Timestamp
    predict_dates: pd.DatetimeIndex
    train_dates: pd.DatetimeIndex
    valid_dates: pd.DatetimeIndex
    record: LeakageRecord = field(repr=False)

    @property
    def cutoff(self) -> pd.Timestamp:
        """Latest ``label_end`` usable for this fold (``embargo`` trading days before the decision)."""
        return self.record.cutoff

    def sample_positions(self, index: pd.Index) -> tuple[np.ndarray, np.ndarray]:
        """Row positions of the training and validation samples in ``index`` (a DatetimeIndex of sample
        dates, or a (date, code) MultiIndex); :func:`backtest.leakage.fold_rows` without the prediction rows.
        """
        train, valid, _ = fold_rows(self, index)
        return train, valid

    def __str__(self) -> str:
        return (
            f"fold {self.fold}: decide {day_label(self.decision_date)}"
            f"  predict {_span(self.predict_dates)}"
            f"  train {_span(self.train_dates)}"
            f"  valid {_span(self.valid_dates)}"
            f"  cutoff {day_label(self.cutoff)}"
        )


def decision_dates(folds: Iterable[Fold | LeakageRecord]) -> dict[int, pd.Timestamp]:
    """Each fold's decision date (its first test day) by fold number, of folds or of their leakage records."""
    return {f.fold: f.decision_date for f in folds}


# ----------------------------------------------------------------------------------------------------
# Rolling schedule


@dataclass(frozen=True)
class RollingSchedule:
    """Retrain every ``retrain_every`` trading days over a test period, purging from ``label_end``.

    For a fold deciding at ``d`` (calendar position ``p``), with ``e = embargo``:

    1. ``cutoff = dates[p - e]``; usable samples: dated before ``d`` with ``label_end <= cutoff``.
    2. Validation tail: the usable dates among the last ``valid_days`` trading days ending at the latest
       usable date; its first day ``v0`` gives ``valid_cutoff = dates[pos(v0) - e]``.
    3. Training candidates: dated before ``v0`` with ``label_end <= valid_cutoff`` (before ``d`` with
       ``label_end <= cutoff`` when ``valid_days = 0``).
    4. Window: ``"sliding"`` keeps the candidates within the last ``train_window`` trading days ending
       at the latest candidate; ``"expanding"`` keeps all candidates from the first labelled date and
       requires at least ``train_window`` trading days of them (the first fold's length).

    With labels of horizon ``h`` on every date, the purge leaves ``h + e - 1`` unlabelled trading days
    between the training part and ``v0`` and as many between the validation tail and ``d``; a fold
    therefore needs ``train_window + valid_days + 2 (h + e - 1)`` trading days of labelled history
    before ``d`` (``train_window + h + e - 1`` without a validation tail).

    Parameters
    ----------
    retrain_every : int
        Trading days between retrains; each fold predicts that many decision dates (the last fewer).
    train_window : int
        Trading days of the training part (sliding), or its minimum length (expanding).
    window : {"sliding", "expanding"}
    valid_days : int
        Trading days of the early-stopping validation tail (0: none).
    embargo : int
        Extra trading days between the latest usable ``label_end`` and the decision date.
    test_start, test_end : date-like or None
        First and last decision dates (snapped inward to trading days). ``None``: the last
        ``DEFAULT_TEST_YEARS`` calendar years of the calendar, up to its last day.
    purge : bool
        True (default): the rule above, and every fold is checked with :func:`check_fold`.
        False: the buggy "train on every sample dated before the decision date" of the original
        research, for a leak demonstration only; records are marked ``leaky`` instead of raising.
    leak_demo : bool
        Must be True to accept ``purge=False``: the run declares itself a leak demonstration.

    Warnings
    --------
    ``purge=False`` trains on labels that end after the decision date: its results are not results.

    Examples
    --------
    Labels of horizon 2 on 30 business days; retrain every 5 days from 2024-01-29, 6-day sliding
    window, 3-day validation tail, embargo 1:

    >>> dates = pd.bdate_range("2024-01-01", periods=30, name="date")
    >>> label_end = pd.Series(dates[2:], index=dates[:-2])
    >>> schedule = RollingSchedule(retrain_every=5, train_window=6, valid_days=3, embargo=1,
    ...                            test_start="2024-01-29")
    >>> for fold in schedule.split(dates, label_end):
    ...     print(fold)
    fold 0: decide 2024-01-29  predict 2024-01-29..2024-02-02 (5)  train 2024-01-10..2024-01-17 (6)
      valid 2024-01-22..2024-01-24 (3)  cutoff 2024-01-26
    fold 1: decide 2024-02-05  predict 2024-02-05..2024-02-09 (5)  train 2024-01-17..2024-01-24 (6)
      valid 2024-01-29..2024-01-31 (3)  cutoff 2024-02-02

    Fold 0: the validation labels end by 2024-01-26 (the cutoff, one trading day before the
    decision); 2024-01-25 and 2024-01-26 are purged (their labels end 2024-01-29 and 2024-01-30).
    The training labels end by 2024-01-19, one trading day before ``v0`` = 2024-01-22.

    >>> fold = next(schedule.split(dates, label_end))
    >>> {k: fold.record.to_dict()[k] for k in ("max_train_label_end", "valid_cutoff", "n_purged")}
    {'max_train_label_end': '2024-01-19', 'valid_cutoff': '2024-01-19', 'n_purged': 4}
    """

    retrain_every: int = 5
    train_window: int = 500
    window: str = "sliding"
    valid_days: int = 20
    embargo: int = 2
    test_start: pd.Timestamp | str | None = None
    test_end: pd.Timestamp | str | None = None
    purge: bool = True
    leak_demo: bool = False

    def __post_init__(self) -> None:
        for name, low in (("retrain_every", 1), ("train_window", 1), ("valid_days", 0), ("embargo", 0)):
            _check_int(f"backtest.{name}", getattr(self, name), low)
        if self.window not in WINDOWS:
            raise ConfigError(f"backtest.window must be one of {', '.join(WINDOWS)}; got {self.window!r}.")
        for name in ("purge", "leak_demo"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"backtest.{name} must be true or false; got {getattr(self, name)!r}.")
        if not self.purge and not self.leak_demo:
            raise ConfigError(
                "backtest.purge=false trains on labels that end after the decision date. It is only "
                "accepted for a leak demonstration: set backtest.leak_demo=true as well (the run is then "
                "tagged leak_guard=disabled), or keep backtest.purge=true."
            )
        for name in ("test_start", "test_end"):
            object.__setattr__(self, name, _parse_date(f"backtest.{name}", getattr(self, name)))
        if self.test_start is not None and self.test_end is not None and self.test_start > self.test_end:
            raise ConfigError(
                f"backtest.test_start ({day_label(self.test_start)}) is after backtest.test_end "
                f"({day_label(self.test_end)}); swap them or set one to null."
            )

    def test_period(self, dates: pd.DatetimeIndex) -> tuple[pd.Timestamp, pd.Timestamp]:
        """First and last decision dates on the calendar ``dates`` (``None`` bounds resolved).

        Parameters
        ----------
        dates : DatetimeIndex, the trading calendar, sorted and unique.
        """
        calendar = _calendar(dates)
        test = self._test_dates(calendar)
        return test[0], test[-1]

    def get_n_splits(self, dates: pd.DatetimeIndex) -> int:
        """Number of folds (retrains) over the test period of ``dates``."""
        n_test = len(self._test_dates(_calendar(dates)))
        return -(-n_test // self.retrain_every)

    def split(self, dates: pd.DatetimeIndex, label_end: pd.Series) -> Iterator[Fold]:
        """The folds, in time order; all are built and checked before the first is returned.

        Parameters
        ----------
        dates : DatetimeIndex
            The trading calendar (sorted, unique), including the unlabelled last days.
        label_end : Series of datetime64
            ``Labels.label_end``: indexed by sample date or (date, code), sorted by date; sample dates
            must be on the calendar.

        Yields
        ------
        Fold

        Raises
        ------
        DataContractError
            Unsorted or duplicate calendar, unsorted ``label_end``, sample dates off the calendar.
        InsufficientHistoryError
            A fold cannot get its training window and validation tail from the labelled history.
        LeakageError
            A purged fold breaks the purge rule (a bug guard; cannot happen with ``purge=True``).
        """
        return iter(self.folds(dates, label_end))

    def folds(self, dates: pd.DatetimeIndex, label_end: pd.Series) -> list[Fold]:
        """All folds as a list; see :meth:`split`."""
        calendar = _calendar(dates)
        ends = LabelEnds.of(label_end)
        pos = _positions_on(calendar, ends.dates, "label_end's sample dates")
        test = self._test_dates(calendar)
        test_pos = calendar.get_indexer(test)
        blocks = [test_pos[i : i + self.retrain_every] for i in range(0, len(test_pos), self.retrain_every)]
        if not self.purge:
            log.warning(
                "rolling schedule: purge DISABLED (leak demonstration); training uses every sample dated "
                "before the decision date, including labels that end after it"
            )
            if self.valid_days > 0:
                log.warning(
                    "rolling schedule: with valid_days=%d the leaky labels fall in the validation tail, "
                    "where they only steer early stopping; valid_days=0 trains on them, as the original "
                    "research did (experiment=leak_demo)",
                    self.valid_days,
                )
        cal = calendar.values.astype(_NS)
        horizon = int((cal.searchsorted(ends.end) - pos).max())  # trading days from sample to label_end
        folds = [self._fold(i, block, calendar, cal, ends, pos, horizon) for i, block in enumerate(blocks)]
        n_leaky = sum(f.record.leaky for f in folds)
        log.info(
            "rolling schedule: %d folds, decisions %s, %s window %d + valid %d, embargo %d, label_end up "
            "to %d trading days after the sample date, purge %s%s",
            len(folds),
            _span(test),
            self.window,
            self.train_window,
            self.valid_days,
            self.embargo,
            horizon,
            "on" if self.purge else "OFF",
            f", {n_leaky} leaky folds" if n_leaky else "",
        )
        return folds

    def _test_dates(self, calendar: pd.DatetimeIndex) -> pd.DatetimeIndex:
        if len(calendar) == 0:
            raise InsufficientHistoryError("The trading calendar is empty: load data before scheduling folds.")
        start = self.test_start
        if start is None:
            start = calendar[calendar > calendar[-1] - pd.DateOffset(years=DEFAULT_TEST_YEARS)][0]
        end = calendar[-1] if self.test_end is None else self.test_end
        test = calendar[(calendar >= start) & (calendar <= end)]
        if len(test) == 0:
            raise ConfigError(
                f"The test period {day_label(start)}..{day_label(end)} holds no trading day of the data "
                f"({_span(calendar)}). Set backtest.test_start / backtest.test_end inside the data."
            )
        return test

    def _fold(
        self,
        number: int,
        block: np.ndarray,
        calendar: pd.DatetimeIndex,
        cal: np.ndarray,
        ends: LabelEnds,
        pos: np.ndarray,
        horizon: int,
    ) -> Fold:
        p, e = int(block[0]), self.embargo
        decision = calendar[p]

        def insufficient(what: str) -> InsufficientHistoryError:
            gap = horizon + e - 1
            if self.valid_days:
                needed = self.train_window + self.valid_days + 2 * gap
                parts = f"train_window {self.train_window} + valid_days {self.valid_days} + 2 purge gaps of {gap}"
            else:
                needed = self.train_window + gap
                parts = f"train_window {self.train_window} + a purge gap of {gap}"
            return InsufficientHistoryError(
                f"Fold {number} (decision {day_label(decision)}) {what}. With labels reaching {horizon} trading "
                f"days ahead and embargo {e}, a fold needs about {needed} trading days of labelled history "
                f"before its decision ({parts} = horizon + embargo - 1); it has {p - int(pos[0])} (labels "
                f"start {day_label(ends.dates[0])}). Fix: move backtest.test_start later, load more history, or "
                f"shorten backtest.train_window / valid_days / embargo."
            )

        if p - e < 0:
            raise insufficient(f"has no trading day {e} days before it for the cutoff")
        cutoff = cal[p - e]
        before = pos < p
        usable = before & (ends.end <= cutoff) if self.purge else before
        if not usable.any():
            raise insufficient(f"has no sample with label_end <= the cutoff {day_label(calendar[p - e])}")
        last_usable = int(pos[usable].max())

        valid_cutoff = None
        valid = np.zeros(len(pos), dtype=bool)
        candidates = usable
        if self.valid_days > 0:
            v0 = last_usable - self.valid_days + 1
            if v0 - e < 0:
                raise insufficient(f"cannot fit a {self.valid_days}-day validation tail and its cutoff")
            valid = usable & (pos >= v0)
            valid_cutoff = cal[v0 - e]
            candidates = (pos < v0) & (ends.end <= valid_cutoff) if self.purge else pos < v0
        if not candidates.any():
            raise insufficient("has no training sample left after the purge")
        last_train = int(pos[candidates].max())
        window_start = last_train - self.train_window + 1
        if window_start < int(pos[0]):
            raise insufficient(
                f"would need its {self.window} training window to start {int(pos[0]) - window_start} "
                f"trading days before the first labelled date"
            )
        train = candidates & (pos >= window_start) if self.window == "sliding" else candidates

        first_train = int(pos[train].min())
        purged = (pos >= first_train) & before & ~train & ~valid
        record = LeakageRecord(
            fold=number,
            decision_date=decision,
            cutoff=calendar[p - e],
            embargo=e,
            purge=self.purge,
            train_start=ends.dates[train][0],
            train_end=ends.dates[train][-1],
            valid_start=ends.dates[valid][0] if valid.any() else None,
            valid_end=ends.dates[valid][-1] if valid.any() else None,
            valid_cutoff=pd.Timestamp(valid_cutoff) if valid_cutoff is not None else None,
            max_train_label_end=pd.Timestamp(ends.end[train].max()),
            max_valid_label_end=pd.Timestamp(ends.end[valid].max()) if valid.any() else None,
            n_train_samples=int(ends.counts[train].sum()),
            n_valid_samples=int(ends.counts[valid].sum()),
            n_purged=int(ends.counts[purged].sum()),
            leaky=False,
        )
        fold = Fold(
            fold=number,
            decision_date=decision,
            predict_dates=calendar[block],
            train_dates=ends.dates[train],
            valid_dates=ends.dates[valid],
            record=record,
        )
        if purge_violations(fold, ends):
            if self.purge:
                check_fold(fold, ends.as_series())  # a bug guard: raises with the full message
            fold = replace(fold, record=replace(record, leaky=True))
        log.debug("%s  leak_guard=%s", fold, fold.record.leak_guard)
        return fold


# ----------------------------------------------------------------------------------------------------
# Shared validation and reductions


def _calendar(dates: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """The trading calendar, checked to be strictly increasing."""
    try:
        calendar = pd.DatetimeIndex(dates)
    except (TypeError, ValueError) as exc:
        raise DataContractError(f"dates must be trading days (datetime64); could not read them: {exc}") from exc
    values = calendar.values.astype(_NS)
    if np.isnat(values).any():
        raise DataContractError("dates contains missing values (NaT); pass the trading calendar only.")
    bad = np.flatnonzero(values[1:] <= values[:-1])
    if len(bad):
        i = int(bad[0])
        kind = "repeats" if values[i + 1] == values[i] else "comes after"
        raise DataContractError(
            f"dates must be sorted ascending and unique (the trading calendar); position {i + 1} "
            f"({day_label(values[i + 1])}) {kind} position {i} ({day_label(values[i])}). Pass e.g. "
            f"panel.index.get_level_values('date').unique().sort_values()."
        )
    return calendar


def _positions_on(calendar: pd.DatetimeIndex, days: pd.DatetimeIndex, what: str) -> np.ndarray:
    pos = calendar.get_indexer(days)
    missing = days[pos < 0]
    if len(missing):
        raise DataContractError(
            f"{what} must be trading days of the calendar ({_span(calendar)}); {len(missing)} are not, "
            f"e.g. {preview([day_label(d) for d in missing], 5)}. Pass the calendar of the panel the labels "
            f"were made from."
        )
    return pos


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer; got {value!r} ({type(value).__name__}).")
    if value < low:
        raise ConfigError(f"{name} must be >= {low}; got {value}.")


def _parse_date(name: str, value: object) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a date like 2024-01-02 or null; got {value!r} ({exc}).") from exc
    if pd.isna(stamp):
        raise ConfigError(f"{name} must be a date like 2024-01-02 or null; got {value!r}.")
    return stamp


def _span(days: pd.DatetimeIndex) -> str:
    if len(days) == 0:
        return "none"
    return f"{day_label(days[0])}..{day_label(days[-1])} ({len(days)})"
