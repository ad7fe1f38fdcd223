"""Tests of backtest.reports: plots, pages, the drift and study reports, and their command line."""
