"""Content fingerprint of a canonical panel."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd


def panel_fingerprint(panel: pd.DataFrame) -> str:
    """A 16-hex-digit content hash of the panel: index, column names, dtypes and values.

    Equal panels (same rows in the same order, same values) give the same fingerprint whatever the
    datetime unit or the memory layout; any changed value, row or column changes it.
    """
    h = hashlib.blake2b(digest_size=8)
    dates = panel.index.get_level_values(0).to_numpy().astype("datetime64[ns]").view("int64")
    h.update(dates.tobytes())
    h.update("\x1f".join(map(str, panel.index.get_level_values(1))).encode())
    for name in panel.columns:
        col = panel[name]
        h.update(f"\x1e{name}:{_kind(col)}".encode())
        if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object or pd.api.types.is_string_dtype(col):
            h.update("\x1f".join("\x00" if pd.isna(v) else str(v) for v in col.astype(object)).encode())
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
    return h.hexdigest()


def _kind(col: pd.Series) -> str:
    if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object or pd.api.types.is_string_dtype(col):
        return "text"
    return str(col.dtype)
