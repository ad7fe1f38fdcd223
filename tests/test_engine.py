"""The rolling engine end to end on the tiny synthetic market: guards, determinism, resume, backends."""

from __future__ import annotations

import functools
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import backtest.engine as engine
from backtest.benchmark import index_returns
from backtest.code_fingerprint import code_fingerprint
from backtest.data.fingerprint import panel_fingerprint
from backtest.drift import feature_value_drift
from backtest.engine import EngineOptions, plan_backtest, run_backtest
from backtest.errors import ConfigError, FeatureAuditError
from backtest.features.registry import default_registry
from backtest.features.sets import FeatureSetSpec
from backtest.labels import LabelSpec
from backtest.memory import file_backed, file_identity, sees_file
from backtest.metrics import HEADLINE_KEYS, INDEX_KEYS, ndcg_at_k
from backtest.portfolio import PortfolioSpec
from backtest.record import value_drift
from backtest.splits import RollingSchedule
from models.lambdarank import LambdaRankRanker
from tests.features.feature_fixtures import PLANTED
from tests.small_backtest import FEATURES, SCHEDULE, backtest, plan, small_ranker


@pytest.fixture(scope="module")
def result(tiny_panel):
    return backtest(tiny_panel)


def test_headline_metrics_and_fold_records(result) -> None:
    assert set(HEADLINE_KEYS) <= set(result.metrics)
    assert result.metrics["n_folds"] == len(result.records) == len(result.fold_metrics) >= 6
    assert result.leak_guard == "passed" and result.feature_audit == "passed"
    for record in result.records:
        assert record.max_train_label_end <= record.cutoff < record.decision_date
    assert np.isfinite(result.metrics["sharpe"]) and result.metrics["max_drawdown"] <= 0
    # days on which the book was not the one chosen (blocked trades, stale marks), for the summary and tags
    assert result.metrics["days_blocked"] == result.portfolio.days_blocked <= len(result.portfolio.returns)
    assert result.metrics["rebalances_blocked"] == result.portfolio.rebalances_blocked
    # every decision date of the test period has scores for the day's members, and only for them
    scored_days = result.scores.index.get_level_values("date").unique()
    assert scored_days.min() >= pd.Timestamp("2022-07-01")
    assert result.importance.shape[0] == len(result.records)


def test_the_index_benchmark_is_on_the_strategys_return_days(result, tiny_panel) -> None:
    returns = result.portfolio.returns
    assert result.index is not None and result.index.source == "float_mv"
    assert result.index.returns.index.equals(returns.index)
    assert result.index.returns.equals(index_returns(tiny_panel, alignment="open").returns.reindex(returns.index))
    assert all(np.isfinite(result.metrics[k]) for k in INDEX_KEYS)
    assert result.metrics["index_excess_ann_return"] == pytest.approx(
        result.metrics["ann_return"] - result.metrics["index_ann_return"], abs=1e-15
    )
    assert 0.0 < result.metrics["index_beta"] < 3.0 and result.metrics["index_tracking_error"] > 0


def test_scores_only_for_members(result, tiny_panel) -> None:
    members = tiny_panel.loc[result.scores.index, "in_universe"]
    assert members.all()


def test_features_are_computed_once_per_backtest(tiny_panel, monkeypatch) -> None:
    calls = []
    real = engine.build_features

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "build_features", counting)
    backtest(tiny_panel)
    assert len(calls) == 1


def test_same_inputs_same_scores(result, tiny_panel) -> None:
    again = backtest(tiny_panel)
    pd.testing.assert_series_equal(again.scores, result.scores)


def test_backend_and_workers_do_not_change_results(result, tiny_panel) -> None:
    parallel = backtest(tiny_panel, n_jobs=2, backend="loky")
    pd.testing.assert_series_equal(parallel.scores, result.scores)


class PrepareCounting(LambdaRankRanker):
    """small_ranker's model, writing a line into ``log`` at every prepare (from whichever process)."""

    def __init__(self, log: Path) -> None:
        super().__init__(small_ranker().config)
        self.log = log

    def prepare(self, data, *, history_end=None, shared=None) -> None:
        with self.log.open("a") as out:
            out.write(f"{os.getpid()} {'read' if shared else 'binned'}\n")
        super().prepare(data, history_end=history_end, shared=shared)


