"""Feature sets: which indicators and which transforms make up the feature matrix (plain data).

A :class:`FeatureSetSpec` names base indicators (from a registry) and the transforms applied to them;
``conf/features/*.yaml`` holds the named sets (``all``, ``no_volatility``, ``no_moneyflow``,
``with_industry``, ``price_only``, ``top80_by_gain``). :func:`plan_features` resolves a spec against a
registry and a panel's columns into the ordered list of output columns.

Column naming, for a base indicator ``x`` and time-aggregate windows (5, 20)::

    x, x_cs_rank, x_cs_z, [x_ind_neu]                        the indicator and its daily transforms
    x_ma5, x_ma5_cs_rank, x_ma5_cs_z, [x_ma5_ind_neu]        its 5-day average (aggregated bases only)
    x_ma20, x_ma20_cs_rank, x_ma20_cs_z, [x_ma20_ind_neu]    its 20-day average

``x_ma{w}`` is the mean of ``x`` over the stock's last ``w`` rows (valid values, at least half of the
window). Exclusions are by base name and remove every column derived from the base.

The default spec is the ``all`` set: every indicator except the industry ones (``industry_id``,
``ind_rel_ret_5``, ``ind_rel_ret_20``), which enter in ``with_industry``. This mirrors the research log,
where the base runs effectively had no industry data (4.7% coverage) and filling it in was a separate
experiment; ``all`` on this registry gives 285 columns (the original had 289).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from backtest.errors import ConfigError, preview
from backtest.features.indicator import Indicator
from backtest.features.registry import FeatureRegistry, unknown_names_message

log = logging.getLogger("backtest.features")

TRANSFORMS: tuple[str, ...] = ("raw", "cs_rank", "cs_z", "ind_neu")
INDUSTRY_INDICATORS: tuple[str, ...] = ("industry_id", "ind_rel_ret_5", "ind_rel_ret_20")


def _as_tuple(value: object, what: str) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ConfigError(f"feature set: `{what}` must be a list, got the string {value!r}; write [{value}]")
    if not isinstance(value, Iterable):
        raise ConfigError(f"feature set: `{what}` must be a list, got {type(value).__name__} {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class FeatureSetSpec:
    """A feature set: plain data, instantiated from ``conf/features/<name>.yaml``.

    Attributes
    ----------
    name : the set's name (recorded with the run).
    indicators : base indicator names to start from; None = every indicator of the registry.
    inputs : if given, keep only indicators whose inputs are all among these panel columns
        (``price_only`` uses ``[close]``).
    exclude : base indicator names to drop, together with every column derived from them.
    aggregate : bases that get the time aggregates; None = those the registry marks ``aggregate``.
    windows : time-aggregate windows in trading days (``_ma5``, ``_ma20``).
    raw, cs_rank, cs_z : emit the per-stock value, its daily percentile rank, its daily z-score.
    industry_neutral : also emit the industry-neutral z-score ``_ind_neu`` (needs ``industry``).
    keep_by_gain : if set, the engine keeps only this many features: those with the largest gain importance of
        a model trained before the first decision date (``select_by_gain``).
    base_set : the name of the set a ``keep_by_gain`` set selects from (documentation).
    """

    name: str = "all"
    indicators: tuple[str, ...] | None = None
    inputs: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = INDUSTRY_INDICATORS
    aggregate: tuple[str, ...] | None = None
    windows: tuple[int, ...] = (5, 20)
    raw: bool = True
    cs_rank: bool = True
    cs_z: bool = True
    industry_neutral: bool = False
    keep_by_gain: int | None = None
    base_set: str | None = None

    def __post_init__(self) -> None:
        for name in ("indicators", "inputs", "exclude", "aggregate", "windows"):
            value = _as_tuple(getattr(self, name), name)
            object.__setattr__(self, name, () if value is None and name in ("exclude", "windows") else value)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"feature set: `name` must be a non-empty string, got {self.name!r}")
        bad = [w for w in self.windows if not isinstance(w, int) or isinstance(w, bool) or w < 2]
        if bad or len(set(self.windows)) != len(self.windows):
            raise ConfigError(
                f"feature set {self.name!r}: `windows` must be distinct integers >= 2 (trading days), "
                f"got {list(self.windows)}"
            )
        if self.keep_by_gain is not None and (
            not isinstance(self.keep_by_gain, int) or isinstance(self.keep_by_gain, bool) or self.keep_by_gain < 1
        ):
            raise ConfigError(
                f"feature set {self.name!r}: `keep_by_gain` must be a positive integer or null, "
                f"got {self.keep_by_gain!r}"
            )

    def as_dict(self) -> dict[str, object]:
        """The spec as plain JSON-able data (lists for tuples), in field order."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class FeatureColumn:
    """One output column: ``transform`` of the base indicator ``base`` (or of its ``window``-day mean)."""

    name: str
    base: str
    window: int | None
    transform: str
    lookback: int


