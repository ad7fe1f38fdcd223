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
    h.update(_joined(panel.index.get_level_values(1), missing=None))
    for name in panel.columns:
        col = panel[name]
        kind = _kind(col)
        h.update(f"\x1e{name}:{kind}".encode())
        if kind == "text":
            h.update(_joined(col, missing="\x00"))
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
    return h.hexdigest()


def _joined(values: pd.Index | pd.Series, missing: str | None) -> bytes:
    r"""``"\\x1f".join`` of ``str(v)`` for every value, UTF-8; a missing value is ``missing`` (None: its
    ``str``, e.g. ``nan``). Strings and categories are converted once per distinct value; a plain object
    column value by value (``1`` and ``1.0`` are one distinct value but two strings)."""
    if values.dtype == object:
        return "\x1f".join(missing if missing is not None and pd.isna(v) else str(v) for v in values).encode()
    codes, uniques = pd.factorize(values, use_na_sentinel=missing is not None)
    text = np.array([str(u) for u in uniques] + [missing], dtype=object)  # code -1 (missing) is the last
    return "\x1f".join(text[codes].tolist()).encode()


def _kind(col: pd.Series) -> str:
    if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object or pd.api.types.is_string_dtype(col):
        return "text"
    return str(col.dtype)