def test_folds_on_a_dask_cluster_equal_the_in_process_run_bitwise(
    result, tiny_panel, monkeypatch, tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    scattered = []
    real_scatter = distributed.Client.scatter

    def spy(self, data, *args, **kwargs):
        scattered.append(
            (
                [type(x).__name__ for x in data] if isinstance(data, list) else type(data).__name__,
                kwargs.get("broadcast"),
            )
        )
        return real_scatter(self, data, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "scatter", spy)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        prepares = tmp_path / "prepares.txt"
        on_cluster = backtest(
            tiny_panel,
            backend="dask",
            scheduler=cluster.scheduler_address,
            n_jobs=-1,
            factory=functools.partial(PrepareCounting, prepares),
        )
        prefixes = set(cluster.scheduler.task_prefixes)
    assert any(p.startswith("batch_of__stateless_fold") for p in prefixes), prefixes  # the workers ran the folds
    # each of the two workers binned the data once, not once per fold; this process did not
    pids = [line.split()[0] for line in prepares.read_text().splitlines()]
    assert len(on_cluster.records) >= 6 and len(pids) == len(set(pids)) <= 2 and os.getpid() not in map(int, pids)
    # the features went to the workers once, broadcast, not once per fold
    assert scattered == [(["RankingData", "RankingData", "Labels", "MultiIndex"], True)]
    assert np.array_equal(on_cluster.scores.to_numpy(), result.scores.to_numpy())
    pd.testing.assert_series_equal(on_cluster.scores, result.scores, check_exact=True)
    pd.testing.assert_frame_equal(
        on_cluster.fold_metrics.drop(columns="fit_seconds"),
        result.fold_metrics.drop(columns="fit_seconds"),
        check_exact=True,
    )
    assert on_cluster.metrics.keys() == result.metrics.keys()
    for key, value in result.metrics.items():
        assert on_cluster.metrics[key] == value or (np.isnan(value) and np.isnan(on_cluster.metrics[key])), key


def test_dask_workers_on_this_machine_map_the_cached_matrix_from_its_file(
    result, tiny_panel, monkeypatch, tmp_path: Path
) -> None:
    """With the feature cache, workers that see its file get a reference to it, not the matrix's bytes:
    what Dask serializes of the samples and the data (after it has tokenized them for their keys)
    unpickles as a memory map of the file and holds no array of feature values, and so does what a worker
    passes on to another; the stock codes travel as integers; every score is the same."""
    distributed = pytest.importorskip("distributed")
    from distributed.protocol import pickle as dask_pickle

    sizes: list[tuple[int, int, int, int]] = []
    real_dumps = dask_pickle.dumps

    def spy(x, *args, buffer_callback=None, **kwargs):
        buffers: list[pickle.PickleBuffer] = []
        out = real_dumps(x, *args, buffer_callback=buffers.append, **kwargs)
        for b in buffers:
            if buffer_callback is not None:
                buffer_callback(b)
        if type(x).__name__ == "RankingData":
            received = pickle.loads(out, buffers=buffers)
            assert file_backed(received.root().X)
            # what a worker sends another (broadcast copies travel from worker to worker) is a reference too
            passed_on = len(pickle.dumps(received, protocol=5))
            for shipped_codes in (received.codes, received.root().codes):  # an int32 a row, not a str a row
                distinct = len(set(shipped_codes.tolist()))
                assert len(pickle.dumps(shipped_codes, protocol=5)) < 4 * len(shipped_codes) + 30 * distinct + 500
            shipped = len(out) + sum(b.raw().nbytes for b in buffers)
            largest = max((b.raw().nbytes for b in buffers), default=0)  # no array of feature values in it
            sizes.append((shipped, passed_on, x.root().X.nbytes, largest))
        return out

    monkeypatch.setattr(dask_pickle, "dumps", spy)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        on_cluster = backtest(
            tiny_panel, backend="dask", scheduler=cluster.scheduler_address, n_jobs=-1, feature_cache_dir=tmp_path
        )
    assert file_backed(on_cluster.features.values)
    assert len(sizes) == 2  # the samples and the data, scattered once
    for shipped, passed_on, matrix, largest in sizes:
        assert matrix > 1_000_000 and largest < matrix / 4, (largest, matrix)
        assert passed_on < shipped + matrix / 4, (passed_on, shipped, matrix)
    pd.testing.assert_series_equal(on_cluster.scores, result.scores, check_exact=True)


def test_one_dask_worker_bins_and_the_others_read_its_bins(result, tiny_panel, tmp_path: Path) -> None:
    """With the cached matrix on a folder every worker sees, one worker bins the samples and writes the
    bins beside the matrix; the workers fitting the folds read them instead of binning again; the scores
    equal the in-process run's bitwise, and the bins file is gone when the backtest ends."""
    distributed = pytest.importorskip("distributed")
    prepares = tmp_path / "prepares.txt"
    cache = tmp_path / "cache"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        on_cluster = backtest(
            tiny_panel,
            backend="dask",
            scheduler=cluster.scheduler_address,
            n_jobs=-1,
            feature_cache_dir=cache,
            factory=functools.partial(PrepareCounting, prepares),
        )
    lines = [line.split() for line in prepares.read_text().splitlines()]
    assert [kind for _, kind in lines].count("binned") == 1, lines  # one worker binned, once
    readers = {pid for pid, kind in lines if kind == "read"}
    assert 1 <= len(readers) <= 2 and str(os.getpid()) not in {pid for pid, _ in lines}
    assert not list(cache.rglob("bins-*.bin"))
    pd.testing.assert_series_equal(on_cluster.scores, result.scores, check_exact=True)


def test_a_file_is_seen_only_with_its_size_and_time(tmp_path: Path) -> None:
    path = tmp_path / "m.npy"
    np.save(path, np.ones((3, 2), dtype=np.float32))
    found = file_identity(np.load(path, mmap_mode="r"))
    assert found is not None and found[0] == str(path) and sees_file(*found)
    assert not sees_file(found[0], found[1] + 1, found[2]) and not sees_file(str(tmp_path / "x.npy"), *found[1:])
    assert file_identity(np.ones((3, 2), dtype=np.float32)) is None


def test_dask_without_a_scheduler_or_with_a_silent_one_is_refused_before_the_features(tiny_panel, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="needs its scheduler's address"):
        EngineOptions(backend="dask")
    monkeypatch.setattr(engine, "DASK_CONNECT_TIMEOUT_S", 1)
    monkeypatch.setattr(engine, "build_features", lambda *a, **k: pytest.fail("features built"))
    with pytest.raises(ConfigError, match="no Dask scheduler answers at 'tcp://127.0.0.1:9'"):
        backtest(tiny_panel, backend="dask", scheduler="tcp://127.0.0.1:9", audit_cutoffs=0)


def test_killed_run_resumes_with_identical_results(result, tiny_panel, tmp_path: Path) -> None:
    class Killed(Exception):
        pass

    def kill_after_three(outcome, n):
        if outcome.fold == 2 and not outcome.resumed:
            raise Killed

    with pytest.raises(Killed):
        run_backtest(
            plan(tiny_panel),
            features=FEATURES,
            ranker_factory=small_ranker,
            data_fingerprint=panel_fingerprint(tiny_panel),
            options=EngineOptions(checkpoint_dir=tmp_path),
            seed=3,
            on_fold=kill_after_three,
        )
    saved = list(tmp_path.rglob("fold_*.npz"))
    assert len(saved) == 3
    seen = []
    resumed = run_backtest(
        plan(tiny_panel),
        features=FEATURES,
        ranker_factory=small_ranker,
        data_fingerprint=panel_fingerprint(tiny_panel),
        options=EngineOptions(checkpoint_dir=tmp_path),
        seed=3,
        on_fold=lambda o, n: seen.append(o.resumed),
    )
    assert seen[:3] == [True, True, True] and not any(seen[3:])
    assert resumed.resumed_folds == 3 and resumed.resumed_from == resumed.code_fingerprint
    pd.testing.assert_series_equal(resumed.scores, result.scores)


def test_changed_code_resumes_nothing_and_unchanged_code_resumes_every_fold(
    result, tiny_panel, tmp_path: Path, monkeypatch
) -> None:
    caches = dict(checkpoint_dir=tmp_path / "checkpoints", feature_cache_dir=tmp_path / "features")
    first = backtest(tiny_panel, **caches)
    assert first.code_fingerprint == code_fingerprint() and len(first.code_fingerprint) == 16
    assert (first.resumed_folds, first.resumed_from) == (0, None)
    pd.testing.assert_series_equal(first.scores, result.scores, check_exact=True)

    # a committed change that negates the model's predictions, with the code fingerprint it brings
    real_predict = LambdaRankRanker.predict
    monkeypatch.setattr(LambdaRankRanker, "predict", lambda self, data: -real_predict(self, data))
    monkeypatch.setattr(engine, "code_fingerprint", lambda: "0123456789abcdef")
    changed = backtest(tiny_panel, **caches)
    assert changed.code_fingerprint == "0123456789abcdef" and changed.resumed_folds == 0
    assert changed.scores.to_numpy().tobytes() == (-result.scores).to_numpy().tobytes()
    assert changed.feature_cache_hit  # the feature code did not change: its cache still hits

    monkeypatch.undo()  # back to the first code: every fold is read back, bitwise the same
    again = backtest(tiny_panel, **caches)
    assert again.resumed_folds == len(again.records) and again.resumed_from == first.code_fingerprint
    assert again.scores.to_numpy().tobytes() == first.scores.to_numpy().tobytes()
    assert again.portfolio.returns.to_numpy().tobytes() == first.portfolio.returns.to_numpy().tobytes()
    assert again.metrics == pytest.approx(first.metrics, rel=0, abs=0, nan_ok=True)


def test_warm_start_resume_is_identical(tiny_panel, tmp_path: Path) -> None:
    def warm():
        return small_ranker(warm_start=True, warm_start_rounds=10, full_refit_every=3)

    straight = backtest(tiny_panel, factory=warm)

    class Killed(Exception):
        pass

    def kill(outcome, n):
        if outcome.fold == 3 and not outcome.resumed:
            raise Killed

    opts = EngineOptions(checkpoint_dir=tmp_path)
    kwargs = dict(
        features=FEATURES, ranker_factory=warm, data_fingerprint=panel_fingerprint(tiny_panel), options=opts, seed=3
    )
    with pytest.raises(Killed):
        run_backtest(plan(tiny_panel), on_fold=kill, **kwargs)
    resumed = run_backtest(plan(tiny_panel), **kwargs)
    pd.testing.assert_series_equal(resumed.scores, straight.scores)


def test_a_warm_start_checkpoint_stores_no_secret_of_the_model_config(tiny_panel, tmp_path: Path) -> None:
    def warm():  # a secret as LightGBM would get it, e.g. model.config.extra.password='${oc.env:LGB_PASSWORD}'
        return small_ranker(warm_start=True, warm_start_rounds=10, extra={"password": "abc123secret"})

    straight = backtest(tiny_panel, factory=warm, checkpoint_dir=tmp_path)
    units = sorted(tmp_path.rglob("fold_*.npz"))
    assert len(units) == len(straight.records) > 2
    for unit in units:
        with np.load(unit) as arrays:
            stored = {name: arrays[name].tobytes() for name in arrays.files}
        assert any(name.startswith("model/") for name in stored)  # the warm-start state is there
        assert not [name for name, data in stored.items() if b"abc123secret" in data], unit
    units[-2].unlink()  # the next-to-last fold is refit from the state saved before it, then the last resumes
    resumed = backtest(tiny_panel, factory=warm, checkpoint_dir=tmp_path)
    assert resumed.resumed_folds == len(resumed.records) - 1
    pd.testing.assert_series_equal(resumed.scores, straight.scores)


def test_a_rebalance_dropped_at_the_end_of_the_data_is_said_once_for_every_book(tiny_panel, caplog) -> None:
    # 121 decision days up to the panel's last day: the last weekly rebalance is decided on that day
    schedule = RollingSchedule(**{**SCHEDULE, "test_start": "2022-07-07"})
    with caplog.at_level(logging.WARNING):
        res = backtest(tiny_panel, schedule=schedule, audit_cutoffs=0)
    assert res.portfolio.dropped_rebalances == (pd.Timestamp("2022-12-30"),)
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == [
        "1 rebalance(s) dropped from the model's book, its equal-weight benchmark and the baselines': the panel "
        "ends before a full open-to-open return after their execution day (decided on 2022-12-30)"
    ]


def test_purge_cannot_be_switched_off_silently() -> None:
    with pytest.raises(ConfigError, match="leak_demo"):
        RollingSchedule(**SCHEDULE, purge=False)


def test_leak_demo_is_tagged_disabled(tiny_panel) -> None:
    leaky = backtest(tiny_panel, schedule=RollingSchedule(**{**SCHEDULE, "embargo": 0}, purge=False, leak_demo=True))
    assert leaky.leak_guard == "disabled"
    assert any(r.leaky for r in leaky.records)
    # the labels used reach past the decision date: the leak the purge prevents
    assert all(max(r.max_train_label_end, r.max_valid_label_end) > r.decision_date for r in leaky.records)


def test_the_ndcg_is_at_the_portfolio_depth_not_the_models(tiny_panel) -> None:
    """The model early-stops at its configured NDCG@5; the run's ndcg is at the 3 stocks it buys."""
    three = plan_backtest(
        tiny_panel, label=LabelSpec(), schedule=RollingSchedule(**SCHEDULE), portfolio=PortfolioSpec(top_k=3)
    )
    res = run_backtest(
        three,
        features=FEATURES,
        ranker_factory=small_ranker,
        data_fingerprint=panel_fingerprint(tiny_panel),
        options=EngineOptions(audit_cutoffs=0),
        seed=3,
    )
    assert small_ranker().ndcg_depth == 5 and res.ndcg_depth == 3
    relevance = res.labels.target.reindex(res.scores.index)
    assert res.metrics["ndcg"] == ndcg_at_k(res.scores, relevance, 3, gain=small_ranker().ndcg_gain)
    assert "ndcg" in res.fold_metrics.columns and not any(c.startswith("ndcg_at") for c in res.fold_metrics.columns)


def test_an_audit_switched_off_is_tagged_disabled(tiny_panel) -> None:
    off = backtest(tiny_panel, audit_cutoffs=0)
    assert off.audit is None and off.feature_audit == "disabled" and off.leak_guard == "passed"
    # the one reason: the tiny market trades on every test day
    reason = "a leakage guard failed or was switched off (leak_guard=passed, feature_audit=disabled)"
    assert off.not_comparable == (reason,)


def test_a_look_ahead_feature_stops_the_run_and_is_named(tiny_panel) -> None:
    registry = default_registry().extended(*PLANTED[:1])
    spec = FeatureSetSpec(name="leaky", indicators=("ret_5d", PLANTED[0].name), windows=(5,))
    with pytest.raises(FeatureAuditError, match=PLANTED[0].name):
        run_backtest(
            plan(tiny_panel),
            features=spec,
            ranker_factory=small_ranker,
            data_fingerprint=panel_fingerprint(tiny_panel),
            registry=registry,
        )


def test_top_k_selection_uses_only_data_before_the_first_decision(tiny_panel) -> None:
    spec = FeatureSetSpec(name="top3", indicators=FEATURES.indicators, windows=(5,), keep_by_gain=3)
    res = run_backtest(
        plan(tiny_panel),
        features=spec,
        ranker_factory=small_ranker,
        data_fingerprint=panel_fingerprint(tiny_panel),
        seed=3,
    )
    assert len(res.feature_names) == 3
    assert set(res.importance.columns) <= set(res.feature_names)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="resident memory is read from /proc (Linux)")
