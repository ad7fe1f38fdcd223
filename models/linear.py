"""LinearRanker: the engine's linear baseline as a model of its own (``model=linear``), so that it can be
an ensemble member or the model of a run.

A ridge regression of the target's cross-sectional percentile rank on the features' cross-sectional
percentile ranks, both centred at 0 per day, a missing feature at the median: the ``linear`` baseline of
:mod:`backtest.baselines`, on the same machinery (:mod:`models.ranks`),
fitted on the training and validation days together (nothing to stop early). The baseline ranks the
forward return; this ranker ranks the target it is given (relevance bins, raw returns, percentile
ranks), whose daily order is the forward return's up to the ties of the bins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self

import numpy as np

from backtest.errors import DataContractError, preview
from backtest.labels import PROCESSINGS
from models.base import RankerBase
from models.data import RankingData
from models.ranks import RIDGE_ALPHA, RankedPanel, fit_ridge

META_FILE = "linear.json"


class LinearRanker(RankerBase):
    """Ridge on daily centred ranks (see the module docstring).

    Parameters
    ----------
    alpha : the ridge penalty relative to the variance of a centred rank column (1/12), as
        :data:`models.ranks.RIDGE_ALPHA`.

    Attributes
    ----------
    coef : float64 (n_features,) after ``fit``, the weights of the centred feature ranks.
    """

    accepted_labels = frozenset(PROCESSINGS)

    def __init__(self, alpha: float = RIDGE_ALPHA) -> None:
        self.alpha = float(alpha)
        self.coef: np.ndarray | None = None
        self.feature_names: tuple[str, ...] = ()
        self._root: tuple[RankingData, np.ndarray] | None = None  # prepared data and its ranks

    @property
    def params(self) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def adopt_state(self, other: Self) -> None:
        """Take ``other``'s weights, keeping the ranks this ranker prepared."""
        self.coef, self.feature_names = other.coef, other.feature_names

    def prepare(self, data: RankingData, *, history_end: np.datetime64 | None = None) -> None:
        """Rank every sample of ``data``'s lineage once (a day's ranks read that day's rows only, so no
        preprocessing depends on ``history_end``)."""
        root = data.root()
        self._root = (root, _centred_ranks(root))

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Self:
        """Fit on the days of ``train`` and ``valid`` (both labelled)."""
        parts = [d for d in (train, valid) if d is not None and d.n_samples]
        if any(d.relevance is None for d in parts):
            raise DataContractError("LinearRanker.fit: train (and valid) need relevance labels.")
        if valid is not None and valid.feature_names != train.feature_names:
            raise DataContractError("LinearRanker.fit: train and valid have different features.")
        X = np.concatenate([self._ranks(d) for d in parts])
        y = np.concatenate([_target_ranks(d) for d in parts])
        self.coef, self.feature_names = fit_ridge(X, y, self.alpha), train.feature_names
        return self

    def predict(self, data: RankingData) -> np.ndarray:
        """Scores, float64 (n_samples,), aligned with ``data``."""
        if self.coef is None:
            raise DataContractError("LinearRanker: call fit() (or load()) before predict/save.")
        if data.feature_names != self.feature_names:
            raise DataContractError(
                "LinearRanker.predict: features differ from the fitted model's: expected "
                f"{preview(self.feature_names)}, received {preview(data.feature_names)}."
            )
        return self._ranks(data).astype(np.float64) @ self.coef

    def feature_importance(self) -> dict[str, float]:
        """The absolute weight of each feature's centred rank (all ranks share one scale)."""
        if self.coef is None:
            return {}
        return dict(zip(self.feature_names, np.abs(self.coef).tolist(), strict=True))

    def save(self, path: str | Path) -> None:
        if self.coef is None:
            raise DataContractError("LinearRanker: call fit() before save.")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"alpha": self.alpha, "feature_names": list(self.feature_names), "coef": self.coef.tolist()}
        (path / META_FILE).write_text(json.dumps(meta))

    @classmethod
    def load(cls, path: str | Path) -> Self:
        file = Path(path) / META_FILE
        if not file.is_file():
            raise DataContractError(f"LinearRanker.load: expected {META_FILE} in {path}; write it with save(path).")
        meta = json.loads(file.read_text())
        ranker = cls(meta["alpha"])
        ranker.coef, ranker.feature_names = np.asarray(meta["coef"], dtype=np.float64), tuple(meta["feature_names"])
        return ranker

    def _ranks(self, data: RankingData) -> np.ndarray:
        """The centred feature ranks of ``data``'s rows: from the prepared lineage when ``data`` descends
        from it, else ranked here (the same values: a day's ranks read only that day)."""
        if self._root is not None:
            root, ranks = self._root
            rows = data.rows_in(root)
            if rows is not None:
                return ranks[rows]
        return _centred_ranks(data)


def _centred_ranks(data: RankingData) -> np.ndarray:
    """Each feature's daily percentile rank less 0.5, float32 (n_samples, n_features), NaN -> 0."""
    nothing = np.full(data.n_samples, np.nan)
    X = data.feature_values(slice(None))
    return RankedPanel.rank(X, nothing, data.dates, data.feature_names, 0, data.n_samples).X


def _target_ranks(data: RankingData) -> np.ndarray:
    """The target's daily percentile rank less 0.5 (ties averaged), float64."""
    assert data.relevance is not None
    nothing = np.zeros((data.n_samples, 0), dtype=np.float32)
    return RankedPanel.rank(nothing, data.relevance.astype(np.float64), data.dates, (), 0, data.n_samples).y
