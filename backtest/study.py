"""Studies: the runs of one sweep (an ablation, a grid) read, deflated, compared and reported together.

A study is every backtest run tagged with one ``study`` name. It is usually a named config,
``conf/study/NAME.yaml``, launched as ``python -m backtest -m +study=NAME``; any sweep
(``python -m backtest -m features=all,no_volatility``) is a study too, named ``sweep-<time>`` unless
``tracking.study`` names it.

::

    open_sweep ──> parent run (run_kind=sweep): study, command, overrides, swept keys, git commit
    each job   ──> child run named after the values it was given (features=no_volatility), its own
                   DSR logged as ``dsr_provisional`` (it sees only the trials finished before it)
    close_sweep ─> the study report (comparisons with the baseline on the paired daily rank IC, NDCG
                   and Sharpe, verdicts on ``study.primary`` Holm-adjusted, equity curves, rank IC per
                   fold, robustness, per-year table, DSR with N = the study's trials, PBO) logged at the
                   root of the parent run, ``pbo`` and each trial's ``<trial>/rank_ic_diff``, ... on the
                   parent, the study-wide ``dsr`` on every finished child

The first value of each swept key is the **baseline** the other trials are compared with. The number of
trials is the number of distinct configurations the study holds (tag ``config_key``), failed ones
included: rerunning a study does not inflate it, trying one more variant under its name does. A sweep over
the model ``seed`` (the market pinned: ``data.seed=42``) makes seed replicates: one trial per
configuration (tag ``trial_key``), its seeds' mean in the report, with their spread.

From the store, later: ``python -m backtest.study list`` and ``python -m backtest.study report NAME
[--out DIR]`` (the report rebuilt and logged on the study's latest parent run again).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from backtest import PROJECT_DIR
from backtest.errors import BacktestError, ConfigError, TrackingError
from backtest.research_log import claim_table
from backtest.statistics import COMPARISON_STATISTICS
from backtest.tracking import ARTIFACTS, TrackedRun, Tracker, git_state

log = logging.getLogger(__name__)

#: Columns of the study table printed at the end of a sweep (from the study report's trials table).
STUDY_TABLE = {
    "rank_ic_mean": "rank IC",
    "rank_ic_diff": "rank IC diff",
    "rank_ic_diff_se": "s.e.",
    "ndcg_diff": "NDCG diff",
    "sharpe": "Sharpe",
    "sharpe_diff": "Sharpe diff",
    "p_holm": "Holm p",
    "mde_rank_ic": "MDE rank IC",
    "days_to_resolve": "days to resolve",
    "n_seeds": "seeds",
    "rank_ic_seed_sd": "rank IC seed sd",
    "sharpe_seed_sd": "Sharpe seed sd",
    "dsr": "DSR",
}
#: Blocks of the PBO's CSCV unless ``study.pbo_blocks`` says otherwise.
DEFAULT_PBO_BLOCKS = 16
#: The statistic the verdicts rest on unless ``study.primary`` says otherwise.
DEFAULT_PRIMARY = "rank_ic"
#: The comparison columns logged on the parent run for each trial, as ``<trial>/<column>``.
PARENT_COMPARISON_METRICS = (
    "rank_ic_diff",
    "rank_ic_diff_se",
    "rank_ic_diff_ci_low",
    "rank_ic_diff_ci_high",
    "ndcg_diff",
    "ndcg_diff_se",
    "ndcg_diff_ci_low",
    "ndcg_diff_ci_high",
    "sharpe_diff",
    "sharpe_diff_ci_low",
    "sharpe_diff_ci_high",
    "p_value",
    "p_holm",
    "mde_rank_ic",
    "days_to_resolve",
)


def check_primary(value: object) -> str:
    """``study.primary`` checked: the statistic a study's verdicts rest on.

    >>> check_primary("ndcg")
    'ndcg'
    >>> check_primary("ic")
    Traceback (most recent call last):
    ...
    backtest.errors.ConfigError: study.primary: expected one of rank_ic, ndcg, sharpe; received 'ic'
    ...
    """
    if value not in COMPARISON_STATISTICS:
        raise ConfigError(
            f"study.primary: expected one of {', '.join(COMPARISON_STATISTICS)}; received {value!r}\n"
            "  fix: study.primary=rank_ic (the paired daily rank IC difference, the default), study.primary=ndcg "
            "(the daily NDCG at the portfolio depth) or study.primary=sharpe (the top-k portfolio's Sharpe ratio); "
            "in conf/study/NAME.yaml or on the command line"
        )
    return str(value)


@dataclass(frozen=True)
class Sweep:
    """One sweep as it was launched: what the parent run records.

    Attributes
    ----------
    study : the study's name (tag ``study`` of the parent and of every job).
    n_trials : jobs in the sweep (the product of the swept values' counts).
    swept : the keys that vary between the jobs, in command-line order.
    overrides : the sweep's overrides (the study config's ``hydra.sweeper.params`` and the command
        line's, sweeps and fixed values alike).
    command : the command line that launched it.
    description : the study config's ``study.description``.
    pbo_blocks : blocks of the PBO's combinatorially symmetric cross-validation (``study.pbo_blocks``).
    primary : the statistic the verdicts rest on (``study.primary``: ``rank_ic``, ``ndcg`` or ``sharpe``).
    n_seeds : model seeds each trial runs with (a sweep over ``seed``: replicates, not trials); 1 without.
    """

    study: str
    n_trials: int
    swept: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    command: str = ""
    description: str = ""
    pbo_blocks: int = DEFAULT_PBO_BLOCKS
    primary: str = DEFAULT_PRIMARY
    n_seeds: int = 1
    git_commit: str = field(default="", compare=False)


def study_name(configured: str | None) -> str:
    """The configured study name, or a dated ``sweep-YYYYmmdd-HHMMSS`` one."""
    return configured or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"


def trial_label(task_overrides: Sequence[str], swept: Sequence[str]) -> str:
    """The values a job of a sweep was given for the swept keys: its name within the study.

    >>> trial_label(["+study=volatility", "features=no_volatility", "seed=1"], ["features", "seed"])
    'features=no_volatility seed=1'
    >>> trial_label(["features=all"], [])
    ''
    """
    keys = set(swept)
    chosen = [text for text in task_overrides if "=" in text and text.split("=", 1)[0].lstrip("+~") in keys]
    return " ".join(chosen)


def open_sweep(tracker: Tracker, sweep: Sweep) -> TrackedRun:
    """Open the parent run of a sweep (ended by :func:`close_sweep`); it records how it was launched."""
    commit, dirty = git_state(PROJECT_DIR)
    seeds = f" x {sweep.n_seeds} seeds" if sweep.n_seeds > 1 else ""
    parent = tracker.create_run(
        f"{sweep.study} ({sweep.n_trials} trials{seeds})",
        study=sweep.study,
        n_trials=sweep.n_trials,
        kind="sweep",
        tags={
            "command": sweep.command,
            "overrides": " ".join(sweep.overrides),
            "swept": ",".join(sweep.swept),
            "git_commit": commit,
            "git_dirty": dirty,
            "mlflow.note.content": sweep.description,
        },
    )
    parent.log_json({**asdict(sweep), "git_commit": commit, "git_dirty": dirty}, ARTIFACTS.study_sweep)
    log.info("study %s: %d trials under parent run %s", sweep.study, sweep.n_trials, parent.run_id)
    return parent


def trial_sharpe_var(tracker: Tracker, study: str | None) -> float:
    """Variance of the Sharpe ratios already recorded in ``study`` (0 for a lone run).

    Provisional inside a sweep: a job only sees the trials finished before it; the sweep's end computes
    the study-wide DSR (:func:`close_sweep`)."""
    if not study:
        return 0.0
    runs, _ = study_trials(tracker, study)
    values = runs["metrics.sharpe"].dropna() if "metrics.sharpe" in runs.columns else pd.Series(dtype=float)
    return float(values.var(ddof=1)) if len(values) >= 2 else 0.0


def study_trials(tracker: Tracker, study: str) -> tuple[pd.DataFrame, int]:
    """The finished trials of ``study`` (the latest run of each configuration, in sweep order: job
    number, then start time) and the number of configurations tried (failed and killed ones included).

    Seed replicates of one trial (tag ``trial_key``: its configuration without the model seed) are kept
    apart as runs but count as one configuration."""
    runs = tracker.study_runs(study)
    if not len(runs):
        return runs, 0
    key = runs["tags.config_key"].fillna(runs.index.to_series()) if "tags.config_key" in runs else runs.index
    configuration = runs["tags.trial_key"].fillna(pd.Series(key, index=runs.index)) if "tags.trial_key" in runs else key
    n_configs = int(pd.Series(configuration).nunique())
    finished = runs[runs["status"] == "FINISHED"]
    finished = finished.loc[~pd.Series(key, index=runs.index)[finished.index].duplicated(keep="last")]
    order = pd.to_numeric(
        finished.get("tags.trial_num", pd.Series(index=finished.index, dtype=float)), errors="coerce"
    ).fillna(1e9)
    finished = finished.assign(_order=order).sort_values(["_order", "start_time"], kind="stable").drop(columns="_order")
    return finished, n_configs


def build_report(
    tracker: Tracker,
    study: str,
    *,
    n_trials: int = 0,
    pbo_blocks: int = DEFAULT_PBO_BLOCKS,
    description: str = "",
    primary: str = DEFAULT_PRIMARY,
):  # -> tuple[StudyReport, pd.DataFrame]
    """The study report of ``study`` from the store, and its trials (one row per finished run, indexed
    by run id, with the trial label in column ``trial``).

    Each trial's daily returns, daily rank IC and NDCG (``data/daily_ranking.parquet``; a run recorded
    before it was stored has none, and is judged on the Sharpe difference alone), Newey-West lags (param
    ``ic_lags``) and rank IC per fold (``data/fold_metrics.csv``) are read from its run.

    Raises
    ------
    TrackingError : the study has no finished run.
    ConfigError : ``primary`` is not a comparison statistic.
    """
    from backtest.comparison import TRIAL_RUN_METRICS, VERDICT_COLUMNS, build_study_report

    primary = check_primary(primary)
    runs, n_configs = study_trials(tracker, study)
    if not len(runs):
        raise TrackingError(
            f"study {study!r} has no finished run in {tracker}. Fix: run it (python -m backtest "
            f"-m +study={study}) or pick a name from `python -m backtest.study list`"
        )
    labels = _trial_labels(runs)
    strategy, benchmarks, ranking, folds = {}, {}, {}, {}
    for run_id in runs.index:
        run = tracker.attach(run_id)
        daily = run.load_frame(ARTIFACTS.daily_returns)
        strategy[run_id], benchmarks[run_id] = daily["strategy"], daily["equal_weight"]
        ranking[run_id] = run.load_frame(ARTIFACTS.daily_ranking, missing_ok=True)
        fold_metrics = run.load_frame(ARTIFACTS.fold_metrics, missing_ok=True)
        if fold_metrics is not None and "rank_ic" in fold_metrics.columns:
            folds[run_id] = fold_metrics["rank_ic"]
    lags = pd.to_numeric(runs.get("params.ic_lags", pd.Series(index=runs.index, dtype=float)), errors="coerce")
    groups = {label: list(ids) for label, ids in runs.index.to_series().groupby(labels, sort=False)}
    names = list(dict.fromkeys(labels))  # in sweep order; the seed replicates of a trial share its name
    # A trial with seed replicates is their mean: the mean daily return (a book split evenly over the seeds'
    # books), the mean daily rank IC and NDCG, the mean of each fold's rank IC and of each metric.
    returns = pd.DataFrame(
        {name: pd.concat([strategy[i] for i in groups[name]], axis=1).mean(axis=1) for name in names}
    )
    benchmark = benchmarks[groups[names[0]][0]]
    ranking_of = {
        name: None
        if any(ranking[i] is None for i in groups[name])
        else pd.concat([ranking[i] for i in groups[name]]).groupby(level=0).mean()
        for name in names
    }
    fold_rank_ic = {
        name: pd.concat([folds[i] for i in groups[name]], axis=1).mean(axis=1)
        for name in names
        if all(i in folds for i in groups[name])
    }
    ic_lags = {name: int(lags[groups[name]].max()) for name in names if lags[groups[name]].notna().any()}
    replicate_keys = {
        c
        for c in runs.columns
        if c.startswith("params.") and any(runs.loc[ids, c].nunique(dropna=False) > 1 for ids in groups.values())
    }
    varied = [
        c
        for c in runs.columns
        if c.startswith("params.") and c not in replicate_keys and runs[c].nunique(dropna=False) > 1
    ]
    first = runs.loc[[groups[name][0] for name in names]]
    metric = {
        k: runs.get(f"metrics.{k}", pd.Series(float("nan"), index=runs.index)).groupby(labels, sort=False).mean()
        for k in TRIAL_RUN_METRICS
    }
    minutes = (runs["end_time"] - runs["start_time"]).dt.total_seconds() / 60  # wall time of the run
    trial_metrics = pd.DataFrame(
        {
            **{k: v.reindex(names).to_numpy() for k, v in metric.items()},
            **{c.removeprefix("params."): first[c].to_numpy() for c in varied},
            **{
                key: first.get(f"tags.{key}", pd.Series("", index=first.index)).fillna("").to_numpy()
                for key in VERDICT_COLUMNS
            },
            "minutes": minutes.groupby(labels, sort=False).sum().reindex(names).to_numpy(),
            "resumed_folds": pd.to_numeric(
                runs.get("tags.resumed_folds", pd.Series(index=runs.index, dtype=float)), errors="coerce"
            )
            .groupby(labels, sort=False)
            .sum()
            .reindex(names)
            .to_numpy(),  # folds read from checkpoints, not computed
        },
        index=names,
    )
    seed_spread = None
    if any(len(ids) > 1 for ids in groups.values()):
        seed_spread = pd.DataFrame(
            {
                "n_seeds": [len(groups[name]) for name in names],
                **{
                    f"{key}_seed_sd": [_seed_sd(runs, groups[name], metric) for name in names]
                    for key, metric in (("rank_ic", "rank_ic_mean"), ("ndcg", "ndcg"), ("sharpe", "sharpe"))
                },
            },
            index=names,
        )
    title = f"Study {study}" + (f": {description}" if description else "")
    report = build_study_report(
        returns,
        benchmark,
        title=title,
        trial_metrics=trial_metrics,
        n_trials=max(n_trials, n_configs),
        baseline=labels.iloc[0],
        n_blocks=pbo_blocks,
        daily_ranking=ranking_of,
        ic_lags=ic_lags,
        primary=primary,
        fold_rank_ic=pd.DataFrame(fold_rank_ic) if fold_rank_ic else None,
        seed_spread=seed_spread,
    )
    return report, runs.assign(trial=labels)


def _seed_sd(runs: pd.DataFrame, ids: list[str], metric: str) -> float:
    """Standard deviation (ddof=1) of one metric over a trial's seed replicates; NaN for one seed."""
    values = pd.to_numeric(runs.get(f"metrics.{metric}", pd.Series(index=runs.index, dtype=float)), errors="coerce")
    return float(values[ids].std(ddof=1)) if len(ids) > 1 else float("nan")


