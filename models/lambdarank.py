"""LightGBM LambdaRank: one query group per trading day, NDCG@k on the integer relevance levels of the
label (its ``bins`` or ``three_class`` processing; a real-valued label is refused).

Rolling speed: :class:`BinnedPanel` bins every sample of a backtest once and hands each fold a
``Dataset.subset`` of whole days (far cheaper than binning each window: ``benchmarks/bench_lambdarank.py``);
with ``warm_start`` a fold continues from the previous fold's booster with a few rounds, and every
``full_refit_every``-th fold is refitted from scratch. A continued fit starts from the previous booster's
scores of the fold's rows, computed on a view of the rows where they lie (:meth:`RankingData.row_span`),
so neither the panel nor the fold keeps or gathers raw feature rows for it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import lightgbm as lgb
import numpy as np

from backtest.errors import ConfigError, DataContractError, preview
from backtest.memory import drop_span, read_columns
from backtest.metrics import GAINS, mean_daily_rank_ic, relevance_gains
from backtest.portfolio import DEFAULT_TOP_K
from backtest.stop import raise_if_stopped
from models.base import EARLY_STOPPING_METRICS, LEVEL_PROCESSINGS, SHARED_FILE, RankerBase, label_processing_fix
from models.data import RankingData

log = logging.getLogger(__name__)

#: ``truncation_level`` that keeps every pair of a day: more positions than a day's universe holds.
WHOLE_LIST = 10_000

BOOSTER_FILE = "booster.txt"
META_FILE = "ranker.json"


@dataclass(frozen=True)
class LambdaRankConfig:
    """Hyper-parameters of :class:`LambdaRankRanker` (defaults sized for ~300 stocks a day).

    Parameters
    ----------
    n_bins : relevance levels of the label, ``0..n_bins-1`` (10 for the ``"bins"`` target, 3 for
        ``"three_class"``); one ``label_gain`` per level.
    label_gain : ``"linear"`` (gain ``l``, default), ``"exponential"`` (``2**l - 1``, LightGBM's
        default) or an explicit sequence of ``n_bins`` gains, as :func:`backtest.metrics.relevance_gains`
        defines them (the headline NDCG uses the same). Linear on purpose: a bin is a decile of a
        noisy 5-day return, and the top decile (30 stocks) is already six times the 5 stocks bought; the
        exponential gain weighs the top bin 511x the second-lowest, which turns the objective into
        "find the extreme decile" and mostly fits idiosyncratic jumps, while a linear gain keeps the
        whole upper half of the order informative.
    ndcg_depth : the NDCG depth: the stocks bought per day (``portfolio.top_k`` in the config, default
        :data:`backtest.portfolio.DEFAULT_TOP_K`). The validation NDCG at this depth drives early stopping;
        the run's headline ``ndcg`` is at ``portfolio.top_k`` too, whatever is set here.
    truncation_level : ``lambdarank_truncation_level``: LambdaRank's pairs are those involving the
        top ``truncation_level`` positions of the current ranking. Default :data:`WHOLE_LIST` (more
        positions than any day has stocks): every pair of the day counts. Truncated near the portfolio
        depth (None -> ``ndcg_depth + 3``, 8 stocks of ~300) the gradient of a day rests on its top 8
        names, which on a 5-day return is mostly noise: on the default market its out-of-sample rank
        IC falls below the best single factor's, and well below that of the whole list
        (``experiments/early_stopping/``, from ``benchmarks/bench_early_stopping.py``).
    num_leaves, learning_rate, min_data_in_leaf, feature_fraction, lambda_l2, max_bin : tree growth;
        ``min_data_in_leaf`` ~ one day's cross-section keeps leaves from fitting single days. Half the
        features per tree (``feature_fraction=0.5``) costs less a round than 0.8
        (``benchmarks/bench_rounds.py``).
    num_boost_round : rounds of a fresh fit: 30 trees, every one kept, by default. Early stopping
        (``early_stopping_rounds``, None = off, the default) on the validation set picks the best
        iteration instead. On the default market a 20-day purged tail is too noisy a judge: stopping
        after 10 rounds without gain kept fewer than 5 trees on 10-12 of 25 folds, and a rank IC 0.011
        below the linear ranker's. The out-of-sample rank IC rises to about 20 trees and stays flat
        to 40 (``benchmarks/probe_lambdarank_rounds.py``). With sub-lists of 64, 30 fixed trees match
        the linear ranker within one standard error over 3 seeds, in less time than the early-stopped
        default of before (``experiments/models/README.md``, "LambdaRank").
    early_stopping_metric : the validation metric early stopping follows (``EARLY_STOPPING_METRICS``):
        ``"ndcg"`` (NDCG at ``ndcg_depth``, LightGBM's) or ``"rank_ic"`` (mean daily Spearman
        correlation of the scores with the relevance levels over the whole list,
        :func:`backtest.metrics.mean_daily_rank_ic`). NDCG@5 of a 20-day tail rests on 100 stocks and
        its best iteration is mostly noise; the rank IC uses every stock of every day.
    min_rounds : trees a fresh fit keeps at least: the best iteration is chosen among iterations
        ``>= min_rounds`` and training never stops before them (1 = no minimum).
    sublist_size : None trains on each day's whole list: a round's lambdas cost the square of the
        day's stocks. An integer ``m`` (64 by default) splits each training day into ``ceil(n / m)`` random
        sub-lists of near-equal size (:func:`day_sublists`) and LambdaRank forms pairs within a
        sub-list only: every pair of a day is still drawn with the same probability, about
        ``(m - 1) / (n - 1)``, so the whole list's objective is kept in expectation, at a cost linear
        in the day's stocks. The split of a day depends on its date and ``seed`` only, so every fold
        that trains on a day splits it alike. Validation and scoring stay whole days.
    num_threads : LightGBM threads, 0 = all cores.
    seed, deterministic : with ``deterministic`` and ``force_col_wise`` (always on: faster than
        row-wise on this shape) a fit is bit-for-bit reproducible.
    warm_start : continue each fit from the previous fit's booster with ``warm_start_rounds`` rounds;
        the first fit and every ``full_refit_every``-th fit after a fresh one are fresh.
    extra : further LightGBM parameters, passed through unchanged (they win over the fields above).
    """

    n_bins: int = 10
    label_gain: str | tuple[float, ...] = "linear"
    ndcg_depth: int = DEFAULT_TOP_K
    truncation_level: int | None = WHOLE_LIST
    num_leaves: int = 31
    learning_rate: float = 0.05
    min_data_in_leaf: int = 300
    feature_fraction: float = 0.5
    lambda_l2: float = 1.0
    max_bin: int = 255
    num_boost_round: int = 30
    early_stopping_rounds: int | None = None
    early_stopping_metric: str = "ndcg"
    min_rounds: int = 1
    sublist_size: int | None = 64
    num_threads: int = 0
    seed: int = 0
    deterministic: bool = True
    warm_start: bool = False
    warm_start_rounds: int = 40
    full_refit_every: int = 4
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.label_gain, str):
            object.__setattr__(self, "label_gain", tuple(float(g) for g in self.label_gain))
        object.__setattr__(self, "extra", dict(self.extra))
        if self.n_bins < 2:
            raise ConfigError(f"model.n_bins: expected >= 2, received {self.n_bins}.")
        if isinstance(self.label_gain, str) and self.label_gain not in GAINS:
            raise ConfigError(
                f"model.label_gain: expected {' or '.join(repr(g) for g in GAINS)} or a list of "
                f"{self.n_bins} gains, received {self.label_gain!r}."
            )
        if not isinstance(self.label_gain, str) and len(self.label_gain) != self.n_bins:
            raise ConfigError(
                f"model.label_gain: expected {self.n_bins} gains (one per relevance bin), received "
                f"{len(self.label_gain)}."
            )
        if isinstance(self.ndcg_depth, bool) or not isinstance(self.ndcg_depth, int) or self.ndcg_depth < 1:
            raise ConfigError(
                f"model.ndcg_depth: expected a positive number of stocks, received {self.ndcg_depth!r}.\n"
                "  fix: model.config.ndcg_depth=${portfolio.top_k} (the default)"
            )
        if self.early_stopping_metric not in EARLY_STOPPING_METRICS:
            raise ConfigError(
                f"model.early_stopping_metric: expected one of {', '.join(EARLY_STOPPING_METRICS)}, received "
                f"{self.early_stopping_metric!r}.\n  fix: model.config.early_stopping_metric=rank_ic"
            )
        if (
            isinstance(self.min_rounds, bool)
            or not isinstance(self.min_rounds, int)
            or not (1 <= self.min_rounds <= self.num_boost_round)
        ):
            raise ConfigError(
                f"model.min_rounds: expected an integer in [1, num_boost_round={self.num_boost_round}], received "
                f"{self.min_rounds!r}.\n  fix: model.config.min_rounds=1 (no minimum)"
            )
        if self.sublist_size is not None and (
            isinstance(self.sublist_size, bool) or not isinstance(self.sublist_size, int) or self.sublist_size < 2
        ):
            raise ConfigError(
                f"model.sublist_size: expected null (whole days) or an integer >= 2, received "
                f"{self.sublist_size!r}.\n  fix: model.config.sublist_size=64"
            )
        if self.warm_start and (self.warm_start_rounds < 1 or self.full_refit_every < 1):
            raise ConfigError(
                "model.warm_start_rounds and model.full_refit_every must be >= 1 with warm_start, received "
                f"{self.warm_start_rounds} and {self.full_refit_every}."
            )

    def gains(self) -> np.ndarray:
        """The ``label_gain`` vector, float64 (n_bins,): :func:`backtest.metrics.relevance_gains`."""
        return relevance_gains(self.label_gain, self.n_bins)

    def lgb_params(self) -> dict[str, Any]:
        """The LightGBM parameter dict (also given to :class:`BinnedPanel` so the bins match)."""
        params: dict[str, Any] = {
            "objective": "lambdarank",
            # LightGBM's NDCG only when early stopping follows it (rank_ic is a feval of ours)
            "metric": "ndcg" if self.early_stopping_metric == "ndcg" else "None",
            "eval_at": [self.ndcg_depth],
            "label_gain": [float(g) for g in self.gains()],
            "lambdarank_truncation_level": self.truncation_level or self.ndcg_depth + 3,
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "lambda_l2": self.lambda_l2,
            "max_bin": self.max_bin,
            "num_threads": self.num_threads,
            "seed": self.seed,
            "deterministic": self.deterministic,
            "force_col_wise": True,
            "verbosity": -1,
        }
        params.update(self.extra)
        return params


def day_sublists(
    day_dates: np.ndarray, counts: np.ndarray, size: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The order of each day's rows and the query groups of random sub-lists of at most ``size`` rows.

    Parameters
    ----------
    day_dates : datetime64 (n_days,), each day's date; counts : int (n_days,), each day's rows.
    size : the sub-list size (None: one group per day, rows in their order).
    seed : with a day's date, the seed of its shuffle: a day is split alike whatever else is fitted.

    Returns
    -------
    order : int64 (sum(counts),), for each position of the days' concatenated rows, the row it takes
        (a permutation within each day).
    groups : int32, the group sizes: ``ceil(n / size)`` near-equal sub-lists per day of ``n`` rows.

    >>> order, groups = day_sublists(np.array(["2024-01-02", "2024-01-03"], "datetime64[ns]"), np.array([5, 3]), 2, 0)
    >>> groups.tolist(), sorted(order[:5].tolist()), sorted(order[5:].tolist())
    ([2, 2, 1, 2, 1], [0, 1, 2, 3, 4], [5, 6, 7])
    """
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    if size is None:
        return np.arange(starts[-1], dtype=np.int64), counts.astype(np.int32)
    order = np.empty(starts[-1], dtype=np.int64)
    days = np.asarray(day_dates, dtype="datetime64[D]").astype(np.int64)
    for day, start, n in zip(days.tolist(), starts[:-1].tolist(), counts.tolist(), strict=True):
        order[start : start + n] = start + np.random.default_rng([seed, day]).permutation(n)
    return order, sublist_groups(counts, size)


