"""StockTransformerRanker: trains and applies :class:`~models.stock_transformer.StockTransformer` behind
the :class:`~models.base.Ranker` protocol.

Samples come as a :class:`~models.data.RankingData`; its ``wide`` tensor (NaN replaced by 0, uploaded once
to the device) is the source of each batch's [day, stock, window, feature] view, gathered on the device
a few days at a time (``days_per_step``), so the full 4-D array never exists.

Training: AdamW, linear warmup then cosine decay, gradient clipping, a ranking loss on the label's
target (every processing: integer relevance levels, or raw returns / percentile ranks; by default the
regression on the day's z-scored target, :func:`~models.ranking_losses.regression_loss`), early stopping on
the validation tail (mean daily rank IC, or NDCG at ``ndcg_depth``), the best epoch's weights kept. Seeded:
the same seed gives identical scores on CPU (deterministic algorithms are switched on for
the duration of the fit; the global RNG state is restored afterwards).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd
import torch

from backtest.errors import ConfigError, DataContractError, preview
from backtest.labels import PROCESSINGS
from backtest.metrics import daily_ic, ndcg_at_k
from backtest.portfolio import DEFAULT_TOP_K
from backtest.stop import raise_if_stopped
from models.base import EARLY_STOPPING_METRICS, RankerBase
from models.data import RankingData
from models.ranking_losses import LOSSES, listmle_loss, listnet_loss
from models.ranks import centred_ranks, daily_section
from models.stock_transformer import StockTransformer, StockTransformerConfig
from models.windows import window_view

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.pt"
#: what the network reads of each feature (TransformerTrainingConfig.inputs)
INPUTS = ("rank", "as_is")
META_FILE = "ranker.json"


@dataclass(frozen=True)
class TransformerTrainingConfig:
    """How :class:`StockTransformerRanker` trains.

    Parameters
    ----------
    loss : ``"listnet"`` (softmax cross-entropy on relevance), ``"listmle"``, ``"ranknet"`` (pairwise) or
        ``"regression"`` (the day's z-scored target, pointwise): :mod:`models.ranking_losses`.
    listnet_temperature : ListNet's target is ``softmax(relevance / temperature)`` for integer relevance
        levels (bins, three classes), and ``softmax(z / temperature)`` for a real-valued label (raw
        returns, percentile ranks), ``z`` its z-score within the day clipped to +-3: raw returns spread
        by ~1% would otherwise give a flat target, and the spread changes from day to day
        (:func:`~models.ranking_losses.listnet_loss`).
    aux_loss_weight : weight of the MoE load-balancing loss.
    learning_rate, weight_decay : AdamW (decay on matrices only, not on biases, norms, positions; the
        fused kernel on CUDA).
    warmup_fraction, min_lr_ratio : linear warmup over this share of all steps, then cosine decay to
        ``min_lr_ratio * learning_rate``.
    grad_clip : max global gradient norm (0 = off).
    max_epochs, patience : epochs over the training days; stop after ``patience`` epochs without a better
        validation ``early_stopping_metric``, keep the best weights.
    early_stopping_metric : ``"rank_ic"`` (mean daily Spearman IC with the target) or ``"ndcg"`` (NDCG at
        ``ndcg_depth`` with linear gains, :func:`backtest.metrics.ndcg_at_k`; a real-valued target is
        graded into 10 daily bins).
    ndcg_depth : depth of the ``"ndcg"`` metric: the stocks bought (``portfolio.top_k`` in the config, default
        :data:`backtest.portfolio.DEFAULT_TOP_K`).
    days_per_step : days (query lists) per optimiser step; predict uses ``predict_days_per_step``.
    device : ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    precision : ``"auto"`` (bf16 autocast on CUDA, fp32 on CPU), ``"fp32"`` or ``"bf16"``.
    compile : None, or a ``torch.compile`` mode (``"default"``, ``"reduce-overhead"`` = CUDA graphs).
    num_threads : CPU threads while fitting / predicting, 0 = leave torch's setting.
    seed : seeds the weights, dropout and the day order.
    inputs : ``"rank"`` (each feature's percentile rank within its day, centred at 0, a missing value at
        0: the linear ranker's inputs, :func:`models.ranks.centred_ranks`) or ``"as_is"`` (the feature
        values, a missing value at 0). A day's ranks read that day's rows only.
    """

    loss: str = "regression"
    listnet_temperature: float = 1.0
    aux_loss_weight: float = 0.01
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    min_lr_ratio: float = 0.05
    grad_clip: float = 1.0
    max_epochs: int = 20
    patience: int = 3
    early_stopping_metric: str = "rank_ic"
    ndcg_depth: int = DEFAULT_TOP_K
    days_per_step: int = 16
    predict_days_per_step: int = 64
    device: str = "auto"
    precision: str = "auto"
    compile: str | None = None
    num_threads: int = 0
    seed: int = 0
    inputs: str = "as_is"

    def __post_init__(self) -> None:
        problems = []
        if self.loss not in LOSSES:
            problems.append(f"loss={self.loss!r} must be one of {sorted(LOSSES)}")
        if self.early_stopping_metric not in EARLY_STOPPING_METRICS:
            hint = (
                " (the depth is ndcg_depth: early_stopping_metric=ndcg)"
                if self.early_stopping_metric.startswith("ndcg@")
                else ""
            )
            problems.append(
                f"early_stopping_metric={self.early_stopping_metric!r} must be one of {EARLY_STOPPING_METRICS}{hint}"
            )
        if isinstance(self.ndcg_depth, bool) or not isinstance(self.ndcg_depth, int) or self.ndcg_depth < 1:
            problems.append(f"ndcg_depth={self.ndcg_depth!r} must be a positive number of stocks")
        if self.inputs not in INPUTS:
            problems.append(f"inputs={self.inputs!r} must be one of {INPUTS}")
        if self.precision not in ("auto", "fp32", "bf16"):
            problems.append(f"precision={self.precision!r} must be 'auto', 'fp32' or 'bf16'")
        if self.days_per_step < 1 or self.predict_days_per_step < 1 or self.max_epochs < 1:
            problems.append("days_per_step, predict_days_per_step and max_epochs must be >= 1")
        if problems:
            raise ConfigError("model.training: " + "; ".join(problems) + ".")


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; other names as torch reads them."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"model.training.device={name!r}, but CUDA is not available here; use 'auto' or 'cpu'.")
    return device


@contextlib.contextmanager
def _torch_session(device: torch.device, seed: int | None, num_threads: int) -> Iterator[None]:
    """Seeded RNG (restored afterwards), deterministic CPU algorithms, threads, and on CUDA the cuDNN
    attention backend off (it failed at large batches and in compiled backward on the H200 build)."""
    devices = [device.index or 0] if device.type == "cuda" else []
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_threads = torch.get_num_threads()
    prev_cudnn_sdp = torch.backends.cuda.cudnn_sdp_enabled()
    with torch.random.fork_rng(devices=devices):
        try:
            if seed is not None:
                torch.manual_seed(seed)
            if device.type == "cpu":
                torch.use_deterministic_algorithms(True)
            else:
                torch.backends.cuda.enable_cudnn_sdp(False)
            if num_threads > 0:
                torch.set_num_threads(num_threads)
            yield
        finally:
            torch.use_deterministic_algorithms(prev_det)
            torch.set_num_threads(prev_threads)
            torch.backends.cuda.enable_cudnn_sdp(prev_cudnn_sdp)


@dataclass(frozen=True)
class DayBatches:
    """The days of a RankingData, padded to the same number of stocks, on the device.

    Attributes
    ----------
    date_pos : long (n_days,), row of each decision day in the wide tensor.
    code_pos : long (n_days, max_stocks), column of each stock, -1 for padding.
    relevance : float32 (n_days, max_stocks), the target, 0 where padded or unknown.
    levels : True when the target is integer relevance levels, False for a real-valued label.
    """

    date_pos: torch.Tensor
    code_pos: torch.Tensor
    relevance: torch.Tensor
    wide: torch.Tensor
    levels: bool = True

    @property
    def n_days(self) -> int:
        return int(self.date_pos.shape[0])

    def batch(self, days: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (days, stocks, window, features), mask (days, stocks), relevance (days, stocks)."""
        x, mask = window_view(self.wide, self.date_pos[days], window, code_positions=self.code_pos[days])
        return x, mask, self.relevance[days]


class StockTransformerRanker(RankerBase):
    """The StockTransformer behind the :class:`~models.base.Ranker` protocol.

    It learns from every label processing (``accepted_labels``): integer relevance levels, raw returns
    and percentile ranks (see ``listnet_temperature`` for how ListNet reads a real-valued label).

    Parameters
    ----------
    architecture : the network (``n_features`` 0: taken from the training data).
    training : the optimisation and the device.

    Attributes
    ----------
    network : the fitted :class:`StockTransformer` (None before ``fit``).
    history : per-epoch records of the latest fit: ``epoch``, ``train_loss`` (mean over the epoch's
        steps), ``grad_norm`` (mean global gradient norm before clipping), ``learning_rate`` (at the
        epoch's end), ``train_rank_ic`` (on :data:`TRAIN_PROBE_DAYS` evenly spaced training days, in eval
        mode), ``valid_<metric>`` (and ``valid_rank_ic``) with a validation set, and ``seconds``.
    last_fit : ``{"best_epoch", "best_score", "epochs", "seconds", "device", "precision"}``.
    """

    def __init__(
        self,
        architecture: StockTransformerConfig | None = None,
        training: TransformerTrainingConfig | None = None,
    ) -> None:
        self.architecture = architecture or StockTransformerConfig()
        self.training = training or TransformerTrainingConfig()
        self.network: StockTransformer | None = None
        self.feature_names: tuple[str, ...] = ()
        self.history: list[dict[str, float]] = []
        self.last_fit: dict[str, Any] = {}
        self._forward: Any = None  # the (possibly compiled) network of the latest fit
        self._device_wide: tuple[np.ndarray, torch.Tensor] | None = None
        self._root_grid: tuple[RankingData, np.ndarray, np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ protocol

    accepted_labels = frozenset(PROCESSINGS)
    stateful = False  # every fit starts from fresh weights: folds are independent

    @property
    def ndcg_depth(self) -> int:
        """Depth of the ``"ndcg"`` early-stopping metric (``training.ndcg_depth``)."""
        return self.training.ndcg_depth

    @property
    def ndcg_gain(self) -> str:
        """Gain of that metric: linear (the ListNet target does not use a gain)."""
        return "linear"

    def adopt_state(self, other: Self) -> None:
        """Take the fitted network (weights, features, history) of ``other``, keeping this ranker's
        prepared device tensor."""
        self.network, self.feature_names = other.network, other.feature_names
        self.history, self.last_fit = list(other.history), dict(other.last_fit)
        self._forward = None if other.network is None else other._forward
        if self.network is not None:
            self.network = self.network.to(self.device)

    @property
    def params(self) -> dict[str, Any]:
        arch = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.architecture).items()}
        arch.pop("n_features")
        return {**arch, **asdict(self.training)}

    @property
    def device(self) -> torch.device:
        return resolve_device(self.training.device)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        p = self.training.precision
        if p == "bf16" or (p == "auto" and self.device.type == "cuda"):
            return torch.bfloat16
        return None

    def prepare(self, data: RankingData, *, history_end: np.datetime64 | None = None) -> None:
        """Upload the wide tensor to the device once (no data-dependent preprocessing, so
        ``history_end`` is not needed).

        Without a ``wide`` tensor, the tensor is built from the root of ``data``'s lineage (e.g. every
        eligible sample, when ``data`` is its labelled subset); later fits and predictions on data
        taken from that root draw their windows from it, so a predicted day sees its history.
        """
        if data.wide is not None:
            self._wide_on_device(data.wide)
            return
        root = data.root()
        wide, date_pos, code_pos = root.window_source()
        self._root_grid = (root, wide, date_pos, code_pos)
        self._wide_on_device(wide)

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Self:
        """Train on ``train``'s days; early stopping on ``valid`` (the purged tail) when given."""
        cfg, arch = self.training, replace(self.architecture, n_features=train.n_features)
        if train.relevance is None or (valid is not None and valid.relevance is None):
            raise DataContractError("StockTransformerRanker.fit: train (and valid) need relevance labels.")
        if valid is not None and valid.feature_names != train.feature_names:
            raise DataContractError("StockTransformerRanker.fit: train and valid have different features.")
        device, t_fit = self.device, time.perf_counter()
        with _torch_session(device, cfg.seed, cfg.num_threads):
            network = StockTransformer(arch).to(device)
            forward = torch.compile(network, mode=cfg.compile) if cfg.compile else network
            optimizer = torch.optim.AdamW(
                _param_groups(network, cfg.weight_decay), lr=cfg.learning_rate, fused=device.type == "cuda"
            )  # one kernel per step on CUDA
            tr = self._days(train)
            va = self._days(valid) if valid is not None else None
            steps_per_epoch = math.ceil(tr.n_days / cfg.days_per_step)
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer, _warmup_cosine(steps_per_epoch * cfg.max_epochs, cfg.warmup_fraction, cfg.min_lr_ratio)
            )
            probe = train.take(_probe_rows(train))  # the training days of train_rank_ic
            probe_days = self._days(probe)
            order_rng = torch.Generator().manual_seed(cfg.seed)
            best_score, best_epoch, best_state = -math.inf, -1, None
            self.history = []
            for epoch in range(cfg.max_epochs):
                t0 = time.perf_counter()
                network.train()
                total = torch.zeros((), device=device)
                grad_norm = torch.zeros((), device=device)
                # the epoch's day order goes to the device once: no host-to-device copy per step
                for days in torch.randperm(tr.n_days, generator=order_rng).to(device).split(cfg.days_per_step):
                    x, mask, rel = tr.batch(days, arch.window)
                    with self._autocast(device):
                        scores, aux = forward(x, mask)
                    loss = self._loss(scores, rel, mask, order_rng, tr.levels) + cfg.aux_loss_weight * aux.float()
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    # the global norm before clipping (inf: measured, not clipped)
                    norm = torch.nn.utils.clip_grad_norm_(network.parameters(), cfg.grad_clip or math.inf)
                    optimizer.step()
                    schedule.step()
                    total += loss.detach()
                    grad_norm += norm.detach()
                record = {
                    "epoch": epoch,
                    "train_loss": float(total) / steps_per_epoch,
                    "grad_norm": float(grad_norm) / steps_per_epoch,
                    "learning_rate": float(schedule.get_last_lr()[0]),
                }
                record["train_rank_ic"] = self._score(probe, self._scores(network, forward, probe_days), "rank_ic")
                if va is not None:
                    assert valid is not None
                    valid_scores = self._scores(network, forward, va)
                    score = self._score(valid, valid_scores)
                    record[f"valid_{cfg.early_stopping_metric}"] = score
                    if cfg.early_stopping_metric != "rank_ic":
                        record["valid_rank_ic"] = self._score(valid, valid_scores, "rank_ic")
                    if score > best_score:
                        best_score, best_epoch = score, epoch
                        best_state = copy.deepcopy(network.state_dict())
                record["seconds"] = time.perf_counter() - t0
                self.history.append(record)
                log.info("StockTransformer epoch %d: %s", epoch, {k: round(v, 4) for k, v in record.items()})
                raise_if_stopped()  # between epochs (backtest.stop)
                if va is not None and epoch - best_epoch >= cfg.patience:
                    break
            if best_state is not None:
                network.load_state_dict(best_state)
        network.eval()
        self.network, self.feature_names = network, train.feature_names
        self._forward = forward
        self.last_fit = {
            "best_epoch": best_epoch if va is not None else len(self.history) - 1,
            "best_score": best_score if va is not None else None,
            "epochs": len(self.history),
            "seconds": time.perf_counter() - t_fit,
            "device": str(device),
            "precision": "bf16" if self.autocast_dtype is not None else "fp32",
        }
        return self

    def predict(self, data: RankingData) -> np.ndarray:
        """Scores, float64 (n_samples,), aligned with ``data``'s rows (windows from ``data.wide``)."""
        network = self._fitted()
        if data.feature_names != self.feature_names:
            raise DataContractError(
                "StockTransformerRanker.predict: features differ from the fitted model's: expected "
                f"{preview(self.feature_names)}, received {preview(data.feature_names)}."
            )
        with _torch_session(self.device, None, self.training.num_threads):
            forward = self._forward if self._forward is not None else network  # no bool(): a compiled
            day_scores = self._scores(network, forward, self._days(data))  # module has no __len__
        return day_scores[data.day_index(), data.day_slots()].astype(np.float64)

    def feature_importance(self) -> dict[str, float]:
        """Empty: the network has no per-feature gain."""
        return {}

    def save(self, path: str | Path) -> None:
        """Write ``model.pt`` (the weights) and ``ranker.json`` (configs, features, history) into ``path``."""
        network = self._fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in network.state_dict().items()}, path / WEIGHTS_FILE)
        meta = {
            "architecture": asdict(network.cfg),
            "training": asdict(self.training),
            "feature_names": list(self.feature_names),
            "history": self.history,
            "last_fit": self.last_fit,
        }
        (path / META_FILE).write_text(json.dumps(meta, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read a ranker written by :meth:`save` (onto the device its training config resolves to here)."""
        path = Path(path)
        if not (path / WEIGHTS_FILE).is_file() or not (path / META_FILE).is_file():
            raise DataContractError(
                f"StockTransformerRanker.load: expected {WEIGHTS_FILE} and {META_FILE} in {path}; write them "
                "with StockTransformerRanker.save(path)."
            )
        meta = json.loads((path / META_FILE).read_text())
        arch = StockTransformerConfig(**meta["architecture"])
        ranker = cls(replace(arch, n_features=0), TransformerTrainingConfig(**meta["training"]))
        network = StockTransformer(arch)
        network.load_state_dict(torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True))
        ranker.network = network.to(ranker.device).eval()
        ranker.feature_names = tuple(meta["feature_names"])
        ranker.history, ranker.last_fit = meta.get("history", []), meta.get("last_fit", {})
        return ranker

    # ------------------------------------------------------------------ internals

    def _fitted(self) -> StockTransformer:
        if self.network is None:
            raise DataContractError("StockTransformerRanker: call fit() (or load()) before predict/save.")
        return self.network

    def _wide_on_device(self, wide: np.ndarray) -> torch.Tensor:
        if self._device_wide is None or self._device_wide[0] is not wide:
            self._device_wide = (wide, self._network_inputs(wide))
        return self._device_wide[1]

    def _network_inputs(self, wide: np.ndarray) -> torch.Tensor:
        """The (dates, codes, features) tensor the network reads, on the device: ``wide`` as
        ``training.inputs`` says, a missing value at 0 (NaN never enters torch)."""
        if self.training.inputs == "rank":
            n_dates, n_codes, n_features = wide.shape
            cells = wide.reshape(n_dates * n_codes, n_features)
            day = np.repeat(np.arange(n_dates, dtype=np.int64), n_codes)
            clean = centred_ranks(cells, daily_section(day)).reshape(wide.shape)
        else:
            clean = np.nan_to_num(wide, nan=0.0, posinf=0.0, neginf=0.0)
        return torch.from_numpy(clean).to(self.device)

    def _window_source(self, data: RankingData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The data's own tensor; else the prepared root's grid when ``data`` descends from it; else a
        grid of ``data``'s own samples (no history before its first day)."""
        if data.wide is None and self._root_grid is not None:
            root, wide, date_pos, code_pos = self._root_grid
            rows = data.rows_in(root)
            if rows is not None:
                return wide, date_pos[rows], code_pos[rows]
        if data.wide is None:
            log.info(
                "StockTransformerRanker: %d days without a wide tensor or a prepared lineage: windows "
                "hold only the history inside this data",
                data.n_days,
            )
        return data.window_source()

    def _days(self, data: RankingData) -> DayBatches:
        wide, date_pos, code_pos = self._window_source(data)
        starts = data.day_starts()
        day_date = date_pos[starts[:-1]]
        if not np.array_equal(np.repeat(day_date, data.group_sizes()), date_pos):
            raise DataContractError(
                "StockTransformerRanker: the samples of one day sit on different rows of the wide tensor; "
                "build date_pos from the tensor's grid (RankingData.from_frame(..., tensor=...))."
            )
        codes, _ = data.day_matrix(code_pos, fill=-1)
        rel = data.relevance if data.relevance is not None else np.zeros(data.n_samples, dtype=np.int64)
        rel_m, _ = data.day_matrix(rel.astype(np.float32), fill=0.0)
        device = self.device
        shared = self._device_wide is not None and self._device_wide[0] is wide
        dev_wide = self._wide_on_device(wide) if data.wide is not None or shared else self._network_inputs(wide)
        return DayBatches(
            date_pos=torch.as_tensor(day_date, dtype=torch.long, device=device),
            code_pos=torch.as_tensor(codes, dtype=torch.long, device=device),
            relevance=torch.as_tensor(rel_m, dtype=torch.float32, device=device),
            wide=dev_wide,
            levels=bool(np.issubdtype(rel.dtype, np.integer)),
        )

    def _loss(
        self, scores: torch.Tensor, rel: torch.Tensor, mask: torch.Tensor, rng: torch.Generator, levels: bool
    ) -> torch.Tensor:
        name = self.training.loss
        if name == "listnet":
            return listnet_loss(scores, rel, mask, self.training.listnet_temperature, standardize=not levels)
        if name == "listmle":
            return listmle_loss(scores, rel, mask, rng)
        return LOSSES[name](scores, rel, mask)

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        dtype = self.autocast_dtype
        return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    @torch.no_grad()
    def _scores(self, network: StockTransformer, forward: Any, days: DayBatches) -> np.ndarray:
        """Scores (n_days, max_stocks) float32, in eval mode (the network's mode is restored)."""
        was_training = network.training
        network.eval()
        out = []
        device = days.date_pos.device
        for idx in torch.arange(days.n_days, device=device).split(self.training.predict_days_per_step):
            x, mask, _ = days.batch(idx, network.cfg.window)
            with self._autocast(device):
                scores, _ = forward(x, mask)
            out.append(scores.float())
        network.train(was_training)
        return torch.cat(out).cpu().numpy()  # one device-to-host copy

    def _score(self, data: RankingData, day_scores: np.ndarray, metric: str | None = None) -> float:
        """``metric`` (default: the early-stopping metric) of the day-matrix scores on ``data``'s target."""
        assert data.relevance is not None
        index = pd.MultiIndex.from_arrays([data.dates, data.codes], names=["date", "code"])
        scores = pd.Series(day_scores[data.day_index(), data.day_slots()].astype(np.float64), index=index)
        relevance = pd.Series(data.relevance, index=index)
        if (metric or self.training.early_stopping_metric) == "rank_ic":
            return float(daily_ic(scores, relevance, "spearman").mean())
        return ndcg_at_k(scores, relevance, k=self.ndcg_depth, gain=self.ndcg_gain)


#: training days whose rank IC is recorded each epoch (``train_rank_ic``), evenly spaced over the window
TRAIN_PROBE_DAYS = 64


def _probe_rows(data: RankingData) -> np.ndarray:
    """The rows of :data:`TRAIN_PROBE_DAYS` days of ``data``, evenly spaced over its days."""
    starts = data.day_starts()
    days = np.unique(np.linspace(0, data.n_days - 1, min(data.n_days, TRAIN_PROBE_DAYS)).round().astype(np.int64))
    return np.concatenate([np.arange(starts[d], starts[d + 1]) for d in days])


def _param_groups(network: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay = [p for n, p in network.named_parameters() if p.ndim >= 2 and not n.endswith("pos")]
    keep = [p for n, p in network.named_parameters() if not (p.ndim >= 2 and not n.endswith("pos"))]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]


def _warmup_cosine(total_steps: int, warmup_fraction: float, min_ratio: float):  # type: ignore[no-untyped-def]
    warmup = max(1, int(round(total_steps * warmup_fraction)))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