def _trial_labels(runs: pd.DataFrame) -> pd.Series:
    """One name per trial: its swept values (tag ``trial``), else its run name. The seed replicates of a
    trial (tag ``replicate``) share its name; other runs with the same name get their run id's start."""
    labels = runs.get("tags.trial", pd.Series(index=runs.index, dtype=object)).replace("", None)
    labels = labels.fillna(runs["run_name"].fillna(pd.Series(runs.index, index=runs.index)))
    replicate = runs.get("tags.replicate", pd.Series(index=runs.index, dtype=object)).fillna("")
    duplicated = labels.duplicated(keep=False) & ~(replicate != "").groupby(labels).transform("all")
    return labels.where(~duplicated, labels + " [" + pd.Series(runs.index, index=runs.index).str[:8] + "]")


def record_report(
    tracker: Tracker, parent: TrackedRun | None, report, runs: pd.DataFrame, out: Path | str | None = None
) -> list[Path]:
    """Log the study-wide ``dsr`` on every trial, the report at the root of ``parent`` (with ``pbo``,
    ``n_trials``, ``trial_sharpe_var``, ``expected_max_sharpe``) and, with ``out``, write it there too."""
    from backtest.reports.study import write_study_report

    for run_id, label in runs["trial"].items():
        value = report.trials.loc[label, "dsr"]
        if pd.notna(value):
            tracker.attach(run_id).log_metrics({"dsr": float(value)})
    written: list[Path] = []
    if out is not None:
        written = write_study_report(out, report)
    if parent is not None:
        fingerprints = sorted(set(runs.get("tags.data_fingerprint", pd.Series(dtype=object)).dropna()))
        parent.set_tags(
            {
                "data_fingerprint": fingerprints[0] if len(fingerprints) == 1 else "varies: " + ",".join(fingerprints),
                "trials": ",".join(runs.index),
                "baseline": report.baseline,
            }
        )
        parent.log_metrics({k: v for k, v in study_metrics(report).items() if pd.notna(v) and abs(v) != float("inf")})
        parent.set_tags(
            {
                f"verdict.{metric_prefix(name)}": f"{row['verdict']} [on {row['verdict_statistic']}]"
                for name, row in report.trials.drop(index=report.baseline).iterrows()
            }
        )
        with tempfile.TemporaryDirectory(prefix="rankbacktest-study-") as tmp:
            write_study_report(tmp, report)
            parent.log_artifact(tmp)
    return written


