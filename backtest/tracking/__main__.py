import sys

from backtest.tracking.fallback import main

sys.exit(main())
