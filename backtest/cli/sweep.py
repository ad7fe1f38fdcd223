"""A multirun is one study: a parent run per sweep, every job a child run of it.

``python -m backtest -m KEY=A,B ...`` (or ``-m +study=NAME``): before the first job, the
:class:`SweepTracking` callback (``hydra.callbacks`` in ``conf/config.yaml``) checks every job's config as
a single run checks its own (:func:`check_sweep_jobs`; a bad one is refused with exit status 2 and nothing
written), then opens the store and the study's parent run, and tells the jobs through environment
variables, which both the basic and the joblib launcher pass on (and the ``tracking`` group reads):
:data:`ENV_PARENT`, :data:`ENV_TRIALS`, :data:`ENV_STUDY`, :data:`ENV_SWEPT`. Each job learns from them,
and from Hydra, which trial it is (:func:`sweep_trial`); when the sweep ends the callback builds the study
report (:mod:`backtest.study`).
"""

from __future__ import annotations

import atexit
import math
import os
import sys
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from backtest import PROJECT_DIR
from backtest.cli.argv import main_job_command
from backtest.cli.compose import build
from backtest.cli.errors import refuse
from backtest.errors import BacktestError, ConfigError

#: the study's parent run id, the number of its trials, its name and the swept keys (comma-separated)
ENV_PARENT = "RANKBACKTEST_PARENT_RUN_ID"
ENV_TRIALS = "RANKBACKTEST_N_TRIALS"
ENV_STUDY = "RANKBACKTEST_STUDY"
ENV_SWEPT = "RANKBACKTEST_SWEPT_KEYS"
#: the swept key whose values are seed replicates of one trial, not trials: the model seed (the market has
#: its own, ``data.seed``, which must then be pinned)
REPLICATE_KEY = "seed"


