"""The rolling loop: audit, features, labels, purged folds, fit / predict, portfolio, metrics.

::

    panel --audit_features (cutoffs)--> pass / FeatureAuditError
          --load_or_build_features-----> X (eligible rows, float32), once per backtest
          --make_labels----------------> fwd_return, label_end, relevance bins
          --RollingSchedule.folds------> folds (purged from label_end, each checked by check_fold)
          --ranker.fit / predict-------> scores (date, code) on each fold's decision dates
          --simulate-------------------> daily strategy / equal-weight returns
          --benchmark_index------------> the index's on the same days (planned first)
          --forward_frame--------------> forward returns of the scored rows at several horizons, industry, cap
          --headline_metrics-----------> the contract metric keys

Folds run in time order in this process when the ranker is stateful (warm start), otherwise through
joblib (``backend``, ``n_jobs``), on a Dask cluster with ``backend="dask"`` and the scheduler's address;
results do not depend on either. What a parallel fold needs (the samples, every row's features, the
labels) is broadcast to a Dask cluster's workers once per backtest, not once per fold, and each of them
prepares its ranker (LambdaRank's binning) once and fits every fold it is given on it, as the in-process
loop does. Each finished fold is checkpointed under ``checkpoint_dir/<run key>/`` so that a killed
backtest rerun with the same inputs resumes where it stopped and gives identical results. The run key
includes the code fingerprint (:func:`backtest.code_fingerprint.code_fingerprint`): changed code or packages
never resume from what older code computed. A fold's checkpoint is one file with its outcome, a stateful
ranker's state after it and a checksum, renamed into place in one step; one that fails its checks is
deleted with a warning and its fold recomputed (the format: :mod:`backtest.checkpoints`)."""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from backtest.baselines import Baselines, run_baselines
from backtest.benchmark import IndexReturns, SuppliedIndex, benchmark_index, market_caps
from backtest.cache import cache_paths
from backtest.checkpoints import Checkpoints, FoldOutcome, run_key
from backtest.code_fingerprint import code_fingerprint
from backtest.data.panel import WideGrid
from backtest.errors import ConfigError, FeatureAuditError, InsufficientHistoryError, preview
from backtest.features.audit import AuditReport, audit_features, choose_cutoffs
from backtest.features.build import FeatureMatrix, build_features
from backtest.features.cache import FeatureCache, load_or_build_features
from backtest.features.registry import FeatureRegistry
from backtest.features.sets import FeatureSetSpec, select_by_gain
from backtest.labels import Labels, LabelSpec, forward_horizons, forward_returns, make_labels
from backtest.leakage import GuardStatus, LeakageRecord, fold_rows, leak_guard_status, not_comparable_reasons
from backtest.memory import drop_pages, file_identity, sees_file
from backtest.metrics import daily_ic, daily_ranking_quality, headline_metrics, ndcg_at_k, rank_ic_mean
from backtest.portfolio import PortfolioResult, PortfolioSpec, check_universe, return_days, simulate
from backtest.splits import Fold, RollingSchedule
from backtest.stop import raise_if_stopped
from models.base import LEVEL_PROCESSINGS, Ranker, share_prepared, shared_files
from models.data import RankingData

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger(__name__)

RankerFactory = Callable[[], Ranker]


