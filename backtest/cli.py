"""The command line: ``python -m backtest [hydra overrides]`` (``-m`` for multirun sweeps).

The only module that imports hydra and omegaconf. It composes the config, builds each part with
``hydra.utils.instantiate(..., _convert_="all")`` and hands plain objects to library code: the engine
runs the backtest, tracking records it, the reports are written into the run. A mistake in the user's
data or config ends with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import atexit
import difflib
import inspect
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    InstantiationException,
    MissingConfigException,
    OverrideParseException,
)
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from backtest.data.fingerprint import panel_fingerprint
from backtest.errors import BacktestError, ConfigError, FeatureAuditError, LeakageError

log = logging.getLogger("backtest")

EXIT_USER_ERROR = 2
from backtest import PROJECT_DIR  # noqa: E402  (re-exported: tests and callers read cli.PROJECT_DIR)

CONF_DIR = str(PROJECT_DIR / "conf")

ENV_PARENT = "RANKBACKTEST_PARENT_RUN_ID"
ENV_TRIALS = "RANKBACKTEST_N_TRIALS"
ENV_STUDY = "RANKBACKTEST_STUDY"
ENV_SWEPT = "RANKBACKTEST_SWEPT_KEYS"


def _user_error(exc: BaseException, cfg: DictConfig | None = None) -> BacktestError | None:
    """The BacktestError behind ``exc``, if any: a project error (Hydra wraps errors raised while
    instantiating), Hydra's composition errors (a typo'd key, an unknown option, an override that does not
    parse) and a key a group's target does not accept (with ``cfg``: named with the experiment that set it).
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BacktestError):
            return seen
        if isinstance(seen, MissingConfigException):
            return _unknown_option(seen)
        if isinstance(seen, OverrideParseException):
            return _unparsable_override(seen)
        if isinstance(seen, ConfigCompositionException):
            return _bad_override(seen)
        if isinstance(seen, TypeError) and "unexpected keyword" in str(seen):
            return _unexpected_key(seen, cfg)
        if isinstance(seen, OmegaConfBaseException):
            return ConfigError(f"{seen}\n  fix: set the missing or wrong key on the command line, e.g. "
                               "data=parquet data.path=/abs/path/panel.parquet")
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__


def _command_line_overrides() -> list[str]:
    """The Hydra overrides of this process's command line (flags such as ``-m`` or ``--cfg`` left out)."""
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(sys.argv[1:])
    except SystemExit:  # argparse refused the flags: Hydra reports it itself
        return []
    return list(args.overrides)


def _unknown_option(exc: MissingConfigException) -> ConfigError:
    """``features=nope``: Hydra's many-line 'Could not find' as one line naming the group's options."""
    text = str(exc)
    missing = re.search(r"Could not find '([^']+)'", text)
    options = re.findall(r"^\t(\S+)$", text.split("Config search path:")[0], flags=re.MULTILINE)
    if missing is None or "/" not in missing.group(1) or not options:
        return ConfigError(f"{_first_line(exc)}\n  fix: check the option names; conf/ holds one folder per group")
    group, option = missing.group(1).rsplit("/", 1)
    close = difflib.get_close_matches(option, options, n=1)
    return ConfigError(f"unknown option {group}={option}: the group '{group}' has {', '.join(options)} (conf/{group}/)"
                       f"\n  fix: {group}={close[0] if close else options[0]}, or another option listed")


def _unparsable_override(exc: OverrideParseException) -> ConfigError:
    bad = []
    for text in _command_line_overrides():
        try:
            OverridesParser.create().parse_overrides([text])
        except OverrideParseException:
            bad.append(text)
    which = f"the override {bad[0]!r}" if bad else "an override"
    return ConfigError(f"{which} does not parse: {_first_line(exc)}\n  fix: write key=value; quote a value with "
                       "spaces, brackets or commas (key='a,b'); grammar: "
                       "https://hydra.cc/docs/1.2/advanced/override_grammar/basic")


