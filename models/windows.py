"""The StockTransformer's input: the wide [date, code, feature] tensor and its [day, stock, window,
feature] view.

:func:`feature_tensor` scatters a (date, code) feature frame onto the full (date x code) grid once per
backtest; :func:`window_view` cuts a batch of days out of it, each stock's last ``window`` days ending at
(and including) the decision day, on numpy or on a torch device. A :class:`~models.data.RankingData`
carries the tensor (``wide``) and each sample's place in it (:meth:`~models.data.RankingData.window_source`).

Timing: the window of decision day t holds days t - window + 1 .. t only, never a later day.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid
from backtest.errors import DataContractError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def feature_tensor(features: pd.DataFrame) -> tuple[np.ndarray, WideGrid]:
    """Scatter a (date, code) feature frame onto the wide [date, code, feature] float32 tensor.

    Parameters
    ----------
    features : DataFrame indexed by (date, code), one column per feature.

    Returns
    -------
    wide : float32 (n_dates, n_codes, n_features), NaN where the frame has no row.
    grid : the :class:`WideGrid` (dates and codes of the axes).
    """
    grid = WideGrid.of(features)
    wide = np.full((*grid.shape, features.shape[1]), np.nan, dtype=np.float32)
    wide[grid.row_pos, grid.col_pos] = features.to_numpy(dtype=np.float32)
    return wide, grid


def window_view(
    wide: np.ndarray | torch.Tensor,
    date_positions: np.ndarray | torch.Tensor,
    window: int = 30,
    *,
    code_positions: np.ndarray | torch.Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray] | tuple[torch.Tensor, torch.Tensor]:
    """The [day, stock, window, feature] view of a batch of days, built from the wide tensor.

    Parameters
    ----------
    wide : float32 [date, code, feature], NaN where missing (numpy); or a torch tensor on any device
        that holds no NaN (sanitise it once with ``nan_to_num`` before upload: NaN never enters torch).
    date_positions : int (days,), rows of ``wide``: the decision days of the batch. Build batches of a
        few days: the result holds ``days * stocks * window * features`` values.
    window : days of history per stock, ending at (and including) the decision day.
    code_positions : int (days, stocks), columns of ``wide`` for each day's stocks, -1 for padding;
        None takes every column of ``wide`` for every day.

    Returns
    -------
    x : float32 (days, stocks, window, features); ``x[d, s, -1]`` is the decision day. Missing values,
        days before the start of ``wide`` and padded stocks are 0.
    mask : bool (days, stocks): True for a real stock; with ``code_positions`` None, a stock that has at
        least one non-NaN feature on the decision day.
    """
    if not isinstance(wide, np.ndarray):
        return _window_view_torch(wide, date_positions, window, code_positions)
    if wide.ndim != 3:
        raise DataContractError(f"window_view: expected wide [date, code, feature], received shape {wide.shape}.")
    dpos = np.asarray(date_positions, dtype=np.int64)
    t = dpos[:, None] - (window - 1) + np.arange(window)  # (days, window)
    t_ok = t >= 0
    if code_positions is None:
        x = wide[np.clip(t, 0, None)]  # (days, window, codes, feat)
        x = x.transpose(0, 2, 1, 3)  # (days, codes, window, feat)
        mask = ~np.isnan(wide[dpos]).all(axis=-1)  # (days, codes)
        x = np.ascontiguousarray(x)
    else:
        cpos = np.asarray(code_positions, dtype=np.int64)
        mask = cpos >= 0  # (days, stocks)
        # (days, 1, window) x (days, stocks, 1) index arrays -> (days, stocks, window, feat)
        x = wide[np.clip(t, 0, None)[:, None, :], np.clip(cpos, 0, None)[:, :, None]]
    np.nan_to_num(x, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    x *= (t_ok[:, None, :] & mask[:, :, None])[..., None]  # zero padded stocks and pre-history days
    return x.astype(np.float32, copy=False), mask


def _window_view_torch(wide, date_positions, window, code_positions):  # type: ignore[no-untyped-def]
    import torch

    dev = wide.device
    dpos = torch.as_tensor(date_positions, dtype=torch.long, device=dev)
    t = dpos[:, None] - (window - 1) + torch.arange(window, device=dev)  # (days, window)
    t_ok = t >= 0
    if code_positions is None:
        x = wide[t.clamp(min=0)].permute(0, 2, 1, 3)  # (days, codes, window, feat)
        mask = wide[dpos].ne(0).any(dim=-1)  # (days, codes): NaN was replaced by 0 before upload
    else:
        cpos = torch.as_tensor(code_positions, dtype=torch.long, device=dev)
        mask = cpos >= 0  # (days, stocks)
        x = wide[t.clamp(min=0)[:, None, :], cpos.clamp(min=0)[:, :, None]]  # (days, stocks, window, feat)
    keep = (t_ok[:, None, :] & mask[:, :, None]).unsqueeze(-1)  # (days, stocks, window, 1)
    return x * keep.to(x.dtype), mask
