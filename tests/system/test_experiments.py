"""Every configured experiment (conf/experiment/*.yaml) runs end to end on a tiny market.

The experiments are found by glob, so a new one is covered without touching this file. Each keeps its
own schedule, model and portfolio; only the market is shrunk (and the caches sent to a temporary folder).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from backtest import cli
from backtest.cli.compose import CONF_DIR
from tests.system.tiny_market import TINY_MARKET

EXPERIMENTS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
#: an experiment's own settings that the tiny market cannot serve (its 730-day window needs three years)
FITTED = {"weekly": ["backtest.train_window=120"]}


def test_the_experiments_are_found() -> None:
    assert {"smoke", "leak_demo"} <= set(EXPERIMENTS)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_end_to_end_with_its_guard_tags(experiment: str, tmp_path: Path, compose_config) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    cfg = compose_config(
        [
            f"experiment={experiment}",
            *TINY_MARKET,
            *FITTED.get(experiment, []),
            f"tracking.uri={uri}",
            f"engine.cache_dir={tmp_path / 'cache'}",
        ]
    )
    if "num_threads" in cfg.model.get("config", {}):
        cfg.model.config.num_threads = 1  # LightGBM's default, every core, thrashes on a shared machine
    out = cli.run(cfg)
    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    for key in ("sharpe", "rank_ic_mean"):
        assert math.isfinite(run.data.metrics[key]), (key, run.data.metrics.get(key))
    # The tags follow from what the experiment declares: the purge switched off disables the leak guard,
    # no audit cutoffs disable the feature audit, and a run is comparable only when both guards passed.
    tags = run.data.tags
    leak_guard = "passed" if cfg.backtest.purge else "disabled"
    feature_audit = "passed" if cfg.engine.audit_cutoffs > 0 else "disabled"
    assert tags["leak_demo"] == str(cfg.backtest.leak_demo).lower()
    assert tags["leak_guard"] == leak_guard and tags["feature_audit"] == feature_audit
    assert tags["comparable"] == str(leak_guard == feature_audit == "passed").lower()
    if experiment == "leak_demo":
        assert tags["leak_demo"] == "true" and tags["leak_guard"] == "disabled" and tags["comparable"] == "false"