def _bad_override(exc: ConfigCompositionException) -> ConfigError:
    """``backtest.retrain_evry=5`` (a key that does not exist) or a value of the wrong type, in one line."""
    cause = exc.__cause__
    unknown = re.match(r"Could not override '([^']+)'", str(exc))
    if unknown is None:
        detail = f": {_first_line(cause)}" if cause is not None else ""
        return ConfigError(f"{_first_line(exc)}{detail}\n  fix: correct that override; `python -m backtest --cfg job` "
                           "shows every key with its value")
    key = unknown.group(1)
    parent, _, leaf = key.rpartition(".")
    value = next((t.split("=", 1)[1] for t in _command_line_overrides()
                  if t.split("=", 1)[0] == key and "=" in t), "<value>")
    known = _keys_of(parent, skip=key)
    close = difflib.get_close_matches(leaf, known, n=1)
    where = f"the '{parent}' group has no key '{leaf}'" if parent else f"the config has no group or key '{leaf}'"
    fix = f"{parent + '.' if parent else ''}{close[0]}={value} (did you mean {close[0]}?); " if close else ""
    return ConfigError(f"unknown config key {key}: {where}\n  fix: {fix}`python -m backtest --cfg job` lists the keys; "
                       f"adding a new key takes a leading + (+{key}={value})")


def _keys_of(parent: str, skip: str) -> list[str]:
    """Keys of the config node ``parent`` composed from the command line without ``skip`` (for hints)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        parsed = OverridesParser.create().parse_overrides(_command_line_overrides())
        keep = [o.input_line for o in parsed
                if not o.is_sweep_override() and o.key_or_group != skip and not o.key_or_group.startswith("hydra")]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=keep)
        node = OmegaConf.select(cfg, parent) if parent else cfg
    except Exception:  # only a hint: without it the message still names the key
        return []
    return [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []


def _unexpected_key(exc: TypeError, cfg: DictConfig | None) -> ConfigError:
    """A key the group's target does not take; when the chosen experiment set it, say so."""
    plain = ConfigError(f"{exc}\n  fix: remove the unknown key; `python -m backtest --cfg job` shows the keys each "
                        "group accepts")
    found = re.search(r"(\w+)\(\) got an unexpected keyword argument '(\w+)'", str(exc))
    if found is None or cfg is None:
        return plain
    function, key = found.groups()
    from hydra.core.hydra_config import HydraConfig

    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    experiment = choices.get("experiment")
    path = Path(CONF_DIR) / "experiment" / f"{experiment}.yaml"
    if not experiment or not path.is_file():
        return plain
    injected = OmegaConf.load(path)
    for group in cfg:
        node, target = cfg.get(group), None
        if isinstance(node, DictConfig):
            target = str(node.get("_target_", ""))
        if not target or not target.endswith(f".{function}") or not isinstance(injected.get(group), DictConfig):
            continue
        if key not in injected[group]:
            continue
        try:
            accepted = inspect.signature(hydra.utils.get_object(target)).parameters
        except (ValueError, TypeError, ImportError, HydraException):
            accepted = {}
        rejected = [f"{group}.{k}" for k in injected[group] if k not in accepted] or [f"{group}.{key}"]
        option = choices.get(group, "?")
        return ConfigError(
            f"{group}.{key} is set by experiment={experiment} (conf/experiment/{experiment}.yaml), and the chosen "
            f"{group}={option} ({target}) does not accept it: {exc}\n  fix: drop experiment={experiment}, or remove "
            f"the keys it sets that {group}={option} does not take: {' '.join('~' + k for k in rejected)}"
        )
    return plain


def _build(node: DictConfig, **kwargs: Any) -> Any:
    return hydra.utils.instantiate(node, _convert_="all", **kwargs)


