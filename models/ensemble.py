"""EnsembleRanker: member rankers fitted on the same fold, their scores combined per day.

Each member goes through the ranker protocol as it would alone (``prepare`` once, ``fit`` on the
fold's purged training days with its validation tail, ``predict`` on the decision days), so the
ensemble inherits their leakage guards: it sees no row a member does not. The day's scores of each
member become percentile ranks within the day (scores of different models have different scales), and
the ensemble's score is their weighted mean:

- ``combine="rank_mean"``: equal weights;
- ``combine="valid_ic"``: weights proportional to each member's mean daily rank IC on the fold's
  purged validation tail (negative ones count as 0; equal weights when none is positive or the fold
  has no tail). The tail's rank IC is noisy (20 days: a standard error near 0.02), so these weights
  are too: ``experiments/models/`` measures both.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, DataContractError
from backtest.metrics import daily_ic
from models.base import Ranker, RankerBase, share_prepared
from models.data import RankingData

META_FILE = "ensemble.json"
COMBINE = ("rank_mean", "valid_ic")


class EnsembleRanker(RankerBase):
    """Rank-combined members (see the module docstring).

    Parameters
    ----------
    members : name -> a ranker, or a factory of one (a Hydra ``_partial_`` config), in order.
    combine : ``"rank_mean"`` or ``"valid_ic"``.

    Attributes
    ----------
    weights : name -> weight of the latest fit (summing to 1).
    accepted_labels : the label processings every member accepts (an instance attribute).
    """

    #: none for the class: an instance accepts what all its members accept (set in ``__init__``), so the
    #: class is never suggested for a label on the strength of members it may not have
    accepted_labels: frozenset[str] = frozenset()

    def __init__(self, members: Mapping[str, Ranker | Callable[[], Ranker]], combine: str = "rank_mean") -> None:
        if not members:
            raise ConfigError("model=ensemble: expected at least one member in model.members, received none.")
        if combine not in COMBINE:
            raise ConfigError(f"model.combine: expected one of {', '.join(COMBINE)}, received {combine!r}.")
        # a ranker class passes the protocol's isinstance check too: it is a factory
        self.members: dict[str, Ranker] = {
            name: (m if isinstance(m, Ranker) and not isinstance(m, type) else m()) for name, m in members.items()
        }
        self.combine = combine
        self.accepted_labels = frozenset.intersection(*(frozenset(m.accepted_labels) for m in self.members.values()))
        self.weights: dict[str, float] = {name: 1.0 / len(self.members) for name in self.members}
        self.last_fit: dict[str, Any] = {}

    @property
    def stateful(self) -> bool:  # type: ignore[override]
        """True when a member continues from its previous fit (the engine then orders the folds)."""
        return any(m.stateful for m in self.members.values())

    @property
    def ndcg_gain(self) -> str | tuple[float, ...]:
        """The first member's gain."""
        return next(iter(self.members.values())).ndcg_gain

    @property
    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"combine": self.combine, "members": ",".join(self.members)}
        for name, member in self.members.items():
            out.update({f"{name}.{k}": v for k, v in member.params.items()})
        return out

    def adopt_state(self, other: Self) -> None:
        if type(other) is not type(self) or list(other.members) != list(self.members):
            raise TypeError("EnsembleRanker.adopt_state: expected an ensemble of the same members.")
        for name, member in self.members.items():
            member.adopt_state(other.members[name])  # type: ignore[arg-type]
        self.weights, self.last_fit = dict(other.weights), dict(other.last_fit)

    def prepare(
        self, data: RankingData, *, history_end: np.datetime64 | None = None, shared: Any | None = None
    ) -> None:
        """Prepare every member; one that :meth:`share_prepared` shared reads what it prepared."""
        for name, member in self.members.items():
            if shared is not None and name in shared:
                member.prepare(data, history_end=history_end, shared=shared[name])  # type: ignore[call-arg]
            else:
                member.prepare(data, history_end=history_end)

    def share_prepared(self, directory: Path) -> dict[str, Any] | None:
        """The members' handles (:meth:`RankerBase.share_prepared`) by name; None when none shares."""
        handles = {name: share_prepared(m, directory) for name, m in self.members.items()}
        kept = {name: h for name, h in handles.items() if h is not None}
        return kept or None

    def fit(self, train: RankingData, valid: RankingData | None = None) -> Self:
        """Fit every member on ``train`` (``valid`` their early-stopping tail), then weigh them."""
        fits = {}
        for name, member in self.members.items():
            member.fit(train, valid)
            fits[name] = dict(getattr(member, "last_fit", {}) or {})
        ics = {}
        if valid is not None and valid.n_samples and valid.relevance is not None:
            ics = {name: _mean_rank_ic(m.predict(valid), valid) for name, m in self.members.items()}
        raw = {name: max(ics.get(name, 0.0), 0.0) for name in self.members} if self.combine == "valid_ic" else {}
        total = sum(raw.values())
        if total > 0:
            self.weights = {name: w / total for name, w in raw.items()}
        else:
            self.weights = {name: 1.0 / len(self.members) for name in self.members}
        self.last_fit = {"members": fits, "valid_rank_ic": ics, "weights": dict(self.weights)}
        return self

    def predict(self, data: RankingData) -> np.ndarray:
        """The weighted mean of the members' daily percentile ranks, float64 (n_samples,)."""
        out = np.zeros(data.n_samples)
        for name, member in self.members.items():
            out += self.weights[name] * daily_percentile(np.asarray(member.predict(data), dtype=np.float64), data)
        return out

    def feature_importance(self) -> dict[str, float]:
        """The mean over members with an importance of each one's share of its total (a feature's share
        of the ensemble's attention); empty when no member reports any."""
        shares = []
        for member in self.members.values():
            imp = member.feature_importance()
            total = sum(imp.values())
            if total > 0:
                shares.append({k: v / total for k, v in imp.items()})
        if not shares:
            return {}
        names = sorted(set().union(*shares))
        return {k: float(np.mean([s.get(k, 0.0) for s in shares])) for k in names}

    def save(self, path: str | Path) -> None:
        """Each member into ``path/<name>/``, and ``ensemble.json`` (members' classes, combine, weights)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name, member in self.members.items():
            member.save(path / name)
        classes = {name: f"{type(m).__module__}:{type(m).__qualname__}" for name, m in self.members.items()}
        meta = {"members": classes, "combine": self.combine, "weights": self.weights, "last_fit": self.last_fit}
        (path / META_FILE).write_text(json.dumps(meta, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> Self:
        path = Path(path)
        if not (path / META_FILE).is_file():
            raise DataContractError(f"EnsembleRanker.load: expected {META_FILE} in {path}; write it with save(path).")
        meta = json.loads((path / META_FILE).read_text())
        members = {}
        for name, target in meta["members"].items():
            module, qualname = target.split(":")
            members[name] = getattr(importlib.import_module(module), qualname).load(path / name)
        ranker = cls(members, meta["combine"])
        ranker.weights, ranker.last_fit = dict(meta["weights"]), dict(meta.get("last_fit", {}))
        return ranker


def daily_percentile(scores: np.ndarray, data: RankingData) -> np.ndarray:
    """Each score's percentile rank among its day's scores, in (0, 1] (ties averaged), float64."""
    ranks = pd.Series(scores, dtype=np.float64).groupby(data.day_index()).rank(method="average", pct=True)
    return ranks.to_numpy()


def _mean_rank_ic(scores: np.ndarray, data: RankingData) -> float:
    """Mean daily Spearman correlation of ``scores`` with ``data``'s target (0 when no day has one)."""
    assert data.relevance is not None
    index = pd.MultiIndex.from_arrays([data.dates, data.codes], names=["date", "code"])
    ic = daily_ic(pd.Series(scores, index=index), pd.Series(data.relevance.astype(np.float64), index=index), "spearman")
    return float(ic.mean()) if ic.notna().any() else 0.0