@dataclass(frozen=True)
class EngineOptions:
    """How the loop runs (never what it computes).

    Parameters
    ----------
    n_jobs : joblib workers for stateless rankers (1: in this process).
    backend : joblib backend ("loky", "threading", "multiprocessing", "dask", or another registered
        with joblib). With "dask" the stateless folds run on the cluster of ``scheduler``; ``n_jobs`` is
        then the number of folds in flight (-1: one per worker thread of the cluster).
    scheduler : the Dask scheduler's address (``tcp://host:8786``), required with ``backend="dask"``.
    feature_cache_dir : feature cache directory (None: no cache).
    checkpoint_dir : fold checkpoints (None: no checkpoints, no resume).
    audit_cutoffs : number of cutoff dates of the feature audit (0 switches it off; the run is then
        not comparable).
    baselines : also run the best-factor and linear baselines on the same folds
        (:mod:`backtest.baselines`; their ``baseline_*`` metrics). They add metrics and never change the
        model's.

    Raises
    ------
    ConfigError : ``n_jobs`` not -1 or >= 1, a backend joblib does not know, ``backend="dask"`` without a
        ``scheduler``, ``audit_cutoffs`` < 0, or a
        cache directory that cannot be created or written. A cache that cannot be written is refused
        here, before any work, rather than used without a cache: the run would lose its resume points
        and fail (or recompute) only after the compute, while the config promised a cache.
    """

    n_jobs: int = 1
    backend: str = "loky"
    scheduler: str | None = None
    feature_cache_dir: Path | None = None
    checkpoint_dir: Path | None = None
    audit_cutoffs: int = 3
    baselines: bool = True

    def __post_init__(self) -> None:
        from joblib.parallel import BACKENDS, EXTERNAL_BACKENDS

        n_jobs = self.n_jobs
        if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or not (n_jobs == -1 or n_jobs >= 1):
            raise ConfigError(
                f"engine.n_jobs: expected -1 (all cores) or an integer >= 1, received {n_jobs!r}\n"
                "  fix: engine.n_jobs=1 (folds in this process) or engine.n_jobs=-1"
            )
        backends = sorted({*BACKENDS, *EXTERNAL_BACKENDS})
        if self.backend not in backends:
            raise ConfigError(
                f"engine.backend: expected one of {', '.join(backends)} (joblib backends registered "
                f"in this process), received {self.backend!r}\n  fix: engine.backend=loky"
            )
        if self.backend == "dask" and not self.scheduler:
            raise ConfigError(
                "engine.backend=dask runs the folds on a Dask cluster and needs its scheduler's address, received "
                f"engine.scheduler={self.scheduler!r}\n  fix: engine.backend=dask engine.scheduler=tcp://HOST:8786 "
                '(README "Scaling out" starts one), or engine.backend=loky'
            )
        if (
            isinstance(self.audit_cutoffs, bool)
            or not isinstance(self.audit_cutoffs, (int, np.integer))
            or self.audit_cutoffs < 0
        ):
            raise ConfigError(
                f"engine.audit_cutoffs: expected an integer >= 0 (0 switches the audit off), received "
                f"{self.audit_cutoffs!r}\n  fix: engine.audit_cutoffs=3"
            )
        for what, directory in (("feature cache", self.feature_cache_dir), ("checkpoint", self.checkpoint_dir)):
            if directory is not None:
                _check_writable(Path(directory), what)

    @classmethod
    def from_config(
        cls,
        *,
        n_jobs: int,
        backend: str,
        scheduler: str | None,
        feature_cache: bool,
        checkpoints: bool,
        cache_dir: str | None,
        audit_cutoffs: int,
    ) -> EngineOptions:
        """The options of the ``engine`` config group (its ``_target_``): the caches are switched on or off
        and live under ``cache_dir`` (None: the project's ``.cache``; :func:`backtest.cache.cache_paths`),
        the other keys are the fields of the same name."""
        feature_dir, checkpoint_dir = cache_paths(cache_dir or None)
        return cls(
            n_jobs=n_jobs,
            backend=backend,
            scheduler=scheduler,
            feature_cache_dir=feature_dir if feature_cache else None,
            checkpoint_dir=checkpoint_dir if checkpoints else None,
            audit_cutoffs=audit_cutoffs,
        )


