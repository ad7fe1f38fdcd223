"""The indicator registry: every per-stock feature the framework can build, with what it needs.

Each entry is an :class:`~backtest.features.indicator.Indicator` (name, compute function, inputs,
lookback, group, flags); the indicator modules define them and this module collects them in a fixed order.

The registry is an immutable value, never a global that modules register into: :func:`default_registry`
builds the library's registry, and :meth:`FeatureRegistry.extended` returns a new registry with extra
indicators (how the tests plant look-ahead features for the audit).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from backtest.errors import ConfigError, preview
from backtest.features import activity, industry, momentum, moneyflow, oscillators, size, volatility

# re-exported: the public names of the indicator type stay importable from here
from backtest.features.indicator import GROUPS, RESERVED_SUFFIXES, Indicator

#: Bump when a change to indicator or transform code changes any feature value: it is part of every
#: feature fingerprint and cache key, so stale cached features are never reused.
FEATURE_CODE_VERSION = "2"  # 2: one tradability rule (a zero-volume day is suspended, flag or not)

__all__ = [
    "FEATURE_CODE_VERSION",
    "GROUPS",
    "RESERVED_SUFFIXES",
    "FeatureRegistry",
    "Indicator",
    "default_registry",
    "describe_indicators",
    "unknown_names_message",
]


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
