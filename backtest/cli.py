"""The command line: ``python -m backtest [hydra overrides]``.

The only module that imports hydra and omegaconf. It composes the config, builds each part with
``hydra.utils.instantiate(..., _convert_="all")`` and hands plain objects to library code. A mistake in
the user's data or config ends with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from backtest.data.fingerprint import panel_fingerprint
from backtest.errors import BacktestError, ConfigError

log = logging.getLogger("backtest")

EXIT_USER_ERROR = 2
PROJECT_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = str(PROJECT_DIR / "conf")


def _user_error(exc: BaseException) -> BacktestError | None:
    """The BacktestError behind ``exc`` (Hydra wraps errors raised while instantiating), if any."""
    seen = exc
    while seen is not None:
        if isinstance(seen, BacktestError):
            return seen
        if isinstance(seen, TypeError) and "unexpected keyword" in str(seen):
            return ConfigError(f"{seen}\n  fix: remove the unknown key; `python -m backtest --cfg job` shows the "
                               "keys each group accepts")
        if isinstance(seen, OmegaConfBaseException):
            return ConfigError(f"{seen}\n  fix: set the missing or wrong key on the command line, e.g. "
                               "data=parquet data.path=/abs/path/panel.parquet")
        seen = seen.__cause__ or seen.__context__
    return None


def load_panel(cfg: DictConfig):
    """Build the panel from the ``data`` group (synthetic, parquet/csv, tushare)."""
    return hydra.utils.instantiate(cfg.data, _convert_="all")


def summarize_panel(panel) -> str:
    dates = panel.index.get_level_values("date")
    codes = panel.index.get_level_values("code")
    lines = [
        f"rows            {len(panel):,}",
        f"trading days    {dates.nunique():,}  ({dates.min():%Y-%m-%d} .. {dates.max():%Y-%m-%d})",
        f"stocks          {codes.nunique():,}",
        f"columns         {', '.join(map(str, panel.columns))}",
    ]
    if "in_universe" in panel.columns:
        per_day = panel["in_universe"].groupby(level="date").sum()
        lines.append(f"members per day {per_day.min()}..{per_day.max()} (median {per_day.median():.0f})")
    if "is_suspended" in panel.columns:
        lines.append(f"suspended rows  {panel['is_suspended'].mean():.2%}")
    if "industry" in panel.columns:
        lines.append(f"industries      {panel['industry'].nunique()}")
    lines.append(f"fingerprint     {panel_fingerprint(panel)}")
    return "\n".join(lines)


def run(cfg: DictConfig) -> None:
    panel = load_panel(cfg)
    print(summarize_panel(panel))


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (BacktestError, InstantiationException, OmegaConfBaseException, TypeError) as exc:
        err = _user_error(exc)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def main() -> None:
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    _hydra_main()


if __name__ == "__main__":
    main()
