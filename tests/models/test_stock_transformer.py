"""StockTransformer network, ranking losses and the StockTransformerRanker (CPU; GPU tests marked)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from backtest.errors import ConfigError, DataContractError
from backtest.labels import cross_sectional_target
from backtest.metrics import daily_ic, daily_ndcg
from models import stock_transformer
from models.data import RankingData
from models.ranking_losses import listmle_loss, listnet_loss, ranknet_loss, regression_loss
from models.stock_transformer import (
    EncoderLayer,
    SelfAttention,
    StockTransformer,
    StockTransformerConfig,
    attention,
)
from models.transformer_ranker import StockTransformerRanker, TransformerTrainingConfig
from models.windows import feature_tensor

Factory = Callable[..., tuple[RankingData, np.ndarray]]

TINY = StockTransformerConfig(
    n_features=3,
    window=6,
    d_model=16,
    n_heads=2,
    n_layers=1,
    scales=(2, 6),
    cross_heads=2,
    n_experts=3,
    experts_per_stock=2,
    dropout=0.0,
)
FAST = TransformerTrainingConfig(max_epochs=3, days_per_step=4, num_threads=1, learning_rate=3e-3, device="cpu")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def network(cfg: StockTransformerConfig = TINY, seed: int = 0) -> StockTransformer:
    torch.manual_seed(seed)
    return StockTransformer(cfg).eval()


def inputs(days: int = 3, stocks: int = 7, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(days, stocks, TINY.window, TINY.n_features, generator=g)
    mask = torch.ones(days, stocks, dtype=torch.bool)
    mask[0, 5:] = False
    mask[2, 0] = False
    return x, mask


# ---------------------------------------------------------------------------- the network


def test_shapes_and_masked_scores() -> None:
    x, mask = inputs()
    scores, aux = network()(x, mask)
    assert scores.shape == (3, 7) and aux.shape == ()
    assert (scores[~mask] == 0).all() and torch.isfinite(scores).all()
    assert network().temporal.encoder.layers[0].linear1.out_features == 4 * TINY.d_model


@pytest.mark.parametrize(
    "cfg", [TINY, replace(TINY, cross_stock=False), replace(TINY, moe=False), replace(TINY, linear_path=True)]
)
def test_a_masked_stock_never_changes_other_scores(cfg: StockTransformerConfig) -> None:
    net = network(cfg)
    x, mask = inputs()
    with torch.no_grad():
        before, aux_before = net(x, mask)
        garbage = x.clone()
        garbage[~mask] = torch.randn(int((~mask).sum()), cfg.window, cfg.n_features) * 1e6
        after, aux_after = net(garbage, mask)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    torch.testing.assert_close(aux_after, aux_before, rtol=0, atol=0)
    # padding is as good as absent: day 0 (stocks 5, 6 masked) scores the same without those slots
    with torch.no_grad():
        trimmed, _ = net(x[:1, :5], mask[:1, :5])
    torch.testing.assert_close(trimmed[0], before[0, :5], rtol=1e-5, atol=1e-6)


def test_linear_path_adds_a_linear_map_of_todays_row_and_starts_at_zero() -> None:
    x, mask = inputs()
    deep, wide = network(TINY), network(replace(TINY, linear_path=True))
    assert [n for n, _ in wide.named_parameters()] == [n for n, _ in deep.named_parameters()] + ["linear.weight"]
    with torch.no_grad():
        base, _ = deep(x, mask)
        torch.testing.assert_close(wide(x, mask)[0], base, rtol=0, atol=0)  # the path starts at zero
        w = torch.tensor([[0.5, -2.0, 3.0]])
        wide.linear.weight.copy_(w)
        scores, _ = wide(x, mask)
        older = x.clone()
        older[:, :, :-1] += 1.0  # the earlier days of the window move the deep part only
        moved, _ = wide(older, mask)
    expected = base + (x[:, :, -1, :] @ w[0]).masked_fill(~mask, 0.0)
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-6)
    assert (scores[~mask] == 0).all()
    torch.testing.assert_close(moved - deep(older, mask)[0].detach(), expected - base, rtol=1e-5, atol=1e-5)


def test_cross_stock_switch_controls_interaction() -> None:
    x, mask = inputs()
    x2 = x.clone()
    x2[1, 3] += 5.0  # change one real stock
    for cross, interacts in ((True, True), (False, False)):
        net = network(replace(TINY, cross_stock=cross))
        with torch.no_grad():
            a, _ = net(x, mask)
            b, _ = net(x2, mask)
        others = torch.ones(7, dtype=torch.bool)
        others[3] = False
        changed = not torch.equal(a[1, others], b[1, others])
        assert changed == interacts
        assert torch.equal(a[0], b[0])  # other days are never affected


def test_permutation_equivariance_across_the_stocks_of_a_day() -> None:
    net = network()
    x, mask = inputs()
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        scores, aux = net(x, mask)
        permuted, aux_p = net(x[:, perm], mask[:, perm])
    torch.testing.assert_close(permuted, scores[:, perm], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(aux_p, aux, rtol=1e-5, atol=1e-6)


def test_chunked_temporal_attention_equals_one_call() -> None:
    x, mask = inputs()
    whole = network(TINY)
    chunked = network(replace(TINY, max_attention_batch=5))  # 21 sequences -> chunks of 4
    with torch.no_grad():
        torch.testing.assert_close(chunked(x, mask)[0], whole(x, mask)[0], rtol=1e-6, atol=1e-6)


def test_explicit_attention_equals_the_fused_kernel_call() -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(5, 2, 7, 8, generator=g) for _ in range(3))
    keys = torch.rand(5, 7, generator=g) > 0.3
    keys[:, 0] = True  # every query keeps a key
    for mask in (None, keys[:, None, None, :]):
        fused = attention(q, k, v, mask, 0.0, explicit=False)
        torch.testing.assert_close(attention(q, k, v, mask, 0.0, explicit=True), fused, rtol=1e-5, atol=1e-6)
    # a masked key has no weight: changing it changes nothing
    k2, v2 = k.clone(), v.clone()
    k2[~keys[:, None, :, None].expand_as(k)] = 50.0
    v2[~keys[:, None, :, None].expand_as(v)] = -50.0
    torch.testing.assert_close(
        attention(q, k2, v2, keys[:, None, None, :], 0.0, explicit=True),
        attention(q, k, v, keys[:, None, None, :], 0.0, explicit=True),
    )
    assert attention(q, k, v, None, 0.0).shape == q.shape  # CPU: the SDPA call


def test_attention_layers_match_torch_multihead_attention_and_encoder_layer() -> None:
    d, heads = 16, 2
    torch.manual_seed(0)
    ours = SelfAttention(d, heads, dropout=0.0)
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    x = torch.randn(4, 9, d)
    keys = torch.ones(4, 9, dtype=torch.bool)
    keys[1, 5:] = False
    for net in (ours, theirs):
        net.train()
    torch.testing.assert_close(
        ours(x, keys), theirs(x, x, x, key_padding_mask=~keys, need_weights=False)[0], rtol=1e-5, atol=1e-6
    )
    torch.manual_seed(0)
    layer = EncoderLayer(d, heads, 4 * d, dropout=0.0)
    torch.manual_seed(0)
    reference = torch.nn.TransformerEncoderLayer(
        d, heads, dim_feedforward=4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    assert layer.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(layer.state_dict().values(), reference.state_dict().values()))
    torch.testing.assert_close(layer.train()(x), reference.train()(x), rtol=1e-5, atol=1e-6)


def test_moe_balancing_loss_is_one_for_uniform_routing_and_zero_without_moe() -> None:
    net = network()
    with torch.no_grad():
        net.head.gate.weight.zero_()  # uniform probabilities: f = (1, 0, 0) by tie order, P = 1/3 each
        _, aux = net(*inputs())
    assert aux.item() == pytest.approx(1.0, abs=1e-6)
    single = network(replace(TINY, moe=False))
    assert single.head.gate is None
    assert single(*inputs())[1].item() == 0.0


def test_config_errors_say_what_to_fix() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        StockTransformerConfig(n_features=3, d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="scales=.*window=6"):
        StockTransformerConfig(n_features=3, window=6, scales=(5, 10))
    with pytest.raises(ConfigError, match="n_features must be >= 1"):
        StockTransformer(replace(TINY, n_features=0))
    with pytest.raises(ConfigError, match="loss='listwise'"):
        TransformerTrainingConfig(loss="listwise")


# ---------------------------------------------------------------------------- losses (exact values)


def test_listnet_exact_and_masked() -> None:
    scores = torch.tensor([[0.0, 0.0, 100.0]])
    rel = torch.tensor([[1, 0, 9]])
    mask = torch.tensor([[True, True, False]])
    # target softmax(1, 0), prediction (1/2, 1/2): cross-entropy = log 2 whatever the target
    assert listnet_loss(scores, rel, mask).item() == pytest.approx(math.log(2), abs=1e-6)
    scores2 = torch.tensor([[1.0, 0.0, -3.0]])
    p = 1 / (1 + math.exp(-1.0))  # softmax(1, 0)[0], both for target and prediction
    expect = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert listnet_loss(scores2, rel, mask).item() == pytest.approx(expect, abs=1e-6)


def test_listmle_exact() -> None:
    scores = torch.tensor([[2.0, 0.5, 7.0]])
    rel = torch.tensor([[1, 0, 3]])
    mask = torch.tensor([[True, True, False]])
    expect = (math.log(math.exp(2.0) + math.exp(0.5)) - 2.0 + 0.0) / 2  # order (0, 1); per real stock
    assert listmle_loss(scores, rel, mask).item() == pytest.approx(expect, abs=1e-6)


def test_ranknet_exact_and_empty_days_add_nothing() -> None:
    scores = torch.tensor([[1.0, 0.0, 0.0], [5.0, 1.0, 2.0]])
    rel = torch.tensor([[1, 0, 0], [2, 1, 0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert ranknet_loss(scores, rel, mask).item() == pytest.approx(math.log1p(math.exp(-1.0)), abs=1e-6)
    assert listnet_loss(scores, rel, mask).item() == pytest.approx(
        listnet_loss(scores[:1], rel[:1], mask[:1]).item(), abs=1e-7
    )


def test_listnet_standardises_a_real_valued_target_per_day() -> None:
    scores = torch.tensor([[0.3, -1.0, 2.0, 0.0], [1.0, 0.5, 0.0, 9.0]])
    returns = torch.tensor([[0.012, -0.004, 0.030, 0.001], [-0.02, 0.01, 0.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    loss = listnet_loss(scores, returns, mask, standardize=True)
    # the scale of the day's returns does not matter, the z-score does
    assert listnet_loss(scores, 50 * returns, mask, standardize=True).item() == pytest.approx(loss.item(), abs=1e-6)
    z = torch.zeros_like(scores)
    for d in range(2):
        r = returns[d][mask[d]]
        z[d, : len(r)] = ((r - r.mean()) / r.std(unbiased=False)).float()
    assert listnet_loss(scores, z, mask).item() == pytest.approx(loss.item(), abs=1e-5)
    # unstandardised, 1% returns make an almost flat target: the loss is that of a uniform target
    flat = -torch.log_softmax(scores[:1], dim=1).mean()
    assert listnet_loss(scores[:1], returns[:1], mask[:1]).item() == pytest.approx(flat.item(), abs=2e-2)
    assert abs(loss.item() - flat.item()) > 0.1


def test_listmle_and_ranknet_read_only_the_order_of_a_real_valued_target() -> None:
    scores = torch.tensor([[2.0, 0.5, -1.0, 7.0]])
    returns = torch.tensor([[0.004, 0.001, -0.003, 0.02]])
    mask = torch.tensor([[True, True, True, False]])
    levels = torch.tensor([[2, 1, 0, 3]])
    assert listmle_loss(scores, returns, mask).item() == pytest.approx(listmle_loss(scores, levels, mask).item())
    assert ranknet_loss(scores, returns, mask).item() == pytest.approx(ranknet_loss(scores, levels, mask).item())


def test_regression_loss_is_the_day_centred_fit_to_the_target_z_score() -> None:
    rel = torch.tensor([[3, 1, 0, 2], [0, 2, 1, 9]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    z = torch.zeros(2, 4)
    for d in range(2):
        r = rel[d][mask[d]].float()
        z[d, : len(r)] = (r - r.mean()) / r.std(unbiased=False)
    assert regression_loss(z, rel, mask).item() == pytest.approx(0.0, abs=1e-7)  # the target itself
    shifted = z + torch.tensor([[5.0], [-2.0]])  # a constant per day is not a ranking: no cost
    assert regression_loss(shifted, rel, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert regression_loss(torch.zeros(2, 4), rel, mask).item() == pytest.approx(1.0, abs=1e-6)  # var of z
    reverse = regression_loss(-z, rel, mask).item()  # the reverse order: (2z)^2 = 4 on average
    assert reverse == pytest.approx(4.0, abs=1e-5)
    padded = regression_loss(z.masked_fill(~mask, 100.0), rel, mask)  # a masked stock's score never counts
    assert padded.item() == pytest.approx(0.0, abs=1e-6)
    # the whole list counts alike: moving the bottom stock costs what moving the top one does
    bottom, top = z.clone(), z.clone()
    bottom[0, 2] += 0.5
    top[0, 0] += 0.5
    assert regression_loss(bottom, rel, mask).item() == pytest.approx(regression_loss(top, rel, mask).item())


# ---------------------------------------------------------------------------- the ranker


def ranker(seed: int = 0, **training: object) -> StockTransformerRanker:
    arch = replace(TINY, n_features=0, dropout=0.1)
    return StockTransformerRanker(arch, replace(FAST, seed=seed, **training))


def test_same_seed_gives_identical_scores_on_cpu(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=24, n_stocks=10, n_features=3, seed=3)
    train, valid = data.take(np.arange(0, 16 * 10)), data.take(np.arange(18 * 10, 24 * 10))
    a = ranker(seed=5).fit(train, valid).predict(valid)
    b = ranker(seed=5).fit(train, valid).predict(valid)
    c = ranker(seed=6).fit(train, valid).predict(valid)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert torch.are_deterministic_algorithms_enabled() is False  # the fit restored the global setting


def test_overfits_a_tiny_batch(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=4, n_stocks=12, n_features=3, signal=0.0, seed=4)
    model = ranker(max_epochs=150, learning_rate=1e-2, days_per_step=4, warmup_fraction=0.0)
    model.architecture = replace(model.architecture, dropout=0.0)
    model.fit(data)
    losses = [h["train_loss"] for h in model.history]
    assert losses[-1] < 0.8 * losses[0]
    idx = pd.MultiIndex.from_arrays([data.dates, data.codes])
    ndcg = daily_ndcg(pd.Series(model.predict(data), idx), pd.Series(data.relevance, idx), k=5, gain="linear")
    assert ndcg.mean() > 0.9


def test_learns_a_planted_signal_with_early_stopping(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    train, valid = data.take(np.arange(0, 40 * 20)), data.take(np.arange(42 * 20, 50 * 20))
    model = ranker(max_epochs=6, patience=2).fit(train, valid)
    assert model.last_fit["best_score"] > 0.3  # f0 carries a rank IC of ~0.45 with the bins
    assert len(model.history) <= 6 and "valid_rank_ic" in model.history[0]


def test_rank_inputs_are_each_features_centred_rank_within_its_day(make_ranking_data: Factory) -> None:
    wide = np.array(
        [
            [[3.0, np.nan], [1.0, 5.0], [2.0, 5.0], [np.nan, np.nan]],
            [[0.5, 1.0], [np.inf, 2.0], [-1.0, 3.0], [0.0, 4.0]],
        ],
        dtype=np.float32,
    )  # 2 days x 4 stocks x 2 features; stock 3 is absent on day 0
    ranks = ranker(inputs="rank")._network_inputs(wide).numpy()
    # day 0: feature 0 ranks 3 > 2 > 1 among 3 stocks; feature 1 ties its 2 values; a missing value sits at 0
    np.testing.assert_allclose(ranks[0, :, 0], [1 - 0.5, 1 / 3 - 0.5, 2 / 3 - 0.5, 0.0], atol=1e-7)
    np.testing.assert_allclose(ranks[0, :, 1], [0.0, 0.75 - 0.5, 0.75 - 0.5, 0.0], atol=1e-7)
    np.testing.assert_allclose(ranks[1, :, 0], [0.75 - 0.5, 1 - 0.5, 0.25 - 0.5, 0.5 - 0.5], atol=1e-7)
    as_is = ranker()._network_inputs(wide).numpy()  # the default: the values, a missing one at 0
    np.testing.assert_array_equal(as_is[0, :, 0], [3.0, 1.0, 2.0, 0.0])
    data, _ = make_ranking_data(n_days=30, n_stocks=12, n_features=3, signal=1.0, seed=2)
    fitted = ranker(inputs="rank", max_epochs=2).fit(data)
    assert np.isfinite(fitted.predict(data)).all()
    with pytest.raises(ConfigError, match="inputs='zscore' must be one of"):
        TransformerTrainingConfig(inputs="zscore")


def test_history_records_the_curves_of_the_fit(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    train, valid = data.take(np.arange(0, 40 * 20)), data.take(np.arange(42 * 20, 50 * 20))
    model = ranker(max_epochs=4, patience=10, grad_clip=0.0, early_stopping_metric="ndcg", ndcg_depth=4)
    model.fit(train, valid)
    first, last = model.history[0], model.history[-1]
    assert {"train_loss", "grad_norm", "learning_rate", "train_rank_ic", "valid_ndcg", "valid_rank_ic"} <= set(first)
    assert all(h["grad_norm"] > 0 for h in model.history)  # measured even with clipping off
    assert last["learning_rate"] < first["learning_rate"]  # the cosine decay
    # f0 carries a rank IC of ~0.45 with the bins: the training days' rank IC rises towards it
    assert last["train_rank_ic"] > 0.3 and last["train_rank_ic"] > first["train_rank_ic"] - 0.05


@pytest.mark.parametrize("processing", ["raw", "rank"])
def test_learns_a_planted_signal_from_a_real_valued_label(make_ranking_data: Factory, processing: str) -> None:
    data, label = make_ranking_data(n_days=50, n_stocks=20, n_features=3, signal=1.0, seed=5)
    target = 0.01 * label if processing == "raw" else cross_sectional_target(label.reshape(50, 20), "rank").ravel()
    data = data.with_relevance(target)  # raw: returns of ~1%, as in the market
    train, valid = data.take(np.arange(0, 40 * 20)), data.take(np.arange(42 * 20, 50 * 20))
    model = ranker(max_epochs=6, patience=2, early_stopping_metric="ndcg", ndcg_depth=4).fit(train, valid)
    assert "valid_ndcg" in model.history[0] and model.ndcg_depth == 4
    idx = pd.MultiIndex.from_arrays([valid.dates, valid.codes])
    ic = daily_ic(pd.Series(model.predict(valid), idx), pd.Series(label[42 * 20 :], idx), "spearman")
    assert ic.mean() > 0.3  # f0 carries a rank IC of ~0.45 with the label


def test_adopt_state_takes_the_fitted_network(make_ranking_data: Factory, tmp_path: Path) -> None:
    data, _ = make_ranking_data(n_days=14, n_stocks=8, n_features=3, seed=8)
    model = ranker(max_epochs=1).fit(data)
    model.save(tmp_path / "st")
    fresh = ranker()
    fresh.prepare(data)
    fresh.adopt_state(StockTransformerRanker.load(tmp_path / "st"))
    np.testing.assert_array_equal(fresh.predict(data), model.predict(data))


def test_an_ndcg_metric_with_a_depth_is_named_by_ndcg_depth() -> None:
    with pytest.raises(ConfigError, match="ndcg@5.*early_stopping_metric=ndcg"):
        TransformerTrainingConfig(early_stopping_metric="ndcg@5")
    with pytest.raises(ConfigError, match="ndcg_depth=0"):
        TransformerTrainingConfig(ndcg_depth=0)


def test_windows_come_from_the_backtest_tensor(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=30, n_stocks=8, n_features=3, seed=6)
    idx = pd.MultiIndex.from_arrays([pd.DatetimeIndex(data.dates), data.codes], names=["date", "code"])
    frame = pd.DataFrame(data.X, index=idx, columns=list(data.feature_names))
    frame.iloc[::7, 1] = np.nan  # missing values stay out of torch
    full = RankingData.from_frame(frame, data.relevance, tensor=feature_tensor(frame))
    model = ranker().fit(full.take(np.arange(0, 20 * 8)))
    test = full.take(np.arange(20 * 8, 30 * 8))
    scores = model.predict(test)
    assert np.isfinite(scores).all()
    one_day = full.take(np.arange(25 * 8, 26 * 8))  # the same day alone still sees its 6-day history
    np.testing.assert_allclose(model.predict(one_day), scores[5 * 8 : 6 * 8], rtol=1e-5, atol=1e-6)
    no_history = one_day.take(np.arange(8))
    no_history = RankingData(no_history.X, no_history.dates, no_history.codes, no_history.feature_names)
    assert not np.allclose(model.predict(no_history), scores[5 * 8 : 6 * 8])


def test_prepared_lineage_gives_history_without_a_tensor(make_ranking_data: Factory) -> None:
    """The engine's shape: all eligible rows -> labelled samples -> folds, no wide tensor anywhere."""
    everything, _ = make_ranking_data(n_days=30, n_stocks=8, n_features=3, seed=10)
    labelled = np.ones(everything.n_samples, dtype=bool)
    labelled[-3 * 8 :] = False
    samples = everything.take(np.flatnonzero(labelled)).with_relevance(everything.relevance[labelled])
    model = ranker()
    model.prepare(samples)
    model.fit(samples.take(np.arange(0, 20 * 8)))
    last_days = everything.take(np.arange(24 * 8, 30 * 8))
    scores = model.predict(last_days)
    one_day = everything.take(np.arange(29 * 8, 30 * 8))  # an unlabelled day still sees its 6-day history
    np.testing.assert_allclose(model.predict(one_day), scores[-8:], rtol=1e-5, atol=1e-6)
    orphan = RankingData(one_day.X, one_day.dates, one_day.codes, one_day.feature_names)
    assert not np.allclose(model.predict(orphan), scores[-8:])