def _check_writable(directory: Path, what: str) -> None:
    """Create ``directory`` if needed and write a probe file into it; ConfigError when that fails."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"engine.cache_dir: the {what} directory {directory} cannot be written ({type(exc).__name__}: "
            f"{exc.strerror or exc}); expected a directory this user can create and write\n"
            "  fix: engine.cache_dir=<a writable directory>, or run without a cache: engine.feature_cache=false "
            "engine.checkpoints=false"
        ) from None


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
    ndcg_depth: int  # depth of the headline and per-fold ``ndcg``: the portfolio's top_k (param ndcg_depth)
    #: :func:`backtest.code_fingerprint.code_fingerprint` of this process: the source and package versions that
    #: can change the result; it keys the checkpoints (and, for the feature code, the feature cache)
    code_fingerprint: str = ""
    #: the baselines on the same folds (None when ``EngineOptions.baselines`` is off)
    baselines: Baselines | None = None
    #: folds read from checkpoints instead of computed
    resumed_folds: int = 0
    #: the code fingerprint the resumed folds were computed by (read from their checkpoints, which are
    #: kept per run key and checked on load, so it is always ``code_fingerprint``); None when none resumed
    resumed_from: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: the daily rank IC and NDCG behind ``rank_ic_mean`` and ``ndcg``, indexed by date
    #: (:func:`backtest.metrics.daily_ranking_quality`); what a study pairs two runs on
    daily_ranking: pd.DataFrame | None = None
    #: Newey-West lags of ``rank_ic_se`` and of a study's paired differences: the label horizon less one day
    #: (consecutive days' labels overlap by that many days); the run records it as the param ``ic_lags``
    ic_lags: int = 0
    #: the index benchmark on the strategy's return days (:func:`backtest.benchmark.benchmark_index`), behind
    #: the ``index_*`` metrics
    index: IndexReturns | None = None
    #: the scored rows' forward returns at every horizon with their ``industry`` and ``market_cap`` of the day
    #: (:func:`forward_frame`): what the signal and portfolio pages and other tools read
    forward_returns: pd.DataFrame | None = None

    @property
    def not_comparable(self) -> tuple[str, ...]:
        """Why the run is not comparable, empty when it is: its guards' verdicts and the test days on which
        the book could trade (:func:`backtest.leakage.not_comparable_reasons`)."""
        p = self.portfolio
        return not_comparable_reasons(
            self.leak_guard, self.feature_audit, tradable_days=p.days_tradable, test_days=len(p.returns)
        )


@dataclass(frozen=True, eq=False)
class BacktestPlan:
    """What :func:`run_backtest` runs: the panel, label, schedule and portfolio it was made from, and
    their labels and purged folds, everything that can refuse a backtest cheaply (:func:`plan_backtest`);
    ``index`` is the index benchmark on the return days the test period will have."""

    panel: pd.DataFrame
    label: LabelSpec
    schedule: RollingSchedule
    portfolio: PortfolioSpec
    labels: Labels
    folds: list[Fold]
    seconds: float = 0.0  # what making it took (the run's ``plan_s``)
    index: IndexReturns | None = None


def plan_backtest(
    panel: pd.DataFrame,
    *,
    label: LabelSpec,
    schedule: RollingSchedule,
    portfolio: PortfolioSpec,
    benchmark: SuppliedIndex | None = None,
) -> BacktestPlan:
    """Make the labels and the folds before any expensive work (benchmarks/bench_labels_splits.py times it).

    The test period's universe is checked first (:func:`backtest.portfolio.check_universe`), then the index
    benchmark is made on the days the returns will have (:func:`backtest.portfolio.return_days`): a supplied
    series that does not cover them is refused here. Every fold
    is purged from ``label_end`` and checked by :func:`backtest.leakage.check_fold` inside
    :meth:`RollingSchedule.folds` (LeakageError on a breach). A caller plans before it opens a tracked
    run, so that a schedule the data cannot serve is refused before anything is written, then hands the
    plan to :func:`run_backtest`.

    Parameters
    ----------
    panel : the validated canonical panel, indexed by (date, code).
    label, schedule, portfolio : the specs of each part (see their modules).
    benchmark : the index series of ``data.benchmark_path`` (None: the float-cap-weighted index of the panel's
        universe; :func:`backtest.benchmark.benchmark_index`).

    Raises
    ------
    ConfigError : the test period holds no trading day of the data; ``portfolio.top_k`` at least the
        eligible universe.
    DataContractError : fewer than 2 members on the median test day, or no member trades in the test
        period; the supplied index series has no level for a day the test period's returns need.
    InsufficientHistoryError : a fold cannot get its training window from the labelled history.
    """
    started = time.perf_counter()
    calendar = pd.DatetimeIndex(panel.index.get_level_values(0).unique())
    test_period = schedule.test_period(calendar)
    check_universe(panel, portfolio, test_period)
    index = benchmark_index(panel, return_days(calendar, test_period, portfolio), benchmark)
    labels = make_labels(panel, label)
    folds = schedule.folds(calendar, labels.label_end)
    if not folds:
        raise InsufficientHistoryError("the schedule has no folds: the test period holds no trading day")
    seconds = time.perf_counter() - started
    return BacktestPlan(panel, label, schedule, portfolio, labels, folds, seconds, index)


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; musl and macOS have none
    except (AttributeError, OSError):  # pragma: no cover
        return None


_MALLOC_TRIM = _libc_malloc_trim()


def _resident_gib() -> tuple[float, float] | None:
    """(peak so far, now) of this process's resident memory in GiB; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmHWM", "VmRSS")}
        return kib["VmHWM"] / 2**20, kib["VmRSS"] / 2**20
    except (OSError, KeyError, ValueError):  # pragma: no cover
        return None


def release_freed_memory(stage: str) -> None:
    """Hand the heap pages that ``stage`` (just finished) freed back to the OS, and log at DEBUG level
    the process's peak resident memory so far and what is resident after the release
    (``hydra.verbose=backtest.engine``; Linux only): the stage that raised the peak is the first whose
    line shows it.

    glibc keeps freed small blocks (a feature build's temporaries, LightGBM's binning samples) in its
    heap, so without this each stage's peak would stack on the last one's garbage.
    """
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    resident = _resident_gib()
    if resident is not None:
        log.debug("memory: %s done, peak so far %.2f GiB resident; %.2f GiB after it", stage, *resident)


