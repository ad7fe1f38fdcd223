"""Each part of the main job built from the composed config, and the panel loaded.

Every config group names its part's class or function in ``_target_``; :func:`build` instantiates it with
``_convert_="all"``, so library code receives plain lists and dicts, never a Hydra ``DictConfig``. The
parts are built before any data is read (:func:`build_parts`): a config mistake surfaces in a second, before
any expensive work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig, OmegaConf

from backtest import PROJECT_DIR

if TYPE_CHECKING:
    import pandas as pd

    from backtest.benchmark import SuppliedIndex
    from backtest.data.synthetic import SyntheticMarket
    from backtest.engine import EngineOptions, RankerFactory
    from backtest.features.sets import FeatureSetSpec
    from backtest.labels import LabelSpec
    from backtest.portfolio import PortfolioSpec
    from backtest.record import ReportChoice, RunIdentity
    from backtest.splits import RollingSchedule
    from backtest.tracking import TrackingConfig

#: the Hydra config folder of the project (one sub-folder per group)
CONF_DIR = str(PROJECT_DIR / "conf")

#: keys of the ``data`` group that the main job reads itself, never passed to the loader its ``_target_`` names
DATA_KEYS_OF_THE_JOB: tuple[str, ...] = ("benchmark_path",)


def build(node: DictConfig, **kwargs: Any) -> Any:
    """The object the config ``node`` describes (its ``_target_`` called with its keys), in plain types."""
    return hydra.utils.instantiate(node, _convert_="all", **kwargs)


@dataclass(frozen=True)
class Parts:
    """The main job's parts, one per config group (``model`` as a factory of fresh rankers)."""

    features: FeatureSetSpec
    label: LabelSpec
    schedule: RollingSchedule
    portfolio: PortfolioSpec
    tracking: TrackingConfig
    ranker_factory: RankerFactory
    options: EngineOptions
    reports: ReportChoice


def build_parts(cfg: DictConfig) -> Parts:
    """Build every part of ``cfg`` but the data; a model that cannot learn from the label is refused here.

    Raises
    ------
    ConfigError : a part refuses its settings (see each part), or the model cannot learn from
        ``label.processing`` (:func:`models.base.check_label_processing`).
    """
    from backtest.record import ReportChoice
    from models.base import check_label_processing

    features, label, schedule = build(cfg.features), build(cfg.label), build(cfg.backtest)
    portfolio, tracking = build(cfg.portfolio), build(cfg.tracking)
    ranker_factory = build(cfg.model, _partial_=True)
    check_label_processing(ranker_factory(), label.processing)  # also fails now on a bad model config
    return Parts(
        features=features,
        label=label,
        schedule=schedule,
        portfolio=portfolio,
        tracking=tracking,
        ranker_factory=ranker_factory,
        options=build(cfg.engine),  # the options create the cache folders
        reports=ReportChoice(
            tearsheet=tracking.tearsheet, plots=tracking.plots, drift_report=tracking.drift_report, pages=tracking.pages
        ),
    )


def build_data(cfg: DictConfig) -> Any:
    """What the ``data`` group's ``_target_`` returns (a panel, or the synthetic market), called with the
    group's keys but those of :data:`DATA_KEYS_OF_THE_JOB`, which the main job reads itself."""
    node = OmegaConf.to_container(cfg.data, resolve=True, throw_on_missing=True)
    for key in DATA_KEYS_OF_THE_JOB:
        node.pop(key, None)
    return build(node)


def load_panel(cfg: DictConfig) -> tuple[pd.DataFrame, SyntheticMarket | None]:
    """Build the panel from the ``data`` group (synthetic, parquet/csv, tushare), with the synthetic
    market behind it (None for real data)."""
    from backtest.data.synthetic import SyntheticMarket

    built = build_data(cfg)
    return (built.panel, built) if isinstance(built, SyntheticMarket) else (built, None)


def load_benchmark(cfg: DictConfig) -> SuppliedIndex | None:
    """The index series of ``data.benchmark_path`` (read and checked now, before the panel), or None: the
    index benchmark is then the float-cap-weighted index of the panel's universe (:mod:`backtest.benchmark`).

    Raises
    ------
    DataContractError : the file is missing or unreadable, or lacks a date or value column
        (:func:`backtest.data.loaders.read_index_series`).
    """
    from backtest.benchmark import SuppliedIndex

    path = cfg.data.get("benchmark_path")
    if path is None or str(path).strip() == "":
        return None
    return SuppliedIndex.read(str(path), encoding=str(cfg.data.get("encoding") or "utf-8"))


def run_identity(cfg: DictConfig, parts: Parts, data_fingerprint: str, trial: dict[str, str]) -> RunIdentity:
    """What the main job's run is called and carries: its name (the model and feature set, a sweep job's
    values, ``-LEAK-DEMO`` for a leakage demonstration), the resolved config, and the tags it opens with
    (``leak_demo``, ``config_key``; a sweep job's ``trial`` and ``trial_num``)."""
    from backtest.record import RunIdentity
    from backtest.tracking import config_key

    config, tracking = OmegaConf.to_container(cfg, resolve=True), parts.tracking
    leak_demo = bool(parts.schedule.leak_demo)
    tags = {"leak_demo": str(leak_demo).lower(), "config_key": config_key(config), **trial}
    model_name = cfg.model._target_.rsplit(".", 1)[-1]
    name = tracking.run_name or f"{model_name}-{parts.features.name}" + ("-LEAK-DEMO" if leak_demo else "")
    named = " ".join(v for v in (trial.get("trial", ""), trial.get("replicate", "")) if v)  # a replicate: its seed
    if named:  # a job of a sweep: named after the values it was given
        name = f"{name} {named}"
    return RunIdentity(
        name,
        config,
        tags,
        data_fingerprint=data_fingerprint,
        leak_demo=leak_demo,
        study=tracking.study,
        n_trials=int(tracking.n_trials or 1),
        parent_run_id=tracking.parent_run_id,
        sweep_job=bool(trial),
    )
