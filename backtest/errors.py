"""The project's error hierarchy.

Every error a user can trigger with their data or config derives from :class:`BacktestError`. The CLI
prints the message of a :class:`BacktestError` and exits non-zero without a traceback, so a message must
say what was expected, what was received, where (codes, dates, keys) and how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable


class BacktestError(Exception):
    """Base class of every user-facing error of the project."""


class DataContractError(BacktestError):
    """The input data breaks the panel contract (see ``backtest.data.schema``)."""


class ConfigError(BacktestError):
    """A configuration value is missing, unknown or inconsistent."""


class LeakageError(BacktestError):
    """A training sample's label reaches past the decision date it is used for."""


class FeatureAuditError(BacktestError):
    """A feature's past values change when future data is removed (look-ahead)."""


class InsufficientHistoryError(BacktestError):
    """Not enough trading days to build the requested features, labels or folds."""


class TrackingError(BacktestError):
    """The experiment store (MLflow) cannot be reached, or it refused a record."""


class StoreUnavailableError(TrackingError):
    """The experiment store stopped answering (a lost server, a full disk): the record went nowhere."""


class RunInterrupted(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM, SIGHUP, Ctrl-C); the tracked run ends KILLED.

    ``exit_status`` is the shell's for that signal, ``128 + signum`` (143 for SIGTERM, 130 for Ctrl-C).
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    def __reduce__(self) -> tuple[type, tuple[str, int]]:  # pickled as it was made (a worker's error)
        return type(self), (str(self), self.signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def preview(items: Iterable[object], limit: int = 5) -> str:
    """Format the first ``limit`` items of ``items`` for an error message, with the total count.

    >>> preview(["a", "b", "c"], limit=2)
    'a, b (and 1 more)'
    """
    items = list(items)
    shown = ", ".join(str(x) for x in items[:limit])
    rest = len(items) - limit
    return f"{shown} (and {rest} more)" if rest > 0 else shown
