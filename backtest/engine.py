"""The rolling loop: audit, features, labels, purged folds, fit / predict, portfolio, metrics.

::

    panel --audit_features (cutoffs)--> pass / FeatureAuditError
          --load_or_build_features-----> X (eligible rows, float32), once per backtest
          --make_labels----------------> fwd_return, label_end, relevance bins
          --RollingSchedule.folds------> folds (purged from label_end, each checked by check_fold)
          --ranker.fit / predict-------> scores (date, code) on each fold's decision dates
          --simulate-------------------> daily strategy / equal-weight returns
          --headline_metrics-----------> the contract metric keys

Folds run in time order in this process when the ranker is stateful (warm start), otherwise through
joblib (``backend``, ``n_jobs``); results do not depend on either. Each finished fold is checkpointed
under ``checkpoint_dir/<run key>/`` so that a killed backtest rerun with the same inputs resumes where it
stopped and gives identical results.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, FeatureAuditError, InsufficientHistoryError
from backtest.features.audit import AuditReport, audit_features
from backtest.features.build import FeatureMatrix, build_features
from backtest.features.cache import load_or_build_features
from backtest.features.registry import FeatureRegistry
from backtest.features.sets import FeatureSetSpec, select_by_gain
from backtest.labels import Labels, LabelSpec, make_labels
from backtest.leakage import GuardStatus, LeakageRecord, feature_audit_status, fold_rows, leak_guard_status
from backtest.metrics import daily_ic, headline_metrics, ndcg_at_k
from backtest.portfolio import PortfolioResult, PortfolioSpec, simulate
from backtest.splits import Fold, RollingSchedule
from models.base import LEVEL_PROCESSINGS, Ranker, RankingData

log = logging.getLogger(__name__)

RankerFactory = Callable[[], Ranker]


@dataclass(frozen=True)
class EngineOptions:
    """How the loop runs (never what it computes).

    Parameters
    ----------
    n_jobs : joblib workers for stateless rankers (1: in this process).
    backend : joblib backend ("loky", "threading", "multiprocessing", or "ray" / "dask" when their
        joblib backends are registered).
    feature_cache_dir : feature cache directory (None: no cache).
    checkpoint_dir : fold checkpoints (None: no checkpoints, no resume).
    audit_cutoffs : number of cutoff dates of the feature audit (0 switches it off; the run is then
        not comparable).
    """

    n_jobs: int = 1
    backend: str = "loky"
    feature_cache_dir: Path | None = None
    checkpoint_dir: Path | None = None
    audit_cutoffs: int = 3


@dataclass(frozen=True)
class FoldOutcome:
    """What one fold produced: scores for its decision dates and its evidence."""

    fold: int
    scores: np.ndarray  # aligned with the fold's prediction rows
    rows: np.ndarray  # positions of those rows in the feature matrix
    importance: dict[str, float]
    metrics: dict[str, float]
    resumed: bool = False


@dataclass(frozen=True, eq=False)
class BacktestResult:
    """Everything a backtest produced; plain data for reports and tracking."""

    scores: pd.Series
    portfolio: PortfolioResult
    metrics: dict[str, float]
    fold_metrics: pd.DataFrame
    records: list[LeakageRecord]
    importance: pd.DataFrame
    audit: AuditReport | None
    labels: Labels
    features: FeatureMatrix
    feature_names: list[str]
    leak_guard: GuardStatus
    feature_audit: GuardStatus
    feature_cache_hit: bool
    ndcg_depth: int  # the headline and per-fold NDCG are ndcg_at_<ndcg_depth>
    timings: dict[str, float] = field(default_factory=dict)


def run_backtest(
    panel: pd.DataFrame,
    *,
    features: FeatureSetSpec,
    label: LabelSpec,
    schedule: RollingSchedule,
    ranker_factory: RankerFactory,
    portfolio: PortfolioSpec,
    data_fingerprint: str,
    options: EngineOptions = EngineOptions(),
    n_trials: int = 1,
    trial_sharpe_var: float = 0.0,
    seed: int = 0,
    on_fold: Callable[[FoldOutcome, int], None] | None = None,
    registry: FeatureRegistry | None = None,
) -> BacktestResult:
    """Run a leakage-guarded rolling backtest of ``ranker_factory``'s model on ``panel``.

    Parameters
    ----------
    panel : the validated canonical panel, indexed by (date, code).
    features, label, schedule, portfolio : the specs of each part (see their modules).
    ranker_factory : builds a fresh ranker (models.base.Ranker).
    data_fingerprint : ``panel_fingerprint(panel)``, keys the feature cache and the checkpoints.
    n_trials, trial_sharpe_var : for the deflated Sharpe ratio (the study this run belongs to).
    on_fold : called after each fold with its outcome and the number of folds (progress display).
    registry : the feature indicators (default: the library's registry); the audit covers them all.

    Raises
    ------
    FeatureAuditError : a feature's past values change when future data is removed.
    LeakageError : a fold trains on a label that ends after its cutoff (with the purge on).
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()

    audit = None
    if options.audit_cutoffs > 0:
        t0 = time.perf_counter()
        audit = audit_features(panel, features, cutoffs=_audit_cutoffs(panel, schedule, options.audit_cutoffs),
                               registry=registry)
        timings["audit_s"] = time.perf_counter() - t0
        if not audit.passed:
            raise FeatureAuditError(
                f"feature audit failed: {audit.summary()}\n  fix: remove or correct the named feature(s); a "
                "feature of day t may use data up to the close of t only"
            )

    t0 = time.perf_counter()
    if options.feature_cache_dir is not None:
        matrix, cache_hit = load_or_build_features(
            panel, features, options.feature_cache_dir, data_fingerprint=data_fingerprint, registry=registry
        )
    else:
        matrix = build_features(panel, features, data_fingerprint=data_fingerprint, registry=registry)
        cache_hit = False
    timings["features_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    labels = make_labels(panel, label)
    timings["labels_s"] = time.perf_counter() - t0

    calendar = pd.DatetimeIndex(panel.index.get_level_values(0).unique())
    folds = schedule.folds(calendar, labels.label_end)
    if not folds:
        raise InsufficientHistoryError("the schedule has no folds: the test period holds no trading day")
    # RollingSchedule.folds has already run check_fold on every purged fold (LeakageError on a breach).

    relevance = labels.target.reindex(matrix.index)
    if features.keep_by_gain:
        matrix = _keep_by_gain(matrix, relevance, label.processing, folds[0], ranker_factory, features.keep_by_gain)
    probe = ranker_factory()
    # The NDCG reported is the one the model trains / early-stops on: its depth (else the stocks bought)
    # and its gain.
    ndcg = _Ndcg(depth=probe.ndcg_depth or portfolio.top_k, gain=probe.ndcg_gain)
    data, samples = _ranking_data(matrix, relevance, label.processing)

    key = _run_key(data_fingerprint, matrix.fingerprint, label, schedule, ranker_factory, seed)
    ckpt = _Checkpoints(options.checkpoint_dir / key) if options.checkpoint_dir else None

    t0 = time.perf_counter()
    outcomes = list(
        _run_folds(samples, data, folds, ranker_factory, labels, options, ckpt, on_fold, ndcg)
    )
    timings["folds_s"] = time.perf_counter() - t0

    rows = np.concatenate([o.rows for o in outcomes])
    scores = pd.Series(np.concatenate([o.scores for o in outcomes]), index=matrix.index[rows], name="score")
    scores = scores.sort_index()

    t0 = time.perf_counter()
    result = simulate(scores, panel, portfolio)
    timings["portfolio_s"] = time.perf_counter() - t0

    fwd = labels.fwd_return.reindex(scores.index)
    rel = labels.target.reindex(scores.index)
    metrics = headline_metrics(
        result.returns, result.benchmark_returns, result.periods,
        scores=scores, labels=fwd, relevance=rel, turnover=result.annual_turnover,
        n_trials=n_trials, trial_sharpe_var=trial_sharpe_var, rng=np.random.default_rng(seed),
        ndcg_depth=ndcg.depth, ndcg_gain=ndcg.gain,
    )
    metrics["n_folds"] = float(len(folds))
    fold_metrics = pd.DataFrame([{"fold": o.fold, **o.metrics} for o in outcomes]).set_index("fold")
    importance = pd.DataFrame({o.fold: o.importance for o in outcomes}).T.rename_axis("fold").fillna(0.0)
    records = [f.record for f in folds]
    timings["total_s"] = time.perf_counter() - started
    return BacktestResult(
        scores=scores, portfolio=result, metrics=metrics, fold_metrics=fold_metrics, records=records,
        importance=importance, audit=audit, labels=labels, features=matrix, feature_names=list(matrix.names),
        leak_guard=leak_guard_status(records), feature_audit=feature_audit_status(audit),
        feature_cache_hit=cache_hit, ndcg_depth=ndcg.depth, timings=timings,
    )


# --- folds ------------------------------------------------------------------------------------------


def _fold_sets(samples: RankingData, data: RankingData,
               fold: Fold) -> tuple[RankingData, RankingData | None, np.ndarray]:
    """Training and validation sets (from the labelled ``samples``) and the prediction rows of ``data``."""
    train_rows, valid_rows, _ = fold_rows(fold, samples.dates)
    predict_rows = fold_rows(fold, data.dates)[2]
    valid = samples.take(valid_rows) if len(valid_rows) else None
    return samples.take(train_rows), valid, predict_rows


@dataclass(frozen=True)
class _Ndcg:
    depth: int
    gain: str | tuple[float, ...]


def _fold_metrics(fold: Fold, scores: np.ndarray, rows: np.ndarray, index: pd.MultiIndex, labels: Labels,
                  seconds: float, ndcg: _Ndcg) -> dict[str, float]:
    s = pd.Series(scores, index=index[rows])
    fwd = labels.fwd_return.reindex(s.index)
    rel = labels.target.reindex(s.index)
    ok = fwd.notna()
    out = {
        "rank_ic": float(daily_ic(s[ok], fwd[ok], method="spearman").mean()) if ok.any() else float("nan"),
        "ic": float(daily_ic(s[ok], fwd[ok]).mean()) if ok.any() else float("nan"),
        f"ndcg_at_{ndcg.depth}": float(ndcg_at_k(s[ok], rel[ok], k=ndcg.depth, gain=ndcg.gain)) if ok.any()
        else float("nan"),
        "n_train": float(fold.record.n_train_samples),
        "n_valid": float(fold.record.n_valid_samples),
        "n_purged": float(fold.record.n_purged),
        "fit_seconds": seconds,
    }
    return out


def _fit_predict(ranker: Ranker, samples: RankingData, data: RankingData, fold: Fold, labels: Labels,
                 index: pd.MultiIndex, ndcg: _Ndcg) -> FoldOutcome:
    t0 = time.perf_counter()
    train, valid, predict_rows = _fold_sets(samples, data, fold)
    ranker.fit(train, valid)
    scores = np.asarray(ranker.predict(data.take(predict_rows)), dtype=np.float64)
    seconds = time.perf_counter() - t0
    return FoldOutcome(fold.fold, scores, predict_rows, dict(ranker.feature_importance()),
                       _fold_metrics(fold, scores, predict_rows, index, labels, seconds, ndcg))


def _stateless_fold(factory: RankerFactory, samples: RankingData, data: RankingData, fold: Fold, labels: Labels,
                    index: pd.MultiIndex, history_end: np.datetime64, ndcg: _Ndcg) -> FoldOutcome:
    ranker = factory()
    ranker.prepare(samples, history_end=history_end)
    return _fit_predict(ranker, samples, data, fold, labels, index, ndcg)


def _run_folds(
    samples: RankingData, data: RankingData, folds: list[Fold], factory: RankerFactory,
    labels: Labels, options: EngineOptions, ckpt: _Checkpoints | None,
    on_fold: Callable[[FoldOutcome, int], None] | None, ndcg: _Ndcg,
) -> Iterator[FoldOutcome]:
    index = pd.MultiIndex.from_arrays([pd.DatetimeIndex(data.dates), data.codes], names=["date", "code"])
    history_end = np.datetime64(folds[0].train_dates[-1], "ns")
    n = len(folds)
    done = ckpt.completed() if ckpt else {}
    probe = factory()
    stateful = probe.stateful

    def emit(outcome: FoldOutcome) -> FoldOutcome:
        if ckpt and not outcome.resumed:
            ckpt.save(outcome)
        if on_fold:
            on_fold(outcome, n)
        return outcome

    if stateful or options.n_jobs == 1:
        ranker = probe
        ranker.prepare(samples, history_end=history_end)
        for fold in folds:
            if fold.fold in done:
                yield emit(done[fold.fold])
                continue
            if stateful and ckpt and fold.fold > 0 and (fold.fold - 1) in done:
                ranker = ckpt.restore_ranker(type(ranker), fold.fold - 1, ranker)
            outcome = _fit_predict(ranker, samples, data, fold, labels, index, ndcg)
            if ckpt and stateful:
                ckpt.save_ranker(ranker, fold.fold)
            yield emit(outcome)
        return

    from joblib import Parallel, delayed

    todo = [f for f in folds if f.fold not in done]
    parallel = Parallel(n_jobs=options.n_jobs, backend=options.backend, return_as="generator")
    computed = parallel(
        delayed(_stateless_fold)(factory, samples, data, f, labels, index, history_end, ndcg) for f in todo
    )
    results = {o.fold: o for o in map(emit, computed)}
    for fold in folds:
        yield done[fold.fold] if fold.fold in done else results[fold.fold]


def _ranking_data(matrix: FeatureMatrix, relevance: pd.Series, processing: str) -> tuple[RankingData, RankingData]:
    """Every eligible row (for predictions) and the labelled rows with their target (for training).

    Training sets are taken from the labelled rows only, so each day of a fold is a whole query group.
    The target keeps the kind of the label ``processing``: int64 relevance levels for ``bins`` /
    ``three_class``, float64 for ``raw`` / ``rank`` (reindexing onto the eligible rows has made it
    float).
    """
    data = RankingData(X=matrix.values, dates=matrix.index.get_level_values(0).values,
                       codes=np.asarray(matrix.index.get_level_values(1).astype(str)),
                       feature_names=tuple(matrix.names))
    labelled = np.flatnonzero(relevance.notna().to_numpy())
    target = relevance.to_numpy(dtype=np.float64)[labelled]
    levels = processing in LEVEL_PROCESSINGS
    samples = data.take(labelled).with_relevance(target.astype(np.int64) if levels else target)
    return data, samples


def _keep_by_gain(matrix: FeatureMatrix, relevance: pd.Series, processing: str, first: Fold, factory: RankerFactory,
                  k: int) -> FeatureMatrix:
    """Keep the k features with the most gain in a model trained only before the first decision date.

    The model is fit on the first fold's (purged) training and validation sets, so the selection sees
    no label that ends after the first decision's cutoff.
    """
    if k >= len(matrix.names):
        log.warning("keep_by_gain=%d >= %d features: keeping all", k, len(matrix.names))
        return matrix
    data, samples = _ranking_data(matrix, relevance, processing)
    ranker = factory()
    ranker.prepare(samples, history_end=np.datetime64(first.train_dates[-1], "ns"))
    train, valid, _ = _fold_sets(samples, data, first)
    ranker.fit(train, valid)
    importance = ranker.feature_importance()
    if not importance:
        raise ConfigError("features.keep_by_gain needs a model with gain importance (model=lambdarank)")
    chosen = select_by_gain(importance, k)
    log.info("top-%d features selected before %s: %s", k, f"{first.decision_date:%Y-%m-%d}", ", ".join(chosen[:10]))
    return matrix.select(chosen)


def _audit_cutoffs(panel: pd.DataFrame, schedule: RollingSchedule, n: int) -> list[pd.Timestamp]:
    """``n`` cutoff dates spread over the test period (its first day, evenly to near its end)."""
    calendar = pd.DatetimeIndex(panel.index.get_level_values(0).unique())
    start, end = schedule.test_period(calendar)
    test = calendar[(calendar >= start) & (calendar <= end)]
    picks = np.unique(np.linspace(0, max(len(test) - 10, 0), num=n).astype(int))
    return [test[i] for i in picks]


# --- checkpoints -----------------------------------------------------------------------------------


def _run_key(data_fp: str, feature_fp: str, label: LabelSpec, schedule: RollingSchedule,
             factory: RankerFactory, seed: int) -> str:
    probe = factory()
    payload = json.dumps(
        {"data": data_fp, "features": feature_fp, "label": repr(label), "schedule": repr(schedule),
         "model": type(probe).__name__, "params": probe.params, "seed": seed},
        sort_keys=True, default=str,
    )
    return hashlib.blake2b(payload.encode(), digest_size=10).hexdigest()


class _Checkpoints:
    """One folder per run key; one ``fold_NNNN.npz`` per finished fold, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, fold: int) -> Path:
        return self.directory / f"fold_{fold:04d}.npz"

    def save(self, outcome: FoldOutcome) -> None:
        tmp = self.directory / f".fold_{outcome.fold:04d}.{os.getpid()}.tmp.npz"
        np.savez(
            tmp, scores=outcome.scores, rows=outcome.rows,
            meta=np.frombuffer(json.dumps({"importance": outcome.importance, "metrics": outcome.metrics}).encode(),
                               dtype=np.uint8),
        )
        os.replace(tmp, self._path(outcome.fold))

    def completed(self) -> dict[int, FoldOutcome]:
        out: dict[int, FoldOutcome] = {}
        for path in sorted(self.directory.glob("fold_*.npz")):
            fold = int(path.stem.split("_")[1])
            with np.load(path) as z:
                meta = json.loads(z["meta"].tobytes().decode())
                out[fold] = FoldOutcome(fold, z["scores"], z["rows"], meta["importance"], meta["metrics"], resumed=True)
        if out:
            log.info("resuming: %d finished fold(s) found in %s", len(out), self.directory)
        return out

    def save_ranker(self, ranker: Ranker, fold: int) -> None:
        target = self.directory / f"model_{fold:04d}"
        ranker.save(target)
        previous = self.directory / f"model_{fold - 1:04d}"
        if previous.exists():
            import shutil

            shutil.rmtree(previous, ignore_errors=True)

    def restore_ranker(self, cls: Any, fold: int, current: Ranker) -> Ranker:
        path = self.directory / f"model_{fold:04d}"
        if not path.exists():
            return current
        current.adopt_state(cls.load(path))
        return current
