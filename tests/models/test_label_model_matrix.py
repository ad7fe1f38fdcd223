"""Every label option (conf/label) with every model (conf/model), one fold on the tiny market: each pair
either gives a valid run or is refused with a ConfigError whose fix line names the config that works.

Run with ``-s`` to see the label x model table.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from backtest.cli.compose import CONF_DIR
from backtest.data.fingerprint import panel_fingerprint
from backtest.engine import EngineOptions, plan_backtest, run_backtest
from backtest.errors import ConfigError
from backtest.features.sets import FeatureSetSpec
from backtest.labels import PROCESSINGS
from backtest.metrics import daily_ic
from backtest.portfolio import PortfolioSpec
from backtest.splits import RollingSchedule
from models.base import check_label_processing, label_configs, model_configs, model_families

CONF = Path(CONF_DIR)
LABELS = sorted(p.stem for p in (CONF / "label").glob("*.yaml"))
MODEL_CONFIGS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
#: The model families (the fix lines' vocabulary); the other conf/model files are ablations of one of them.
MODELS = sorted(model_families())

#: One fold: the test period (2022-11-01..2022-12-20, ~35 trading days) is shorter than retrain_every.
ONE_FOLD = RollingSchedule(
    retrain_every=40, train_window=100, valid_days=10, embargo=2, test_start="2022-11-01", test_end="2022-12-20"
)
FEATURES = FeatureSetSpec(
    name="small", indicators=("ret_5d", "ret_20d", "vol_20d", "mf_main_net_rate", "rsi_14"), windows=(5,)
)
#: Small models: 30 trees; a 1-layer d_model-16 transformer over 10-day windows, 2 epochs.
SMALL = {
    "lambdarank": ["model.config.num_boost_round=30", "model.config.min_data_in_leaf=40", "model.config.num_threads=1"],
    "stock_transformer": [
        "model.architecture.d_model=16",
        "model.architecture.n_layers=1",
        "model.architecture.n_heads=2",
        "model.architecture.cross_heads=2",
        "model.architecture.window=10",
        "model.architecture.scales=[5,10]",
        "model.training.max_epochs=2",
        "model.training.device=cpu",
        "model.training.num_threads=1",
        "model.training.days_per_step=32",
    ],
    "linear": [],
    "ensemble": [
        "model.members.lambdarank.config.num_boost_round=30",
        "model.members.lambdarank.config.min_data_in_leaf=40",
        "model.members.lambdarank.config.num_threads=1",
    ],
}


def _run_cell(panel, cfg) -> dict[str, object]:
    spec = instantiate(cfg.label, _convert_="all")
    factory = instantiate(cfg.model, _convert_="all", _partial_=True)
    t0 = time.perf_counter()
    try:
        check_label_processing(factory(), spec.processing)  # what the CLI does when it composes the run
    except ConfigError as refusal:
        # a library user who bypasses the CLI gets the same refusal from fit
        with pytest.raises(ConfigError, match="fix: ") as from_fit:
            _backtest(panel, spec, factory)
        return {
            "status": "refused",
            "processing": spec.processing,
            "message": str(refusal),
            "fit_message": str(from_fit.value),
            "seconds": time.perf_counter() - t0,
        }
    result = _backtest(panel, spec, factory)
    ranker = factory()
    fwd = result.labels.fwd_return.reindex(result.scores.index)
    return {
        "status": "ran",
        "processing": spec.processing,
        "scores": result.scores.to_numpy(),
        "rank_ic": float(daily_ic(result.scores, fwd, "spearman").mean()),
        "headline_rank_ic": result.metrics["rank_ic_mean"],
        "n_folds": result.metrics["n_folds"],
        "ndcg": result.fold_metrics.filter(like="ndcg").iloc[0].to_dict(),
        "ndcg_depth": getattr(ranker, "ndcg_depth", None),
        "ndcg_gain": ranker.ndcg_gain,
        "seconds": time.perf_counter() - t0,
    }


def _backtest(panel, spec, factory):
    plan = plan_backtest(panel, label=spec, schedule=ONE_FOLD, portfolio=PortfolioSpec())
    return run_backtest(
        plan,
        features=FEATURES,
        ranker_factory=factory,
        data_fingerprint=panel_fingerprint(panel),
        options=EngineOptions(audit_cutoffs=0),
        seed=3,
    )


def _cell_text(cell: dict[str, object]) -> str:
    if cell["status"] == "refused":
        return "refused: " + str(cell["message"]).split("fix: ", 1)[1]
    return f"ok, rank IC {cell['rank_ic']:+.3f}, {cell['seconds']:.1f}s"


def test_every_label_option_with_every_model(tiny_panel, compose_config) -> None:
    cells = {
        (label, model): _run_cell(tiny_panel, compose_config([f"label={label}", f"model={model}", *SMALL[model]]))
        for label in LABELS
        for model in MODELS
    }
    rows = {label: f"{label} ({cells[(label, MODELS[0])]['processing']})" for label in LABELS}
    first = max(len(r) for r in [*rows.values(), "label \\ model"]) + 2
    width = {m: max(len(m), *(len(_cell_text(cells[(label, m)])) for label in LABELS)) + 2 for m in MODELS}
    lines = ["label \\ model".ljust(first) + "".join(m.ljust(width[m]) for m in MODELS)]
    lines += [
        rows[label].ljust(first) + "".join(_cell_text(cells[(label, m)]).ljust(width[m]) for m in MODELS)
        for label in LABELS
    ]
    print("\n" + "\n".join(line.rstrip() for line in lines))

    for (label, model), cell in cells.items():
        where = f"label={label} model={model}"
        if cell["status"] == "refused":
            assert "cannot learn from label.processing=" in cell["message"], where
            assert "\n  fix: label=" in cell["message"], where
            assert "fix: label=" in cell["fit_message"], where
            continue
        scores = cell["scores"]
        assert cell["n_folds"] == 1, where
        assert len(scores) and np.isfinite(scores).all(), where
        assert np.isfinite(cell["rank_ic"]) and np.isfinite(cell["headline_rank_ic"]), where
        assert all(np.isfinite(v) for v in cell["ndcg"].values()), where
        assert np.std(scores) > 0, f"{where}: constant scores"

    # The matrix the models declare: LambdaRank learns from integer levels only, the transformer from all.
    status = {key: cell["status"] for key, cell in cells.items()}
    assert status[("raw", "lambdarank")] == status[("rank", "lambdarank")] == "refused"
    assert status[("default", "lambdarank")] == status[("three_class", "lambdarank")] == "ran"
    assert all(status[(label, "stock_transformer")] == status[(label, "linear")] == "ran" for label in LABELS)
    assert "model=stock_transformer" in cells[("raw", "lambdarank")]["message"]
    # an ensemble accepts what all its members accept: the default one holds a LambdaRank
    assert all(status[(label, "ensemble")] == status[(label, "lambdarank")] for label in LABELS)
    assert "EnsembleRanker cannot learn" in cells[("raw", "ensemble")]["message"]


def test_the_fix_lines_name_the_config_options_of_conf(compose_config) -> None:
    """label_configs and model_configs (the fix lines' vocabulary) are read from conf/label and conf/model:
    every file, with what Hydra composes from it."""
    assert sorted(label_configs()) == LABELS
    for name, processing in label_configs().items():
        assert compose_config([f"label={name}"]).label.processing == processing, name
    assert set(label_configs().values()) == set(PROCESSINGS)  # every processing has its config option
    assert sorted(model_configs()) == MODEL_CONFIGS
    for name, target in model_configs().items():  # the ablation variants included
        assert compose_config([f"model={name}"]).model._target_ == target.replace(":", "."), name
    families = model_families()
    assert set(families) <= set(MODEL_CONFIGS)
    assert sorted(families.values()) == sorted(set(model_configs().values()))  # one family per ranker class


def test_a_new_config_file_is_in_the_fix_line_without_a_code_change(tmp_path, monkeypatch) -> None:
    import shutil

    import backtest
    from models.lambdarank import LambdaRankRanker

    for group in ("label", "model"):
        shutil.copytree(CONF / group, tmp_path / "conf" / group)
    (tmp_path / "conf" / "label" / "deciles.yaml").write_text("defaults:\n  - default\n  - _self_\n\nn_bins: 10\n")
    (tmp_path / "conf" / "model" / "lambdarank_fast.yaml").write_text(
        "defaults:\n  - lambdarank\n  - _self_\n\nconfig:\n  num_boost_round: 50\n"
    )
    monkeypatch.setattr(backtest, "PROJECT_DIR", tmp_path)
    assert label_configs()["deciles"] == "bins"
    assert model_configs()["lambdarank_fast"] == "models.lambdarank:LambdaRankRanker"
    assert "lambdarank_fast" not in model_families()  # a variant: the fix line names its family
    with pytest.raises(ConfigError) as refusal:
        check_label_processing(LambdaRankRanker, "raw")
    assert str(refusal.value).endswith(
        "fix: label=deciles (bins) or label=default (bins) or label=three_class, or model=linear or "
        "model=stock_transformer"
    )
    monkeypatch.setattr(backtest, "PROJECT_DIR", tmp_path / "elsewhere")  # no conf/: the fix names the setting
    with pytest.raises(ConfigError, match="fix: label.processing=bins or label.processing=three_class$"):
        check_label_processing(LambdaRankRanker, "raw")


def test_three_class_gives_lambdarank_three_gains(compose_config) -> None:
    ranker = instantiate(compose_config(["label=three_class", "model=lambdarank"]).model, _convert_="all")
    assert ranker.config.n_bins == 3 and ranker.config.lgb_params()["label_gain"] == [0.0, 1.0, 2.0]
    default = instantiate(compose_config(["label=default", "model=lambdarank"]).model, _convert_="all")
    assert default.config.lgb_params()["label_gain"] == [float(i) for i in range(10)]