def study_metrics(report) -> dict[str, float]:
    """The parent run's metrics: ``pbo``, ``n_trials``, ``trial_sharpe_var``, ``expected_max_sharpe`` and, for
    each trial but the baseline, its comparison (:data:`PARENT_COMPARISON_METRICS`) as ``<trial>/<column>``
    (:func:`metric_prefix`) with ``<trial>/verdict`` (+1 better, -1 worse, 0 no detectable difference)."""
    out = {
        "pbo": report.pbo.pbo if report.pbo is not None else float("nan"),
        "n_trials": float(report.n_trials),
        "trial_sharpe_var": report.trial_sharpe_var,
        "expected_max_sharpe": report.expected_max_sharpe,
    }
    for name, row in report.trials.drop(index=report.baseline).iterrows():
        prefix = metric_prefix(name)
        keys = (*PARENT_COMPARISON_METRICS, "n_seeds", "rank_ic_seed_sd", "sharpe_seed_sd", "seed_se")
        out.update({f"{prefix}/{key}": float(row[key]) for key in keys if key in row})
        verdict = str(row["verdict"])
        out[f"{prefix}/verdict"] = 1.0 if verdict.startswith("better") else -1.0 if verdict.startswith("worse") else 0.0
    return out


def metric_prefix(trial: str) -> str:
    """A trial's name as the prefix of its metrics on the parent run (MLflow keys allow letters, digits,
    ``_ - . : space``).

    >>> metric_prefix("features=no_moneyflow seed=2")
    'features_no_moneyflow seed_2'
    """
    return re.sub(r"[^\w.\- :]", "_", str(trial))


