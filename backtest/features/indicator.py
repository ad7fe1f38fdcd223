"""The :class:`Indicator` type: one named, causal per-stock feature and what it declares.

An indicator is a documented function of the wide inputs of one panel
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

The indicator modules (momentum, oscillators, volatility, activity, moneyflow, industry, size) build
their ``INDICATORS`` from this type; :mod:`backtest.features.registry` collects them. Imports run one
way: indicator modules -> this module, registry -> indicator modules.

Examples
--------
>>> ind = Indicator("close_level", lambda m: m.close, ("close",), 0, "momentum", "the close")
>>> ind.name, ind.inputs, ind.lookback
('close_level', ('close',), 0)
>>> Indicator("close_cs_z", lambda m: m.close, ("close",), 0, "momentum", "bad name")
Traceback (most recent call last):
...
backtest.errors.ConfigError: indicator name 'close_cs_z' is invalid: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from backtest.errors import ConfigError
from backtest.features.inputs import MarketData

#: what an indicator computes: ``compute(market) -> ndarray`` of shape (n_dates, n_codes)
Compute = Callable[[MarketData], np.ndarray]

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
    compute: Compute
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