def load_panel(cfg: DictConfig) -> tuple[pd.DataFrame, Any]:
    """Build the panel from the ``data`` group (synthetic, parquet/csv, tushare), with the synthetic
    market behind it (None for real data)."""
    from backtest.data.synthetic import SyntheticMarket

    built = _build(cfg.data)
    return (built.panel, built) if isinstance(built, SyntheticMarket) else (built, None)


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
    """Each finished fold: a tqdm bar with an ETA (the CLI's choice) and its metrics logged to the run at
    once (``fold/<name>``, step = fold), so that a run that dies later keeps its progress. A store that
    stops answering is noted once and not asked again; the run is then recorded in the fallback store."""

    def __init__(self) -> None:
        self.bar = None
        self.run: Any = None
        self.lost: BaseException | None = None

    def __call__(self, outcome: Any, n_folds: int) -> None:
        from backtest.errors import StoreUnavailableError

        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=n_folds, desc="folds", unit="fold", file=sys.stderr, dynamic_ncols=True)
        if self.run is not None and self.lost is None:
            try:
                self.run.log_fold_metrics({outcome.fold: outcome.metrics})
            except StoreUnavailableError as exc:
                self.lost = exc
                log.warning("the tracking store stopped answering (%s); the backtest goes on and will be "
                            "recorded in the fallback store", exc)
        ic = outcome.metrics.get("rank_ic", float("nan"))
        self.bar.set_postfix_str(f"rank IC {ic:+.3f}" + (" (resumed)" if outcome.resumed else ""))
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) raise RunInterrupted, so that the open
    tracked run ends KILLED with the signal's name instead of staying RUNNING (main thread only)."""
    from backtest.errors import RunInterrupted

    def stop(signum: int, frame: Any) -> None:
        raise RunInterrupted(f"signal {signal.Signals(signum).name}")

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)


#: the prefix of the log line with the run's stage timings (plan, audit, features, folds, portfolio,
#: baselines, the engine's total, and the record into the store), in seconds, as JSON
STAGE_SECONDS = "stage seconds"


