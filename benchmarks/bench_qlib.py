"""Benchmark: read a full-size Qlib provider directory (the default synthetic market in Qlib's format).

    .venv/bin/python benchmarks/bench_qlib.py [--repeat 5] [--n-stocks 460] [--start 2018-01-01]

The synthetic market of ``conf/data/synthetic.yaml`` is written with ``write_qlib`` (calendar, instrument
spans, one ``.bin`` file per stock and field: open high low close volume amount factor), then read with
``read_qlib`` for ``market=csi300`` (the stocks ever in the index) and ``market=all``. Same-process
baselines, so that the ratios compare across noisy machines: ``pd.read_parquet`` of the panel that
``read_qlib`` returns, stored as one parquet file (the I/O floor), and ``read_panel`` of that file (the
project's loader: read, canonicalize, validate). Target: ``read_qlib`` no slower than ``read_panel``.
It also checks that the read gives the source's prices back. Where pyqlib is importable (``.venv-qlib``,
``make test-qlib`` builds it) it times Qlib's own ``D.features`` of the same fields and market too:

    .venv-qlib/bin/python benchmarks/bench_qlib.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data.loaders import read_panel
from backtest.data.qlib import read_qlib, write_qlib

sys.path.insert(0, os.path.dirname(__file__))
from bench_tushare import median_time, sized_market


def main() -> None:
    args, panel = sized_market(repeat=5)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        t0 = time.perf_counter()
        write_qlib(panel, root / "cn_data")
        write_s = time.perf_counter() - t0
        files = list((root / "cn_data" / "features").rglob("*.bin"))
        size = sum(p.stat().st_size for p in files) / 2**20
        rows = {}
        for market in ("csi300", "all"):
            seconds, read = median_time(lambda m=market: read_qlib(root / "cn_data", market=m), args.repeat)
            read.to_parquet(root / f"{market}.parquet")
            io_s, _ = median_time(lambda m=market: pd.read_parquet(root / f"{m}.parquet"), args.repeat)
            base_s, _ = median_time(lambda m=market: read_panel(root / f"{m}.parquet"), args.repeat)
            rows[market] = (seconds, io_s, base_s, read)
        pyqlib = _pyqlib_seconds(root / "cn_data", args.repeat)

    whole = rows["all"][3]
    # Qlib's format ends a stock at its last bar: suspended days after it (suspended into delisting) have
    # no place in it, so they are the rows the round trip cannot give back.
    traded = ~panel["is_suspended"].to_numpy()
    code = panel.index.get_level_values("code")
    after_last_bar = pd.Series(traded[::-1], index=code[::-1]).groupby(level=0).cummax().to_numpy()[::-1] == 0
    kept = panel[~after_last_bar]
    same = whole.index.equals(kept.index) and all(
        np.array_equal(whole[c].to_numpy(), kept[c].to_numpy()) for c in ("open", "high", "low", "close")
    )
    print(
        f"source: {len(panel):,} rows, {panel.index.get_level_values('code').nunique()} stocks, "
        f"{panel.index.get_level_values('date').nunique()} days; write_qlib {write_s:.2f} s, {len(files):,} files, "
        f"{size:.1f} MiB; prices read back exactly: {same} (all rows but the {int(after_last_bar.sum())} "
        "suspended after a stock's last bar, which Qlib's format does not hold)"
    )
    for market, (seconds, io_s, base_s, read) in rows.items():
        print(
            f"read_qlib(market={market}): {len(read):,} rows, {read.index.get_level_values('code').nunique()} "
            f"stocks: {seconds:.3f} s = {seconds / io_s:.1f}x pd.read_parquet ({io_s:.3f} s), "
            f"{seconds / base_s:.2f}x read_panel ({base_s:.3f} s) of the same panel [target <= 1x] "
            f"(medians of {args.repeat})"
        )
    if pyqlib is None:
        print("pyqlib not importable: Qlib's own reader not timed (run with .venv-qlib/bin/python)")
    else:
        init_s, features_s, n = pyqlib
        print(
            f"pyqlib D.features(D.instruments('csi300'), 7 fields): {features_s:.3f} s for {n:,} rows = "
            f"{features_s / rows['csi300'][0]:.1f}x read_qlib(market=csi300) (qlib.init {init_s:.2f} s, once)"
        )


def _pyqlib_seconds(provider: Path, repeat: int) -> tuple[float, float, int] | None:
    """qlib.init once, then the median of ``D.features`` of the importer's fields for csi300 (no caches,
    one process, as ``read_qlib`` runs), or None without pyqlib."""
    try:
        import qlib
        from qlib.data import D
    except ImportError:
        return None
    t0 = time.perf_counter()
    qlib.init(provider_uri=str(provider), region="cn", kernels=1, expression_cache=None, dataset_cache=None)
    init_s = time.perf_counter() - t0
    fields = ["$open", "$high", "$low", "$close", "$volume", "$amount", "$factor"]
    seconds, frame = median_time(lambda: D.features(D.instruments("csi300"), fields), repeat)
    return init_s, seconds, len(frame)


if __name__ == "__main__":
    main()
