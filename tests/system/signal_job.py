"""``python -m backtest`` that sends itself a stop signal at a chosen instant: the subprocess of the stop
tests in ``tests/system/test_run_lifecycle.py``.

    python -m tests.system.signal_job POINT SIGNAL [hydra overrides ...]

SIGNAL is ``SIGTERM``, ``SIGINT`` or ``SIGHUP``; POINT is where the process raises it (``signal.raise_signal``:
delivered before the call returns, so the instant is the same on every run):

- ``boosting_round``: in the first LightGBM fit, as its third boosting round begins;
- ``fit_cleanup``: in LightGBM's cleanup at the end of the first fit (the first ``Dataset`` freed, inside
  its ``__del__``, where an exception raised by a signal handler is printed as "Exception ignored" and lost);
- ``fit_returned``: right after the first fit returns;
- ``fold_metrics``: inside the store's transaction that writes the first fold's metrics;
- ``artifacts``: inside the write of the predictions artifact, while the run is recorded;
- ``epoch``: in the StockTransformer's first epoch (with ``model=stock_transformer``).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

import lightgbm as lgb

POINTS = ("boosting_round", "fit_cleanup", "fit_returned", "fold_metrics", "artifacts", "epoch")


def _once(sig: signal.Signals) -> Callable[[], None]:
    fired: list[bool] = []

    def fire() -> None:
        if not fired:
            fired.append(True)
            signal.raise_signal(sig)

    return fire


def arm(point: str, sig: signal.Signals) -> None:
    """Make this process raise ``sig`` at ``point`` (see the module docstring)."""
    fire = _once(sig)
    if point in ("boosting_round", "fit_cleanup"):
        real_train, started = lgb.train, []

        def third_round(env: Any) -> None:
            if env.iteration - env.begin_iteration == 2:
                fire()

        third_round.order = 0  # type: ignore[attr-defined]
        third_round.before_iteration = True  # type: ignore[attr-defined]

        def train(*args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> lgb.Booster:
            started.append(True)
            if point == "boosting_round":
                callbacks = [*(callbacks or []), third_round]
            return real_train(*args, callbacks=callbacks, **kwargs)

        lgb.train = train  # type: ignore[assignment]
        if point == "fit_cleanup":
            real_del = lgb.Dataset.__del__

            def free(self: lgb.Dataset) -> None:
                if started:
                    fire()
                real_del(self)

            lgb.Dataset.__del__ = free  # type: ignore[method-assign]
    elif point == "fit_returned":
        from models.lambdarank import LambdaRankRanker

        real_fit = LambdaRankRanker.fit

        def fit(self: LambdaRankRanker, *args: Any, **kwargs: Any) -> LambdaRankRanker:
            fitted = real_fit(self, *args, **kwargs)
            fire()
            return fitted

        LambdaRankRanker.fit = fit  # type: ignore[method-assign]
    elif point == "fold_metrics":
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        real_log_metrics = SqlAlchemyStore._log_metrics

        def log_metrics(self: SqlAlchemyStore, run_id: str, metrics: list[Any]) -> None:
            real_log_metrics(self, run_id, metrics)
            if any(m.key.startswith("fold/") for m in metrics):
                fire()  # inside log_batch's session

        SqlAlchemyStore._log_metrics = log_metrics  # type: ignore[method-assign]
    elif point == "artifacts":
        from mlflow.tracking import MlflowClient

        real_log_artifact = MlflowClient.log_artifact

        def log_artifact(self: MlflowClient, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
            if "predictions" in str(local_path):
                fire()
            real_log_artifact(self, run_id, local_path, artifact_path)

        MlflowClient.log_artifact = log_artifact  # type: ignore[method-assign]
    elif point == "epoch":
        import torch

        real_clip = torch.nn.utils.clip_grad_norm_

        def clip(*args: Any, **kwargs: Any) -> Any:
            fire()  # the first optimizer step of the first epoch
            return real_clip(*args, **kwargs)

        torch.nn.utils.clip_grad_norm_ = clip
    else:
        raise SystemExit(f"unknown point {point!r}; expected one of {', '.join(POINTS)}")


def main() -> None:
    point, sig, *overrides = sys.argv[1:]
    arm(point, signal.Signals[sig])
    sys.argv[1:] = overrides
    from backtest.cli import main as backtest_main

    backtest_main()


if __name__ == "__main__":
    main()
