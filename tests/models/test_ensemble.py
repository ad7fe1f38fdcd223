"""The linear ranker and the ensemble: the protocol, the combination rule, save/load, the label check."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import pandas as pd
import pytest

from backtest.errors import ConfigError
from backtest.metrics import daily_ic
from models.base import check_label_processing, shared_files
from models.data import RankingData
from models.ensemble import EnsembleRanker, daily_percentile
from models.lambdarank import LambdaRankConfig, LambdaRankRanker
from models.linear import LinearRanker
from models.ranks import RankedPanel, fit_ridge

Factory = Callable[..., tuple[RankingData, np.ndarray]]


def _rank_ic(scores: np.ndarray, data: RankingData, label: np.ndarray) -> float:
    idx = pd.MultiIndex.from_arrays([data.dates, data.codes])
    return float(daily_ic(pd.Series(scores, idx), pd.Series(label, idx), "spearman").mean())


def _lambdarank() -> LambdaRankRanker:
    return LambdaRankRanker(LambdaRankConfig(num_boost_round=20, min_data_in_leaf=20, num_threads=1))


class Constant(LinearRanker):
    """A member whose scores are fixed per stock (its code's number), for exact combination checks."""

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Constant:
        self.feature_names = train.feature_names
        return self

    def predict(self, data: RankingData) -> np.ndarray:
        return np.array([int(c[:6]) for c in data.codes], dtype=np.float64) * self.alpha


def test_linear_ranker_is_the_ridge_of_the_baseline(make_ranking_data: Factory) -> None:
    data, label = make_ranking_data(n_days=40, n_stocks=30, n_features=5, seed=1)
    train, test = data.take(np.arange(0, 30 * 30)), data.take(np.arange(30 * 30, 40 * 30))
    model = LinearRanker(alpha=0.1)
    model.prepare(data)
    model.fit(train)
    X = RankedPanel.rank(data.X, np.full(data.n_samples, np.nan), data.dates, data.feature_names, 0, data.n_samples).X
    y = RankedPanel.rank(np.zeros((900, 0), np.float32), train.relevance.astype(float), train.dates, (), 0, 900).y
    np.testing.assert_allclose(model.coef, fit_ridge(X[:900], y, 0.1))
    np.testing.assert_allclose(model.predict(test), X[900:].astype(np.float64) @ model.coef)
    # without a prepared lineage the ranks are computed from the data itself: the same scores
    np.testing.assert_allclose(LinearRanker(0.1).fit(train).predict(test), model.predict(test), rtol=1e-6)
    assert model.coef.argmax() == 0 and _rank_ic(model.predict(test), test, label[900:]) > 0.4  # f0 is the signal


def test_rank_mean_averages_the_members_daily_percentiles(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=6, n_stocks=4, n_features=2, seed=2)
    up, down = Constant(alpha=1.0), Constant(alpha=-1.0)  # ranks 1..4 and 4..1 of the codes
    model = EnsembleRanker({"up": up, "down": down}).fit(data)
    np.testing.assert_allclose(model.predict(data), np.full(24, 0.625))  # (0.25 + 1.0) / 2 for every stock
    lopsided = EnsembleRanker({"up": Constant(alpha=1.0), "down": Constant(alpha=-1.0)})
    lopsided.weights = {"up": 0.75, "down": 0.25}
    np.testing.assert_allclose(
        lopsided.predict(data)[:4], [0.75 * r + 0.25 * (1.25 - r) for r in (0.25, 0.5, 0.75, 1.0)]
    )


def test_daily_percentile_averages_ties() -> None:
    data = RankingData(
        X=np.zeros((5, 1), np.float32),
        dates=np.array(["2024-01-02"] * 3 + ["2024-01-03"] * 2, dtype="datetime64[ns]"),
        codes=np.array(["000001.SZ", "000002.SZ", "000003.SZ", "000001.SZ", "000002.SZ"]),
        feature_names=("f0",),
    )
    np.testing.assert_allclose(daily_percentile(np.array([3.0, 1.0, 1.0, 5.0, 2.0]), data), [1.0, 0.5, 0.5, 1.0, 0.5])


def test_valid_ic_weights_follow_the_members_validation_rank_ic(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    train, valid = data.take(np.arange(0, 40 * 20)), data.take(np.arange(42 * 20, 50 * 20))
    model = EnsembleRanker({"linear": LinearRanker(), "noise": Constant(alpha=1.0)}, combine="valid_ic").fit(
        train, valid
    )
    ic = model.last_fit["valid_rank_ic"]
    assert ic["linear"] > 0.3  # f0 carries a rank IC of ~0.45
    expected = max(ic["linear"], 0) / (max(ic["linear"], 0) + max(ic["noise"], 0))
    assert model.weights["linear"] == pytest.approx(expected) and model.weights["linear"] > 0.7
    without_tail = EnsembleRanker({"linear": LinearRanker(), "noise": Constant(alpha=1.0)}, combine="valid_ic").fit(
        train
    )
    assert without_tail.weights == {"linear": 0.5, "noise": 0.5}  # no tail: equal weights


def test_an_ensemble_learns_saves_and_loads(make_ranking_data: Factory, tmp_path) -> None:
    data, label = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    train, valid, test = (data.take(np.arange(a * 20, b * 20)) for a, b in ((0, 36), (38, 44), (44, 50)))
    model = EnsembleRanker({"lambdarank": _lambdarank, "linear": partial(LinearRanker, alpha=0.1)})
    model.prepare(data.take(np.arange(0, 44 * 20)), history_end=train.dates[-1])
    scores = model.fit(train, valid).predict(test)
    assert _rank_ic(scores, test, label[44 * 20 :]) > 0.3
    assert set(model.last_fit["members"]) == {"lambdarank", "linear"} and model.params["linear.alpha"] == 0.1
    assert max(model.feature_importance(), key=model.feature_importance().get) == "f0"
    model.save(tmp_path / "ens")
    again = EnsembleRanker.load(tmp_path / "ens")
    np.testing.assert_allclose(again.predict(test), scores)


def test_an_ensemble_shares_the_preparation_of_the_members_that_have_one(make_ranking_data: Factory, tmp_path) -> None:
    """Only LambdaRank's bins are shared (the linear ranker has nothing to share); an ensemble prepared
    from the handle, as a Dask worker is, scores exactly as the one that binned."""
    data, _ = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    train, valid, test = (data.take(np.arange(a * 20, b * 20)) for a, b in ((0, 36), (38, 44), (44, 50)))
    members = {"lambdarank": _lambdarank, "linear": partial(LinearRanker, alpha=0.1)}
    binned, read = EnsembleRanker(members), EnsembleRanker(members)
    binned.prepare(data, history_end=train.dates[-1])
    handle = binned.share_prepared(tmp_path)
    assert list(handle) == ["lambdarank"] and len(shared_files(handle)) == 1
    assert EnsembleRanker({"linear": LinearRanker}).share_prepared(tmp_path) is None
    read.prepare(data, history_end=train.dates[-1], shared=handle)
    np.testing.assert_array_equal(read.fit(train, valid).predict(test), binned.fit(train, valid).predict(test))


def test_an_ensemble_accepts_only_the_labels_all_its_members_accept() -> None:
    with_booster = EnsembleRanker({"lambdarank": _lambdarank, "linear": LinearRanker})
    check_label_processing(with_booster, "bins")
    with pytest.raises(ConfigError, match="EnsembleRanker cannot learn from label.processing=raw"):
        check_label_processing(with_booster, "raw")
    check_label_processing(EnsembleRanker({"linear": LinearRanker}), "raw")
    assert EnsembleRanker({"a": _lambdarank}).stateful is False
    warm = EnsembleRanker({"a": partial(LambdaRankRanker, LambdaRankConfig(warm_start=True))})
    assert warm.stateful is True  # a warm-started member orders the folds
    with pytest.raises(ConfigError, match="model.combine"):
        EnsembleRanker({"a": LinearRanker}, combine="vote")
