"""The command line: ``python -m backtest [hydra overrides]`` (``-m`` for multirun sweeps).

The only module that imports hydra and omegaconf. It composes the config, builds each part with
``hydra.utils.instantiate(..., _convert_="all")`` and hands plain objects to library code: the engine
runs the backtest, tracking records it, the reports are written into the run. A mistake in the user's
data or config ends with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import sys
import tempfile
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


def _trial_sharpe_var(tracker: Any, study: str | None) -> float:
    """Variance of the Sharpe ratios already recorded in ``study`` (0 for a lone run).

    Provisional inside a sweep: a job only sees the runs finished before it, so the sweep's end
    recomputes every job's DSR with the whole study (:func:`deflate_study`)."""
    if not study:
        return 0.0
    runs = tracker.study_runs(study)
    if "metrics.sharpe" not in runs.columns:
        return 0.0
    values = runs["metrics.sharpe"].dropna()
    return float(values.var(ddof=1)) if len(values) >= 2 else 0.0


def run(cfg: DictConfig) -> dict[str, Any]:
    """The main job: load, backtest under the guards, record in MLflow, print the summary."""
    from backtest.cache import cache_paths
    from backtest.engine import EngineOptions, run_backtest
    from backtest.tracking import Provenance, Tracker

    # Build every part first: a config mistake must surface before any expensive work.
    feature_spec = _build(cfg.features)
    label_spec = _build(cfg.label)
    schedule = _build(cfg.backtest)
    portfolio_spec = _build(cfg.portfolio)
    tracking_cfg = _build(cfg.tracking)
    ranker_factory = _build(cfg.model, _partial_=True)
    ranker_factory()  # fail now on a bad model config
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
    resolved = OmegaConf.to_container(cfg, resolve=True)
    model_name = cfg.model._target_.rsplit(".", 1)[-1]
    run_name = tracking_cfg.run_name or f"{model_name}-{feature_spec.name}" + ("-LEAK-DEMO" if leak_demo else "")
    progress = _FoldProgress()
    with tracker.start_run(run_name, parent_run_id=tracking_cfg.parent_run_id, study=study, n_trials=n_trials,
                           tags={"leak_demo": str(leak_demo).lower()}) as mlrun:
        mlrun.log_config(resolved)
        try:
            result = run_backtest(
                panel, features=feature_spec, label=label_spec, schedule=schedule, ranker_factory=ranker_factory,
                portfolio=portfolio_spec, data_fingerprint=data_fp, options=options, n_trials=n_trials,
                trial_sharpe_var=_trial_sharpe_var(tracker, study), seed=int(cfg.seed), on_fold=progress,
            )
        except LeakageError:
            mlrun.set_tags({"leak_guard": "failed", "comparable": "false", "data_fingerprint": data_fp})
            raise
        except FeatureAuditError:
            mlrun.set_tags({"feature_audit": "failed", "comparable": "false", "data_fingerprint": data_fp})
            raise
        finally:
            progress.close()
        provenance = Provenance(
            data_fingerprint=data_fp, feature_fingerprint=result.features.fingerprint,
            leak_guard=result.leak_guard, feature_audit=result.feature_audit,
            leak_demo=leak_demo,
        )
        mlrun.log_provenance(provenance)
        mlrun.log_metrics({k: v for k, v in result.metrics.items() if v is not None and math.isfinite(v)})
        mlrun.log_fold_metrics(result.fold_metrics)
        _log_artifacts(mlrun, result, tracking_cfg, title=run_name)
        run_id = mlrun.run_id
    summary = _summary(result, run_id, tracker, provenance)
    print(summary)
    return {"run_id": run_id, "metrics": result.metrics, "leak_guard": result.leak_guard}


