"""Experiment tracking: one MLflow run per backtest, with its config, metrics, provenance and artifacts.

The only package of the project that imports mlflow. Its modules, one job each:

- :mod:`~backtest.tracking.store`: the ``tracking`` config, the store's URI and artifact location, and
  :func:`prepare_store` (schema and experiment created once, before parallel jobs);
- :mod:`~backtest.tracking.redaction`: secrets out of params, tags and URIs; the flattened params;
- :mod:`~backtest.tracking.run`: :class:`Tracker`, built once by the CLI and passed down, and the
  :class:`TrackedRun` handle of one open run;
- :mod:`~backtest.tracking.queries`: a study's runs read back as a table;
- :mod:`~backtest.tracking.layout`: where each artifact lives inside a run (:data:`ARTIFACTS`);
- :mod:`~backtest.tracking.view`: the headline view of an experiment's runs list in MLflow's UI;
- :mod:`~backtest.tracking.fallback`: a local store for runs whose server went away, and
  ``python -m backtest.tracking sync --to URI``, which hands them over later.

What a run's guards and provenance say is decided outside, in :mod:`backtest.leakage` and
:mod:`backtest.provenance`; this package only records it.

What one run records
--------------------
============  ===============================================================================
params        the flattened resolved config, dotted keys (``model.config.learning_rate``),
              values as strings (lists as JSON), secrets redacted (:func:`redact_config`)
metrics       headline metrics at step 0 (``sharpe``, ``max_drawdown``, ...); per-fold metrics
              ``fold/<name>`` with ``step`` = fold number, so the UI draws one curve per key
tags          ``git_commit``, ``git_dirty``, ``data_fingerprint``, ``feature_fingerprint``,
              ``pkg.<name>``, ``leak_guard``, ``feature_audit``, ``comparable`` (and
              ``comparable_reason`` when it is false), ``leak_demo``, ``study``, ``n_trials``,
              ``run_kind`` (``backtest`` or ``sweep``), ``host``, ``pid`` and ``owner`` (the
              process that opened the run, :mod:`backtest.tracking.owner`), ``error`` (failed runs)
artifacts     the paths of :data:`ARTIFACTS` (:class:`~backtest.tracking.layout.RunArtifacts`)
============  ===============================================================================

Example
-------
>>> import tempfile
>>> store = tempfile.mkdtemp()
>>> tracker = Tracker(f"sqlite:///{store}/mlruns.db", "example", project_dir=store)
>>> with tracker.start_run("lambdarank", study="ablation") as run:
...     _ = run.log_config({"model": {"lr": 0.05}, "tushare": {"token": "abc"}})
...     _ = run.log_provenance(Provenance("d41d8cd9", "a3f2c1", leak_guard="passed", feature_audit="passed"))
...     run.log_fold_metrics({0: {"rank_ic": 0.03}, 1: {"rank_ic": 0.01}})
...     run.log_metrics({"sharpe": 0.7, "max_drawdown": -0.25})
>>> row = tracker.study_runs("ablation").iloc[0]
>>> row["status"], row["params.tushare.token"], float(row["metrics.sharpe"]), row["tags.comparable"]
('FINISHED', '***', 0.7, 'true')
"""

from __future__ import annotations

import os

# Telemetry would try to reach the network (there is none here); it must be off before mlflow loads.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Reading a run's artifacts back (a sweep's study table) must not draw progress bars into the output.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# A lost server must cost seconds, not minutes: MLflow's defaults (7 retries, backoff factor 2, 120 s
# timeout) retry for minutes before giving up. These bound a request to about 10 s of retries; the run
# then goes to the fallback store (backtest.tracking.fallback). Set the variables to override.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

from backtest.provenance import Provenance, git_state, provenance_tags
from backtest.tracking.fallback import fallback_uri, sync_runs
from backtest.tracking.layout import ARTIFACTS, RunArtifacts
from backtest.tracking.queries import RunKind, study_runs, sweep_runs
from backtest.tracking.redaction import (
    MAX_PARAM_VALUE_CHARS,
    flatten_config,
    is_secret_key,
    redact_config,
    redact_uri,
)
from backtest.tracking.run import TrackedRun, Tracker, config_key, open_run, store_unavailable
from backtest.tracking.store import (
    STORE_ERRORS,
    TrackingConfig,
    default_artifact_location,
    prepare_store,
    resolve_tracking_uri,
)

__all__ = [
    "ARTIFACTS",
    "MAX_PARAM_VALUE_CHARS",
    "STORE_ERRORS",
    "Provenance",
    "RunArtifacts",
    "RunKind",
    "TrackedRun",
    "Tracker",
    "TrackingConfig",
    "config_key",
    "fallback_uri",
    "store_unavailable",
    "sync_runs",
    "default_artifact_location",
    "flatten_config",
    "git_state",
    "is_secret_key",
    "open_run",
    "prepare_store",
    "provenance_tags",
    "redact_config",
    "redact_uri",
    "resolve_tracking_uri",
    "study_runs",
    "sweep_runs",
]
