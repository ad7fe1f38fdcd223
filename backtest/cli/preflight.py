"""The checks a job passes before it reads data or touches the store: one rule for a single run and for
every job of a sweep.

A single run calls :func:`check_job` on its own config first thing (:func:`backtest.cli.run`). A sweep's
callback (:class:`backtest.cli.sweep.SweepTracking`) composes every job's config and calls it on each
before it opens the study's parent run (:func:`backtest.cli.sweep.check_sweep_jobs`): a bad value in the
last job of a sweep is refused (exit 2, naming the job) before the first job runs, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from backtest.cli.compose import Parts, build_parts, load_benchmark
from backtest.cli.errors import text_in_a_number

if TYPE_CHECKING:
    from backtest.benchmark import SuppliedIndex


def check_job(cfg: DictConfig, overrides: Sequence[str] | None = None) -> tuple[Parts, SuppliedIndex | None]:
    """Check a job's config before any expensive work: no text where the config holds a number, every
    part built (each refuses its own bad settings), the index file of ``data.benchmark_path`` read, the
    Dask scheduler of ``engine.backend=dask`` answering.

    Parameters
    ----------
    cfg : the job's composed config.
    overrides : the job's overrides (default: those of the running Hydra job).

    Returns
    -------
    The job's parts and its supplied index (None: the index is built from the panel).

    Raises
    ------
    ConfigError : text given for a number or a boolean (:func:`backtest.cli.errors.text_in_a_number`), a
        part refuses its settings, or no Dask scheduler answers at ``engine.scheduler``; whatever else
        building a part raises, which :func:`backtest.cli.errors.user_error` words.
    DataContractError : the index file is missing or malformed.
    """
    from backtest.engine import check_scheduler

    mistyped = text_in_a_number(cfg, overrides)
    if mistyped is not None:
        raise mistyped
    parts = build_parts(cfg)  # every part first: a config mistake must surface before any expensive work
    benchmark = load_benchmark(cfg)  # a missing or malformed index file too, before the panel is read
    check_scheduler(parts.options)  # a scheduler that does not answer, before any run is opened
    return parts, benchmark