def study_table(study: str, report) -> str:
    """The study as text: one line per trial, the baseline first, then the DSR's N and the PBO."""
    trials = report.trials
    shown = trials[[c for c in STUDY_TABLE if c in trials.columns]].rename(columns=STUDY_TABLE)
    shown.insert(0, "trial", trials.index)
    pbo = (
        f"PBO {report.pbo.pbo:.2f} ({report.pbo.n_blocks} blocks, {report.pbo.n_combinations} splits)"
        if report.pbo is not None
        else "PBO: needs 2 trials"
    )
    verdicts = [f"  {name}: {verdict}" for name, verdict in trials["verdict"].items()] if "verdict" in trials else []
    return (
        f"\nstudy {study}: {report.n_trials} trials, baseline {report.baseline}; DSR against the best of "
        f"them (expected max Sharpe {report.expected_max_sharpe:+.2f}); {pbo}; verdicts on "
        f"{report.primary}, Holm-adjusted\n"
        + shown.to_string(index=False, float_format=lambda v: f"{v:+.4f}")
        + "\n"
        + "\n".join(verdicts)
    )


def close_sweep(tracker: Tracker, parent: TrackedRun, sweep: Sweep) -> str:
    """End a sweep: build the study report, log it on the parent run and the study-wide ``dsr`` on each
    trial, end the parent; return the study table as text ("" when no report could be built: the
    jobs' own results stand, and ``python -m backtest.study report`` can build it later)."""
    try:
        report, runs = build_report(
            tracker,
            sweep.study,
            n_trials=sweep.n_trials,
            pbo_blocks=sweep.pbo_blocks,
            description=sweep.description,
            primary=sweep.primary,
        )
        record_report(tracker, parent, report, runs)
        return study_table(sweep.study, report)
    except BacktestError as exc:
        log.warning(
            "study %s: no study report (%s); python -m backtest.study report %s builds it later",
            sweep.study,
            exc,
            sweep.study,
        )
        return ""
    finally:
        parent.end()


