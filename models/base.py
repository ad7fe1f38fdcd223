"""The ranker protocol: what every model implements, and which labels each can learn from.

A ranker reads :class:`~models.data.RankingData` (the data container, one query group per trading day)
and implements :class:`Ranker`; :class:`RankerBase` holds the defaults of the protocol's optional
members. Which label a model can learn from is the model's own declaration
(:attr:`Ranker.accepted_labels`), checked by :func:`check_label_processing` when a run is composed.

The ``fix:`` line of a refusal names config choices, read from ``conf/`` itself when a refusal is
written (:func:`label_configs`, :func:`model_configs`): a new config file is known without editing code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np

from backtest.errors import ConfigError
from backtest.labels import PROCESSINGS
from models.data import RankingData

#: The label processings whose target is integer relevance levels (``backtest.labels``: int64).
LEVEL_PROCESSINGS: frozenset[str] = frozenset({"bins", "three_class"})

#: Validation metrics a ranker can early-stop on: the mean daily rank IC with the target over the whole
#: list, or NDCG at the ranker's ``ndcg_depth`` (the stocks bought).
EARLY_STOPPING_METRICS: tuple[str, ...] = ("rank_ic", "ndcg")


@runtime_checkable
class Ranker(Protocol):
    """What the rolling engine needs from a model.

    One ranker object may serve a whole backtest: ``prepare`` once with all samples, then ``fit`` and
    ``predict`` per fold (a ranker with warm start continues from its previous fit).

    Besides the methods, a ranker declares ``accepted_labels`` (which targets it can learn from),
    ``stateful`` and ``adopt_state`` (how the engine orders and resumes its folds), and ``ndcg_gain``
    (the gain of the NDCG it trains or early-stops on, which the headline NDCG uses too; its depth is the
    portfolio's ``top_k``, given to the model by its config and never read back from it).
    :class:`RankerBase` gives the defaults of the optional ones (``stateful`` False, ``adopt_state``
    taking over every attribute, ``ndcg_gain`` ``"linear"``).
    """

    #: The label processings (``backtest.labels.PROCESSINGS``) the model can learn from; a run with
    #: another one is refused by :func:`check_label_processing` (and by ``fit``).
    accepted_labels: ClassVar[frozenset[str]]

    #: True when a fit continues from the previous one (warm start): the engine then runs the folds in
    #: order on one ranker object, and a resumed run restores the previous fold's model with
    #: :meth:`adopt_state`. False: every fit starts afresh and folds may run in any order, in parallel.
    stateful: bool

    def adopt_state(self, other: Self) -> None:
        """Take over the fitted state of ``other`` (a ranker of the same class, e.g. one ``load``-ed from
        a checkpoint) while keeping what ``prepare`` built, so that the next ``fit`` continues from it."""
        ...

    @property
    def ndcg_gain(self) -> str | tuple[float, ...]:
        """The gain of the NDCG the model trains or early-stops on: a name of
        :func:`backtest.metrics.relevance_gains` (``"linear"``,
        ``"exponential"``) or one gain per relevance level."""
        ...

    @property
    def params(self) -> dict[str, Any]:
        """The hyper-parameters, flat and JSON-serialisable (logged as run params)."""
        ...

    def prepare(self, data: RankingData, *, history_end: np.datetime64 | None = None) -> None:
        """One-off preprocessing over every sample of the backtest (may do nothing).

        Warnings
        --------
        Only samples dated ``<= history_end`` may shape data-dependent preprocessing (e.g. LightGBM's
        bin edges). Pass the first fold's training end; None uses every date (a look-ahead of the
        feature distribution, logged as a warning).
        """
        ...

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Self:
        """Train on ``train`` (relevance required); ``valid`` (a purged tail) drives early stopping."""
        ...

    def predict(self, data: RankingData) -> np.ndarray:
        """Scores, float64 (n_samples,), aligned with ``data``'s rows; higher ranks first."""
        ...

    def save(self, path: str | Path) -> None:
        """Write the fitted model into the directory ``path`` (created if missing)."""
        ...

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read a model written by :meth:`save`; its predictions equal the saved model's."""
        ...

    def feature_importance(self) -> dict[str, float]:
        """Gain importance by feature name (empty when the model has none)."""
        ...