def test_each_stage_logs_the_peak_resident_memory_so_far(caplog: pytest.LogCaptureFixture) -> None:
    """release_freed_memory logs the process's peak so far and what stays resident: a 200 MB block held
    through one stage is in that stage's resident figure and under the peak, and once freed the next
    line's resident figure drops back by it."""
    import logging
    import re

    def figures() -> tuple[float, float]:
        found = re.search(r"peak so far ([\d.]+) GiB resident; ([\d.]+) GiB after it", caplog.messages[-1])
        assert found, caplog.messages
        return float(found[1]), float(found[2])

    with caplog.at_level(logging.DEBUG, logger="backtest.engine"):
        engine.release_freed_memory("before")
        peak0, _ = figures()
        block = np.ones(200 * 2**20 // 8)  # touched: resident
        engine.release_freed_memory("holding")
        assert caplog.messages[-1].startswith("memory: holding done")
        _, held = figures()
        del block
        engine.release_freed_memory("after")
        peak2, now2 = figures()
    assert peak2 >= max(peak0, held) and held - now2 > 0.15  # about 0.195 GiB handed back


def test_value_drift_thins_each_window_before_gathering_its_rows(result) -> None:
    """The run's PSI / KS table gathers only the rows it keeps: the table of the whole windows' rows thinned
    to the same count (the definition), without a copy of each window."""
    first = result.records[0]
    dates = result.features.index.get_level_values(0)
    reference = (dates >= first.train_start) & (dates <= first.train_end)
    current = dates.isin(result.scores.index.get_level_values(0).unique())
    values = result.features.values
    assert reference.sum() > 50 and current.sum() > 50  # both windows are thinned
    whole = feature_value_drift(values[reference], values[current], result.feature_names, max_rows=50)
    pd.testing.assert_frame_equal(value_drift(result, max_rows=50), whole)


def test_a_cached_matrix_is_read_from_its_file_with_the_same_results(result, tiny_panel, tmp_path: Path) -> None:
    """With the feature cache the matrix is a memory map of its entry's file (built into it on a miss,
    mapped on a hit) whose pages each stage drops after reading: the same values, scores, baselines and
    metrics, bit for bit, as the matrix held in memory."""
    for hit in (False, True):
        cached = backtest(tiny_panel, feature_cache_dir=tmp_path)
        assert cached.feature_cache_hit == hit and file_backed(cached.features.values)
        assert cached.features.values.tobytes() == result.features.values.tobytes()
        assert cached.scores.to_numpy().tobytes() == result.scores.to_numpy().tobytes()
        assert cached.metrics == pytest.approx(result.metrics, rel=0, abs=0, nan_ok=True)
        assert "baseline_linear_rank_ic_mean" in cached.metrics