def list_studies(tracker: Tracker) -> pd.DataFrame:
    """One row per study of the store: its latest sweep, when, its trials (finished / tried), the best
    trial's Sharpe and DSR, and the PBO."""
    parents = tracker.sweep_runs()
    rows = []
    for study, group in parents.groupby("tags.study", sort=False) if len(parents) else []:
        latest = group.iloc[-1]
        runs, n_configs = study_trials(tracker, study)
        sharpe = runs.get("metrics.sharpe", pd.Series(dtype=float))
        best = sharpe.idxmax() if sharpe.notna().any() else None
        rows.append(
            {
                "study": study,
                "parent_run": latest.name,
                "started": latest["start_time"].strftime("%Y-%m-%d %H:%M"),
                "status": latest["status"],
                "trials": f"{len(runs)}/{n_configs}",
                "best": _trial_labels(runs)[best] if best is not None else "",
                "best_sharpe": runs.loc[best, "metrics.sharpe"] if best is not None else float("nan"),
                "best_dsr": runs.loc[best].get("metrics.dsr", float("nan")) if best is not None else float("nan"),
                "pbo": latest.get("metrics.pbo", float("nan")),
            }
        )
    return pd.DataFrame(
        rows, columns=["study", "parent_run", "started", "status", "trials", "best", "best_sharpe", "best_dsr", "pbo"]
    )