def run(cfg: DictConfig) -> dict[str, Any]:
    """The main job: compose, build, run under the guards, record in MLflow, print the summary."""
    _stop_on_signals()
    trial = _sweep_trial()
    from backtest.data.synthetic import oracle_scores
    from backtest.engine import plan_backtest, run_backtest
    from backtest.errors import StoreUnavailableError
    from backtest.leakage import is_comparable
    from backtest.record import ReportChoice, record_backtest
    from backtest.reports.summary import RunSummary, summary_text
    from backtest.study import trial_sharpe_var
    from backtest.tracking import ARTIFACTS, Provenance, Tracker, config_key, fallback_uri, redact_uri
    from models.base import check_label_processing

    # Build every part first: a config mistake must surface before any expensive work.
    feature_spec = _build(cfg.features)
    label_spec = _build(cfg.label)
    schedule = _build(cfg.backtest)
    portfolio_spec = _build(cfg.portfolio)
    tracking_cfg = _build(cfg.tracking)
    ranker_factory = _build(cfg.model, _partial_=True)
    check_label_processing(ranker_factory(), label_spec.processing)  # also fails now on a bad model config
    options = _build(cfg.engine)
    leak_demo = bool(schedule.leak_demo)

    t0 = time.perf_counter()
    panel, market = load_panel(cfg)
    data_fp = panel_fingerprint(panel)
    log.info("panel loaded in %.1f s\n%s", time.perf_counter() - t0, summarize_panel(panel, data_fp))
    # Labels and folds next: a schedule the data cannot serve is refused before the store is touched.
    plan = plan_backtest(panel, label=label_spec, schedule=schedule, portfolio=portfolio_spec)

    config = OmegaConf.to_container(cfg, resolve=True)
    tags = {"leak_demo": str(leak_demo).lower(), "config_key": config_key(config)}
    tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
    tracker.end_stale_runs(tags["config_key"])
    study = tracking_cfg.study
    n_trials = int(tracking_cfg.n_trials or 1)
    model_name = cfg.model._target_.rsplit(".", 1)[-1]
    run_name = tracking_cfg.run_name or f"{model_name}-{feature_spec.name}" + ("-LEAK-DEMO" if leak_demo else "")
    if trial:  # a job of a sweep: named after the values it was given
        run_name = f"{run_name} {trial['trial']}" if trial["trial"] else run_name
        tags.update(trial)
    reports = ReportChoice(tearsheet=tracking_cfg.tearsheet, plots=tracking_cfg.plots,
                           drift_report=tracking_cfg.drift_report)
    progress = _FoldProgress()
    with tracker.start_run(run_name, parent_run_id=tracking_cfg.parent_run_id, study=study, n_trials=n_trials,
                           tags=tags) as mlrun:
        mlrun.log_config(config)
        progress.run = mlrun
        try:
            result = run_backtest(
                plan, features=feature_spec, ranker_factory=ranker_factory, data_fingerprint=data_fp, options=options,
                n_trials=n_trials, trial_sharpe_var=trial_sharpe_var(tracker, study), seed=int(cfg.seed),
                on_fold=progress,
                oracle=oracle_scores(market, label_spec.exit_offset - label_spec.entry_offset) if market else None,
            )
        except LeakageError:
            mlrun.set_tags({"leak_guard": "failed", "data_fingerprint": data_fp})
            raise
        except FeatureAuditError:
            mlrun.set_tags({"feature_audit": "failed", "data_fingerprint": data_fp})
            raise
        finally:
            progress.close()
        if trial and "dsr" in result.metrics:  # the study-wide dsr is logged when the sweep ends
            result.metrics["dsr_provisional"] = result.metrics.pop("dsr")
        provenance = Provenance(
            data_fingerprint=data_fp, feature_fingerprint=result.features.fingerprint,
            leak_guard=result.leak_guard, feature_audit=result.feature_audit, leak_demo=leak_demo,
            code_fingerprint=result.code_fingerprint,
        )
        try:
            if progress.lost is not None:
                raise progress.lost
            t0 = time.perf_counter()
            record_backtest(mlrun, result, provenance=provenance, title=run_name, reports=reports, fold_metrics=False)
            result.timings["record_s"] = time.perf_counter() - t0
            run_id, artifact_uri, store = mlrun.run_id, mlrun.artifact_uri, tracker.uri
        except StoreUnavailableError as exc:
            # The server is gone: the whole run goes to the local fallback store, to be synced later.
            local = Tracker(tracking_cfg.fallback_uri or fallback_uri(PROJECT_DIR), tracker.experiment, PROJECT_DIR)
            with local.start_run(run_name, study=study, n_trials=n_trials, tags={
                **tags, "pending_sync": "true", "fallback_for": redact_uri(tracker.uri),
                "superseded_run": mlrun.run_id,
            }) as fallback:
                fallback.log_config(config)
                record_backtest(fallback, result, provenance=provenance, title=run_name, reports=reports)
                run_id, artifact_uri, store = fallback.run_id, fallback.artifact_uri, local.uri
            log.warning("the tracking store %s stopped answering (%s): the run was recorded in the fallback store "
                        "%s as %s. When the server is back: python -m backtest.tracking sync --to %s",
                        redact_uri(tracker.uri), exc, local.uri, run_id, redact_uri(tracker.uri))
            mlrun.end("FAILED", error=f"the store stopped answering; recorded in the fallback store as {run_id}")
    print(summary_text(result.portfolio.returns, result.portfolio.benchmark_returns, result.metrics, RunSummary(
        n_folds=len(result.records), n_features=len(result.feature_names), ndcg_depth=result.ndcg_depth,
        leak_guard=result.leak_guard, feature_audit=result.feature_audit,
        comparable=is_comparable(result.leak_guard, result.feature_audit), run_id=run_id,
        tearsheet_uri=f"{artifact_uri}/{ARTIFACTS.report('tearsheet')}", ui=_ui_command(store),
    )))
    # one line a benchmark reads (benchmarks/e2e.py): where the run's time went
    log.info("%s %s", STAGE_SECONDS, json.dumps({k: round(v, 3) for k, v in result.timings.items()}))
    return {"run_id": run_id, "metrics": result.metrics, "leak_guard": result.leak_guard, "tracking_uri": store}