def run_backtest(
    plan: BacktestPlan,
    *,
    features: FeatureSetSpec,
    ranker_factory: RankerFactory,
    data_fingerprint: str,
    options: EngineOptions = EngineOptions(),
    n_trials: int = 1,
    trial_sharpe_var: float = 0.0,
    seed: int = 0,
    on_fold: Callable[[FoldOutcome, int], None] | None = None,
    registry: FeatureRegistry | None = None,
    oracle: pd.Series | None = None,
) -> BacktestResult:
    """Run a leakage-guarded rolling backtest of ``ranker_factory``'s model on the plan's panel.

    Parameters
    ----------
    plan : :func:`plan_backtest` of the panel with the label, schedule and portfolio to run; the
        backtest takes them from it, so it runs on exactly what was planned.
    features : the feature set spec (:mod:`backtest.features.sets`).
    ranker_factory : builds a fresh ranker (models.base.Ranker).
    data_fingerprint : ``panel_fingerprint(panel)``, keys the feature cache and the checkpoints.
    n_trials, trial_sharpe_var : for the deflated Sharpe ratio (the study this run belongs to).
    on_fold : called after each fold with its outcome and the number of folds (progress display).
    registry : the feature indicators (default: the library's registry); the audit covers them all.
    oracle : on a synthetic market, the scores of its oracle (:func:`backtest.data.synthetic.oracle_scores`,
        indexed by (date, code)): ``oracle_rank_ic`` is their rank IC on the model's scored rows and
        ``signal_capture`` the model's rank IC as a share of it. Never an input of the model.

    Raises
    ------
    ConfigError : with ``backend="dask"``, no scheduler answers at ``options.scheduler``;
        ``features.keep_by_gain`` with a ranker that reports no gain importance.
    FeatureAuditError : a feature's past values change when future data is removed.
    LeakageError : a fold trains on a label that ends after its cutoff (with the purge on).
    """
    timings: dict[str, float] = {"plan_s": plan.seconds}
    started = time.perf_counter()
    panel, label, schedule, portfolio = plan.panel, plan.label, plan.schedule, plan.portfolio
    labels, folds = plan.labels, plan.folds
    check_scheduler(options)  # an unreachable scheduler is refused before the features

    audit = None
    if options.audit_cutoffs > 0:
        t0 = time.perf_counter()
        audit = audit_features(
            panel, features, cutoffs=_audit_cutoffs(panel, schedule, options.audit_cutoffs), registry=registry
        )
        timings["audit_s"] = time.perf_counter() - t0
        raise_if_stopped()
        if not audit.passed:
            raise FeatureAuditError(
                f"feature audit failed: {audit.summary()}\n  fix: remove or correct the named feature(s); a "
                "feature of day t may use data up to the close of t only"
            )

    t0 = time.perf_counter()
    if options.feature_cache_dir is not None:  # the matrix is a memory map of the entry (backtest.memory)
        matrix, cache_hit = load_or_build_features(
            panel,
            features,
            FeatureCache(options.feature_cache_dir, mmap=True),
            data_fingerprint=data_fingerprint,
            registry=registry,
        )
    else:
        matrix = build_features(panel, features, data_fingerprint=data_fingerprint, registry=registry)
        cache_hit = False
    timings["features_s"] = time.perf_counter() - t0
    raise_if_stopped()
    release_freed_memory("features")

    relevance = labels.target.reindex(matrix.index)
    if features.keep_by_gain:
        matrix = _keep_by_gain(matrix, relevance, label.processing, folds[0], ranker_factory, features.keep_by_gain)
    probe = ranker_factory()
    # The NDCG reported is at the stocks bought (never a depth read back from the model), with the gain the
    # model trains on.
    ndcg = _Ndcg(depth=portfolio.top_k, gain=probe.ndcg_gain)
    data, samples = _ranking_data(matrix, relevance, label.processing)

    code_fp = code_fingerprint()
    ckpt = None
    if options.checkpoint_dir:
        key = run_key(data_fingerprint, matrix.fingerprint, label, schedule, ranker_factory, seed, code_fp)
        ckpt = Checkpoints(options.checkpoint_dir / key, code_fingerprint=code_fp, stateful=probe.stateful)

    t0 = time.perf_counter()
    outcomes = list(_run_folds(samples, data, folds, ranker_factory, labels, options, ckpt, on_fold, ndcg))
    del data, samples
    timings["folds_s"] = time.perf_counter() - t0
    release_freed_memory("folds")  # the binned panel: before the baselines

    rows = np.concatenate([o.rows for o in outcomes])
    scores = pd.Series(np.concatenate([o.scores for o in outcomes]), index=matrix.index[rows], name="score")
    scores = scores.sort_index()

    t0 = time.perf_counter()
    result = simulate(scores, panel, portfolio)
    if result.dropped_rebalances:  # the same decision dates for every book: said once
        log.warning(
            "%d rebalance(s) dropped from the model's book, its equal-weight benchmark%s: the panel ends "
            "before a full open-to-open return after their execution day (decided on %s)",
            len(result.dropped_rebalances),
            " and the baselines'" if options.baselines else "",
            preview([f"{day:%Y-%m-%d}" for day in result.dropped_rebalances]),
        )
    # the planned index on the days the strategy has returns (the planned days, or fewer if a day had no score)
    planned = plan.index
    index = planned.on(result.returns.index) if planned is not None else benchmark_index(panel, result.returns.index)
    timings["portfolio_s"] = time.perf_counter() - t0
    raise_if_stopped()

    t0 = time.perf_counter()
    forward = forward_frame(panel, labels.spec, scores.index)
    timings["forward_returns_s"] = time.perf_counter() - t0

    fwd = labels.fwd_return.reindex(scores.index)
    rel = labels.target.reindex(scores.index)
    ic_lags = labels.ic_lags
    metrics = headline_metrics(
        result.returns,
        result.benchmark_returns,
        result.periods,
        scores=scores,
        labels=fwd,
        relevance=rel,
        turnover=result.annual_turnover,
        n_trials=n_trials,
        trial_sharpe_var=trial_sharpe_var,
        rng=np.random.default_rng(seed),
        ndcg_depth=ndcg.depth,
        ndcg_gain=ndcg.gain,
        ic_lags=ic_lags,
        index=index.returns,
    )
    daily_ranking = daily_ranking_quality(scores, fwd, rel, ndcg.depth, ndcg.gain)
    metrics["n_folds"] = float(len(folds))
    # Days on which the book was not the one chosen (blocked trades, stale marks): the summary shows them.
    metrics["days_blocked"] = float(result.days_blocked)
    metrics["rebalances_blocked"] = float(result.rebalances_blocked)
    # Days on which the top-k book could trade: too few of them and the run is not comparable.
    metrics["days_tradable"] = float(result.days_tradable)
    if oracle is not None:
        metrics["oracle_rank_ic"] = rank_ic_mean(oracle.reindex(scores.index), fwd)
        metrics["signal_capture"] = metrics["rank_ic_mean"] / metrics["oracle_rank_ic"]
    baselines = None
    if options.baselines:
        t0 = time.perf_counter()
        baselines = run_baselines(panel, matrix, labels, folds, portfolio, result, scores, seed=seed)
        metrics.update(baselines.metrics)
        timings["baselines_s"] = time.perf_counter() - t0
        release_freed_memory("baselines")
    fold_metrics = pd.DataFrame([{"fold": o.fold, **o.metrics} for o in outcomes]).set_index("fold")
    importance = pd.DataFrame({o.fold: o.importance for o in outcomes}).T.rename_axis("fold").fillna(0.0)
    records = [f.record for f in folds]
    timings["total_s"] = time.perf_counter() - started
    return BacktestResult(
        scores=scores,
        portfolio=result,
        metrics=metrics,
        fold_metrics=fold_metrics,
        records=records,
        importance=importance,
        audit=audit,
        labels=labels,
        features=matrix,
        feature_names=list(matrix.names),
        leak_guard=leak_guard_status(records),
        feature_audit="disabled" if audit is None else audit.status,
        feature_cache_hit=cache_hit,
        ndcg_depth=ndcg.depth,
        code_fingerprint=code_fp,
        baselines=baselines,
        resumed_folds=sum(o.resumed for o in outcomes),
        resumed_from=",".join(sorted(ckpt.resumed_from)) if ckpt and ckpt.resumed_from else None,
        timings=timings,
        daily_ranking=daily_ranking,
        ic_lags=ic_lags,
        index=index,
        forward_returns=forward,
    )


