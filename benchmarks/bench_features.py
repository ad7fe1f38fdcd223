"""Benchmark of the feature layer on the default synthetic market (run on demand, not in tests).

    .venv/bin/python benchmarks/bench_features.py [--stocks 460] [--start 2018-01-01] [--end 2025-12-31]

Measured in one process, against baselines run in the same process:

The comparisons with pandas are medians of ``REPEAT`` (5) runs in one process (the machine is shared);
the full build, the cache hits and the audit are medians of 3.

1. ``features=all`` full build (target <= 30 s on 2 cores);
2. 20 indicators: the wide-matrix implementation vs a straightforward pandas ``groupby(code)``
   rolling / ewm implementation of the same definitions on the same prepared inputs (target >= 5x;
   values are checked to agree). "compute" times the indicators alone, as the pandas side is timed;
   "build" is the whole panel -> float32 matrix path (input preparation and output included);
3. cross-sectional percentile ranks of those 20 columns vs pandas ``groupby(date).rank(pct=True)``
   (target >= 8x; values must be identical);
4. feature cache: store, then a cold load, read from disk (target <= 2 s), and a warm one;
5. look-ahead audit with 3 cutoffs vs the full build (target well under 10% per cutoff);
6. peak traced memory of the full build vs the float32 matrix (target <= 3x).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid
from backtest.data.synthetic import SyntheticMarketConfig, generate_market
from backtest.features import (
    FeatureCache,
    FeatureSetSpec,
    audit_features,
    build_features,
    default_registry,
    load_or_build_features,
)
from backtest.features.cross_section import DailyCrossSection
from backtest.features.inputs import MarketData

TWENTY = (
    "ret_1d",
    "ret_5d",
    "ret_20d",
    "ma_ratio_5",
    "ma_ratio_20",
    "ma_ratio_60",
    "rsi_6",
    "rsi_14",
    "macd_dif",
    "macd_dea",
    "macd_hist",
    "kdj_k",
    "vol_5d",
    "vol_20d",
    "atr_pct",
    "boll_pctb",
    "boll_width",
    "wr_14",
    "price_pos_20",
    "volume_ratio_5",
)


#: runs of each timed comparison; the median is reported
REPEAT = 5


def timed(fn, repeat: int = 1):
    """The median wall time of ``repeat`` calls of ``fn``, and the last call's result."""
    times, out = [], None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def drop_from_page_cache(directory: Path) -> None:
    """Write the files under ``directory`` to disk and drop their pages from the OS page cache, so that
    the next read comes from the disk."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def pandas_twenty(long: pd.DataFrame) -> pd.DataFrame:
    """The 20 indicators with pandas groupby(code) rolling / ewm, on long inputs sorted by (code, date)."""
    g = long.groupby(level="code", sort=False)
    c, h, lo, v = long["close"], long["high"], long["low"], long["volume"]

    def roll(s: pd.Series, w: int, how: str, **kw) -> pd.Series:
        r = s.groupby(level="code", sort=False).rolling(w, **kw)
        return getattr(r, how)().droplevel(0)

    def ewm(s: pd.Series, **kw) -> pd.Series:
        return s.groupby(level="code", sort=False).ewm(adjust=False, **kw).mean().droplevel(0)

    out = pd.DataFrame(index=long.index)
    prev = g["close"].shift(1)
    ret = c / prev - 1
    out["ret_1d"] = ret
    out["ret_5d"] = c / g["close"].shift(5) - 1
    out["ret_20d"] = c / g["close"].shift(20) - 1
    for n in (5, 20, 60):
        out[f"ma_ratio_{n}"] = c / roll(c, n, "mean") - 1
    delta = c - prev
    for n in (6, 14):
        up = ewm(delta.clip(lower=0), alpha=1 / n, min_periods=n)
        down = ewm(-delta.clip(upper=0), alpha=1 / n, min_periods=n)
        out[f"rsi_{n}"] = 100 * up / (up + down)
    dif = ewm(c, span=12, min_periods=12) - ewm(c, span=26, min_periods=26)
    dea = ewm(dif, span=9, min_periods=9)
    out["macd_dif"], out["macd_dea"], out["macd_hist"] = dif / c, dea / c, 2 * (dif - dea) / c
    low9, high9 = roll(lo, 9, "min"), roll(h, 9, "max")
    rsv = (100 * (c - low9) / (high9 - low9)).where(high9 > low9, 50.0).where(high9.notna())
    out["kdj_k"] = ewm(rsv, alpha=1 / 3)
    out["vol_5d"], out["vol_20d"] = roll(ret, 5, "std"), roll(ret, 20, "std")
    tr = pd.concat([h, prev], axis=1).max(axis=1, skipna=False) - pd.concat([lo, prev], axis=1).min(
        axis=1, skipna=False
    )
    out["atr_pct"] = roll(tr, 14, "mean") / c
    mid, sd = roll(c, 20, "mean"), roll(c, 20, "std")
    cmin, cmax = roll(c, 20, "min"), roll(c, 20, "max")
    flat = cmax == cmin  # a flat 20-day window: the band position is undefined
    out["boll_pctb"] = ((c - (mid - 2 * sd)) / (4 * sd)).mask(flat)
    out["boll_width"] = (4 * sd / mid).mask(flat, 0.0)
    hh, ll = roll(h, 14, "max"), roll(lo, 14, "min")
    out["wr_14"] = -100 * (hh - c) / (hh - ll)
    out["price_pos_20"] = (c - cmin) / (cmax - cmin)
    out["volume_ratio_5"] = v / roll(v, 5, "mean", min_periods=3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stocks", type=int, default=460)
    ap.add_argument("--members", type=int, default=300)
    ap.add_argument("--start", default="2018-01-01")
    ap.add_argument("--end", default="2025-12-31")
    args = ap.parse_args()

    t_gen, panel = timed(
        lambda: generate_market(
            SyntheticMarketConfig(n_stocks=args.stocks, n_members=args.members, start=args.start, end=args.end)
        )
    )
    n_days = panel.index.get_level_values(0).nunique()
    print(f"synthetic market: {n_days} days x {args.stocks} stocks, {len(panel):,} rows (generated in {t_gen:.1f} s)")
    rows = []

    # 1. full build
    spec = FeatureSetSpec()
    t_build, matrix = timed(lambda: build_features(panel, spec, data_fingerprint="bench"), repeat=3)
    mb = matrix.nbytes / 2**20
    rows.append(
        (
            "features=all build",
            f"{t_build:.2f} s",
            f"{matrix.shape[1]} cols x {matrix.shape[0]:,} rows, {mb:.0f} MB",
            "<= 30 s",
        )
    )

    # 2. twenty indicators vs pandas groupby(code), on the same prepared inputs (adjusted, suspension-aware)
    twenty = FeatureSetSpec(name="twenty", indicators=TWENTY, cs_rank=False, cs_z=False, aggregate=())
    t_ours, ours = timed(lambda: build_features(panel, twenty, data_fingerprint="bench", rows="all"), repeat=REPEAT)
    grid = WideGrid.of(panel)
    registry = default_registry()

    def prepared() -> MarketData:
        market = MarketData(panel, grid)
        for name in ("close", "high", "low", "open"):
            getattr(market, name)
        market.activity("volume")
        return market

    def ours_compute(market: MarketData) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):
            return {name: market.to_long(registry.get(name).compute(market)) for name in TWENTY}

    computes = []
    for _ in range(REPEAT):  # a fresh MarketData each time (it caches what it derives), prepared outside the timing
        fresh = prepared()
        computes.append(timed(lambda m=fresh: ours_compute(m))[0])
    del fresh
    t_compute = float(np.median(computes))
    market = prepared()
    inputs = {k: market.to_long(getattr(market, k)) for k in ("close", "high", "low")}
    inputs["volume"] = market.to_long(market.activity("volume"))
    long = pd.DataFrame(inputs, index=panel.index).swaplevel().sort_index()
    t_pd, ref = timed(lambda: pandas_twenty(long), repeat=REPEAT)
    ref = ref.swaplevel().sort_index().loc[panel.index, list(TWENTY)]
    ours_frame = ours.to_frame()[list(TWENTY)]
    agree = np.allclose(ours_frame.to_numpy(np.float64), ref.to_numpy(np.float64), rtol=1e-4, atol=1e-6, equal_nan=True)
    rows.append(
        (
            "20 indicators, compute",
            f"{t_compute:.2f} s",
            f"pandas groupby(code) on the same inputs: {t_pd:.2f} s",
            f"{t_pd / t_compute:.1f}x (>= 5x)",
        )
    )
    rows.append(
        (
            "20 indicators, build",
            f"{t_ours:.2f} s",
            f"panel -> float32 matrix, end to end; values agree: {agree}",
            f"{t_pd / t_ours:.1f}x",
        )
    )

    # 3. cross-sectional ranks vs pandas groupby(date).rank
    member_rows = panel["in_universe"].to_numpy()
    frame = ours_frame.loc[member_rows]
    values32 = frame.to_numpy(np.float32)
    day = pd.factorize(frame.index.get_level_values(0), sort=True)[0]

    def ours_rank():
        daily = DailyCrossSection.of(day, np.ones(len(day), dtype=bool), int(day.max()) + 1)
        return np.column_stack([daily.rank_pct(values32[:, j]) for j in range(values32.shape[1])])

    as32 = pd.DataFrame(values32, index=frame.index, columns=frame.columns)
    t_rank, ranks = timed(ours_rank, repeat=REPEAT)
    t_pdrank, pdranks = timed(lambda: as32.groupby(level="date").rank(pct=True), repeat=REPEAT)
    identical = np.array_equal(ranks, pdranks.to_numpy(np.float64), equal_nan=True)
    rows.append(
        (
            "cs rank, 20 cols",
            f"{t_rank:.3f} s",
            f"pandas groupby(date).rank: {t_pdrank:.2f} s, identical: {identical}",
            f"{t_pdrank / t_rank:.1f}x (>= 8x)",
        )
    )

    # 4. cache: a cold hit reads the entry from disk (its pages are dropped from the page cache first),
    #    a warm one from memory
    with tempfile.TemporaryDirectory() as tmp:
        cache = FeatureCache(tmp)
        t_store, _ = timed(lambda m=matrix: cache.store(m, spec))  # the full matrix of section 1

        def cold_hit():
            drop_from_page_cache(Path(tmp))
            return load_or_build_features(panel, spec, cache, data_fingerprint="bench")

        t_hit, (loaded, hit) = timed(cold_hit, repeat=3)
        same = np.array_equal(loaded.values, matrix.values, equal_nan=True)
        del loaded
        t_hit2, (loaded, _) = timed(
            lambda: load_or_build_features(panel, spec, cache, data_fingerprint="bench"), repeat=3
        )
        size = sum(e.size_bytes for e in cache.entries()) / 2**20
        del loaded
    rows.append(
        (
            "cache hit, cold",
            f"{t_hit:.2f} s",
            f"hit={hit}, identical={same}; warm {t_hit2:.2f} s; store {t_store:.2f} s, {size:.0f} MB",
            "<= 2 s",
        )
    )

    # 5. audit
    dates = panel.index.get_level_values(0).unique()
    cutoffs = [dates[-480], dates[-240], dates[-10]]
    t_audit, report = timed(lambda: audit_features(panel, spec, cutoffs), repeat=3)
    # the audit's floor: each cutoff builds every row (eligible or not) of warm-up + horizon days, then
    # of the warm-up days again, where the full build has the eligible rows of the whole history
    rows.append(
        (
            "audit, 3 cutoffs",
            f"{t_audit:.2f} s",
            f"passed={report.passed}; {t_audit / 3 / t_build:.1%} of a full build per cutoff, building "
            f"{report.rows_built / 3 / len(matrix.values):.1%} of its rows per cutoff",
            "< 10% per cutoff",
        )
    )

    # 6. memory
    del matrix, ours
    gc.collect()
    tracemalloc.start()
    traced = build_features(panel, spec, data_fingerprint="bench")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rows.append(
        (
            "peak memory of the build",
            f"{peak / 2**20:.0f} MB",
            f"{peak / traced.nbytes:.2f}x the float32 matrix ({traced.nbytes / 2**20:.0f} MB)",
            "<= 3x",
        )
    )

    width = max(len(r[0]) for r in rows)
    print(f"\n{'measure':<{width}}  {'time/size':>10}  {'ratio / target':<22}  detail")
    for name, value, detail, target in rows:
        print(f"{name:<{width}}  {value:>10}  {target:<22}  {detail}")


if __name__ == "__main__":
    main()