@dataclass(frozen=True)
class FeaturePlan:
    """A spec resolved against a registry and a panel's columns.

    Attributes
    ----------
    spec : the feature set.
    indicators : the base indicators to compute, in registry order.
    columns : the output columns, grouped by base, in order.
    dropped : (indicator name, missing panel columns) for indicators left out for missing inputs.
    notes : other things left out for missing inputs (e.g. industry neutralisation).
    """

    spec: FeatureSetSpec
    indicators: tuple[Indicator, ...]
    columns: tuple[FeatureColumn, ...]
    dropped: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    notes: tuple[str, ...] = field(default=())

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def max_lookback(self) -> int:
        """The longest history any column needs (base lookback plus aggregate window - 1)."""
        return max(c.lookback for c in self.columns)

    def dropped_message(self) -> str | None:
        """One line listing what was left out for missing panel columns, or None."""
        if not self.dropped and not self.notes:
            return None
        parts = [f"{name} (needs {', '.join(missing)})" for name, missing in self.dropped]
        text = (
            f"feature set {self.spec.name!r}: dropped {len(self.dropped)} indicator(s) whose input columns "
            f"are missing from the panel: {preview(parts, 40)}"
            if parts
            else f"feature set {self.spec.name!r}:"
        )
        return text + "".join(f"; {n}" for n in self.notes)


def plan_features(spec: FeatureSetSpec, registry: FeatureRegistry, available: Iterable[str]) -> FeaturePlan:
    """Resolve ``spec`` into output columns for a panel with the columns ``available``.

    Raises
    ------
    ConfigError
        when the spec names an unknown indicator, or nothing is left to build.
    """
    available = set(available)
    known = registry.names
    for what, names in (("indicators", spec.indicators), ("exclude", spec.exclude), ("aggregate", spec.aggregate)):
        unknown = [n for n in names or () if n not in registry]
        if unknown:
            raise ConfigError(
                f"feature set {spec.name!r}, `{what}`: " + unknown_names_message("indicator", unknown, known)
            )

    wanted = set(spec.indicators) if spec.indicators is not None else set(known)
    wanted -= set(spec.exclude)
    bases, dropped = [], []
    for ind in registry:
        if ind.name not in wanted:
            continue
        if spec.inputs is not None and not set(ind.inputs) <= set(spec.inputs):
            continue
        missing = tuple(c for c in ind.inputs if c not in available)
        if missing:
            dropped.append((ind.name, missing))
        else:
            bases.append(ind)

    notes = []
    neutral = spec.industry_neutral
    if neutral and "industry" not in available:
        neutral = False
        notes.append("industry neutralisation (_ind_neu) skipped: the panel has no `industry` column")
    aggregated = set(spec.aggregate) if spec.aggregate is not None else {i.name for i in registry if i.aggregate}

    columns = []
    for ind in bases:
        sources: list[tuple[str, int | None, int]] = [(ind.name, None, ind.lookback)]
        if ind.cross_sectional and ind.name in aggregated:
            sources += [(f"{ind.name}_ma{w}", w, ind.lookback + w - 1) for w in spec.windows]
        for src, window, lookback in sources:
            transforms = ["raw"] if spec.raw or not ind.cross_sectional else []
            if ind.cross_sectional:
                transforms += [
                    t for t, on in (("cs_rank", spec.cs_rank), ("cs_z", spec.cs_z), ("ind_neu", neutral)) if on
                ]
            for t in transforms:
                columns.append(FeatureColumn(src if t == "raw" else f"{src}_{t}", ind.name, window, t, lookback))
    if not columns:
        raise ConfigError(
            f"feature set {spec.name!r} yields no feature columns on this panel (columns: "
            f"{preview(sorted(available), 12)}; dropped for missing inputs: {preview([d[0] for d in dropped])}). "
            "Fix: choose a set whose inputs the panel has (e.g. features=price_only needs only close), "
            "or switch on at least one of raw / cs_rank / cs_z."
        )
    return FeaturePlan(spec, tuple(bases), tuple(columns), tuple(dropped), tuple(notes))


def select_by_gain(importance: Mapping[str, float], k: int) -> list[str]:
    """The ``k`` feature names with the largest gain importance, best first (ties: by name).

    Parameters
    ----------
    importance : feature name -> total gain (e.g. LightGBM ``feature_importance("gain")``) of a model
        trained on data before the first decision date only.
    k : how many to keep (all of them when fewer exist).

    Warnings
    --------
    The importance must come from a model whose training labels all end before the first decision date
    of the backtest; importance measured on later data selects with hindsight.

    Examples
    --------
    >>> select_by_gain({"a": 1.0, "b": 3.0, "c": 3.0, "d": 0.0}, 2)
    ['b', 'c']
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"select_by_gain: k must be a positive integer, got {k!r}")
    if not importance:
        raise ConfigError("select_by_gain: the importance mapping is empty; train the selection model first")
    bad = [name for name, gain in importance.items() if not isinstance(gain, (int, float)) or math.isnan(gain)]
    if bad:
        raise ConfigError(f"select_by_gain: importance must be numbers, got NaN or non-numbers for {preview(bad)}")
    ranked = sorted(importance, key=lambda name: (-float(importance[name]), name))
    if k > len(ranked):
        log.warning("select_by_gain: k=%d but only %d features have an importance; keeping all", k, len(ranked))
    return ranked[:k]
