"""The command line: ``python -m backtest [hydra overrides]`` (``-m`` for multirun sweeps).

The only module that imports hydra and omegaconf. It composes the config, builds each part with
``hydra.utils.instantiate(..., _convert_="all")`` and hands plain objects to library code: the engine
runs the backtest, tracking records it, the reports are written into the run. A mistake in the user's
data or config ends with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from backtest.data.fingerprint import panel_fingerprint
from backtest.errors import BacktestError, ConfigError, FeatureAuditError, LeakageError

log = logging.getLogger("backtest")

EXIT_USER_ERROR = 2
PROJECT_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = str(PROJECT_DIR / "conf")

ENV_PARENT = "RANKBACKTEST_PARENT_RUN_ID"
ENV_TRIALS = "RANKBACKTEST_N_TRIALS"
ENV_STUDY = "RANKBACKTEST_STUDY"


def _user_error(exc: BaseException) -> BacktestError | None:
    """The BacktestError behind ``exc`` (Hydra wraps errors raised while instantiating), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BacktestError):
            return seen
        if isinstance(seen, TypeError) and "unexpected keyword" in str(seen):
            return ConfigError(f"{seen}\n  fix: remove the unknown key; `python -m backtest --cfg job` shows the "
                               "keys each group accepts")
        if isinstance(seen, OmegaConfBaseException):
            return ConfigError(f"{seen}\n  fix: set the missing or wrong key on the command line, e.g. "
                               "data=parquet data.path=/abs/path/panel.parquet")
        seen = seen.__cause__ or seen.__context__
    return None


def _build(node: DictConfig, **kwargs: Any) -> Any:
    return hydra.utils.instantiate(node, _convert_="all", **kwargs)


def load_panel(cfg: DictConfig) -> pd.DataFrame:
    """Build the panel from the ``data`` group (synthetic, parquet/csv, tushare)."""
    return _build(cfg.data)


def summarize_panel(panel: pd.DataFrame, fingerprint: str) -> str:
    dates = panel.index.get_level_values("date")
    codes = panel.index.get_level_values("code")
    lines = [
        f"rows            {len(panel):,}",
        f"trading days    {dates.nunique():,}  ({dates.min():%Y-%m-%d} .. {dates.max():%Y-%m-%d})",
        f"stocks          {codes.nunique():,}",
    ]
    if "in_universe" in panel.columns:
        per_day = panel["in_universe"].groupby(level="date").sum()
        lines.append(f"members per day {per_day.min()}..{per_day.max()} (median {per_day.median():.0f})")
    lines.append(f"fingerprint     {fingerprint}")
    return "\n".join(lines)


