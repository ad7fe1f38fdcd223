"""Content-addressed feature cache: a built FeatureMatrix stored on disk under its fingerprint.

The key is the matrix fingerprint, a hash of (data fingerprint, feature set, registry, row mode,
``FEATURE_CODE_VERSION``, ``code_fingerprint("features")``): any change to the data, the set or the
feature code (its source, or the numpy / pandas / scipy it runs on) gives a new key, so a stale entry is
never read, while a change elsewhere (a model, the tracking package) still hits. Layout, one folder per
entry::

    <directory>/<key>/values.npy    float32 (n_rows, n_features)
    <directory>/<key>/index.npz     the (date, code) row index as levels and integer codes
    <directory>/<key>/meta.json     names, fingerprint, spec, created (UTC), shape, and the checksums of
                                    values (the array's bytes), index.npz (the file) and meta.json itself

An entry is written to a temporary folder in ``<directory>``, meta.json last, and renamed into place in
one step, so a run killed while writing leaves at most a ``.tmp-*`` folder that is never read (``clear``
removes it). Every load verifies the checksums (xxh3-128, :mod:`backtest.checksum`; load times:
benchmarks/README.md, bench_features.py): an entry truncated, overwritten or otherwise changed on disk is discarded with
one warning and rebuilt, never used.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.checksum import CHECKSUM_ALGORITHM, checksum
from backtest.data.fingerprint import panel_fingerprint
from backtest.features.build import Allocate, FeatureMatrix, Rows, build_features, check_panel, feature_fingerprint
from backtest.features.registry import FeatureRegistry, default_registry
from backtest.features.sets import FeatureSetSpec

log = logging.getLogger("backtest.features")

_TMP_PREFIX = ".tmp-"


class CorruptEntryError(ValueError):
    """A stored file does not match the checksum written with it (caught inside this module and
    :mod:`backtest.engine`: the entry is discarded and recomputed)."""


def _seal(meta: dict) -> dict:
    """``meta`` with ``meta_checksum``, the checksum of its other keys."""
    body = {k: v for k, v in meta.items() if k != "meta_checksum"}
    return {**body, "meta_checksum": checksum(json.dumps(body, sort_keys=True))}


def _read_sealed(path: Path) -> dict:
    """The JSON object at ``path``, after checking its ``meta_checksum`` (CorruptEntryError when it is
    missing or does not match)."""
    meta = json.loads(path.read_text())
    if not isinstance(meta, dict) or meta.get("checksum_algorithm") != CHECKSUM_ALGORITHM:
        raise CorruptEntryError(f"{path.name} carries no {CHECKSUM_ALGORITHM} checksums")
    if _seal(meta).get("meta_checksum") != meta.get("meta_checksum"):
        raise CorruptEntryError(f"{path.name} does not match its checksum")
    return meta


@dataclass(frozen=True)
class CacheEntry:
    """One stored feature matrix: its key, size on disk in bytes, creation time (UTC) and shape."""

    key: str
    size_bytes: int
    created: datetime
    n_rows: int
    n_features: int
    feature_set: str


class FeatureCache:
    """The feature matrices stored under ``directory`` (created on first write).

    Parameters
    ----------
    directory : where entries live; the CLI passes ``<project>/.cache/features``.
    mmap : the values as a read-only memory map of the entry's file: they live in the shared page cache
        instead of process memory, and a pass over them maps in only the pages it reads and drops them
        after (:mod:`backtest.memory`); a miss is built straight into the entry's file
        (:meth:`build`). The engine uses it, so that a backtest does not hold its whole matrix. The
        default (False) reads the whole file on load and builds in memory, which is faster when every
        value is used and memory is plenty (page faults on a cold file read it more slowly than one
        sequential read).
    """

    def __init__(self, directory: str | os.PathLike[str], mmap: bool = False) -> None:
        self.directory = Path(directory)
        self.mmap = mmap

    def path(self, key: str) -> Path:
        return self.directory / key

    def load(self, key: str) -> FeatureMatrix | None:
        """The matrix stored under ``key``, or None when there is no complete entry.

        Every file is checked against the checksum stored with it; an entry that fails (truncated,
        overwritten, written before checksums, unreadable) is removed with one warning, and None is
        returned so that the caller rebuilds it. With ``mmap`` the values are a read-only ``np.memmap``
        (the check reads them once, a chunk at a time, which brings them into the page cache, not into
        this process).
        """
        folder = self.path(key)
        if not (folder / "meta.json").is_file():
            return None
        try:
            meta = _read_sealed(folder / "meta.json")
            values = np.load(folder / "values.npy", allow_pickle=False, mmap_mode="r" if self.mmap else None)
            if values.dtype != np.float32 or list(values.shape) != list(meta["shape"]):
                raise CorruptEntryError(
                    f"values.npy holds {values.dtype} {values.shape}, meta.json says float32 {tuple(meta['shape'])}"
                )
            if checksum(values) != meta["checksums"]["values"]:
                raise CorruptEntryError("values.npy does not match its checksum")
            index_bytes = (folder / "index.npz").read_bytes()
            if checksum(index_bytes) != meta["checksums"]["index"]:
                raise CorruptEntryError("index.npz does not match its checksum")
            with np.load(io.BytesIO(index_bytes), allow_pickle=False) as idx:
                index = pd.MultiIndex(
                    levels=[pd.DatetimeIndex(idx["date_levels"]), pd.Index(idx["code_levels"].astype(str))],
                    codes=[idx["date_codes"], idx["code_codes"]],
                    names=["date", "code"],
                    verify_integrity=False,
                )
            matrix = FeatureMatrix(values, list(meta["names"]), index, meta["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            log.warning("feature cache: entry %s is corrupt (%s); discarded, it will be rebuilt", key, exc)
            shutil.rmtree(folder, ignore_errors=True)
            return None
        return matrix

    def store(self, matrix: FeatureMatrix, spec: FeatureSetSpec | None = None) -> Path:
        """Write ``matrix`` under its fingerprint (atomically); an existing entry is kept as is."""
        final = self.path(matrix.fingerprint)
        if (final / "meta.json").is_file():
            return final
        tmp = self._new_folder(matrix.fingerprint)
        try:
            np.save(tmp / "values.npy", np.ascontiguousarray(matrix.values), allow_pickle=False)
            return self._finish(tmp, matrix, spec)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def build(
        self, key: str, make: Callable[[Allocate], FeatureMatrix], spec: FeatureSetSpec | None = None
    ) -> FeatureMatrix:
        """``make(allocate)``, the matrix of fingerprint ``key`` built straight into a new entry's file,
        stored under ``key`` (atomically) and returned as a read-only memory map of it.

        ``allocate(shape)`` gives ``make`` a writable memory map of the entry's ``values.npy``; the build
        writes it a chunk of rows at a time and drops each chunk's pages (:mod:`backtest.memory`), so the
        matrix is never whole in this process's memory. An entry another process stored meanwhile is
        identical: it is kept and read.
        """
        tmp = self._new_folder(key)
        try:

            def allocate(shape: tuple[int, int]) -> np.ndarray:
                if not shape[0] * shape[1]:  # an empty file cannot be mapped
                    return np.empty(shape, dtype=np.float32)
                return np.lib.format.open_memmap(tmp / "values.npy", mode="w+", dtype=np.float32, shape=shape)

            matrix = make(allocate)
            if matrix.fingerprint != key:
                raise ValueError(f"feature cache: built matrix {matrix.fingerprint} for the key {key}")
            if not (tmp / "values.npy").is_file():
                np.save(tmp / "values.npy", matrix.values, allow_pickle=False)
            final = self._finish(tmp, matrix, spec)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        values = np.load(final / "values.npy", allow_pickle=False, mmap_mode="r")
        return FeatureMatrix(values, matrix.names, matrix.index, matrix.fingerprint)

    def _new_folder(self, key: str) -> Path:
        """A new temporary folder for the entry ``key`` (renamed into place by :meth:`_finish`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"{_TMP_PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        return tmp

    def _finish(self, tmp: Path, matrix: FeatureMatrix, spec: FeatureSetSpec | None) -> Path:
        """Write the index and meta.json (last) beside the values in ``tmp`` and rename it into place;
        the entry's folder. Another process's entry of the same key, stored first, is kept."""
        final = self.path(matrix.fingerprint)
        index = matrix.index
        np.savez(
            tmp / "index.npz",
            date_levels=np.asarray(index.levels[0].to_numpy(), dtype="datetime64"),
            date_codes=index.codes[0],
            code_levels=np.asarray(index.levels[1].astype(str), dtype=str),
            code_codes=index.codes[1],
        )
        meta = {
            "fingerprint": matrix.fingerprint,
            "names": matrix.names,
            "shape": list(matrix.shape),
            "feature_set": spec.name if spec else None,
            "spec": spec.as_dict() if spec else None,
            "created": datetime.now(UTC).isoformat(),
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "checksums": {"values": checksum(matrix.values), "index": checksum((tmp / "index.npz").read_bytes())},
        }
        (tmp / "meta.json").write_text(json.dumps(_seal(meta)))
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same key first: theirs is identical
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def entries(self) -> list[CacheEntry]:
        """The complete entries, oldest first (temporary folders of interrupted writes are skipped)."""
        if not self.directory.is_dir():
            return []
        out = []
        for folder in self.directory.iterdir():
            if folder.name.startswith(_TMP_PREFIX) or not (folder / "meta.json").is_file():
                continue
            try:
                meta = json.loads((folder / "meta.json").read_text())
            except (OSError, ValueError):
                continue
            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            rows, cols = meta.get("shape", [0, 0])
            out.append(
                CacheEntry(
                    folder.name,
                    size,
                    datetime.fromisoformat(meta["created"]),
                    rows,
                    cols,
                    meta.get("feature_set") or "?",
                )
            )
        return sorted(out, key=lambda e: e.created)

    def clear(self, keys: list[str] | None = None) -> int:
        """Remove the given entries (default: all, plus leftovers of interrupted writes); returns how
        many entries were removed."""
        if not self.directory.is_dir():
            return 0
        removed = 0
        for folder in list(self.directory.iterdir()):
            if not folder.is_dir():
                continue
            leftover = folder.name.startswith(_TMP_PREFIX)
            if keys is None or folder.name in keys:
                shutil.rmtree(folder, ignore_errors=True)
                removed += not leftover
        return removed


def load_or_build_features(
    panel: pd.DataFrame,
    spec: FeatureSetSpec | None,
    cache: FeatureCache | str | os.PathLike[str],
    *,
    data_fingerprint: str | None = None,
    registry: FeatureRegistry | None = None,
    rows: Rows = "eligible",
) -> tuple[FeatureMatrix, bool]:
    """The feature matrix of ``panel`` from the cache when stored, else built and stored.

    Parameters are those of ``build_features``, plus ``cache`` (a FeatureCache or its directory).

    Returns
    -------
    (matrix, hit) : hit is True when the matrix was read from the cache.
    """
    spec = spec or FeatureSetSpec()
    registry = registry or default_registry()
    cache = cache if isinstance(cache, FeatureCache) else FeatureCache(cache)
    check_panel(panel)
    data_fingerprint = data_fingerprint or panel_fingerprint(panel)
    key = feature_fingerprint(data_fingerprint, spec, registry, rows)
    started = time.perf_counter()
    cached = cache.load(key)
    if cached is not None:
        log.info("features %r: loaded from cache %s in %.2f s", spec.name, key, time.perf_counter() - started)
        return cached, True

    def build(allocate: Allocate | None = None) -> FeatureMatrix:
        return build_features(
            panel, spec, data_fingerprint=data_fingerprint, registry=registry, rows=rows, allocate=allocate
        )

    if cache.mmap:  # built into the entry's file, not held in memory
        matrix = cache.build(key, build, spec)
    else:
        matrix = build()
        cache.store(matrix, spec)
    log.info("features %r: stored in cache as %s", spec.name, key)
    return matrix, False