def sweep_trial(cfg: DictConfig | None = None) -> dict[str, str]:
    """In a job of a sweep, its tags ``trial`` (the values of the swept keys it was given, its name in the
    study) and ``trial_num`` (its job number); {} outside a sweep. A study config without ``-m`` is
    refused: it would run its defaults alone; so is a study whose ``study.primary`` is not a comparison
    statistic.

    A sweep over the model seed (:data:`REPLICATE_KEY`) makes seed replicates: the seed stays out of the
    trial's name, the job is tagged ``replicate`` (``seed=2``) and ``trial_key`` (:func:`trial_key`: its
    configuration without the seed, which the DSR counts), and a market that would change with the seed
    (``data.seed`` following ``seed``) is refused."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if cfg is not None and cfg.get("study") is not None:
        from backtest.study import DEFAULT_PRIMARY, check_primary

        check_primary(cfg.study.get("primary", DEFAULT_PRIMARY))
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode == RunMode.RUN and "study" in hc.runtime.choices:
        study = hc.runtime.choices["study"]
        raise ConfigError(
            f"+study={study} is a sweep (conf/study/{study}.yaml lists the values it tries) and runs "
            f"only as a multirun\n  fix: {main_job_command(['-m', *sys.argv[1:]])}"
        )
    if hc.mode != RunMode.MULTIRUN or not os.environ.get(ENV_PARENT):
        return {}
    swept = [k for k in os.environ.get(ENV_SWEPT, "").split(",") if k]
    from backtest.study import trial_label

    task = list(hc.overrides.task)
    if REPLICATE_KEY not in swept:
        return {"trial": trial_label(task, swept), "trial_num": str(hc.job.num)}
    if cfg is not None:
        check_replicates(cfg, swept)
    return {
        "trial": trial_label(task, [k for k in swept if k != REPLICATE_KEY]),
        "trial_num": str(hc.job.num),
        "replicate": trial_label(task, [REPLICATE_KEY]),
        **({"trial_key": trial_key(cfg)} if cfg is not None else {}),
    }


def check_replicates(cfg: DictConfig, swept: list[str] | tuple[str, ...]) -> None:
    """A sweep over the model seed must keep the market fixed: ConfigError when ``data.seed`` follows ``seed``."""
    if REPLICATE_KEY in swept and "data" in cfg and OmegaConf.is_interpolation(cfg.data, "seed"):
        raise ConfigError(
            f"a sweep over {REPLICATE_KEY} makes seed replicates of each trial on one market, but data.seed follows "
            f"{REPLICATE_KEY} ({cfg.data._get_node('seed')._value()}), so every replicate would get another market"
            "\n  fix: pin the market: data.seed=42 (or any value) beside seed=1,2,3"
        )


def trial_key(cfg: DictConfig) -> str:
    """The configuration of a job without its model seed (tag ``trial_key``): the seed replicates of one
    trial share it, so the DSR counts the trial once. The seed is set to 0 before the config is resolved, so
    every key that follows it (``model.config.seed``) drops out too; a pinned ``data.seed`` stays."""
    from backtest.tracking import config_key

    container = OmegaConf.to_container(cfg, resolve=False)
    container[REPLICATE_KEY] = 0
    return config_key(OmegaConf.to_container(OmegaConf.create(container), resolve=True))


class SweepTracking(Callback):
    """Hydra callback: before a multirun starts, create the store and the study's parent run, and tell
    the jobs; when it ends, build the study report (:mod:`backtest.study`).

    Jobs read the parent run id, the study name, the number of trials and the swept keys from
    environment variables, which both the basic and the joblib launcher pass on.
    """

    def __init__(self) -> None:
        self.parent = None
        self.tracker = None
        self.sweep = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from backtest.study import DEFAULT_PBO_BLOCKS, DEFAULT_PRIMARY, Sweep, check_primary, open_sweep, study_name
        from backtest.tracking import Tracker

        study_cfg = config.get("study") or {}
        overrides = sweep_overrides(config)
        parsed = OverridesParser.create().parse_overrides(overrides)
        swept = tuple(o.key_or_group for o in parsed if o.is_sweep_override())
        # Before the store is opened: a refused sweep writes nothing. Hydra only warns when a callback raises
        # and launches the jobs anyway, so a refusal ends the process here (exit status 2).
        try:
            primary = check_primary(study_cfg.get("primary", DEFAULT_PRIMARY))
            check_replicates(config, swept)
            check_sweep_jobs(overrides, swept, kwargs.get("config_name") or "config")
        except ConfigError as exc:
            refuse(exc)
        tracking_cfg = build(config.tracking)
        self.tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
        n_seeds = sweep_size([o for o, p in zip(overrides, parsed, strict=True) if p.key_or_group == REPLICATE_KEY])
        self.sweep = Sweep(
            study=study_name(tracking_cfg.study),
            n_trials=sweep_size(overrides) // n_seeds,  # configurations: the seed replicates of one count once
            n_seeds=n_seeds,
            swept=swept,
            overrides=tuple(overrides),
            command=main_job_command(sys.argv[1:], python="python"),
            description=str(study_cfg.get("description", "")),
            pbo_blocks=int(study_cfg.get("pbo_blocks", DEFAULT_PBO_BLOCKS)),
            primary=primary,
        )
        self.tracker.end_stale_sweeps(self.sweep.study)  # a parent left RUNNING by a killed sweep of this study
        self.parent = open_sweep(self.tracker, self.sweep)
        os.environ[ENV_PARENT] = self.parent.run_id
        os.environ[ENV_TRIALS] = str(self.sweep.n_trials)
        os.environ[ENV_STUDY] = self.sweep.study
        os.environ[ENV_SWEPT] = ",".join(self.sweep.swept)
        atexit.register(self._end_stopped_sweep)  # a failing job ends the process, not the multirun

    def _end_stopped_sweep(self) -> None:
        if self.parent is not None:  # no-op once on_multirun_end has ended it
            self.parent.end("FAILED", error="the sweep stopped before its last job: a job failed (see its log)")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from backtest.study import close_sweep

        for key in (ENV_PARENT, ENV_TRIALS, ENV_STUDY, ENV_SWEPT):
            os.environ.pop(key, None)
        if self.parent is not None:
            table = close_sweep(self.tracker, self.parent, self.sweep)
            if table:
                print(table)


def sweep_overrides(config: DictConfig) -> list[str]:
    """The overrides a multirun sweeps over: the config's ``hydra.sweeper.params`` (a study config's)
    then the command line's, the command line winning for a key both set (as Hydra's basic sweeper)."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    texts = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    by_key: dict[str, str] = {}
    for override, text in zip(OverridesParser.create().parse_overrides(texts), texts, strict=True):
        by_key[override.key_or_group] = text
    return list(by_key.values())


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides of each job of a sweep, in job-number order: the product of the sweep's values, as
    Hydra's basic sweeper makes them.

    >>> sweep_jobs(["portfolio.top_k=3,5", "seed=1"])
    [['portfolio.top_k=3', 'seed=1'], ['portfolio.top_k=5', 'seed=1']]
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)
    return jobs


def check_sweep_jobs(overrides: list[str], swept: tuple[str, ...], config_name: str = "config") -> None:
    """Compose every job of a sweep and check it as a single run checks its own config
    (:func:`backtest.cli.preflight.check_job`), before the first job starts.

    Raises
    ------
    ConfigError : the first job that a single run would refuse, named by its job number and the values it
        was given, with the reason and its fix.
    """
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from backtest.cli.errors import user_error
    from backtest.cli.preflight import check_job
    from backtest.study import trial_label

    for num, job in enumerate(sweep_jobs(overrides)):
        cfg = None
        try:
            cfg = compose(config_name=config_name, overrides=job)
            check_job(cfg, job)
        except (BacktestError, HydraException, OmegaConfBaseException, TypeError) as exc:
            err = user_error(exc, cfg)
            if err is None:
                raise
            raise ConfigError(f"job {num} of the sweep ({trial_label(job, swept) or ' '.join(job)}): {err}") from exc


def sweep_size(overrides: list[str]) -> int:
    """Number of jobs of a sweep: the product of the lengths of its sweep overrides."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return math.prod(len(list(o.sweep_iterator())) if o.is_sweep_override() else 1 for o in parsed)
