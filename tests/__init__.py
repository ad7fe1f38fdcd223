"""The test suite: unit tests mirror the packages (backtest/ at this level, models/ in models/); system/ runs
whole jobs."""