def forward_frame(panel: pd.DataFrame, spec: LabelSpec, index: pd.MultiIndex) -> pd.DataFrame:
    """The rows ``index`` (the scored rows) with their forward returns at every horizon
    (:func:`backtest.labels.forward_returns` at :func:`backtest.labels.forward_horizons`; the label's own
    horizon is the label), and, where the panel has them, the stock's ``industry`` and ``market_cap``
    (:func:`backtest.benchmark.market_caps`) on the day.
    """
    frame = forward_returns(panel, spec, forward_horizons(spec), index)
    if "industry" in panel.columns:
        frame["industry"] = panel["industry"].reindex(index)
    grid = WideGrid.of(panel)
    caps, _ = market_caps(panel, grid)
    if caps is not None:
        frame["market_cap"] = grid.at(caps, index)
    return frame


# --- folds ------------------------------------------------------------------------------------------


def _fold_sets(
    samples: RankingData, data: RankingData, fold: Fold
) -> tuple[RankingData, RankingData | None, np.ndarray]:
    """Training and validation sets (from the labelled ``samples``) and the prediction rows of ``data``."""
    train_rows, valid_rows, _ = fold_rows(fold, samples.dates)
    predict_rows = fold_rows(fold, data.dates)[2]
    valid = samples.take(valid_rows) if len(valid_rows) else None
    return samples.take(train_rows), valid, predict_rows


