"""The CPU-sized StockTransformer learns on the smoke market: its out-of-sample rank IC is positive beyond
two standard errors, through the engine as a run computes it (the default loss, a regression on the
day's z-scored target; the CPU-sized network of the studies' CI scale)."""

from __future__ import annotations

import pytest

from backtest.cli.compose import build, build_data
from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import EngineOptions, plan_backtest, run_backtest

#: the smoke market (80 stocks, 50 members) with a year and a half of test days (monthly retraining)
#: and a network of the CPU's size: one layer of width 32 over 10-day windows, 6 epochs at most
CPU_SIZED = [
    "experiment=smoke",
    "model=stock_transformer",
    "backtest.test_start=2024-07-01",
    "model.architecture.d_model=32",
    "model.architecture.n_layers=1",
    "model.architecture.n_heads=2",
    "model.architecture.cross_heads=2",
    "model.architecture.window=10",
    "model.architecture.scales=[5,10]",
    "model.training.max_epochs=6",
    "model.training.device=cpu",
    "model.training.days_per_step=32",
]


@pytest.mark.slow
def test_the_cpu_sized_transformer_learns_on_the_smoke_market(compose_config) -> None:
    cfg = compose_config(CPU_SIZED)
    panel = build_data(cfg).panel
    plan = plan_backtest(panel, label=build(cfg.label), schedule=build(cfg.backtest), portfolio=build(cfg.portfolio))
    result = run_backtest(
        plan,
        features=build(cfg.features),
        ranker_factory=build(cfg.model, _partial_=True),
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(audit_cutoffs=0),
        seed=int(cfg.seed),
    )
    m = result.metrics
    linear = m["baseline_linear_rank_ic_mean"]
    print(f"rank IC {m['rank_ic_mean']:+.4f} (s.e. {m['rank_ic_se']:.4f}), linear {linear:+.4f}")
    assert m["n_folds"] >= 15
    assert m["rank_ic_mean"] > 2 * m["rank_ic_se"], (m["rank_ic_mean"], m["rank_ic_se"])
