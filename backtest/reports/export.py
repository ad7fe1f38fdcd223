"""One run's artifacts as the frames other tools read: alphalens' ``factor_data`` and Qlib's ``pred`` / ``label``.

Both read a run's artifact folder: in the project's store ``mlartifacts/<experiment>/<run id>/artifacts``, from
any store ``mlflow artifacts download -r RUN_ID -d DIR`` (then ``DIR``). They use ``data/predictions.parquet``
(the scores), ``data/forward_returns.parquet`` (the forward returns of the scored rows at every horizon, with
``industry``) and ``config/config.yaml`` (the label's entry and exit days), at the paths of
:data:`backtest.tracking.layout.ARTIFACTS`.

- :func:`alphalens_factor_data`: alphalens' ``factor_data`` (what ``get_clean_factor_and_forward_returns``
  returns), with the run's own forward returns, so alphalens' numbers are the run's: its
  ``factor_information_coefficient`` is the run's daily rank IC.
- :func:`qlib_frames`: Qlib's ``pred`` (column ``score``) and ``label`` (column ``label``, the run's label
  return), indexed by ``(datetime, instrument)`` with Qlib's instrument codes (``SH600000``).

A forward return of horizon ``h`` runs from the open of t+1 (the label's entry) to the open of t+h; alphalens
names a period by the days it is held from the fill, so the column of horizon ``h`` is ``f"{h - 1}D"``: ``1D``
the next open-to-open return, ``4D`` the run's 5-day label (open(t+1) to open(t+5)).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data.qlib import code_to_qlib
from backtest.errors import DataContractError
from backtest.labels import LabelSpec, forward_return_column
from backtest.metrics import SCORE_QUANTILES, horizon_columns, score_quantiles
from backtest.tracking.layout import ARTIFACTS


def alphalens_factor_data(
    run_dir: Path | str,
    *,
    quantiles: int = SCORE_QUANTILES,
    horizons: tuple[int, ...] | None = None,
    label: LabelSpec | None = None,
) -> pd.DataFrame:
    """alphalens' ``factor_data`` of a run: the scores, their forward returns, quantiles and industries.

    Parameters
    ----------
    run_dir : the run's artifact folder (module docstring).
    quantiles : score quantiles a day (deciles by default, the signal page's).
    horizons : the forward returns to keep, as horizons ``h`` (trading days to the exit, the label's
        count); None: every horizon the run stored.
    label : the run's label (its entry day names the periods); None: read from ``config/config.yaml``.

    Returns
    -------
    DataFrame indexed by ``(date, asset)``, the date level's ``freq`` the run's trading days (its scored days:
    alphalens' lags and cumulative returns count them), columns: one forward return per horizon named by the
    days it is held (``f"{h - entry_offset}D"``), ``factor`` (the score), ``group`` (industry, when the run has it) and
    ``factor_quantile`` (1 = lowest scores; :func:`backtest.metrics.score_quantiles`). As
    ``alphalens.utils.get_clean_factor`` does, a row with any of them missing is left out, then the
    quantiles are taken over the rows left (a day whose quantile edges repeat is left out too).
    """
    scores, forward = _read_scored_rows(run_dir)
    spec = label or _label_of(run_dir)
    columns = horizon_columns(forward)
    wanted = tuple(columns) if horizons is None else tuple(horizons)
    missing = [h for h in wanted if h not in columns]
    if missing:
        raise DataContractError(
            f"alphalens_factor_data: the run stored horizons {list(columns)}, not {missing}. Fix: horizons="
            f"{tuple(columns)} (or a subset)."
        )
    data = forward[[columns[h] for h in wanted]].rename(
        columns={columns[h]: f"{h - spec.entry_offset}D" for h in wanted}
    )
    data["factor"] = scores
    if "industry" in forward.columns:
        data["group"] = forward["industry"].astype("category")
    data = data.dropna()
    data["factor_quantile"] = score_quantiles(data["factor"], quantiles)
    data = data.dropna()
    data["factor_quantile"] = data["factor_quantile"].astype(np.int64)
    # the date level keeps every scored day (a MultiIndex keeps the levels of the rows left out), so that the
    # trading calendar of its freq conforms to it
    dates = pd.DatetimeIndex(data.index.levels[0], freq=_trading_days(data.index.levels[0]))
    data.index = data.index.set_levels(dates, level=0).set_names(["date", "asset"])
    return data


def qlib_frames(run_dir: Path | str, *, label: LabelSpec | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Qlib's ``pred`` and ``label`` frames of a run, as its ``SigAnaRecord`` and
    ``qlib.contrib.eva.alpha.calc_ic(pred["score"], label["label"])`` read them.

    Parameters
    ----------
    run_dir : the run's artifact folder (module docstring).
    label : the run's label (its horizon picks the forward return); None: read from ``config/config.yaml``.

    Returns
    -------
    (pred, label) : DataFrames indexed by ``(datetime, instrument)`` (Qlib's codes, ``SH600000``), sorted;
        ``pred`` has every scored row (column ``score``), ``label`` the rows whose label is known (column
        ``label``, the run's label return: open(t+1) to open(t+h), h the label's horizon).
    """
    scores, forward = _read_scored_rows(run_dir)
    spec = label or _label_of(run_dir)
    column = forward_return_column(spec.horizon_days)
    if column not in forward.columns:
        raise DataContractError(
            f"qlib_frames: {run_dir} has no {column} (the label's horizon {spec.horizon_days}); columns "
            f"{list(forward.columns)}. Fix: pass label= the run's LabelSpec."
        )
    index = pd.MultiIndex.from_arrays(
        [scores.index.get_level_values(0), code_to_qlib(scores.index.get_level_values(1))],
        names=["datetime", "instrument"],
    )
    pred = pd.DataFrame({"score": scores.to_numpy()}, index=index).sort_index()
    known = forward[column].reindex(scores.index).to_numpy()
    label_frame = pd.DataFrame({"label": known}, index=index).dropna().sort_index()
    return pred, label_frame


def _read_scored_rows(run_dir: Path | str) -> tuple[pd.Series, pd.DataFrame]:
    """The run's scores and the forward-return frame on the same rows."""
    root = Path(run_dir)
    paths = {name: root / getattr(ARTIFACTS, name) for name in ("predictions", "forward_returns")}
    absent = [str(path) for path in paths.values() if not path.is_file()]
    if absent:
        raise DataContractError(
            f"{root} is not a run's artifact folder with forward returns: missing {', '.join(absent)}. Fix: pass "
            "mlartifacts/<experiment>/<run id>/artifacts, or the folder of `mlflow artifacts download -r RUN_ID "
            "-d DIR` (runs recorded before data/forward_returns.parquet was written have no forward returns)."
        )
    scores = pd.read_parquet(paths["predictions"])["score"]
    forward = pd.read_parquet(paths["forward_returns"]).reindex(scores.index)
    return scores, forward


def _label_of(run_dir: Path | str) -> LabelSpec:
    """The run's label offsets, from its ``config/config.yaml``."""
    import yaml

    path = Path(run_dir) / ARTIFACTS.config
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise DataContractError(
            f"{path} cannot be read ({exc.strerror or exc}); the label's entry and exit days come from it. Fix: pass "
            "label=LabelSpec(entry_offset=..., exit_offset=...) of the run."
        ) from None
    node = config.get("label") or {}
    return LabelSpec(
        entry_offset=int(node.get("entry_offset", LabelSpec.entry_offset)),
        exit_offset=int(node.get("exit_offset", LabelSpec.exit_offset)),
    )


def _trading_days(dates: pd.DatetimeIndex) -> pd.offsets.CustomBusinessDay:
    """The trading calendar of ``dates`` as alphalens infers one: their weekdays, and every such weekday
    between the first and last date that is not among them as a holiday."""
    names = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    weekmask = " ".join(names[d] for d in sorted(set(dates.dayofweek)))
    span = pd.date_range(dates.min(), dates.max(), freq=pd.offsets.CustomBusinessDay(weekmask=weekmask))
    return pd.offsets.CustomBusinessDay(weekmask=weekmask, holidays=list(span.difference(dates).date))