def report_study(
    tracker: Tracker, study: str, out: Path | str | None, *, log_to_store: bool = True, primary: str | None = None
) -> list[Path]:
    """Rebuild the report of ``study`` from the store: written to ``out`` and, with ``log_to_store``,
    logged again on its latest sweep's parent run (with the study-wide ``dsr`` of each trial).

    ``primary`` overrides the statistic the verdicts rest on (default: the sweep's ``study.primary``)."""
    parents = tracker.study_runs(study, kind="sweep")
    latest = tracker.attach(parents.index[-1]) if len(parents) else None
    parent = latest if log_to_store else None
    sweep = _launched(latest)
    report, runs = build_report(
        tracker,
        study,
        n_trials=sweep.get("n_trials", 0),
        pbo_blocks=sweep.get("pbo_blocks", DEFAULT_PBO_BLOCKS),
        description=sweep.get("description", ""),
        primary=primary or sweep.get("primary", DEFAULT_PRIMARY),
    )
    written = record_report(tracker, parent if log_to_store else None, report, runs, out)
    print(study_table(study, report))
    return written


def _launched(parent: TrackedRun | None) -> dict:
    """The parent run's record of its sweep (``study/sweep.json``), {} when it has none."""
    if parent is None:
        return {}
    import json

    with tempfile.TemporaryDirectory() as tmp:
        path = parent.download(ARTIFACTS.study_sweep, tmp)
        return json.loads(Path(path).read_text()) if path is not None else {}  # none: the report's defaults


