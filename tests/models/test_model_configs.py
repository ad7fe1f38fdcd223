"""conf/model/*.yaml compose and instantiate into rankers whose params match the YAML."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from models.base import Ranker
from models.lambdarank import WHOLE_LIST, LambdaRankRanker
from models.transformer_ranker import StockTransformerRanker


@pytest.mark.parametrize(
    "name, cls",
    [
        ("lambdarank", LambdaRankRanker),
        ("stock_transformer", StockTransformerRanker),
        ("stock_transformer_today", StockTransformerRanker),
    ],
)
def test_model_group_instantiates(name: str, cls: type, compose_config) -> None:
    cfg = compose_config([f"model={name}", "seed=7"])
    ranker = instantiate(cfg.model, _convert_="all")
    assert isinstance(ranker, cls) and isinstance(ranker, Ranker)
    assert ranker.params["seed"] == 7
    if name == "lambdarank":
        assert ranker.params["n_bins"] == cfg.label.n_bins
        assert ranker.config.lgb_params()["lambdarank_truncation_level"] == WHOLE_LIST  # every pair of a day
    elif name == "stock_transformer_today":  # the default network on day t alone
        assert (ranker.architecture.window, ranker.architecture.scales) == (1, (1,))
        assert ranker.architecture.cross_stock and ranker.architecture.moe
    else:
        assert (ranker.architecture.window, ranker.architecture.scales) == (30, (5, 10, 30))
        assert ranker.architecture.ff_dim == 256
        assert ranker.architecture.experts_per_stock == 2
    assert (ranker.ndcg_depth, ranker.ndcg_gain) == (cfg.portfolio.top_k, "linear")


@pytest.mark.parametrize("name", ["lambdarank", "stock_transformer"])
def test_the_ndcg_depth_is_the_number_of_stocks_bought(name: str, compose_config) -> None:
    cfg = compose_config([f"model={name}", "portfolio.top_k=7"])
    ranker = instantiate(cfg.model, _convert_="all")
    assert ranker.ndcg_depth == 7
    if name == "lambdarank":
        assert ranker.config.lgb_params()["eval_at"] == [7]
        truncated = compose_config(["model=lambdarank", "portfolio.top_k=7", "model.config.truncation_level=null"])
        lgb = instantiate(truncated.model, _convert_="all").config.lgb_params()
        assert lgb["lambdarank_truncation_level"] == 10  # null: the stocks bought + 3


def test_the_ensemble_with_the_transformer_holds_the_one_day_network(compose_config) -> None:
    """model=ensemble_transformer: LambdaRank, the linear ranker and the StockTransformer on day t alone
    (stock_transformer_today), each member a factory of fresh rankers."""
    members = compose_config(["model=ensemble_transformer"]).model.members
    assert list(members) == ["lambdarank", "linear", "stock_transformer"]
    assert members.stock_transformer._target_ == "models.transformer_ranker.StockTransformerRanker"
    assert (members.stock_transformer.architecture.window, list(members.stock_transformer.architecture.scales)) == (
        1,
        [1],
    )
    assert all(member._partial_ for member in members.values())
