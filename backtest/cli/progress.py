"""What the user sees while the main job runs: the folds' progress bar (with each fold's metrics logged
to the run as it finishes) and the stage timings line. How a run is stopped is :mod:`backtest.stop`'s.

While the bar is shown, the log lines of the console go through tqdm (``tqdm.contrib.logging``): each is
printed above the bar, which is drawn again below it, instead of cutting it in two once per fold.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from backtest.errors import StoreUnavailableError

log = logging.getLogger("backtest")

#: the prefix of the log line with the run's stage timings (plan, audit, features, folds, portfolio,
#: baselines, the engine's total, and the record into the store), in seconds, as JSON
STAGE_SECONDS = "stage seconds"


class FoldProgress:
    """Each finished fold: a tqdm bar with an ETA (the CLI's choice) and its metrics logged to the run at
    once (``fold/<name>``, step = fold, timestamp = the fold's decision date), so that a run that dies later
    keeps its progress. A store that stops answering is noted once and not asked again; the run is then
    recorded in the fallback store."""

    def __init__(self, decision_dates: Mapping[int, Any] | None = None) -> None:
        self.bar = None
        self.run: Any = None
        self.lost: StoreUnavailableError | None = None
        self.decision_dates = dict(decision_dates or {})
        self._logs_above = contextlib.ExitStack()

    def __call__(self, outcome: Any, n_folds: int) -> None:
        if self.bar is None:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._logs_above.enter_context(logging_redirect_tqdm())  # the console's handlers, until close()
            self.bar = tqdm(total=n_folds, desc="folds", unit="fold", file=sys.stderr, dynamic_ncols=True)
        if self.run is not None and self.lost is None:
            try:
                self.run.log_fold_metrics({outcome.fold: outcome.metrics}, self.decision_dates)
            except StoreUnavailableError as exc:
                self.lost = exc
                log.warning(
                    "the tracking store stopped answering (%s); the backtest goes on and will be "
                    "recorded in the fallback store",
                    exc,
                )
        ic = outcome.metrics.get("rank_ic", float("nan"))
        # NaN: no test day of the fold has a known label yet (the last fold, whose labels run past the data)
        shown = f"rank IC {ic:+.3f}" if ic == ic else "rank IC n/a"
        self.bar.set_postfix_str(shown + (" (resumed)" if outcome.resumed else ""))
        self.bar.update(1)
        if self.bar.n >= n_folds:  # the last fold: the stages after it log as usual
            self.close()

    def close(self) -> None:
        """Close the bar and give the console its own handlers back (idempotent)."""
        if self.bar is not None:
            self.bar.close()
        self._logs_above.close()


def log_stage_seconds(timings: Mapping[str, float]) -> None:
    """The one line a benchmark reads (``benchmarks/e2e.py``): where the run's time went."""
    log.info("%s %s", STAGE_SECONDS, json.dumps({k: round(v, 3) for k, v in timings.items()}))