#: Columns of the research-log digest (:func:`digest`): the study report's trials table, shown as text.
DIGEST_COLUMNS = {
    "sharpe": "Sharpe",
    "sharpe_ci": "95% CI",
    "sharpe_ex_best_month": "ex best month",
    "cum_return": "cum. return",
    "rank_ic_mean": "rank IC (s.e.)",
    "factor_ic": "best factor IC",
    "dsr": "DSR",
    "diff": "Sharpe vs baseline [95% CI]",
    "primary_diff": "verdict statistic vs baseline [95% CI]",
    "verdict": "verdict",
    "mde_rank_ic": "MDE rank IC",
    "days_to_resolve": "days to resolve",
    "minutes": "min",
}


def _digest_cells(row: pd.Series, summary: dict, is_baseline: bool) -> dict[str, str]:
    """One digest row's cells. A report written before the comparisons on the ranking has the Sharpe
    difference as ``diff_vs_baseline`` and no verdict statistic: its new cells stay blank."""

    def number(key: str, spec: str) -> str:
        value = row.get(key)
        return (
            format(float(value), spec)
            if value is not None and pd.notna(value) and abs(float(value)) != float("inf")
            else ""
        )

    sharpe_diff = next((k for k in ("sharpe_diff", "diff_vs_baseline") if k in row), None)
    low, high = (
        ("sharpe_diff_ci_low", "sharpe_diff_ci_high")
        if sharpe_diff == "sharpe_diff"
        else ("diff_ci_low", "diff_ci_high")
    )
    statistic = str(row.get("verdict_statistic", "")) if pd.notna(row.get("verdict_statistic")) else ""
    primary = ""
    if statistic and not is_baseline:
        digits = "+.2f" if statistic == "sharpe" else "+.4f"
        on = f"{statistic}_diff"
        primary = (
            f"{statistic} {number(on, digits)} [{number(on + '_ci_low', digits)}, {number(on + '_ci_high', digits)}]"
        )
    days = row.get("days_to_resolve")
    return {
        "sharpe": f"{row.sharpe:+.2f}",
        "sharpe_ci": f"[{row.sharpe_ci_low:+.2f}, {row.sharpe_ci_high:+.2f}]",
        "sharpe_ex_best_month": f"{row.sharpe_ex_best_month:+.2f}",
        "cum_return": f"{(1 + row.ann_return) ** (summary['n_days'] / 252) - 1:+.1%}",
        "rank_ic_mean": f"{row.rank_ic_mean:+.4f}"
        + (f" ({row.rank_ic_se:.4f})" if pd.notna(row.get("rank_ic_se")) else ""),
        "factor_ic": number("baseline_factor_rank_ic_mean", "+.4f"),
        "dsr": f"{row.dsr:.2f}",
        "diff": "baseline"
        if is_baseline
        else f"{number(sharpe_diff, '+.2f')} [{number(low, '+.2f')}, {number(high, '+.2f')}]",
        "primary_diff": "baseline" if is_baseline else primary,
        "verdict": "" if is_baseline else str(row.verdict).split(" (")[0],
        "mde_rank_ic": "" if is_baseline else number("mde_rank_ic", ".4f"),
        "days_to_resolve": ""
        if is_baseline or days is None or pd.isna(days)
        else ("never (no difference)" if float(days) == float("inf") else f"{float(days):,.0f}"),
        "minutes": number("minutes", ".1f"),
    }


