"""``python -m backtest.tracking``: the fallback store's commands (:func:`backtest.tracking.fallback.main`)."""

import sys

from backtest.tracking.fallback import main

sys.exit(main())