def _sweep_trial() -> dict[str, str]:
    """In a job of a sweep, its tags ``trial`` (the values of the swept keys it was given, its name in the
    study) and ``trial_num`` (its job number); {} outside a sweep. A study config without ``-m`` is
    refused: it would run its defaults alone."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode == RunMode.RUN and "study" in hc.runtime.choices:
        study = hc.runtime.choices["study"]
        raise ConfigError(f"+study={study} is a sweep (conf/study/{study}.yaml lists the values it tries) and runs "
                          f"only as a multirun\n  fix: python -m backtest -m +study={study}")
    if hc.mode != RunMode.MULTIRUN or not os.environ.get(ENV_PARENT):
        return {}
    swept = [k for k in os.environ.get(ENV_SWEPT, "").split(",") if k]
    from backtest.study import trial_label

    return {"trial": trial_label(list(hc.overrides.task), swept), "trial_num": str(hc.job.num)}


def _ui_command(uri: str) -> str:
    if uri.startswith("http"):
        return uri
    return f".venv/bin/mlflow server --backend-store-uri {uri} --host 127.0.0.1 --port 5000 --workers 1"


# --- multirun: one parent run per sweep, every job a child run -------------------------------------


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
        from backtest.study import DEFAULT_PBO_BLOCKS, Sweep, open_sweep, study_name
        from backtest.tracking import Tracker

        tracking_cfg = _build(config.tracking)
        self.tracker = Tracker.from_config(tracking_cfg, PROJECT_DIR)
        overrides = sweep_overrides(config)
        parsed = OverridesParser.create().parse_overrides(overrides)
        study_cfg = config.get("study") or {}
        self.sweep = Sweep(
            study=study_name(tracking_cfg.study), n_trials=sweep_size(overrides),
            swept=tuple(o.key_or_group for o in parsed if o.is_sweep_override()), overrides=tuple(overrides),
            command=" ".join(["python -m backtest", *sys.argv[1:]]), description=str(study_cfg.get("description", "")),
            pbo_blocks=int(study_cfg.get("pbo_blocks", DEFAULT_PBO_BLOCKS)),
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


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> Any:
    try:
        return run(cfg)
    except (BacktestError, InstantiationException, OmegaConfBaseException, TypeError) as exc:
        err = _user_error(exc, cfg)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


_ENV_INTERPOLATION = re.compile(r"\s*['\"]?\$\{oc\.env:[^}]*\}['\"]?\s*")


def _keep_secrets_off_the_command_line(argv: list[str]) -> tuple[list[str], ConfigError | None]:
    """Hydra writes every override in plain text into the run's ``.hydra/`` folder: refuse secrets there.

    ``tracking.uri=http://user:password@host`` is taken apart instead: the credentials go to MLflow's
    environment variables (``backtest.tracking.store.take_credentials``) and Hydra sees the plain URI.
    Any other override whose key names a secret (``+data.token=...``; an ``${oc.env:NAME}`` value is
    fine: it is saved unresolved) or whose value carries a password (``postgresql://u:pw@db``,
    ``?password=``) is refused. Returns the command line to hand to Hydra and the refusal, if any.
    """
    from backtest.tracking.redaction import is_secret_key, redact_uri

    out = list(argv)
    for i, text in enumerate(argv):
        if text.startswith("-") or "=" not in text:
            continue
        key, value = text.split("=", 1)
        key = key.lstrip("+~").split("@", 1)[0]
        if key == "tracking.uri" and re.match(r"(?i)https?://[^/?#]*@", value):
            from backtest.tracking.store import take_credentials

            out[i] = f"{text.split('=', 1)[0]}={take_credentials(value)}"
            continue
        if is_secret_key(key) and not _ENV_INTERPOLATION.fullmatch(value):
            return argv, ConfigError(
                f"the override {key}=... puts a secret on the command line; Hydra would save it in plain text in "
                "the run's .hydra/ folder (overrides.yaml, config.yaml)\n  fix: keep it in an environment variable "
                f"and read it from there, e.g. {text.split('=', 1)[0]}='${{oc.env:MY_SECRET}}' (saved unresolved); "
                "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server, TUSHARE_TOKEN for Tushare"
            )
        if redact_uri(value) != value:
            return argv, ConfigError(
                f"the override {redact_uri(text)} carries a password; Hydra would save it in plain text in the run's "
                ".hydra/ folder\n  fix: give the address without it and the password in the environment (PGPASSWORD "
                "or ~/.pgpass for PostgreSQL; MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server)"
            )
    return out, None


def main() -> None:
    """``python -m backtest``: secrets refused before Hydra saves anything; every user error exits 2.

    Hydra reports its own composition errors (a typo'd key, an unknown option, an override that does not
    parse) and exits 1; with ``HYDRA_FULL_ERROR`` set for the call they reach this function instead, which
    prints them in one line with a fix and exits 2. Set ``HYDRA_FULL_ERROR=1`` yourself for tracebacks.
    """
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    argv, refused = _keep_secrets_off_the_command_line(sys.argv[1:])
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    sys.argv[1:] = argv
    users_choice = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _hydra_main()
    except (BacktestError, HydraException, OmegaConfBaseException) as exc:
        err = None if users_choice == "1" else _user_error(exc)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    finally:
        if users_choice is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = users_choice


if __name__ == "__main__":
    main()