class RankerBase:
    """The defaults of :class:`Ranker`'s optional members; a ranker class inherits them and overrides
    what it needs (it must still declare ``accepted_labels`` and implement the methods).

    Examples
    --------
    >>> class Constant(RankerBase):
    ...     accepted_labels = LEVEL_PROCESSINGS
    ...     def __init__(self, value: float = 0.0) -> None:
    ...         self.value = value
    >>> a, b = Constant(), Constant(2.0)
    >>> a.stateful, a.ndcg_gain
    (False, 'linear')
    >>> a.adopt_state(b); a.value
    2.0
    """

    accepted_labels: ClassVar[frozenset[str]]
    stateful: bool = False

    def adopt_state(self, other: Self) -> None:
        """Become ``other``: every instance attribute of ``other`` replaces this one's. Right for a
        ranker whose whole state is its fitted attributes; a ranker whose ``prepare`` builds something
        worth keeping (LambdaRank's binned panel) overrides it."""
        if type(other) is not type(self):
            raise TypeError(
                f"{type(self).__name__}.adopt_state: expected a {type(self).__name__}, "
                f"received a {type(other).__name__}."
            )
        vars(self).update(vars(other))

    @property
    def ndcg_gain(self) -> str | tuple[float, ...]:
        return "linear"

    def share_prepared(self, directory: Path) -> Any | None:
        """After ``prepare``: write what it built into new files under ``directory`` and return a small
        picklable handle, so that rankers of the same config in other processes (Dask workers) are
        prepared with ``prepare(data, history_end=..., shared=handle)`` instead of repeating the work; a
        dict whose files stand under :data:`SHARED_FILE` keys (:func:`shared_files`). None (this
        default) when there is nothing worth sharing and ``prepare`` takes no ``shared``."""
        return None


#: The key of a file's path in a ``share_prepared`` handle (a dict, nested by an ensemble's members).
SHARED_FILE = "file"


def share_prepared(ranker: object, directory: Path) -> Any | None:
    """``ranker.share_prepared(directory)`` (:meth:`RankerBase.share_prepared`), None for a ranker without
    it: the one call for rankers that may not derive from :class:`RankerBase`."""
    share = getattr(ranker, "share_prepared", None)
    return share(directory) if share is not None else None


def shared_files(handle: Any) -> list[str]:
    """The paths of the files a ``share_prepared`` handle refers to (the values of its
    :data:`SHARED_FILE` keys, at any depth): what the process that asked for it checks and removes."""
    if not isinstance(handle, dict):
        return []
    return [f for key, value in handle.items() for f in ([value] if key == SHARED_FILE else shared_files(value))]


def check_label_processing(ranker: object, processing: str) -> None:
    """Refuse a label processing the ranker (an instance or a class) cannot learn from.

    Call it when a run is composed, before any work: LambdaRank trained on raw returns would otherwise
    learn nothing and still report a result.

    Raises
    ------
    ConfigError : ``processing`` is not in the ranker's ``accepted_labels``; the message names the
        accepted processings and a ``fix:`` line with the config choices that work.

    Examples
    --------
    >>> class LevelsOnly(RankerBase):
    ...     accepted_labels = LEVEL_PROCESSINGS
    >>> check_label_processing(LevelsOnly, "bins")
    >>> check_label_processing(LevelsOnly(), "raw")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    backtest.errors.ConfigError: LevelsOnly cannot learn from label.processing=raw: expected one of bins, three_class, received raw.
      fix: label=default (bins) or label=three_class, or model=linear or model=stock_transformer
    """
    cls = ranker if isinstance(ranker, type) else type(ranker)
    accepted = getattr(ranker, "accepted_labels", None)  # an instance's own (an ensemble's: its members')
    if accepted is None:
        raise ConfigError(
            f"{cls.__name__}: expected a ranker declaring accepted_labels (the label processings it can "
            f"learn from), received none.\n  fix: set {cls.__name__}.accepted_labels, e.g. "
            "frozenset({'bins', 'three_class'}), or inherit models.base.RankerBase and declare it"
        )
    if processing not in PROCESSINGS:
        raise ConfigError(
            f"label.processing: expected one of {', '.join(PROCESSINGS)}, received {processing!r}.\n"
            f"  fix: {' or '.join(_label_choice(p) for p in PROCESSINGS)}"
        )
    if processing in accepted:
        return
    raise ConfigError(
        f"{cls.__name__} cannot learn from label.processing={processing}: expected one of "
        f"{', '.join(sorted(accepted))}, received {processing}.\n  fix: {label_processing_fix(ranker, processing)}"
    )