def test_ragged_days_are_padded_and_masked(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=12, n_stocks=9, n_features=3, seed=7)
    keep = np.ones(data.n_samples, dtype=bool)
    keep[[3, 4, 20, 50, 51, 52]] = False  # some days lose stocks
    ragged = data.take(np.flatnonzero(keep))
    model = ranker(max_epochs=1).fit(ragged)
    scores = model.predict(ragged)
    assert scores.shape == (ragged.n_samples,) and np.isfinite(scores).all()


def test_save_load_round_trip_gives_identical_predictions(make_ranking_data: Factory, tmp_path: Path) -> None:
    data, _ = make_ranking_data(n_days=14, n_stocks=8, n_features=3, seed=8)
    model = ranker(max_epochs=2).fit(data)
    model.save(tmp_path / "st")
    again = StockTransformerRanker.load(tmp_path / "st")
    np.testing.assert_array_equal(again.predict(data), model.predict(data))
    assert again.params == model.params and again.feature_importance() == {}
    with pytest.raises(DataContractError, match="expected model.pt"):
        StockTransformerRanker.load(tmp_path / "nothing")


def test_user_mistakes_get_clear_errors(make_ranking_data: Factory) -> None:
    data, _ = make_ranking_data(n_days=8, n_stocks=6, n_features=3)
    with pytest.raises(DataContractError, match="need relevance"):
        ranker().fit(data.with_relevance(None))
    with pytest.raises(DataContractError, match="call fit"):
        ranker().predict(data)


