"""A multirun is one study: a parent run per sweep, every job a child run of it.

``python -m backtest -m KEY=A,B ...`` (or ``-m +study=NAME``): before the first job, the
:class:`SweepTracking` callback (``hydra.callbacks`` in ``conf/config.yaml``) opens the store and the
study's parent run, and tells the jobs through environment variables, which both the basic and the joblib
launcher pass on (and the ``tracking`` group reads): :data:`ENV_PARENT`, :data:`ENV_TRIALS`,
:data:`ENV_STUDY`, :data:`ENV_SWEPT`. Each job learns from them, and from Hydra, which trial it is
(:func:`sweep_trial`); when the sweep ends the callback builds the study report (:mod:`backtest.study`).
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
from backtest.cli.compose import build
from backtest.errors import ConfigError

#: the study's parent run id, the number of its trials, its name and the swept keys (comma-separated)
ENV_PARENT = "RANKBACKTEST_PARENT_RUN_ID"
ENV_TRIALS = "RANKBACKTEST_N_TRIALS"
ENV_STUDY = "RANKBACKTEST_STUDY"
ENV_SWEPT = "RANKBACKTEST_SWEPT_KEYS"


def sweep_trial(cfg: DictConfig | None = None) -> dict[str, str]:
    """In a job of a sweep, its tags ``trial`` (the values of the swept keys it was given, its name in the
    study) and ``trial_num`` (its job number); {} outside a sweep. A study config without ``-m`` is
    refused: it would run its defaults alone; so is a study whose ``study.primary`` is not a comparison
    statistic (Hydra only warns when the sweep callback raises, so each job refuses it before it runs)."""
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
            f"only as a multirun\n  fix: python -m backtest -m +study={study}"
        )
    if hc.mode != RunMode.MULTIRUN or not os.environ.get(ENV_PARENT):
        return {}
    swept = [k for k in os.environ.get(ENV_SWEPT, "").split(",") if k]
    from backtest.study import trial_label

    return {"trial": trial_label(list(hc.overrides.task), swept), "trial_num": str(hc.job.num)}


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
        primary = check_primary(study_cfg.get("primary", DEFAULT_PRIMARY))  # before the store or any job
        tracking_cfg = build(config.tracking)
        self.tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
        overrides = sweep_overrides(config)
        parsed = OverridesParser.create().parse_overrides(overrides)
        self.sweep = Sweep(
            study=study_name(tracking_cfg.study),
            n_trials=sweep_size(overrides),
            swept=tuple(o.key_or_group for o in parsed if o.is_sweep_override()),
            overrides=tuple(overrides),
            command=" ".join(["python -m backtest", *sys.argv[1:]]),
            description=str(study_cfg.get("description", "")),
            pbo_blocks=int(study_cfg.get("pbo_blocks", DEFAULT_PBO_BLOCKS)),
            primary=primary,
        )
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


def sweep_size(overrides: list[str]) -> int:
    """Number of jobs of a sweep: the product of the lengths of its sweep overrides."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return math.prod(len(list(o.sweep_iterator())) if o.is_sweep_override() else 1 for o in parsed)
