"""Point-in-time index membership from constituent snapshots."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


def membership_from_snapshots(snapshots: pd.DataFrame, index: pd.MultiIndex) -> np.ndarray:
    """Whether each (date, code) of ``index`` is an index member, from dated constituent snapshots.

    Parameters
    ----------
    snapshots : DataFrame with columns ``date`` (the snapshot's effective trading day) and ``code``; one
        row per constituent per snapshot (Tushare ``index_weight`` is monthly).
    index : the panel's (date, code) index.

    Returns
    -------
    bool array aligned with ``index``: on day t a stock is a member if it is in the latest snapshot dated
    on or before t. Never the next snapshot: carrying a later list backwards would leak future index
    inclusions (survivorship). Days before the first snapshot have no members.
    """
    snap_dates = pd.DatetimeIndex(pd.to_datetime(snapshots["date"]).unique()).sort_values()
    panel_dates = index.get_level_values(0)
    pos = np.searchsorted(snap_dates.to_numpy(), panel_dates.to_numpy(), side="right") - 1
    before = pos < 0
    if before.any():
        log.warning(
            "membership: %d panel rows (before %s) precede the first constituent snapshot; they are not members",
            int(before.sum()),
            f"{snap_dates[0]:%Y-%m-%d}",
        )
    snap_pos = np.searchsorted(snap_dates.to_numpy(), pd.to_datetime(snapshots["date"]).to_numpy())
    members = pd.MultiIndex.from_arrays([snap_pos, snapshots["code"].astype(str).to_numpy()])
    lookup = pd.MultiIndex.from_arrays([np.where(before, -1, pos), index.get_level_values(1).astype(str)])
    return np.asarray(lookup.isin(members)) & ~before
