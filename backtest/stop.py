"""Stopping a run: one flag, set by the signal handlers, read at the run's safe points.

A signal handler that raised would raise wherever the interpreter happens to be: inside LightGBM's
cleanup (a ``__del__``, whose exceptions Python prints as "Exception ignored" and drops, so the run
went on to FINISHED) or halfway through a write to the store (which could leave SQLite locked, so
the run could not be ended). The handlers of :func:`stop_on_signals` therefore only record the
signal; the run stops at the next safe point, where :func:`raise_if_stopped` raises
:class:`~backtest.errors.RunInterrupted`:

- between folds, and after each fit returns (``backtest/engine.py``);
- between LightGBM's boosting rounds (a callback, ``models/lambdarank.py``) and between the
  StockTransformer's epochs (``models/transformer_ranker.py``);
- before and after each write to the store (``backtest/tracking/run.py``).

The tracked run then ends KILLED (:meth:`backtest.tracking.Tracker.start_run`) and the CLI exits
with ``128 + signal`` and a one-line message. A signal is a fact about the process, so the flag is
the process's: the one piece of module state here, written only by the handlers.

>>> try:
...     with stop_on_signals():
...         signal.raise_signal(signal.SIGTERM)  # the handler only records it
...         print("still running, stop requested by", stop_requested())
...         raise_if_stopped()  # a safe point
...         print("not reached")
... except RunInterrupted as exc:
...     print(f"stopped: {exc}, exit status {exc.exit_status}")
still running, stop requested by SIGTERM
stopped: signal SIGTERM, exit status 143
>>> stop_requested() is None  # leaving the block restores the handlers and lowers the flag
True
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from backtest.errors import RunInterrupted

#: the signals that stop a run: a scheduler's stop, Ctrl-C, a closed terminal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_requested: list[signal.Signals] = []  # the stop flag: the signals received, in order


def stop_requested() -> str | None:
    """The name of the first stop signal received (``"SIGTERM"``), or None."""
    return _requested[0].name if _requested else None


def raise_if_stopped() -> None:
    """A safe point: raise :class:`RunInterrupted` when a stop signal has been received."""
    if _requested:
        raise RunInterrupted(f"signal {_requested[0].name}", signum=int(_requested[0]))


def _request(signum: int, frame: Any) -> None:
    _requested.append(signal.Signals(signum))


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM, SIGINT (Ctrl-C) and SIGHUP set the stop flag while the block runs. A stop that no safe
    point saw raises as the block ends; then the previous handlers come back and the flag is lowered.
    Outside the main thread (where Python cannot install handlers) the block runs with the handlers as
    they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _request) for sig in STOP_SIGNALS}
    try:
        yield
        raise_if_stopped()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested.clear()