def sublist_groups(counts: np.ndarray, size: int) -> np.ndarray:
    """Group sizes, int32: each day of ``n`` rows cut into ``ceil(n / size)`` near-equal sub-lists.

    >>> sublist_groups(np.array([5, 3, 4]), 2).tolist()
    [2, 2, 1, 2, 1, 2, 2]
    """
    parts = [np.full(k, n // k) + (np.arange(k) < n % k) for n in np.asarray(counts).tolist() for k in [-(-n // size)]]
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)


class EarlyStopping:
    """Early stopping on one named validation metric (e.g. ``ndcg@5``).

    LightGBM sorts ``eval_at`` (``extra`` may add cut-offs to ``ndcg_depth``), so its own
    ``early_stopping(first_metric_only=True)`` would stop on the smallest cut-off; this callback follows
    the metric it is given.
    """

    order = 30

    def __init__(self, metric: str, rounds: int, dataset: str = "valid", min_rounds: int = 1) -> None:
        self.metric, self.rounds, self.dataset, self.min_rounds = metric, rounds, dataset, min_rounds
        self.best_score = -np.inf
        self.best_iteration = 0
        self.best_results: list[Any] = []

    def __call__(self, env: Any) -> None:
        found = [r for r in env.evaluation_result_list if r[0] == self.dataset and r[1] == self.metric]
        if not found:
            raise ConfigError(
                f"early stopping: no {self.dataset} metric {self.metric!r} among "
                f"{preview(r[1] for r in env.evaluation_result_list)}; check model.ndcg_depth."
            )
        counted = env.iteration - env.begin_iteration + 1 >= self.min_rounds
        if counted and (found[0][2] > self.best_score or not self.best_results):
            self.best_score, self.best_iteration = found[0][2], env.iteration
            self.best_results = list(env.evaluation_result_list)
        last = env.iteration == env.end_iteration - 1
        stop = (counted and env.iteration - self.best_iteration >= self.rounds) or last
        if stop:
            raise lgb.callback.EarlyStopException(self.best_iteration, self.best_results)


class StopBetweenRounds:
    """Before each boosting round, the run's stop flag (:mod:`backtest.stop`): a stop asked for during a fit
    ends it at the next round. Read in ``lgb.train``'s Python loop, never inside LightGBM's native code."""

    order = 0
    before_iteration = True

    def __call__(self, env: Any) -> None:
        raise_if_stopped()


def _rank_ic_feval(
    valid: RankingData, order: np.ndarray | None = None
) -> Callable[[np.ndarray, Any], tuple[str, float, bool]]:
    """LightGBM ``feval`` of the validation set ``valid``: its mean daily rank IC (``"rank_ic"``).
    ``order``: the row of ``valid`` each Dataset row holds, when the Dataset holds them in another order."""
    assert valid.relevance is not None
    starts, target = valid.day_starts(), np.asarray(valid.relevance, dtype=np.float64)

    def rank_ic(preds: np.ndarray, _: Any) -> tuple[str, float, bool]:
        scores = np.asarray(preds, dtype=np.float64)
        if order is not None:
            scores = np.empty_like(scores)
            scores[order] = preds
        return "rank_ic", mean_daily_rank_ic(scores, target, starts), True

    return rank_ic


def _continued(previous: lgb.Booster, added: lgb.Booster) -> lgb.Booster:
    """``added`` (trees fitted from ``previous``'s scores as ``init_score``) with ``previous``'s trees in
    front: the booster ``lgb.train(init_model=previous)`` returns, joined as it joins them
    (``LGBM_BoosterMerge``), without it predicting the raw rows of every Dataset again."""
    best = added.best_iteration
    lgb.basic._safe_call(lgb.basic._LIB.LGBM_BoosterMerge(added._handle, previous._handle))
    added.best_iteration = previous.current_iteration() + best if best else 0
    return added


class _Rows(lgb.Sequence):
    """A RankingData's feature rows for LightGBM, read a batch at a time: binning from it copies no
    more than a batch of a scattered ``take`` (:meth:`RankingData.feature_values`)."""

    batch_size = 4096

    def __init__(self, data: RankingData, order: np.ndarray | None = None) -> None:
        self.data, self.order = data, order

    def __len__(self) -> int:
        return self.data.n_samples

    def __getitem__(self, idx: int | slice | list[int]) -> np.ndarray:
        if self.order is not None:
            idx = self.order[idx]
            return self.data.feature_values(idx) if np.ndim(idx) else self.data.feature_values(slice(idx, idx + 1))[0]
        if isinstance(idx, slice):
            return self.data.feature_values(idx)
        if np.ndim(idx) == 0:
            return self.data.feature_values(slice(int(idx), int(idx) + 1))[0]
        return self.data.feature_values(np.asarray(idx, dtype=np.int64))


class BinnedPanel:
    """Every sample of a backtest binned once by LightGBM; each fold trains on a subset of whole days.

    Parameters
    ----------
    data : all samples (date, code) of the backtest, sorted; only ``X`` and the day grouping are used.
    params : LightGBM parameters (``LambdaRankConfig.lgb_params()``); the bins depend on ``max_bin``,
        ``min_data_in_leaf`` and the seed, so folds must train with the same parameters.
    history_end : bin edges are computed from the samples dated ``<= history_end`` only, then every
        sample is placed into those bins; a fold's subset holds its bins only.
    sublist_size, seed : with a ``sublist_size``, each day's rows are held in the random order of
        :func:`day_sublists` (the bins are the same), so that a training subset can cut each day into
        contiguous random sub-lists (``subset(..., sublists=True)``).
    bins : a LightGBM binary file written by :meth:`save_bins` of a panel of the same ``data``, ``params``,
        ``history_end``, ``sublist_size`` and ``seed`` (in another process): its bins are read instead of
        binning again, the same bins byte for byte.

    Attributes
    ----------
    bin_columns : features binned at a time (:meth:`_bin_edges`); it bounds LightGBM's bin sample, not
        the bins.

    Warnings
    --------
    ``history_end=None`` computes the bin edges from every date, future test days included: no label
    is involved, but the candidate split thresholds then depend on the feature distribution of days the
    early folds must not know. Pass the first fold's training end (a log line warns otherwise).
    """

    bin_columns = 48

    def __init__(
        self,
        data: RankingData,
        params: dict[str, Any],
        *,
        history_end: np.datetime64 | None = None,
        sublist_size: int | None = None,
        seed: int = 0,
        bins: str | Path | None = None,
    ) -> None:
        t0 = time.perf_counter()
        self.source = data
        self.n_samples = data.n_samples
        self.dates = data.dates
        self._starts = data.day_starts()
        self.feature_names = data.feature_names
        self.params = dict(params)
        self.sublist_size = sublist_size
        # order[p]: the sample held at position p of the binned data; position: its inverse
        self.order: np.ndarray | None = None
        self.position: np.ndarray | None = None
        if sublist_size is not None:
            self.order, _ = day_sublists(data.dates[self._starts[:-1]], np.diff(self._starts), sublist_size, seed)
            self.position = np.empty_like(self.order)
            self.position[self.order] = np.arange(len(self.order))
        placeholder = np.zeros(data.n_samples, dtype=np.float32)  # labels come with each fold
        names = list(data.feature_names)
        if history_end is None:
            log.warning(
                "BinnedPanel: bin edges use the feature values of every date up to %s (no labels); pass "
                "history_end = the first fold's training end to keep later days out of them",
                data.dates[-1] if data.n_samples else None,
            )
            n_ref = data.n_samples
        else:
            n_ref = int(np.searchsorted(data.dates, np.datetime64(history_end, "ns"), side="right"))
            if n_ref == 0:
                raise DataContractError(
                    f"BinnedPanel: no sample is dated on or before history_end={history_end} (data starts "
                    f"{data.dates[0]}); pass the first fold's training end."
                )
        self.bin_rows = n_ref
        if bins is not None:
            self.dataset = lgb.Dataset(str(bins), params=self.params).construct()
            if self.dataset.num_data() != data.n_samples or self.dataset.num_feature() != data.n_features:
                raise DataContractError(
                    f"BinnedPanel: the bins file {bins} holds {self.dataset.num_data()} samples x "
                    f"{self.dataset.num_feature()} features, the data {data.n_samples} x {data.n_features}; "
                    "it was written for other data: prepare the ranker afresh."
                )
            log.info(
                "BinnedPanel: %d samples x %d features read from %s in %.1fs",
                data.n_samples,
                data.n_features,
                bins,
                time.perf_counter() - t0,
            )
            return
        # No second copy of X: the edges come from views of the first n_ref rows, and every sample is
        # then pushed into them a batch at a time.
        reference = self._bin_edges(data.feature_blocks(n_ref), names)
        self.dataset = lgb.Dataset(
            _Rows(data, self.order),
            label=placeholder,
            reference=reference,
            feature_name=names,
            params=self.params,
        ).construct()
        # The bins are copied into the dataset: the edges' Dataset (the first n_ref rows, binned) would
        # otherwise stay referenced for as long as the panel lives.
        self.dataset.reference = None
        log.info(
            "BinnedPanel: %d samples x %d features binned in %.1fs (edges from the first %d samples)",
            data.n_samples,
            data.n_features,
            time.perf_counter() - t0,
            n_ref,
        )

    def save_bins(self, path: str | Path) -> None:
        """Write the binned samples to ``path`` (LightGBM's binary Dataset file), for ``bins=`` of a panel
        built in another process."""
        self.dataset.save_binary(str(path))

    def _bin_edges(self, blocks: list[np.ndarray], names: list[str]) -> lgb.Dataset:
        """A Dataset of ``blocks`` (the rows the bin edges come from), binned :attr:`bin_columns` features
        at a time and joined (``add_features_from``).

        LightGBM samples up to ``bin_construct_sample_cnt`` rows of every feature it bins, as float64
        values plus int32 row numbers: 200k x 285 x 12 bytes = 0.64 GiB at once for the default matrix.
        A feature's bins depend only on its own sampled values, and the sampled rows only on the row
        count and the seed, so binning a few columns at a time gives the same bins (and trees) for a
        sixth of that (48 of 285 columns), plus a copy of those columns of the rows.
        """
        n_ref = sum(len(b) for b in blocks)
        label = np.zeros(n_ref, dtype=np.float32)
        reference: lgb.Dataset | None = None
        for start in range(0, len(names), self.bin_columns):
            cols = slice(start, start + self.bin_columns)
            columns = [read_columns(b, cols) for b in blocks]  # a file-backed matrix's pages are not kept,
            drop_span(blocks)  # those between the runs of rows included
            part = lgb.Dataset(
                columns, label=label, feature_name=names[cols], params=self.params, free_raw_data=True
            ).construct()
            del columns
            if reference is None:
                reference = part
                continue
            with warnings.catch_warnings():  # about raw data and categorical features neither part keeps
                warnings.filterwarnings("ignore", message="Cannot add features from|Resetting categorical")
                reference.add_features_from(part)
        assert reference is not None
        return reference

    def whole_days(self, rows: np.ndarray) -> np.ndarray:
        """Validate that ``rows`` are whole days, increasing; return the group sizes, int32 (n_days,)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or rows.size == 0:
            raise DataContractError(
                f"BinnedPanel.subset: expected a non-empty 1-D row array, received shape {rows.shape}."
            )
        if rows[0] < 0 or rows[-1] >= self.n_samples or (np.diff(rows) <= 0).any():
            raise DataContractError(
                f"BinnedPanel.subset: rows must be strictly increasing positions in [0, {self.n_samples}) "
                "(samples sorted by (date, code)); sort and de-duplicate them."
            )
        day = np.searchsorted(self._starts, rows, side="right") - 1
        days, counts = np.unique(day, return_counts=True)
        full = np.diff(self._starts)[days]
        partial = counts != full
        if partial.any():
            bad = days[partial]
            raise DataContractError(
                f"BinnedPanel.subset: {len(bad)} days are only partly selected, e.g. "
                f"{preview(str(self.dates[self._starts[d]])[:10] for d in bad)} ({counts[partial][0]} of "
                f"{full[partial][0]} samples). A query group is a whole day: select every sample of a day "
                "or none (drop unwanted stocks from the RankingData before building the panel)."
            )
        return counts.astype(np.int32)

    def order_of(self, rows: np.ndarray) -> np.ndarray | None:
        """For each row of :meth:`subset`'s Dataset of ``rows``, its index in ``rows``; None when the
        Dataset holds them in the order given (a panel without sub-lists)."""
        if self.position is None:
            return None
        return np.argsort(self.position[np.asarray(rows, dtype=np.int64)], kind="stable")

    def subset(
        self,
        rows: np.ndarray,
        relevance: np.ndarray,
        *,
        sublists: bool = False,
        init_score: np.ndarray | None = None,
    ) -> lgb.Dataset:
        """The binned samples at ``rows`` (whole days, increasing) as a constructed Dataset, one query
        group per day, or with ``sublists`` (a panel built with a ``sublist_size``) per random sub-list.

        Parameters
        ----------
        rows : int (n_rows,), positions in the panel's data.
        relevance : int (n_rows,), the relevance levels of those rows.
        init_score : float (n_rows,), the rows' starting scores (a continued fit), or None.
        """
        sizes = self.whole_days(rows)
        if sublists and self.sublist_size is None:
            raise DataContractError("BinnedPanel.subset: sub-lists need a panel built with a sublist_size.")
        order = self.order_of(rows)
        rows = np.asarray(rows, dtype=np.int64)
        if order is not None:  # each day's rows in the panel's shuffled order
            rows, relevance = self.position[rows[order]], np.asarray(relevance)[order]
            init_score = None if init_score is None else np.asarray(init_score)[order]
        ds = self.dataset.subset(np.asarray(rows, dtype=np.int32)).construct()
        ds.set_label(np.asarray(relevance, dtype=np.float32))
        ds.set_group(sublist_groups(sizes, self.sublist_size) if sublists else sizes)
        if init_score is not None:
            ds.set_init_score(init_score)
        return ds

    def rows_of(self, data: RankingData) -> np.ndarray | None:
        """Positions of ``data``'s samples in the binned data, when ``data`` was ``take``-n from it
        (directly or through other takes); None otherwise."""
        if data.n_samples == 0 or data.feature_names != self.feature_names:
            return None
        rows = data.rows_in(self.source)
        if rows is not None and not np.array_equal(self.dates[rows], data.dates):  # pragma: no cover
            raise AssertionError("BinnedPanel: lineage rows disagree with the dates")
        return rows


class LambdaRankRanker(RankerBase):
    """LightGBM LambdaRank behind the :class:`~models.base.Ranker` protocol.

    It learns from integer relevance levels only (``accepted_labels``: the label's ``bins`` and
    ``three_class`` processings): LightGBM's lambdarank reads the label as a level, so a raw return or a
    percentile rank would be cut to a constant 0 and train nothing.

    Parameters
    ----------
    config : hyper-parameters; ``LambdaRankConfig()`` by default.

    Attributes
    ----------
    booster : the fitted ``lgb.Booster`` (None before ``fit``).
    last_fit : facts of the latest fit for per-fold logging: ``kind`` ("fresh" or "warm"),
        ``rounds`` (trees added), ``best_iteration`` (trees used), ``best_score`` (validation NDCG by
        metric name), ``seconds``, ``binned`` (trained on a BinnedPanel subset).
    fits_since_refit : fits since the last fresh one (1 right after a fresh fit); with warm start the
        next fit is fresh again when it reaches ``full_refit_every``.
    """

    accepted_labels = LEVEL_PROCESSINGS

    def __init__(self, config: LambdaRankConfig | None = None) -> None:
        self.config = config or LambdaRankConfig()
        self.booster: lgb.Booster | None = None
        self.feature_names: tuple[str, ...] = ()
        self.panel: BinnedPanel | None = None
        self.last_fit: dict[str, Any] = {}
        self.fits_since_refit = 0

    @property
    def stateful(self) -> bool:
        """True with warm start: a fit depends on the previous one, so folds must run in order on one
        ranker object (and a resumed run must restore the previous booster, see :meth:`adopt_state`)."""
        return self.config.warm_start

    @property
    def ndcg_depth(self) -> int:
        """The NDCG depth of early stopping (``config.ndcg_depth``)."""
        return self.config.ndcg_depth

    @property
    def ndcg_gain(self) -> str | tuple[float, ...]:
        """The gain of training and early stopping (``config.label_gain``)."""
        return self.config.label_gain

    def adopt_state(self, other: Self) -> None:
        """Take the fitted state (booster, features, warm-start position) of ``other``, e.g. a ranker
        ``load``-ed from a checkpoint, keeping this one's prepared BinnedPanel."""
        self.booster, self.feature_names = other.booster, other.feature_names
        self.last_fit, self.fits_since_refit = dict(other.last_fit), other.fits_since_refit

    @property
    def params(self) -> dict[str, Any]:
        p = asdict(self.config)
        extra = p.pop("extra")
        p["label_gain"] = p["label_gain"] if isinstance(p["label_gain"], str) else list(p["label_gain"])
        p.update({f"extra.{k}": v for k, v in extra.items()})
        return p

    def prepare(
        self, data: RankingData, *, history_end: np.datetime64 | None = None, shared: Any | None = None
    ) -> None:
        """Bin every sample once (:class:`BinnedPanel`), or read the bins of ``shared`` (what
        :meth:`share_prepared` of a ranker of the same config prepared on the same data returned); later
        fits on data ``take``-n from ``data`` train on subsets. Resets warm start."""
        cfg = self.config
        bins = shared[SHARED_FILE] if shared is not None else None
        self.panel = BinnedPanel(
            data, cfg.lgb_params(), history_end=history_end, sublist_size=cfg.sublist_size, seed=cfg.seed, bins=bins
        )
        self.fits_since_refit = 0

    def share_prepared(self, directory: Path) -> dict[str, str]:
        """Write the prepared bins into ``directory`` (a new file); returns the handle that ``prepare(...,
        shared=)`` reads them from in another process."""
        if self.panel is None:
            raise DataContractError("LambdaRankRanker.share_prepared: call prepare() first.")
        path = Path(directory) / f"bins-{uuid.uuid4().hex}.bin"
        self.panel.save_bins(path)
        return {SHARED_FILE: str(path)}

    def _check(self, data: RankingData, what: str, labelled: bool) -> None:
        if self.feature_names and data.feature_names != self.feature_names:
            raise DataContractError(
                f"LambdaRankRanker.{what}: features differ from the fitted model's: expected "
                f"{preview(self.feature_names)}, received {preview(data.feature_names)}."
            )
        if not labelled:
            return
        if data.relevance is None:
            raise DataContractError(f"LambdaRankRanker.{what}: relevance labels are required to train.")
        if not np.issubdtype(data.relevance.dtype, np.integer):
            raise ConfigError(
                f"LambdaRankRanker.{what}: expected integer relevance levels (label.processing "
                f"{' or '.join(sorted(self.accepted_labels))}), received a {data.relevance.dtype} target (a raw "
                "or rank label): lambdarank would read it as whole-number levels and train on constants.\n"
                f"  fix: {label_processing_fix(self, 'raw')}"
            )
        if data.relevance.size and data.relevance.max() >= self.config.n_bins:
            raise DataContractError(
                f"LambdaRankRanker.{what}: relevance reaches {int(data.relevance.max())} but n_bins is "
                f"{self.config.n_bins}; make label.n_bins and model.n_bins agree."
            )
        if data.n_days < 1:
            raise DataContractError(f"LambdaRankRanker.{what}: no samples.")

    def _dataset(
        self,
        data: RankingData,
        reference: lgb.Dataset | None,
        params: dict[str, Any],
        previous: lgb.Booster | None,
        *,
        train: bool,
    ) -> tuple[lgb.Dataset, np.ndarray | None]:
        """``data`` as a training (``train``: cut into sub-lists when ``sublist_size`` is set) or
        validation Dataset, and for each Dataset row its sample in ``data`` (None: in order); continuing
        ``previous``, its rows start from that booster's scores (``init_score``)."""
        assert data.relevance is not None
        init = None if previous is None else self._scores(previous, data)
        sublists = train and self.config.sublist_size is not None
        rows = self.panel.rows_of(data) if self.panel is not None else None
        if rows is not None:
            assert self.panel is not None
            ds = self.panel.subset(rows, data.relevance, sublists=sublists, init_score=init)
            return ds, self.panel.order_of(rows)
        if not sublists:
            ds = lgb.Dataset(
                data.X,
                label=data.relevance.astype(np.float32),
                group=data.group_sizes(),
                reference=reference,
                init_score=init,
                feature_name=list(data.feature_names),
                params=params,
            )
            return ds, None
        starts = data.day_starts()
        order, groups = day_sublists(
            data.dates[starts[:-1]], np.diff(starts), self.config.sublist_size, self.config.seed
        )
        ds = lgb.Dataset(
            data.feature_values(order),
            label=data.relevance[order].astype(np.float32),
            group=groups,
            reference=reference,
            init_score=None if init is None else init[order],
            feature_name=list(data.feature_names),
            params=params,
        )
        return ds, order

    def _scores(self, booster: lgb.Booster, data: RankingData) -> np.ndarray:
        """``booster``'s scores of ``data``, float64 (n_samples,), computed on the view of the rows where
        they lie (:meth:`RankingData.row_span`) unless the rows are spread over more than twice their
        number, then on a copy of them."""
        span, at = data.row_span()
        spread = len(span) > 2 * len(at)
        scores = booster.predict(
            data.feature_values(slice(None)) if spread else span,
            num_iteration=booster.best_iteration or None,
            num_threads=self.config.num_threads,
        )
        return np.asarray(scores if spread else scores[at], dtype=np.float64)

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Self:
        """Train on ``train``; early stopping on ``valid`` (purged validation tail) when given.

        With ``warm_start`` the booster of the previous fit is continued for ``warm_start_rounds``
        rounds, as ``lgb.train(init_model=...)`` continues it (its scores of the rows as ``init_score``,
        its trees in front: :func:`_continued`), except on fresh fits (the first, and every
        ``full_refit_every``-th).
        """
        cfg = self.config
        self._check(train, "fit(train)", labelled=True)
        if valid is not None:
            self._check(valid, "fit(valid)", labelled=True)
            if valid.feature_names != train.feature_names:
                raise DataContractError("LambdaRankRanker.fit: train and valid have different features.")
        if self.booster is not None and train.feature_names != self.feature_names:
            self.booster, self.fits_since_refit = None, 0  # another feature set: nothing to continue
        warm = cfg.warm_start and self.booster is not None and 0 < self.fits_since_refit < cfg.full_refit_every
        t0 = time.perf_counter()
        params = cfg.lgb_params()
        previous = self.booster if warm else None
        train_ds, _ = self._dataset(train, None, params, previous, train=True)
        callbacks: list[Any] = [StopBetweenRounds()]
        feval = None
        valid_sets, valid_names = [], []
        if valid is not None:
            valid_ds, valid_order = self._dataset(valid, train_ds, params, previous, train=False)
            valid_sets, valid_names = [valid_ds], ["valid"]
            if cfg.early_stopping_rounds:
                name = f"ndcg@{cfg.ndcg_depth}" if cfg.early_stopping_metric == "ndcg" else "rank_ic"
                minimum = 1 if warm else cfg.min_rounds
                callbacks.append(EarlyStopping(name, cfg.early_stopping_rounds, min_rounds=minimum))
            if cfg.early_stopping_metric == "rank_ic":
                feval = _rank_ic_feval(valid, valid_order)
        rounds = cfg.warm_start_rounds if warm else cfg.num_boost_round
        init_iter = previous.current_iteration() if previous is not None else 0
        booster = lgb.train(
            params,
            train_ds,
            num_boost_round=rounds,
            valid_sets=valid_sets,
            valid_names=valid_names,
            callbacks=callbacks,
            feval=feval,
        )
        if previous is not None:
            booster = _continued(previous, booster)
        self.booster = booster
        self.feature_names = train.feature_names
        self.fits_since_refit = self.fits_since_refit + 1 if warm else 1
        best = booster.best_iteration or booster.current_iteration()
        self.last_fit = {
            "kind": "warm" if warm else "fresh",
            "rounds": booster.current_iteration() - init_iter,
            "best_iteration": int(best),
            "best_score": {k: float(v) for k, v in booster.best_score.get("valid", {}).items()},
            "seconds": time.perf_counter() - t0,
            "binned": self.panel is not None and self.panel.rows_of(train) is not None,
        }
        log.info(
            "LambdaRank %s fit: %d days, %d samples, %d trees (best %d), %.1fs%s",
            self.last_fit["kind"],
            train.n_days,
            train.n_samples,
            booster.current_iteration(),
            best,
            self.last_fit["seconds"],
            f", valid {self.last_fit['best_score']}" if valid is not None else "",
        )
        return self

    def _fitted(self) -> lgb.Booster:
        if self.booster is None:
            raise DataContractError("LambdaRankRanker: call fit() (or load()) before predict/save.")
        return self.booster

    def predict(self, data: RankingData) -> np.ndarray:
        """Scores, float64 (n_samples,), aligned with ``data``; higher is better."""
        booster = self._fitted()
        self._check(data, "predict", labelled=False)
        return self._scores(booster, data)

    def feature_importance(self) -> dict[str, float]:
        """Total split gain per feature of the model that makes the predictions (a warm-started model
        includes the trees inherited from earlier folds)."""
        booster = self._fitted()
        gain = booster.feature_importance(importance_type="gain", iteration=booster.best_iteration or None)
        return {name: float(g) for name, g in zip(booster.feature_name(), gain)}

    def save(self, path: str | Path) -> None:
        """Write ``booster.txt`` (LightGBM's native text model) and ``ranker.json`` into directory ``path``."""
        booster = self._fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        booster.save_model(path / BOOSTER_FILE, num_iteration=booster.best_iteration or None)
        meta = {
            "config": self.params,
            "feature_names": list(self.feature_names),
            "last_fit": self.last_fit,
            "fits_since_refit": self.fits_since_refit,
        }
        (path / META_FILE).write_text(json.dumps(meta, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read a ranker written by :meth:`save`."""
        path = Path(path)
        if not (path / BOOSTER_FILE).is_file() or not (path / META_FILE).is_file():
            raise DataContractError(
                f"LambdaRankRanker.load: expected {BOOSTER_FILE} and {META_FILE} in {path}; write them with "
                "LambdaRankRanker.save(path)."
            )
        meta = json.loads((path / META_FILE).read_text())
        flat = meta["config"]
        extra = {k.removeprefix("extra."): flat.pop(k) for k in list(flat) if k.startswith("extra.")}
        ranker = cls(LambdaRankConfig(**flat, extra=extra))
        ranker.booster = lgb.Booster(model_file=path / BOOSTER_FILE)
        ranker.feature_names = tuple(meta["feature_names"])
        ranker.last_fit = meta.get("last_fit", {})
        ranker.fits_since_refit = int(meta.get("fits_since_refit", 1))
        return ranker