def digest(directory: Path | str) -> str:
    """One markdown table of every study report under ``directory`` (``experiments/``): a row per trial
    with its Sharpe and interval, Sharpe without the best month, rank IC, study-wide DSR, the paired Sharpe
    difference from the baseline, the difference its verdict rests on (rank IC, NDCG or Sharpe) with its
    interval, the verdict, the minimum detectable rank IC difference, the test days that would resolve an
    unresolved difference and the run's minutes; a line per study with its period, N and PBO.
    ``make studies`` writes it to ``experiments/digest.md``."""
    import json

    from backtest.reports.files import STUDY_REPORT_FILES

    directory = Path(directory)
    header = "| study | trial | " + " | ".join(DIGEST_COLUMNS.values()) + " |"
    lines = [header, "|---" * (len(DIGEST_COLUMNS) + 2) + "|"]
    notes = []
    for folder in sorted(p for p in directory.iterdir() if (p / STUDY_REPORT_FILES["summary"]).is_file()):
        summary = json.loads((folder / STUDY_REPORT_FILES["summary"]).read_text())
        trials = pd.read_csv(folder / STUDY_REPORT_FILES["trials"], index_col=0)
        for name, row in trials.iterrows():
            cells = _digest_cells(row, summary, name == summary["baseline"])
            lines.append(f"| {folder.name} | {name} | " + " | ".join(cells[k] for k in DIGEST_COLUMNS) + " |")
        pbo = f"PBO {summary['pbo']:.2f} ({summary['pbo_blocks']} blocks)" if summary["pbo"] is not None else "no PBO"
        verdicts = f", verdicts on {summary['primary']} (Holm)" if "primary" in summary else ", verdicts on Sharpe"
        notes.append(
            f"- **{folder.name}**: {summary['start']} .. {summary['end']} ({summary['n_days']} days), "
            f"N = {summary['n_trials']} for the DSR, {pbo}{verdicts}; report: [{folder.name}/"
            f"{STUDY_REPORT_FILES['markdown']}]({folder.name}/{STUDY_REPORT_FILES['markdown']})"
        )
    head = claim_table(directory)
    claims = (
        ["## The research log's claims", "", head, "", CLAIM_NOTE, "", "## Every trial", ""]
        if len(head.splitlines()) > 2
        else []
    )
    return "\n".join(claims + lines + [""] + notes)


#: What the claim table's numbers are (written under it in the digest).
CLAIM_NOTE = (
    "One row per claim of the research log that a study reproduces (backtest/research_log.py): the verdict on "
    "the study's primary statistic (the paired daily rank-IC difference from the baseline, Newey-West s.e., "
    "Holm over the study's trials and beyond the seed spread), the effect ± its s.e., the minimum detectable "
    "difference at 80% power (MDE), and whether the synthetic market's planted truth agrees where it knows. "
    "How often such verdicts are right: [calibration/](calibration/) and benchmarks/README.md, "
    '"Study calibration".'
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m backtest.study list | report NAME [--out DIR] [--no-log] [--primary STAT] | digest [DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m backtest.study",
        description="List the studies of the store and rebuild a study's report from it.",
    )
    parser.add_argument("--tracking-uri", default=None, help="MLflow store (default: the project's mlruns.db)")
    parser.add_argument("--experiment", default="rankbacktest")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="one line per study")
    report = commands.add_parser("report", help="rebuild a study's report from the store")
    report.add_argument("study")
    report.add_argument("--out", type=Path, default=None, help="folder for the report (default: study-report-NAME)")
    report.add_argument("--no-log", action="store_true", help="do not log the report on the study's parent run")
    report.add_argument(
        "--primary",
        choices=COMPARISON_STATISTICS,
        default=None,
        help="the statistic the verdicts rest on (default: the sweep's study.primary, else rank_ic)",
    )
    table = commands.add_parser("digest", help="one markdown table of the study reports under a folder")
    table.add_argument("directory", type=Path, nargs="?", default=PROJECT_DIR / "experiments")
    args = parser.parse_args(argv)
    if args.command == "digest":
        print(digest(args.directory))
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        tracker = Tracker(args.tracking_uri, args.experiment, PROJECT_DIR)
        if args.command == "list":
            studies = list_studies(tracker)
            print(
                studies.to_string(index=False, float_format=lambda v: f"{v:+.3f}")
                if len(studies)
                else f"no study in {tracker}: run one with python -m backtest -m +study=NAME (conf/study/)"
            )
            return 0
        out = args.out or Path(f"study-report-{args.study}")
        written = report_study(tracker, args.study, out, log_to_store=not args.no_log, primary=args.primary)
        print(f"\nstudy report: {len(written)} files in {out}/ ({', '.join(p.name for p in written[:3])}, ...)")
        return 0
    except (BacktestError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