@dataclass(frozen=True)
class _Ndcg:
    depth: int
    gain: str | tuple[float, ...]


def _fold_metrics(
    fold: Fold, scores: np.ndarray, rows: np.ndarray, index: pd.MultiIndex, labels: Labels, seconds: float, ndcg: _Ndcg
) -> dict[str, float]:
    s = pd.Series(scores, index=index[rows])
    fwd = labels.fwd_return.reindex(s.index)
    rel = labels.target.reindex(s.index)
    ok = fwd.notna()
    out = {
        "rank_ic": float(daily_ic(s[ok], fwd[ok], method="spearman").mean()) if ok.any() else float("nan"),
        "ic": float(daily_ic(s[ok], fwd[ok]).mean()) if ok.any() else float("nan"),
        "ndcg": float(ndcg_at_k(s[ok], rel[ok], k=ndcg.depth, gain=ndcg.gain)) if ok.any() else float("nan"),
        "n_train": float(fold.record.n_train_samples),
        "n_valid": float(fold.record.n_valid_samples),
        "n_purged": float(fold.record.n_purged),
        "fit_seconds": seconds,
    }
    return out


def _fit_predict(
    ranker: Ranker,
    samples: RankingData,
    data: RankingData,
    fold: Fold,
    labels: Labels,
    index: pd.MultiIndex,
    ndcg: _Ndcg,
) -> FoldOutcome:
    t0 = time.perf_counter()
    train, valid, predict_rows = _fold_sets(samples, data, fold)
    ranker.fit(train, valid)
    raise_if_stopped()  # a stop during the fit or its cleanup
    scores = np.asarray(ranker.predict(data.take(predict_rows)), dtype=np.float64)
    seconds = time.perf_counter() - t0
    metrics = _fold_metrics(fold, scores, predict_rows, index, labels, seconds, ndcg)
    # the trees a booster keeps (LambdaRank's last_fit); NaN for a ranker that does not report them
    metrics["trees"] = float(getattr(ranker, "last_fit", {}).get("best_iteration", float("nan")))
    return FoldOutcome(fold.fold, scores, predict_rows, dict(ranker.feature_importance()), metrics)


#: the prepared ranker of this worker thread and the backtest it serves (:func:`_stateless_fold`)
_WORKER = threading.local()


def _stateless_fold(
    factory: RankerFactory,
    samples: RankingData,
    data: RankingData,
    fold: Fold,
    labels: Labels,
    index: pd.MultiIndex,
    history_end: np.datetime64,
    ndcg: _Ndcg,
    token: str,
    shared: Any | None = None,
) -> FoldOutcome:
    """One fold of a stateless ranker in a worker. A worker that is handed the same ``samples`` object
    again in one backtest (``token``), as a Dask worker holding the broadcast data is, fits on the ranker
    it prepared for the first of them, as the in-process loop fits every fold on one ranker: a stateless
    fit depends only on the prepared data, never on an earlier fit. (A prepared ranker recognises the
    data taken from what it prepared by lineage, so a copy of ``samples``, as loky's workers get per
    task, is prepared again.) With ``shared`` (:func:`_prepare_once`) it reads what one worker prepared."""
    key = (token, id(samples))
    if getattr(_WORKER, "key", None) != key:
        _WORKER.key, _WORKER.ranker, _WORKER.samples = None, None, None  # free the previous one first
        ranker = factory()
        if shared is None:
            ranker.prepare(samples, history_end=history_end)
        else:
            ranker.prepare(samples, history_end=history_end, shared=shared)  # type: ignore[call-arg]
        release_freed_memory("binning")  # as the in-process loop does: the binning's temporaries
        _WORKER.key, _WORKER.ranker, _WORKER.samples = key, ranker, samples  # samples held: the id stays its
    return _fit_predict(_WORKER.ranker, samples, data, fold, labels, index, ndcg)


