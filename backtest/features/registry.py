"""The indicator registry: every per-stock feature the framework can build, with what it needs.

An :class:`Indicator` is a named, documented function of the wide inputs of one panel
(:class:`~backtest.features.inputs.MarketData`) that returns a (date x code) matrix. It declares

- ``inputs``: the panel columns it reads (it is dropped when one is missing from the panel);
- ``lookback``: how many earlier trading days its value at ``t`` reads (rows ``t - lookback .. t``);
  a stock has no value before that much history (activity averages, which need only half of their
  window of traded days, may start earlier). Recursive averages (EMA, Wilder) have a longer, decaying
  memory; their lookback is the warm-up before the first value;
- ``group``: the family it belongs to (momentum, oscillator, volatility, activity, moneyflow, industry,
  size), for documentation and reports;
- ``aggregate``: whether feature sets add its time aggregates (``_ma5``, ``_ma20``) by default;
- ``cross_sectional``: whether the cross-sectional transforms (``_cs_rank``, ``_cs_z``) apply (not for
  labels such as ``industry_id``).

The registry is an immutable value, never a global that modules register into: :func:`default_registry`
builds the library's registry, and :meth:`FeatureRegistry.extended` returns a new registry with extra
indicators (how the tests plant look-ahead features for the audit).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from backtest.errors import ConfigError, preview
from backtest.features.inputs import MarketData

#: Bump when a change to indicator or transform code changes any feature value: it is part of every
#: feature fingerprint and cache key, so stale cached features are never reused.
FEATURE_CODE_VERSION = "1"

GROUPS: tuple[str, ...] = ("momentum", "oscillator", "volatility", "activity", "moneyflow", "industry", "size")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: suffixes the transforms append; a base name ending in one would make column names ambiguous
RESERVED_SUFFIXES: tuple[str, ...] = ("_cs_rank", "_cs_z", "_ind_neu")


@dataclass(frozen=True)
class Indicator:
    """A per-stock feature: a causal function of the wide inputs of a panel.

    Attributes
    ----------
    name : column name of the feature (lowercase, ``[a-z0-9_]``).
    compute : ``compute(market) -> ndarray`` of shape (n_dates, n_codes); value at row ``t`` may use
        rows ``<= t`` only. Non-finite results are turned into NaN by the builder.
    inputs : panel columns read.
    lookback : earlier trading days the value at ``t`` reads (for recursive averages: the warm-up).
    group : one of ``GROUPS``.
    description : one line: what it measures, with its formula.
    aggregate : feature sets add its ``_ma{w}`` time aggregates by default.
    cross_sectional : the cross-sectional transforms apply to it.
    """

    name: str
    compute: Callable[[MarketData], np.ndarray]
    inputs: tuple[str, ...]
    lookback: int
    group: str
    description: str
    aggregate: bool = False
    cross_sectional: bool = True

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name.endswith(RESERVED_SUFFIXES) or re.search(r"_ma\d+$", self.name):
            raise ConfigError(
                f"indicator name {self.name!r} is invalid: use lowercase letters, digits and underscores, "
                f"and do not end it with a transform suffix ({', '.join(RESERVED_SUFFIXES)}, _ma<N>)"
            )
        if self.group not in GROUPS:
            raise ConfigError(f"indicator {self.name!r}: unknown group {self.group!r}; known: {', '.join(GROUPS)}")
        if self.lookback < 0:
            raise ConfigError(f"indicator {self.name!r}: lookback must be >= 0, got {self.lookback}")
        if not self.inputs:
            raise ConfigError(f"indicator {self.name!r}: declare the panel columns it reads in `inputs`")


@dataclass(frozen=True)
class FeatureRegistry:
    """An ordered, immutable collection of indicators with unique names."""

    indicators: tuple[Indicator, ...]

    def __post_init__(self) -> None:
        names = [i.name for i in self.indicators]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"feature registry: duplicate indicator names {preview(dup)}; names must be unique")

    def __iter__(self) -> Iterator[Indicator]:
        return iter(self.indicators)

    def __len__(self) -> int:
        return len(self.indicators)

    def __contains__(self, name: object) -> bool:
        return any(i.name == name for i in self.indicators)

    @property
    def names(self) -> list[str]:
        """Indicator names in registry order."""
        return [i.name for i in self.indicators]

    def get(self, name: str) -> Indicator:
        """The indicator called ``name``; a ``ConfigError`` with close matches when there is none."""
        for ind in self.indicators:
            if ind.name == name:
                return ind
        raise ConfigError(unknown_names_message("indicator", [name], self.names))

    def extended(self, *extra: Indicator) -> FeatureRegistry:
        """A new registry with ``extra`` appended (this one is unchanged)."""
        return FeatureRegistry((*self.indicators, *extra))

    def fingerprint(self) -> str:
        """Hash of what identifies the indicators (names, inputs, lookbacks, flags, code locations)."""
        h = hashlib.blake2b(digest_size=8)
        for i in self.indicators:
            fn = i.compute
            where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
            h.update(f"{i.name}|{','.join(i.inputs)}|{i.lookback}|{i.aggregate}|{i.cross_sectional}|{where}\n".encode())
        return h.hexdigest()


def unknown_names_message(kind: str, unknown: list[str], known: list[str]) -> str:
    """Error text for unknown feature names, with the closest known names as suggestions."""
    hints = []
    for name in unknown[:5]:
        close = difflib.get_close_matches(name, known, n=3)
        hints.append(f"{name!r} (did you mean {', '.join(close)}?)" if close else repr(name))
    return (
        f"unknown {kind} name(s): {'; '.join(hints)}{' ...' if len(unknown) > 5 else ''}. "
        f"Known {kind}s: {preview(known, 12)}. Fix the name in the feature set config "
        "(conf/features/*.yaml), or list all names with `backtest.features.describe_indicators()`."
    )


def default_registry() -> FeatureRegistry:
    """The library's indicators, in a fixed order (momentum, oscillators, volatility, activity, money
    flow, industry, size)."""
    from backtest.features import activity, industry, momentum, moneyflow, oscillators, size, volatility

    return FeatureRegistry(
        (
            *momentum.INDICATORS,
            *oscillators.INDICATORS,
            *volatility.INDICATORS,
            *activity.INDICATORS,
            *moneyflow.INDICATORS,
            *industry.INDICATORS,
            *size.INDICATORS,
        )
    )


def describe_indicators(registry: FeatureRegistry | None = None) -> pd.DataFrame:
    """A table of the registry: name (index), group, inputs, lookback, aggregate, cross_sectional,
    description."""
    registry = registry or default_registry()
    return pd.DataFrame(
        [
            {
                "name": i.name,
                "group": i.group,
                "inputs": ", ".join(i.inputs),
                "lookback": i.lookback,
                "aggregate": i.aggregate,
                "cross_sectional": i.cross_sectional,
                "description": i.description,
            }
            for i in registry
        ]
    ).set_index("name")
