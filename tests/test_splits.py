"""Rolling schedule: exact folds, the purge rule, leak demonstration, and purge properties."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backtest.errors import ConfigError, DataContractError, InsufficientHistoryError, LeakageError
from backtest.labels import LabelSpec, make_labels
from backtest.leakage import LeakageRecord, check_fold
from backtest.splits import Fold, RollingSchedule

CAL = pd.bdate_range("2024-01-01", periods=40, name="date")  # 2024-01-01 .. 2024-02-23


def horizon_labels(calendar: pd.DatetimeIndex, horizon: int, codes: tuple[str, ...] = ()) -> pd.Series:
    """label_end of samples on every day that has a window: day i -> day i + horizon.

    Indexed by date, or by (date, code) with one row per code when ``codes`` is given.
    """
    dates, ends = calendar[:-horizon], calendar[horizon:]
    if not codes:
        return pd.Series(ends, index=dates, name="label_end")
    index = pd.MultiIndex.from_product([dates, list(codes)], names=["date", "code"])
    return pd.Series(np.repeat(ends.values, len(codes)), index=index, name="label_end")


# ----------------------------------------------------------------------------------------------------
# Rolling schedule: exact folds


def test_first_fold_exactly() -> None:
    # Horizon 5, embargo 2, 4-day validation tail, 6-day sliding window, decision on day 30.
    schedule = RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[30])
    fold = next(schedule.split(CAL, horizon_labels(CAL, 5)))

    assert fold.decision_date == CAL[30]
    assert list(fold.predict_dates) == list(CAL[30:35])
    # cutoff = day 28; usable: label_end = t + 5 <= 28 -> t <= 23; validation days 20..23.
    assert fold.cutoff == CAL[28]
    assert list(fold.valid_dates) == list(CAL[20:24])
    # valid_cutoff = day 18; training labels end by day 18 -> t <= 13; window of 6: days 8..13.
    assert fold.record.valid_cutoff == CAL[18]
    assert list(fold.train_dates) == list(CAL[8:14])
    # Purged between day 8 and the decision: days 14..19 and 24..29.
    assert fold.record.n_purged == 12
    assert fold.record.max_train_label_end == CAL[18]
    assert fold.record.max_valid_label_end == CAL[28]
    assert fold.record.leak_guard == "passed" and not fold.record.leaky
    assert fold.record.n_train_samples == 6 and fold.record.n_valid_samples == 4


def test_needed_history_is_window_plus_tail_plus_two_purge_gaps() -> None:
    # window 6 + valid 4 + 2 * (horizon 5 + embargo 2 - 1) = 22 trading days before the decision.
    label_end = horizon_labels(CAL, 5)
    schedule = RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[22])
    assert next(schedule.split(CAL, label_end)).train_dates[0] == CAL[0]
    too_early = RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[21])
    with pytest.raises(InsufficientHistoryError, match=r"Fold 0 \(decision 2024-01-30\).*needs about 22 .* it has 21"):
        too_early.split(CAL, label_end)
    # Without a validation tail: 6 + 5 + 2 - 1 = 12.
    no_tail = RollingSchedule(train_window=6, valid_days=0, embargo=2, test_start=CAL[12])
    assert list(next(no_tail.split(CAL, label_end)).train_dates) == list(CAL[0:6])
    with pytest.raises(InsufficientHistoryError, match="move backtest.test_start later"):
        RollingSchedule(train_window=6, valid_days=0, embargo=2, test_start=CAL[11]).split(CAL, label_end)


def test_embargo_zero_admits_a_label_ending_on_the_decision_date() -> None:
    schedule = RollingSchedule(retrain_every=5, train_window=5, valid_days=0, embargo=0, test_start=CAL[20])
    fold = next(schedule.split(CAL, horizon_labels(CAL, 5)))
    assert fold.cutoff == CAL[20]
    assert fold.train_dates[-1] == CAL[15] and fold.record.max_train_label_end == CAL[20]


def test_folds_tile_the_test_period_and_the_last_is_shorter() -> None:
    schedule = RollingSchedule(
        retrain_every=4, train_window=5, valid_days=2, embargo=1, test_start="2024-02-05", test_end="2024-02-20"
    )
    folds = list(schedule.split(CAL, horizon_labels(CAL, 3)))
    assert schedule.get_n_splits(CAL) == len(folds) == 3
    assert [len(f.predict_dates) for f in folds] == [4, 4, 4]
    assert [f.decision_date for f in folds] == [pd.Timestamp(d) for d in ("2024-02-05", "2024-02-09", "2024-02-15")]
    odd = RollingSchedule(
        retrain_every=5, train_window=5, valid_days=2, embargo=1, test_start="2024-02-05", test_end="2024-02-20"
    )
    assert [len(f.predict_dates) for f in odd.split(CAL, horizon_labels(CAL, 3))] == [5, 5, 2]


def test_test_period_defaults_to_the_last_two_years_and_snaps_to_trading_days() -> None:
    calendar = pd.bdate_range("2019-06-03", "2024-05-31", name="date")
    assert RollingSchedule().test_period(calendar) == (pd.Timestamp("2022-06-01"), pd.Timestamp("2024-05-31"))
    snapped = RollingSchedule(test_start="2024-01-06", test_end="2024-01-14")  # Saturday .. Sunday
    assert snapped.test_period(calendar) == (pd.Timestamp("2024-01-08"), pd.Timestamp("2024-01-12"))
    with pytest.raises(ConfigError, match="holds no trading day"):
        RollingSchedule(test_start="2030-01-01").test_period(calendar)


def test_expanding_window_starts_at_the_first_labelled_date_and_grows() -> None:
    schedule = RollingSchedule(
        retrain_every=5, train_window=4, window="expanding", valid_days=2, embargo=1, test_start=CAL[20]
    )
    folds = list(schedule.split(CAL, horizon_labels(CAL, 3)))
    assert all(f.train_dates[0] == CAL[0] for f in folds)
    lengths = [len(f.train_dates) for f in folds]
    assert lengths == sorted(lengths) and lengths[0] >= 4 and lengths[1] == lengths[0] + 5


def test_per_stock_label_end_counts_samples_and_positions() -> None:
    label_end = horizon_labels(CAL, 5, codes=("A", "B", "C"))
    schedule = RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[30])
    fold = next(schedule.split(CAL, label_end))
    assert fold.record.n_train_samples == 18 and fold.record.n_valid_samples == 12
    assert fold.record.n_purged == 36
    train_idx, valid_idx = fold.sample_positions(label_end.index)
    assert train_idx.tolist() == list(range(8 * 3, 14 * 3))
    assert valid_idx.tolist() == list(range(20 * 3, 24 * 3))


def test_works_with_labels_from_make_labels() -> None:
    rng = np.random.default_rng(1)
    index = pd.MultiIndex.from_product([CAL, ["A", "B", "C", "D"]], names=["date", "code"])
    opens = np.exp(rng.normal(0, 0.01, len(index)).cumsum()) * 10
    panel = pd.DataFrame({"open": opens, "close": opens}, index=index)
    labels = make_labels(panel, LabelSpec(exit_offset=4))
    schedule = RollingSchedule(retrain_every=5, train_window=8, valid_days=3, embargo=1, test_start=CAL[30])
    folds = list(schedule.split(CAL, labels.label_end))
    assert len(folds) == 2
    for fold in folds:
        check_fold(fold, labels.label_end)
        assert fold.record.max_train_label_end <= fold.record.valid_cutoff
    # Decision on day 30: cutoff 29, the latest usable sample is day 25 (label_end 29).
    assert folds[0].valid_dates[-1] == CAL[25]


# ----------------------------------------------------------------------------------------------------
# Leak demonstration and check_fold


def test_purge_off_needs_the_leak_demo_switch() -> None:
    with pytest.raises(ConfigError, match="backtest.leak_demo=true"):
        RollingSchedule(purge=False)


def test_leak_demo_trains_on_everything_before_the_decision_and_marks_records() -> None:
    schedule = RollingSchedule(
        retrain_every=5, train_window=10, valid_days=3, embargo=2, test_start=CAL[30], purge=False, leak_demo=True
    )
    fold = next(schedule.split(CAL, horizon_labels(CAL, 5)))
    assert list(fold.valid_dates) == list(CAL[27:30])  # the 3 days right before the decision
    assert list(fold.train_dates) == list(CAL[17:27])  # the 10 days before those
    assert fold.record.n_purged == 0
    assert fold.record.leaky and fold.record.leak_guard == "disabled"
    assert fold.record.max_valid_label_end == CAL[34] > fold.cutoff
    with pytest.raises(LeakageError):
        check_fold(fold, horizon_labels(CAL, 5))


def test_check_fold_names_the_fold_and_the_offending_dates() -> None:
    label_end = horizon_labels(CAL, 5)
    fold = next(
        RollingSchedule(retrain_every=5, train_window=6, valid_days=0, embargo=1, test_start=CAL[30]).split(
            CAL, label_end
        )
    )
    check_fold(fold, label_end)  # clean
    leaky = Fold(
        fold.fold,
        fold.decision_date,
        fold.predict_dates,
        fold.train_dates.append(CAL[26:28]),
        fold.valid_dates,
        fold.record,
    )
    with pytest.raises(
        LeakageError,
        match=r"Fold 0 \(decision 2024-02-12, cutoff 2024-02-09.*2 training dates have label_end after the "
        r"cutoff 2024-02-09: 2024-02-06 \(label_end 2024-02-13\), 2024-02-07 \(label_end 2024-02-14\)",
    ):
        check_fold(leaky, label_end)
    overlapping = Fold(
        fold.fold,
        fold.decision_date,
        fold.predict_dates,
        fold.train_dates.append(CAL[30:31]),
        fold.valid_dates,
        fold.record,
    )
    with pytest.raises(LeakageError, match="also prediction dates: 2024-02-12"):
        check_fold(overlapping, label_end)


def test_leakage_record_serialises_to_json() -> None:
    fold = next(
        RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[30]).split(
            CAL, horizon_labels(CAL, 5)
        )
    )
    record = fold.record.to_dict()
    assert json.loads(json.dumps(record)) == record
    assert record["decision_date"] == "2024-02-12" and record["cutoff"] == "2024-02-08"
    assert record["leak_guard"] == "passed" and record["fold"] == 0
    assert set(record) == {f for f in LeakageRecord.__dataclass_fields__} | {"leak_guard"}


# ----------------------------------------------------------------------------------------------------
# Input validation


def test_unsorted_or_duplicate_calendar_is_refused() -> None:
    label_end = horizon_labels(CAL, 5)
    schedule = RollingSchedule(train_window=5, valid_days=0, embargo=0, test_start=CAL[30])
    shuffled = CAL[[0, 2, 1, *range(3, 40)]]
    with pytest.raises(DataContractError, match=r"sorted ascending.*position 2 \(2024-01-02\) comes after"):
        schedule.split(shuffled, label_end)
    with pytest.raises(DataContractError, match="repeats"):
        schedule.split(CAL.insert(5, CAL[5]), label_end)
    with pytest.raises(DataContractError, match="sort_index"):
        schedule.split(CAL, label_end.iloc[::-1])


def test_sample_dates_off_the_calendar_are_refused() -> None:
    with pytest.raises(DataContractError, match="must be trading days of the calendar"):
        RollingSchedule(train_window=5, valid_days=0, test_start=CAL[30]).split(CAL[5:], horizon_labels(CAL, 5))


def test_label_end_must_be_after_the_sample_date() -> None:
    bad = pd.Series(CAL[:10], index=CAL[:10])
    with pytest.raises(DataContractError, match="label_end must be after each sample's date"):
        RollingSchedule(train_window=2, valid_days=0, test_start=CAL[30]).split(CAL, bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retrain_every": 0}, "retrain_every must be >= 1"),
        ({"train_window": 2.5}, "train_window must be an integer"),
        ({"window": "rolling"}, "window must be one of sliding, expanding"),
        ({"embargo": -1}, "embargo must be >= 0"),
        ({"test_start": "not a date"}, "test_start must be a date"),
        ({"test_start": "2024-03-01", "test_end": "2024-01-01"}, "is after backtest.test_end"),
    ],
)
def test_schedule_refuses_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RollingSchedule(**kwargs)


# ----------------------------------------------------------------------------------------------------
# Properties of the rolling schedule


@st.composite
def rolling_cases(draw: st.DrawFn) -> dict:
    n_dates = draw(st.integers(15, 90))
    horizon = draw(st.integers(1, 8))
    calendar = pd.bdate_range("2023-01-02", periods=n_dates, name="date")
    codes = draw(st.sampled_from([(), ("A",), ("A", "B")]))
    label_end = horizon_labels(calendar, min(horizon, n_dates - 1), codes)
    gaps = draw(st.booleans())
    if gaps:  # some days without samples (e.g. a feature warm-up or a data hole)
        keep = draw(st.lists(st.booleans(), min_size=len(label_end), max_size=len(label_end)))
        keep[0] = True
        label_end = label_end[np.array(keep)]
    return {
        "calendar": calendar,
        "label_end": label_end,
        "horizon": min(horizon, n_dates - 1),
        "gaps": gaps,
        "schedule": dict(
            retrain_every=draw(st.integers(1, 8)),
            train_window=draw(st.integers(1, 20)),
            window=draw(st.sampled_from(["sliding", "expanding"])),
            valid_days=draw(st.integers(0, 6)),
            embargo=draw(st.integers(0, 4)),
            test_start=calendar[draw(st.integers(n_dates // 2, n_dates - 1))],
        ),
    }


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(rolling_cases())
def test_rolling_folds_obey_the_purge_rule(case: dict) -> None:
    calendar, label_end, params = case["calendar"], case["label_end"], case["schedule"]
    schedule = RollingSchedule(**params)
    try:
        folds = list(schedule.split(calendar, label_end))
    except InsufficientHistoryError:
        return
    embargo, window = params["embargo"], params["train_window"]
    by_date = label_end.groupby(level=0).max()
    pos = {d: i for i, d in enumerate(calendar)}
    test_dates = calendar[calendar >= params["test_start"]]

    assert [f.fold for f in folds] == list(range(len(folds))) == list(range(schedule.get_n_splits(calendar)))
    assert pd.DatetimeIndex(np.concatenate([f.predict_dates for f in folds])).equals(test_dates)
    for previous, fold in zip(folds, folds[1:]):
        assert previous.predict_dates[-1] < fold.decision_date  # forward, no overlap
    for fold in folds:
        d = fold.decision_date
        cutoff = calendar[pos[d] - embargo]  # computed here, not taken from the fold
        assert fold.predict_dates[0] == d and len(fold.predict_dates) <= params["retrain_every"]
        assert fold.train_dates.intersection(fold.predict_dates).empty
        assert fold.train_dates.intersection(fold.valid_dates).empty
        assert len(fold.train_dates) > 0 and fold.train_dates[-1] < d
        # Every training and validation label is known by the cutoff.
        assert (by_date[fold.train_dates] <= cutoff).all()
        assert (by_date[fold.valid_dates] <= cutoff).all()
        # The validation tail is purged from training the same way.
        if len(fold.valid_dates):
            valid_cutoff = calendar[pos[fold.valid_dates[0]] - embargo]
            assert (by_date[fold.train_dates] <= valid_cutoff).all()
            assert fold.train_dates[-1] < fold.valid_dates[0]
        # Nothing usable is purged on the wrong side: the newest admissible label is used.
        admissible = by_date[(by_date.index < d) & (by_date <= cutoff)]
        newest_used = (fold.valid_dates if len(fold.valid_dates) else fold.train_dates)[-1]
        assert newest_used == admissible.index[-1]
        span = pos[fold.train_dates[-1]] - pos[fold.train_dates[0]] + 1
        if params["window"] == "sliding":
            assert span <= window
        else:
            assert fold.train_dates[0] == by_date.index[0] and span >= window
        assert fold.record.n_train_samples == int(label_end.index.get_level_values(0).isin(fold.train_dates).sum())
        assert fold.record.leak_guard == "passed"
        check_fold(fold, label_end)


@PROPERTY_SETTINGS
@given(rolling_cases())
def test_insufficient_history_is_raised_exactly_when_the_first_fold_lacks_it(case: dict) -> None:
    if case["gaps"]:
        return  # the closed form below assumes a label on every day
    calendar, label_end, params = case["calendar"], case["label_end"], case["schedule"]
    h, e, w, v = case["horizon"], params["embargo"], params["train_window"], params["valid_days"]
    needed = w + h + e - 1 if v == 0 else w + v + 2 * (h + e - 1)
    first = calendar.get_loc(params["test_start"])
    if first >= needed:
        folds = RollingSchedule(**params).folds(calendar, label_end)
        expected_start = calendar[first - needed] if params["window"] == "sliding" else calendar[0]
        assert folds[0].train_dates[0] == expected_start
    else:
        with pytest.raises(InsufficientHistoryError, match=f"Fold 0 .* needs about {needed} .* it has {first}"):
            RollingSchedule(**params).folds(calendar, label_end)


@PROPERTY_SETTINGS
@given(rolling_cases())
def test_leak_demo_uses_every_date_before_the_decision(case: dict) -> None:
    calendar, label_end, params = case["calendar"], case["label_end"], case["schedule"]
    params = dict(params, purge=False, leak_demo=True, window="expanding", train_window=1)
    try:
        folds = RollingSchedule(**params).folds(calendar, label_end)
    except InsufficientHistoryError:
        return
    sample_dates = label_end.index.get_level_values(0).unique()
    by_date = label_end.groupby(level=0).max()
    for fold in folds:
        used = fold.train_dates.union(fold.valid_dates)
        assert used.equals(sample_dates[sample_dates < fold.decision_date])
        assert fold.record.n_purged == 0 and fold.record.leak_guard == "disabled"
        late = (by_date[used] > fold.cutoff).any()
        if len(fold.valid_dates):  # or a training label that reaches into the validation tail's cutoff
            late |= (by_date[fold.train_dates] > fold.record.valid_cutoff).any()
        assert fold.record.leaky == bool(late)


@settings(max_examples=40, deadline=None)
@given(st.integers(20, 60), st.data())
def test_any_unsorted_calendar_is_refused(n_dates: int, data: st.DataObject) -> None:
    calendar = pd.bdate_range("2023-01-02", periods=n_dates, name="date")
    order = data.draw(st.permutations(range(n_dates)))
    if list(order) == sorted(order):
        return
    with pytest.raises(DataContractError, match="sorted ascending"):
        RollingSchedule(train_window=2, valid_days=0, test_start=calendar[-3]).split(
            calendar[list(order)], horizon_labels(calendar, 2)
        )


def test_backtest_config_instantiates_the_schedule(compose_config) -> None:
    from hydra.utils import instantiate

    default = compose_config(config_name="backtest/default")
    demo = compose_config(["backtest.purge=false", "backtest.leak_demo=true"], config_name="backtest/default")
    refused = compose_config(["backtest.purge=false"], config_name="backtest/default")
    assert instantiate(default.backtest, _convert_="all") == RollingSchedule(
        retrain_every=20, train_window=500, window="sliding", valid_days=20, embargo=2, purge=True
    )
    assert instantiate(demo.backtest, _convert_="all").purge is False
    with pytest.raises(Exception, match="leak_demo=true"):  # hydra wraps the ConfigError
        instantiate(refused.backtest, _convert_="all")


def test_schedule_on_the_tiny_synthetic_market(tiny_panel: pd.DataFrame) -> None:
    labels = make_labels(tiny_panel)
    calendar = tiny_panel.index.get_level_values("date").unique()
    schedule = RollingSchedule(train_window=250, test_start="2022-07-01")
    folds = schedule.folds(calendar, labels.label_end)
    n_test = int((calendar >= "2022-07-01").sum())
    assert len(folds) == -(-n_test // 5)
    for fold in folds:
        check_fold(fold, labels.label_end)
        pos_decision = calendar.get_loc(fold.decision_date)
        # cutoff = d - 2; the validation tail ends at d - 2 - 5 and starts 19 days earlier, at v0 = d - 26;
        # training labels end by v0 - 2 = d - 28.
        assert fold.record.max_valid_label_end == fold.cutoff == calendar[pos_decision - 2]
        assert fold.valid_dates[0] == calendar[pos_decision - 26]
        assert fold.record.max_train_label_end == fold.record.valid_cutoff == calendar[pos_decision - 28]
        assert len(fold.train_dates) == 250 and len(fold.valid_dates) == 20
        assert (
            fold.record.n_purged
            == labels.label_end.index.get_level_values(0)
            .isin(
                calendar[calendar.get_loc(fold.valid_dates[-1]) + 1 : pos_decision].union(
                    calendar[calendar.get_loc(fold.train_dates[-1]) + 1 : calendar.get_loc(fold.valid_dates[0])]
                )
            )
            .sum()
        )


def test_folds_survive_pickling_for_worker_processes() -> None:
    import pickle

    fold = next(
        RollingSchedule(retrain_every=5, train_window=6, valid_days=4, embargo=2, test_start=CAL[30]).split(
            CAL, horizon_labels(CAL, 5)
        )
    )
    copy = pickle.loads(pickle.dumps(fold))
    assert copy.record == fold.record and copy.train_dates.equals(fold.train_dates)
