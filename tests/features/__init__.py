"""Tests of backtest.features: the registry, the indicators, the transforms, the sets, the cache and the
audit."""