def _log_artifacts(mlrun: Any, result: Any, tracking_cfg: Any, title: str) -> None:
    from backtest.reports import write_backtest_reports

    p = result.portfolio
    mlrun.log_frame(result.scores.to_frame(), "data/predictions.parquet")
    mlrun.log_frame(p.positions, "data/positions.parquet")
    mlrun.log_frame(pd.DataFrame({"strategy": p.returns, "equal_weight": p.benchmark_returns}), "data/daily_returns.parquet")
    mlrun.log_frame(p.periods, "data/periods.csv")
    mlrun.log_frame(result.fold_metrics, "data/fold_metrics.csv")
    mlrun.log_frame(result.importance, "data/feature_importance.csv")
    mlrun.log_json([r.to_dict() for r in result.records], "guards/leakage_records.json")
    if result.audit is not None:
        mlrun.log_json({"passed": result.audit.passed, "summary": result.audit.summary()}, "guards/feature_audit.json")
    with tempfile.TemporaryDirectory() as tmp:
        importance = None  # fold x feature gain, dated by decision; rankers without importance have none
        if not result.importance.empty:
            importance = result.importance.copy()
            decision = {r.fold: r.decision_date for r in result.records}
            importance.index = pd.DatetimeIndex([decision[f] for f in importance.index], name="decision_date")
        write_backtest_reports(
            tmp, p.returns, p.benchmark_returns, title=title, importance=importance,
            value_drift=_value_drift(result) if tracking_cfg.drift_report else None,
            tearsheet=tracking_cfg.tearsheet, plots=tracking_cfg.plots, drift_report=tracking_cfg.drift_report,
        )
        mlrun.log_artifact(tmp, "reports")


def _value_drift(result: Any, max_rows: int = 20_000) -> pd.DataFrame:
    """PSI / KS of every feature: the first fold's training window against the test period."""
    from backtest.reports import feature_value_drift

    dates = result.features.index.get_level_values(0)
    reference = dates.isin(_train_dates(result))
    current = dates.isin(result.scores.index.get_level_values(0).unique())
    values = result.features.values
    return feature_value_drift(values[reference], values[current], result.feature_names, max_rows=max_rows)


def _train_dates(result: Any) -> pd.DatetimeIndex:
    first = result.records[0]
    dates = result.features.index.get_level_values(0).unique()
    return dates[(dates >= first.train_start) & (dates <= first.train_end)]


