"""Tests of backtest.tracking: the MLflow store, runs, redaction and the UI helpers."""