class _FoldProgress:
    """A tqdm bar over folds with an ETA (the CLI's choice; the engine only reports folds)."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, outcome: Any, n_folds: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=n_folds, desc="folds", unit="fold", file=sys.stderr, dynamic_ncols=True)
        ic = outcome.metrics.get("rank_ic", float("nan"))
        self.bar.set_postfix_str(f"rank IC {ic:+.3f}" + (" (resumed)" if outcome.resumed else ""))
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(cfg: DictConfig) -> dict[str, Any]:
    """The main job: compose, build, run under the guards, record in MLflow, print the summary."""
    from backtest.cache import cache_paths
    from backtest.engine import EngineOptions, run_backtest
    from backtest.leakage import is_comparable
    from backtest.record import ReportChoice, record_backtest
    from backtest.reports.summary import RunSummary, summary_text
    from backtest.study import trial_sharpe_var
    from backtest.tracking import ARTIFACTS, Provenance, Tracker
    from models.base import check_label_processing

    # Build every part first: a config mistake must surface before any expensive work.
    feature_spec = _build(cfg.features)
    label_spec = _build(cfg.label)
    schedule = _build(cfg.backtest)
    portfolio_spec = _build(cfg.portfolio)
    tracking_cfg = _build(cfg.tracking)
    ranker_factory = _build(cfg.model, _partial_=True)
    check_label_processing(ranker_factory(), label_spec.processing)  # also fails now on a bad model config
    engine_cfg = cfg.engine
    feature_dir, checkpoint_dir = cache_paths(engine_cfg.get("cache_dir") or None)
    options = EngineOptions(
        n_jobs=int(engine_cfg.n_jobs), backend=str(engine_cfg.backend),
        feature_cache_dir=feature_dir if engine_cfg.feature_cache else None,
        checkpoint_dir=checkpoint_dir if engine_cfg.checkpoints else None,
        audit_cutoffs=int(engine_cfg.audit_cutoffs),
    )
    leak_demo = bool(schedule.leak_demo)

    t0 = time.perf_counter()
    panel = load_panel(cfg)
    data_fp = panel_fingerprint(panel)
    log.info("panel loaded in %.1f s\n%s", time.perf_counter() - t0, summarize_panel(panel, data_fp))

    tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
    study = tracking_cfg.study
    n_trials = int(tracking_cfg.n_trials or 1)
    model_name = cfg.model._target_.rsplit(".", 1)[-1]
    run_name = tracking_cfg.run_name or f"{model_name}-{feature_spec.name}" + ("-LEAK-DEMO" if leak_demo else "")
    progress = _FoldProgress()
    with tracker.start_run(run_name, parent_run_id=tracking_cfg.parent_run_id, study=study, n_trials=n_trials,
                           tags={"leak_demo": str(leak_demo).lower()}) as mlrun:
        mlrun.log_config(OmegaConf.to_container(cfg, resolve=True))
        try:
            result = run_backtest(
                panel, features=feature_spec, label=label_spec, schedule=schedule, ranker_factory=ranker_factory,
                portfolio=portfolio_spec, data_fingerprint=data_fp, options=options, n_trials=n_trials,
                trial_sharpe_var=trial_sharpe_var(tracker, study), seed=int(cfg.seed), on_fold=progress,
            )
        except LeakageError:
            mlrun.set_tags({"leak_guard": "failed", "data_fingerprint": data_fp})
            raise
        except FeatureAuditError:
            mlrun.set_tags({"feature_audit": "failed", "data_fingerprint": data_fp})
            raise
        finally:
            progress.close()
        mlrun.log_provenance(Provenance(
            data_fingerprint=data_fp, feature_fingerprint=result.features.fingerprint,
            leak_guard=result.leak_guard, feature_audit=result.feature_audit, leak_demo=leak_demo,
        ))
        mlrun.log_metrics({k: v for k, v in result.metrics.items() if v is not None and math.isfinite(v)})
        mlrun.log_fold_metrics(result.fold_metrics)
        record_backtest(mlrun, result, title=run_name, reports=ReportChoice(
            tearsheet=tracking_cfg.tearsheet, plots=tracking_cfg.plots, drift_report=tracking_cfg.drift_report))
        run_id, artifact_uri = mlrun.run_id, mlrun.artifact_uri
    print(summary_text(result.portfolio.returns, result.portfolio.benchmark_returns, result.metrics, RunSummary(
        n_folds=len(result.records), n_features=len(result.feature_names), ndcg_depth=result.ndcg_depth,
        leak_guard=result.leak_guard, feature_audit=result.feature_audit,
        comparable=is_comparable(result.leak_guard, result.feature_audit), run_id=run_id,
        tearsheet_uri=f"{artifact_uri}/{ARTIFACTS.report('tearsheet')}", ui=_ui_command(tracker.uri),
    )))
    return {"run_id": run_id, "metrics": result.metrics, "leak_guard": result.leak_guard}


def _ui_command(uri: str) -> str:
    if uri.startswith("http"):
        return uri
    return f".venv/bin/mlflow server --backend-store-uri {uri} --host 127.0.0.1 --port 5000 --workers 1"


# --- multirun: one parent run per sweep, every job a child run -------------------------------------


class SweepTracking(Callback):
    """Hydra callback: before a multirun starts, create the store and a parent run, and tell the jobs.

    Jobs read the parent run id, the study name and the number of trials (for the deflated Sharpe
    ratio) from environment variables, which both the basic and the joblib launcher pass on.
    """

    def __init__(self) -> None:
        self.parent = None
        self.tracker = None
        self.study = ""
        self.n_trials = 1

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from backtest.study import open_sweep, study_name
        from backtest.tracking import Tracker

        tracking_cfg = _build(config.tracking)
        self.tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
        self.n_trials = sweep_size(list(config.hydra.overrides.task))
        self.study = study_name(tracking_cfg.study)
        self.parent = open_sweep(self.tracker, self.study, self.n_trials)
        os.environ[ENV_PARENT] = self.parent.run_id
        os.environ[ENV_TRIALS] = str(self.n_trials)
        os.environ[ENV_STUDY] = self.study
        atexit.register(self._end_stopped_sweep)  # a failing job ends the process, not the multirun

    def _end_stopped_sweep(self) -> None:
        if self.parent is not None:  # no-op once on_multirun_end has ended it
            self.parent.end("FAILED", error="the sweep stopped before its last job: a job failed (see its log)")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from backtest.study import close_sweep

        for key in (ENV_PARENT, ENV_TRIALS, ENV_STUDY):
            os.environ.pop(key, None)
        if self.parent is not None:
            table = close_sweep(self.tracker, self.parent, self.study, self.n_trials)
            if table:
                print(table)


def sweep_size(task_overrides: list[str]) -> int:
    """Number of jobs of a sweep: the product of the lengths of its sweep overrides."""
    parsed = OverridesParser.create().parse_overrides(task_overrides)
    return math.prod(len(list(o.sweep_iterator())) if o.is_sweep_override() else 1 for o in parsed)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> Any:
    try:
        return run(cfg)
    except (BacktestError, InstantiationException, OmegaConfBaseException, TypeError) as exc:
        err = _user_error(exc)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def main() -> None:
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    _hydra_main()


if __name__ == "__main__":
    main()