def _summary(result: Any, run_id: str, tracker: Any, provenance: Any) -> str:
    from backtest import metrics as m

    s, b = result.portfolio.returns, result.portfolio.benchmark_returns
    rows = [
        ("Sharpe", result.metrics["sharpe"], m.sharpe(b)),
        ("Sortino", result.metrics["sortino"], m.sortino(b)),
        ("annual return", result.metrics["ann_return"], m.ann_return(b)),
        ("cumulative return", result.metrics["cum_return"], m.cum_return(b)),
        ("annual volatility", result.metrics["ann_vol"], m.ann_vol(b)),
        ("max drawdown", result.metrics["max_drawdown"], m.max_drawdown(b)),
        ("Sharpe ex best month", result.metrics["sharpe_ex_best_month"], m.sharpe(m.drop_best_months(b, 1))),
        ("ann. return ex best month", result.metrics["ann_return_ex_best_month"], m.ann_return(m.drop_best_months(b, 1))),
        ("Sharpe ex best 3 months", result.metrics["sharpe_ex_best_3_months"], m.sharpe(m.drop_best_months(b, 3))),
    ]
    pct = {"annual return", "cumulative return", "annual volatility", "max drawdown", "ann. return ex best month"}
    fmt = lambda name, v: f"{v:+.2%}" if name in pct else f"{v:+.2f}"  # noqa: E731
    period = f"{s.index.min():%Y-%m-%d} .. {s.index.max():%Y-%m-%d}"
    out = [f"\nbacktest {period}, {int(result.metrics['n_folds'])} folds, {len(result.feature_names)} features",
           f"{'':28}{'strategy':>12}{'equal weight':>14}"]
    out += [f"{name:28}{fmt(name, a):>12}{fmt(name, bb):>14}" for name, a, bb in rows]
    mt = result.metrics
    out += [
        f"{'win rate vs EW (periods)':28}{mt['win_rate_vs_ew']:>12.1%}",
        f"{'excess annual return':28}{mt['excess_ann_return']:>+12.2%}",
        f"{'turnover (annual)':28}{mt['turnover']:>12.2f}",
        "",
        f"rank IC {mt['rank_ic_mean']:+.4f} (ICIR {mt['icir']:+.3f}), NDCG@5 {mt['ndcg_at_5']:.4f}; "
        f"PSR {mt['psr']:.3f}, DSR {mt['dsr']:.3f}; Sharpe 95% CI [{mt.get('sharpe_ci_low', float('nan')):+.2f}, "
        f"{mt.get('sharpe_ci_high', float('nan')):+.2f}]",
        f"leak guard      {result.leak_guard}   feature audit {result.feature_audit}   "
        f"comparable {'yes' if provenance.comparable else 'NO'}",
        f"MLflow run      {run_id}",
        f"tearsheet       {tracker.client.get_run(run_id).info.artifact_uri}/reports/tearsheet.html",
        f"open the UI     {_ui_command(tracker.uri)}",
    ]
    return "\n".join(out)


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
        from backtest.tracking import Tracker

        tracking_cfg = _build(config.tracking)
        self.tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
        self.n_trials = sweep_size(list(config.hydra.overrides.task))
        self.study = tracking_cfg.study or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
        self.parent = self.tracker.create_run(
            f"{self.study} ({self.n_trials} runs)", study=self.study, n_trials=self.n_trials, kind="sweep"
        )
        os.environ[ENV_PARENT] = self.parent.run_id
        os.environ[ENV_TRIALS] = str(self.n_trials)
        os.environ[ENV_STUDY] = self.study
        log.info("sweep %s: %d runs under parent run %s", self.study, self.n_trials, self.parent.run_id)
        atexit.register(self._end_stopped_sweep)  # a failing job ends the process, not the multirun

    def _end_stopped_sweep(self) -> None:
        if self.parent is not None:  # no-op once on_multirun_end has ended it
            self.parent.end("FAILED", error="the sweep stopped before its last job: a job failed (see its log)")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        for key in (ENV_PARENT, ENV_TRIALS, ENV_STUDY):
            os.environ.pop(key, None)
        if self.parent is None:
            return
        try:
            table = deflate_study(self.tracker, self.study, self.n_trials)
            self.parent.log_metrics(table.attrs)
            if len(table):
                self.parent.log_frame(table, "study/trials.csv")
                print(f"\nstudy {self.study}: {table.attrs['n_trials']:.0f} trials, DSR against the best of "
                      f"them (expected max Sharpe {table.attrs['expected_max_sharpe']:+.2f})")
                shown = table[["run_name", *STUDY_METRICS]].rename(columns=STUDY_HEADERS)
                print(shown.to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
        except BacktestError as exc:  # the jobs' own results stand; only the study-wide DSR is missing
            log.warning("sweep %s: the study-wide DSR was not recomputed: %s", self.study, exc)
        finally:
            self.parent.end()


#: Metrics of each trial in a study's table, the study-wide ``dsr`` last.
STUDY_METRICS = ("sharpe", "sharpe_ex_best_month", "sharpe_ci_low", "sharpe_ci_high", "rank_ic_mean", "dsr")
STUDY_HEADERS = {"run_name": "run", "sharpe": "Sharpe", "sharpe_ex_best_month": "ex best month",
                 "sharpe_ci_low": "CI low", "sharpe_ci_high": "CI high", "rank_ic_mean": "rank IC", "dsr": "DSR"}


def deflate_study(tracker: Any, study: str, n_trials: int) -> pd.DataFrame:
    """Recompute the DSR of every finished run of ``study`` against the whole study and log it (``dsr``,
    step 1, so it supersedes the provisional value a job logged while the sweep was running).

    The number of trials is the larger of ``n_trials`` (the sweep's size) and the runs the study holds,
    failed ones included (a study name reused by several sweeps counts all of them). Returns one row per
    finished run, best Sharpe first: ``run_name``, the config values that differ between the runs
    (``params.<key>``), then :data:`STUDY_METRICS`; the study's ``n_trials``, ``trial_sharpe_var`` and
    annualised ``expected_max_sharpe`` are in ``attrs``.
    """
    from backtest import metrics as m

    runs = tracker.study_runs(study)
    n_trials = max(n_trials, len(runs))
    runs = runs[runs["status"] == "FINISHED"]
    sharpes = runs["metrics.sharpe"].dropna() if "metrics.sharpe" in runs.columns else pd.Series(dtype=float)
    var = float(sharpes.var(ddof=1)) if len(sharpes) >= 2 else 0.0
    runs = runs.loc[sharpes.index]
    varied = [c for c in runs.columns if c.startswith("params.") and runs[c].nunique(dropna=False) > 1]
    table = runs[["run_name", *varied]].copy()
    for key in STUDY_METRICS:
        table[key] = runs.get(f"metrics.{key}", pd.Series(float("nan"), index=runs.index))
    for run_id in table.index:
        child = tracker.attach(run_id)
        value = m.dsr(child.load_frame("data/daily_returns.parquet")["strategy"], n_trials, var)
        child.log_metrics({"dsr": value}, step=1)
        table.loc[run_id, "dsr"] = value
    table = table.sort_values("sharpe", ascending=False)
    table.attrs = {
        "n_trials": float(n_trials),
        "trial_sharpe_var": var,
        "expected_max_sharpe": m.expected_max_sharpe(n_trials, var),  # annualised, as the Sharpes
    }
    return table


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
