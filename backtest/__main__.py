"""``python -m backtest [overrides]``: the main job (:func:`backtest.cli.main`)."""

from backtest.cli import main

main()
