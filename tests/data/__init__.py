"""Tests of backtest.data: schema, validation, loaders, tradability and the synthetic market."""
