"""The fold checkpoint format: one file per finished fold, under a folder named by the run key.

::

    <checkpoint_dir>/<run_key>/fold_0000.npz   meta (fold, code fingerprint, importance, metrics,
                              fold_0001.npz   checksum algorithm), scores, rows, model/<files of
                              ...             ranker.save, secrets redacted> for a stateful ranker, checksum

The run key (:func:`run_key`) hashes everything a fold's outcome depends on, the code fingerprint
(:func:`backtest.code_fingerprint.code_fingerprint`) included, so changed code or packages never resume from what
older code computed. The engine writes and reads the units (:class:`Checkpoints`); ``python -m
backtest.cache`` lists and clears them (:func:`fold_units`). Both go through this module, so the format is
defined once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backtest.checksum import CHECKSUM_ALGORITHM, checksum
from backtest.features.cache import CorruptEntryError
from backtest.labels import LabelSpec
from backtest.splits import RollingSchedule
from models.base import Ranker

log = logging.getLogger(__name__)

#: the file of a fold's unit inside its run key's folder, and the pattern that finds them all
UNIT_FILE = "fold_{fold:04d}.npz"
UNIT_GLOB = "fold_*.npz"
#: the prefix of the arrays that hold a stateful ranker's saved files inside a unit
MODEL_PREFIX = "model/"


@dataclass(frozen=True)
class FoldOutcome:
    """What one fold produced: scores for its decision dates and its evidence (what a unit stores)."""

    fold: int
    scores: np.ndarray  # aligned with the fold's prediction rows
    rows: np.ndarray  # positions of those rows in the feature matrix
    importance: dict[str, float]
    metrics: dict[str, float]
    resumed: bool = False


def run_key(
    data_fp: str,
    feature_fp: str,
    label: LabelSpec,
    schedule: RollingSchedule,
    factory: Callable[[], Ranker],
    seed: int,
    code_fp: str,
) -> str:
    """The checkpoint folder of a run: everything its folds' outcomes depend on, the code included
    (``code_fp``: :func:`backtest.code_fingerprint.code_fingerprint`), so that changed code never resumes from
    folds that older code computed."""
    probe = factory()
    payload = json.dumps(
        {
            "data": data_fp,
            "features": feature_fp,
            "label": repr(label),
            "schedule": repr(schedule),
            "model": type(probe).__name__,
            "params": probe.params,
            "seed": seed,
            "code": code_fp,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.blake2b(payload.encode(), digest_size=10).hexdigest()


class Checkpoints:
    """The finished folds of one run key: one ``fold_NNNN.npz`` per fold, one unit each.

    A unit holds the fold's outcome (scores, rows, importance, metrics), the code fingerprint that
    computed it, for a stateful ranker the model state after the fold (the files of ``ranker.save``),
    and a checksum over all of them. It is written to a temporary file and renamed into place in one
    step, so a kill at any instant leaves the whole unit or none of it: never a model without its
    outcome, nor an outcome without its model (the warm-start resume then continues from exactly the
    state the uninterrupted run had). A unit that fails its checksum, cannot be read, comes from other
    code or lacks the model a stateful ranker needs is deleted with one warning and its fold is
    recomputed.
    """

    def __init__(self, directory: Path, *, code_fingerprint: str, stateful: bool) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.code_fingerprint = code_fingerprint
        self.stateful = stateful
        self._models: dict[int, dict[str, bytes]] = {}
        #: code fingerprints of the units :meth:`completed` read (the one of this run, by the key)
        self.resumed_from: set[str] = set()

    def _path(self, fold: int) -> Path:
        return self.directory / UNIT_FILE.format(fold=fold)

    def save(self, outcome: FoldOutcome, ranker: Ranker | None = None) -> None:
        """Write the unit of ``outcome`` (with the state of ``ranker`` when given) atomically."""
        meta = json.dumps(
            {
                "fold": outcome.fold,
                "code": self.code_fingerprint,
                "importance": outcome.importance,
                "metrics": outcome.metrics,
                "checksum_algorithm": CHECKSUM_ALGORITHM,
            }
        )
        arrays = {"meta": np.frombuffer(meta.encode(), dtype=np.uint8), "scores": outcome.scores, "rows": outcome.rows}
        if ranker is not None:
            with tempfile.TemporaryDirectory(prefix="ranker-state-") as tmp:
                ranker.save(tmp)
                for file in sorted(p for p in Path(tmp).rglob("*") if p.is_file()):
                    name = MODEL_PREFIX + file.relative_to(tmp).as_posix()
                    data = _without_secrets(file.read_bytes()) if file.suffix == ".json" else file.read_bytes()
                    arrays[name] = np.frombuffer(data, dtype=np.uint8)
        arrays["checksum"] = np.frombuffer(unit_checksum(arrays).encode(), dtype=np.uint8)
        tmp_path = self.directory / f".fold_{outcome.fold:04d}.{os.getpid()}.tmp.npz"
        np.savez_compressed(tmp_path, **arrays)  # a warm-started booster's text compresses well
        os.replace(tmp_path, self._path(outcome.fold))

    def completed(self) -> dict[int, FoldOutcome]:
        """The folds whose units pass their checks; the others are deleted (one warning each)."""
        self._remove_leftovers()
        out: dict[int, FoldOutcome] = {}
        for path in fold_units(self.directory):
            try:
                fold = int(path.stem.split("_")[1])
                with np.load(path, allow_pickle=False) as z:
                    arrays = {name: z[name] for name in z.files}
                stored = arrays.pop("checksum").tobytes().decode()
                if stored != unit_checksum(arrays):
                    raise CorruptEntryError("it does not match its checksum")
                meta = json.loads(arrays["meta"].tobytes().decode())
                if meta["fold"] != fold or meta["code"] != self.code_fingerprint:
                    raise CorruptEntryError(
                        f"it holds fold {meta['fold']} of code {meta['code']}, expected fold "
                        f"{fold} of code {self.code_fingerprint}"
                    )
                model = {
                    name.removeprefix(MODEL_PREFIX): a.tobytes()
                    for name, a in arrays.items()
                    if name.startswith(MODEL_PREFIX)
                }
                if self.stateful and not model:
                    raise CorruptEntryError("it holds no model state, which a stateful ranker needs to continue")
                outcome = FoldOutcome(
                    fold, arrays["scores"], arrays["rows"], meta["importance"], meta["metrics"], resumed=True
                )
            except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
                log.warning("checkpoint %s is corrupt (%s); deleted, its fold will be recomputed", path, exc)
                path.unlink(missing_ok=True)
                continue
            out[fold] = outcome
            self.resumed_from.add(meta["code"])
            if model:
                self._models[fold] = model
        if out:
            log.info("resuming: %d finished fold(s) found in %s", len(out), self.directory)
        return out

    def restore_ranker(self, fold: int, current: Ranker) -> Ranker:
        """``current`` with the model state saved with ``fold`` (:meth:`Ranker.adopt_state`)."""
        with tempfile.TemporaryDirectory(prefix="ranker-state-") as tmp:
            for name, data in self._models[fold].items():
                target = Path(tmp) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            current.adopt_state(type(current).load(tmp))
        return current

    def _remove_leftovers(self) -> None:
        """Delete the temporary files of writers that were killed (their process is gone)."""
        for path in self.directory.glob(".fold_*.tmp.npz"):
            try:
                os.kill(int(path.name.split(".")[2]), 0)
            except (ValueError, IndexError, ProcessLookupError):
                path.unlink(missing_ok=True)
            except PermissionError:  # alive, another user's
                pass


def _without_secrets(metadata: bytes) -> bytes:
    """A ranker's JSON metadata with the values of its secret config keys replaced by ``***``
    (:func:`backtest.tracking.redaction.redact_config`, the rule of the run's params): a unit never stores a
    password, even one read from the environment. A resumed warm start takes the fitted state from the unit
    (:meth:`Ranker.adopt_state`) and keeps the config of the run that resumes it."""
    from backtest.tracking.redaction import redact_config

    return json.dumps(redact_config(json.loads(metadata)), indent=2).encode()


def unit_checksum(arrays: dict[str, np.ndarray]) -> str:
    """Checksum over a checkpoint unit's arrays (names and contents, in name order)."""
    parts: list[np.ndarray | str] = []
    for name in sorted(arrays):
        parts += [name, arrays[name]]
    return checksum(*parts)


def fold_units(directory: Path | str) -> list[Path]:
    """The fold units in the folder of one run key, in fold order (unchecked: :meth:`Checkpoints.completed`
    checks them)."""
    return sorted(Path(directory).glob(UNIT_GLOB))