#: seconds a Dask scheduler has to answer before the run is refused
DASK_CONNECT_TIMEOUT_S = 10


def check_scheduler(options: EngineOptions) -> None:
    """With ``backend="dask"``, connect to the scheduler once and let go: the job's pre-flight check
    (:func:`backtest.cli.preflight.check_job`), so an unreachable one is refused before a run is opened.

    Raises
    ------
    ConfigError : no Dask scheduler answers at ``options.scheduler`` within :data:`DASK_CONNECT_TIMEOUT_S`.
    """
    if options.backend == "dask":
        _dask_client(options.scheduler).close()


def _dask_client(address: str | None):
    """A client of the Dask scheduler at ``address``; ConfigError when it does not answer in time."""
    from distributed import Client

    try:
        return Client(address, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(
            f"engine.scheduler: no Dask scheduler answers at {address!r} ({type(exc).__name__}: {exc})\n"
            "  fix: start one (dask scheduler; dask worker tcp://HOST:8786) and pass its address, or run "
            "the folds here: engine.backend=loky"
        ) from None


def _run_folds(
    samples: RankingData,
    data: RankingData,
    folds: list[Fold],
    factory: RankerFactory,
    labels: Labels,
    options: EngineOptions,
    ckpt: Checkpoints | None,
    on_fold: Callable[[FoldOutcome, int], None] | None,
    ndcg: _Ndcg,
) -> Iterator[FoldOutcome]:
    index = pd.MultiIndex.from_arrays([pd.DatetimeIndex(data.dates), data.codes], names=["date", "code"])
    history_end = np.datetime64(folds[0].train_dates[-1], "ns")
    n = len(folds)
    done = ckpt.completed() if ckpt else {}
    probe = factory()
    stateful = probe.stateful

    def emit(outcome: FoldOutcome, state: Ranker | None = None) -> FoldOutcome:
        if ckpt and not outcome.resumed:
            ckpt.save(outcome, state)  # one unit: a stateful ranker's state is saved with its fold
        raise_if_stopped()
        if on_fold:
            on_fold(outcome, n)
        raise_if_stopped()
        return outcome

    if stateful and options.backend == "dask":
        log.warning(
            "engine.backend=dask: this model is stateful (warm start chains its folds in order), so "
            "its folds run in this process, not on the cluster"
        )
    if stateful or (options.n_jobs == 1 and options.backend != "dask"):
        ranker = probe
        ranker.prepare(samples, history_end=history_end)
        drop_pages(data.X)  # the rows the binning read
        release_freed_memory("binning")  # the binning's samples
        for fold in folds:
            raise_if_stopped()  # between folds
            if fold.fold in done:
                yield emit(done[fold.fold])
                continue
            if stateful and ckpt and fold.fold > 0 and (fold.fold - 1) in done:
                ranker = ckpt.restore_ranker(fold.fold - 1, ranker)  # continue from the saved state
            outcome = _fit_predict(ranker, samples, data, fold, labels, index, ndcg)
            drop_pages(data.X)  # the rows the fold scored
            yield emit(outcome, ranker if stateful else None)
        return

    from joblib import Parallel, delayed, parallel_config

    todo = [f for f in folds if f.fold not in done]
    token = uuid.uuid4().hex  # this backtest: a worker prepares its ranker once for it

    def run(parallel: Parallel, samples: RankingData, data: RankingData, shared: Any = None) -> dict[int, FoldOutcome]:
        computed = parallel(
            delayed(_stateless_fold)(factory, samples, data, f, labels, index, history_end, ndcg, token, shared)
            for f in todo
        )
        return {o.fold: o for o in map(emit, computed)}

    if options.backend == "dask":
        with _dask_client(options.scheduler) as client:
            *shipped, folder = _ship_to_workers(client, samples, data)
            shared = _prepare_once(client, factory, shipped[0], history_end, folder) if folder and todo else None
            try:
                # broadcast to every worker once; joblib's dask backend then passes their futures, not the data
                started = time.perf_counter()
                with parallel_config(backend="dask", client=client, scatter=[*shipped, labels, index]):
                    log.info("Dask: samples, labels and index on every worker in %.1fs", time.perf_counter() - started)
                    results = run(Parallel(n_jobs=options.n_jobs, return_as="generator"), *shipped, shared)
            finally:
                for path in shared_files(shared):
                    Path(path).unlink(missing_ok=True)
    else:
        results = run(Parallel(n_jobs=options.n_jobs, backend=options.backend, return_as="generator"), samples, data)
    for fold in folds:
        yield done[fold.fold] if fold.fold in done else results[fold.fold]


def _ship_to_workers(
    client: Client, samples: RankingData, data: RankingData
) -> tuple[RankingData, RankingData, Path | None]:
    """What the Dask workers get of the feature matrix: when it is a memory map of its cache file and every
    worker sees that file (the same path, size and modification time: workers on this machine, or on a
    shared filesystem), a reference to the file, so that the workers map its pages from the page cache
    they share instead of each receiving and holding a copy of the matrix (``backtest.memory.by_file``),
    and the file's folder, which they share. Otherwise the matrix itself and None. Both give the workers
    the same values, and both ship the stock codes as integers (``RankingData.compact``): pickling them as
    strings, once per worker that passes them on, stalled the broadcast of a whole market's samples."""
    found = file_identity(data.root().__dict__["X"])
    if found is not None:
        seen = client.run(sees_file, *found)
        if seen and all(seen.values()):
            log.info("Dask: the %d workers map the feature matrix from %s", len(seen), found[0])
            return samples.by_file(), data.by_file(), Path(found[0]).parent
        log.info(
            "Dask: %d of %d workers do not see %s; the matrix is sent",
            list(seen.values()).count(False),
            len(seen),
            found[0],
        )
    return samples.compact(), data.compact(), None


def _prepare_and_share(
    factory: RankerFactory, samples: RankingData, history_end: np.datetime64, folder: str
) -> Any | None:
    """On one worker: prepare a ranker and write what it built into ``folder`` (``share_prepared``)."""
    ranker = factory()
    ranker.prepare(samples, history_end=history_end)
    handle = share_prepared(ranker, Path(folder))
    del ranker
    release_freed_memory("binning")
    return handle


def _prepare_once(
    client: Client, factory: RankerFactory, samples: RankingData, history_end: np.datetime64, folder: Path
) -> Any | None:
    """One worker prepares the ranker (LambdaRank bins every sample) and shares it through files in
    ``folder``, which every worker sees; the others read it instead of repeating the work. None when the
    ranker has nothing to share, or when a worker does not see the files (each worker then prepares its
    own, with the same result)."""
    started = time.perf_counter()
    handle = client.submit(_prepare_and_share, factory, samples, history_end, str(folder), pure=False).result()
    files = shared_files(handle)
    if handle is None or not files:
        return None
    seen = client.run(_sees_all, files)
    if not all(seen.values()):
        log.info("Dask: not every worker sees %s; each worker prepares its own ranker", files[0])
        for path in files:
            Path(path).unlink(missing_ok=True)
        return None
    seconds = time.perf_counter() - started
    log.info("Dask: one worker prepared the ranker in %.1fs; the others read %s", seconds, files[0])
    return handle


def _sees_all(paths: list[str]) -> bool:
    return all(os.path.exists(p) for p in paths)


def _ranking_data(matrix: FeatureMatrix, relevance: pd.Series, processing: str) -> tuple[RankingData, RankingData]:
    """Every eligible row (for predictions) and the labelled rows with their target (for training).

    Training sets are taken from the labelled rows only, so each day of a fold is a whole query group.
    The target keeps the kind of the label ``processing``: int64 relevance levels for ``bins`` /
    ``three_class``, float64 for ``raw`` / ``rank`` (reindexing onto the eligible rows has made it
    float).
    """
    data = RankingData(
        X=matrix.values,
        dates=matrix.index.get_level_values(0).values,
        codes=np.asarray(matrix.index.get_level_values(1).astype(str)),
        feature_names=tuple(matrix.names),
    )
    labelled = np.flatnonzero(relevance.notna().to_numpy())
    target = relevance.to_numpy(dtype=np.float64)[labelled]
    levels = processing in LEVEL_PROCESSINGS
    samples = data.take(labelled).with_relevance(target.astype(np.int64) if levels else target)
    return data, samples


def _keep_by_gain(
    matrix: FeatureMatrix, relevance: pd.Series, processing: str, first: Fold, factory: RankerFactory, k: int
) -> FeatureMatrix:
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
    """The feature audit's cutoff days in the test period, for the cost of ``n`` lone cutoffs.

    They are chosen to cover the positions a look-ahead can hide behind (month and week ends and
    starts, inside and at the end of a suspension, a reconstitution day and its eve), in clusters of
    neighbouring days that share their reference build (:func:`backtest.features.audit.choose_cutoffs`);
    the run's ``AuditReport.covered`` says which positions were covered.
    """
    calendar = pd.DatetimeIndex(panel.index.get_level_values(0).unique())
    return choose_cutoffs(panel, n, period=schedule.test_period(calendar))