# ---------------------------------------------------------------------------- GPU (skipped without CUDA)


@pytest.mark.gpu
@cuda
def test_gpu_bf16_forward_agrees_with_cpu_fp32() -> None:
    cfg = replace(TINY, n_features=8, window=30, d_model=64, n_heads=4, cross_heads=4, scales=(5, 10, 30))
    net = network(cfg)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 300, 30, 8, generator=g)
    mask = torch.ones(4, 300, dtype=torch.bool)
    mask[1, 250:] = False
    with torch.no_grad():
        cpu, _ = net(x, mask)
        net.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gpu, _ = net(x.cuda(), mask.cuda())
    gpu = gpu.float().cpu()
    assert (gpu[~mask] == 0).all()
    for d in range(4):
        m = mask[d]
        r = np.corrcoef(cpu[d, m].numpy(), gpu[d, m].numpy())[0, 1]
        assert r > 0.99


@pytest.mark.gpu
@cuda
def test_gpu_explicit_temporal_attention_equals_the_fused_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = replace(TINY, n_features=8, window=30, d_model=64, n_heads=4, cross_heads=4, scales=(5, 10, 30))
    net = network(cfg).cuda()
    x = torch.randn(4, 300, 30, 8, device="cuda")
    mask = torch.ones(4, 300, dtype=torch.bool, device="cuda")
    mask[1, 250:] = False
    with torch.no_grad():
        explicit, _ = net(x, mask)
        monkeypatch.setattr(stock_transformer, "EXPLICIT_ATTENTION_MAX_LENGTH", 0)
        fused, _ = net(x, mask)
    torch.testing.assert_close(explicit, fused, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@cuda
def test_gpu_attention_batches_above_the_kernel_limit_are_chunked() -> None:
    cfg = replace(TINY, n_features=4, window=30, d_model=32, n_heads=2, cross_heads=2, scales=(5, 30))
    net = network(cfg).cuda().train()
    x = torch.randn(230, 300, 30, 4, device="cuda")  # 69,000 sequences > 65,535
    mask = torch.ones(230, 300, dtype=torch.bool, device="cuda")
    torch.backends.cuda.enable_cudnn_sdp(False)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        scores, aux = net(x, mask)
    (scores.float().square().mean() + aux).backward()
    assert torch.isfinite(scores).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


@pytest.mark.gpu
@cuda
def test_gpu_ranker_fits_with_auto_device_and_compile(make_ranking_data: Factory, tmp_path: Path) -> None:
    data, _ = make_ranking_data(n_days=60, n_stocks=50, n_features=3, signal=1.0, seed=9)
    train, valid = data.take(np.arange(0, 45 * 50)), data.take(np.arange(48 * 50, 60 * 50))
    for compile_mode in (None, "default"):
        training = replace(FAST, device="auto", max_epochs=4, days_per_step=8, compile=compile_mode)
        model = StockTransformerRanker(replace(TINY, n_features=0), training)
        model.fit(train, valid)
        assert model.last_fit["device"].startswith("cuda") and model.last_fit["precision"] == "bf16"
        assert model.last_fit["best_score"] > 0.3
        if compile_mode is None:  # eager vs eager: compiled bf16 kernels round differently (MoE top-k flips)
            model.save(tmp_path / "gpu")
            again = StockTransformerRanker.load(tmp_path / "gpu")
            np.testing.assert_array_equal(again.predict(valid), model.predict(valid))