def label_processing_fix(ranker: object, processing: str) -> str:
    """The ``fix:`` advice for a ``processing`` the ranker refuses: the label choices it accepts, then
    the models (:func:`model_families`) that accept ``processing``."""
    cls = ranker if isinstance(ranker, type) else type(ranker)
    accepted = getattr(ranker, "accepted_labels", frozenset())
    labels = " or ".join(_label_choice(p) for p in PROCESSINGS if p in accepted)
    models = [
        name
        for name, target in model_families().items()
        if not target.endswith(f":{cls.__name__}") and processing in _accepted_labels_of(target)
    ]
    return labels + (f", or {' or '.join(f'model={m}' for m in models)}" if models else "")


def _accepted_labels_of(target: str) -> frozenset[str]:
    """``accepted_labels`` of the ranker class at ``module:class`` (imported on demand: error path only)."""
    import importlib

    module, name = target.split(":")
    return frozenset(getattr(getattr(importlib.import_module(module), name), "accepted_labels", ()))


def label_configs() -> dict[str, str]:
    """The options of the ``label`` config group: each ``conf/label/*.yaml`` name -> its ``processing``
    (a file's own value, else the one of the file its ``defaults`` list names). Read on the error path.

    >>> label_configs()["default"], label_configs()["three_class"]
    ('bins', 'three_class')
    """
    group = _config_group("label")
    return {name: str(value) for name in group if (value := _config_value(group, name, "processing")) is not None}


def model_configs() -> dict[str, str]:
    """The options of the ``model`` config group: each ``conf/model/*.yaml`` name -> the ``module:class``
    of its ``_target_`` (a file's own, else the one of the file its ``defaults`` list names, as an
    ablation variant inherits its family's). Read on the error path.

    >>> model_configs()["lambdarank"]
    'models.lambdarank:LambdaRankRanker'
    """
    group = _config_group("model")
    targets = {name: _config_value(group, name, "_target_") for name in group}
    return {name: ":".join(str(t).rsplit(".", 1)) for name, t in targets.items() if t is not None}


def model_families() -> dict[str, str]:
    """The :func:`model_configs` that name their ranker class themselves, one per class (the fix lines'
    vocabulary); the others are ablation variants of one of them and accept the labels it accepts.

    >>> sorted(model_families())
    ['ensemble', 'lambdarank', 'linear', 'stock_transformer']
    """
    group = _config_group("model")
    return {name: target for name, target in model_configs().items() if "_target_" in group[name]}


def _label_choice(processing: str) -> str:
    """The config choices that give ``processing``: ``label=NAME`` for each label config that sets it,
    with the processing in brackets where the name differs; ``label.processing=...`` without one."""
    names = sorted(name for name, value in label_configs().items() if value == processing)
    return (
        " or ".join(f"label={n}" + ("" if n == processing else f" ({processing})") for n in names)
        or f"label.processing={processing}"
    )


def _config_group(group: str) -> dict[str, dict[str, Any]]:
    """The YAML of every ``conf/<group>/*.yaml`` of the project, by config name (empty without conf/)."""
    import yaml

    from backtest import PROJECT_DIR

    files = sorted((PROJECT_DIR / "conf" / group).glob("*.yaml"))
    return {path.stem: yaml.safe_load(path.read_text(encoding="utf-8")) or {} for path in files}


def _config_value(group: dict[str, dict[str, Any]], name: str, key: str, seen: frozenset[str] = frozenset()) -> Any:
    """``key`` of config ``name``: its own value, else the first found in the group configs its
    ``defaults`` list names (Hydra puts ``_self_`` last by default: a file's own value wins)."""
    config = group.get(name, {})
    if key in config:
        return config[key]
    for parent in config.get("defaults", []):
        if isinstance(parent, str) and parent in group and parent not in seen | {name}:
            value = _config_value(group, parent, key, seen | {name})
            if value is not None:
                return value
    return None
