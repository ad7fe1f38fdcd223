"""Benchmark: rolling LambdaRank retraining, naive vs bin-once, fresh vs warm start, and warm-start quality.

    .venv/bin/python benchmarks/bench_lambdarank.py                 # all three parts (~10 min on 2 cores)
    .venv/bin/python benchmarks/bench_lambdarank.py --parts prep retrain
    .venv/bin/python benchmarks/bench_lambdarank.py --parts quality --quality-folds 60

1. prep    per-fold Dataset preparation on 300 stocks x 1,000 days x 250 random-but-structured features
           (latent factors, heavy tails, discrete columns, 3% NaN), 750-day training window + 20-day
           validation tail: a new ``lgb.Dataset`` per fold (naive baseline) vs ``BinnedPanel.subset``
           of the panel binned once. Target >= 40x.
2. retrain steady-state fit on the same shape: a fresh 200-round fit vs a warm start (continuing
           the previous fold's booster, +40 rounds). Target >= 4x.
3. quality on the default synthetic market (``generate_market``), simple causal price / money-flow
           features ranked per day, the project's labels and purged ``RollingSchedule`` (weekly
           retrains): out-of-sample rank IC (vs the 5-day forward return) of warm-start (full refit
           every 4th fold) vs fresh fits on every fold. Target: the difference within one standard error.

Ratios are measured in one process; absolute times depend on the machine's load.
"""

from __future__ import annotations

import argparse
import logging
import time

import lightgbm as lgb
import numpy as np
import pandas as pd

from backtest.data.panel import WideGrid, adjusted_price
from backtest.data.synthetic import SyntheticMarketConfig, generate_market
from backtest.labels import LabelSpec, cross_sectional_target, make_labels
from backtest.metrics import daily_ic
from backtest.splits import RollingSchedule
from models.data import RankingData
from models.lambdarank import BinnedPanel, LambdaRankConfig, LambdaRankRanker

STOCKS, DAYS, FEATURES, WINDOW, VALID = 300, 1000, 250, 750, 20


# ---------------------------------------------------------------------------------------------- data


def structured_data(seed: int = 0) -> RankingData:
    """300 stocks x 1,000 days x 250 features: 10 persistent latent factors + idiosyncratic noise, mixed
    marginals (gaussian, heavy-tailed, skewed, 5-level discrete), 3% NaN; the label loads on 3 factors."""
    rng = np.random.default_rng(seed)
    k = 10
    factors = np.empty((DAYS, STOCKS, k), dtype=np.float32)
    factors[0] = rng.standard_normal((STOCKS, k))
    for t in range(1, DAYS):  # persistent exposures (AR(1), phi 0.97)
        factors[t] = 0.97 * factors[t - 1] + 0.243 * rng.standard_normal((STOCKS, k))
    loadings = rng.standard_normal((k, FEATURES)).astype(np.float32) / np.sqrt(k)
    X = (factors.reshape(-1, k) @ loadings).astype(np.float32)
    X += rng.standard_normal(X.shape, dtype=np.float32)
    kind = np.arange(FEATURES) % 4
    X[:, kind == 1] = np.sign(X[:, kind == 1]) * np.abs(X[:, kind == 1]) ** 2  # heavy tails
    X[:, kind == 2] = np.exp(0.5 * X[:, kind == 2])  # skewed, positive
    X[:, kind == 3] = np.clip(np.round(X[:, kind == 3]), -2, 2)  # 5 levels
    X[rng.random(X.shape, dtype=np.float32) < 0.03] = np.nan
    fwd = factors[..., :3].sum(-1) * 0.02 + rng.standard_normal((DAYS, STOCKS)).astype(np.float32)
    rel = cross_sectional_target(fwd, "bins", 10).ravel()
    dates = np.repeat(pd.bdate_range("2020-01-01", periods=DAYS).values, STOCKS)
    codes = np.tile(np.array([f"{i:06d}.SH" for i in range(STOCKS)]), DAYS)
    return RankingData(X, dates, codes, tuple(f"x{i:03d}" for i in range(FEATURES)), rel)


def fold_rows(fold: int, step: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation rows of fold ``fold`` (windows slide by ``step`` days)."""
    t0 = fold * step
    train = np.arange(t0 * STOCKS, (t0 + WINDOW) * STOCKS)
    valid = np.arange((t0 + WINDOW + 5) * STOCKS, (t0 + WINDOW + 5 + VALID) * STOCKS)
    return train, valid


# ---------------------------------------------------------------------------------------------- parts


def bench_prep(data: RankingData, params: dict, folds: int) -> None:
    print(
        f"\n[prep] {data.n_samples:,} samples x {data.n_features} features; window {WINDOW} days "
        f"({WINDOW * STOCKS:,} rows) + {VALID}-day validation",
        flush=True,
    )
    naive = []
    for f in range(folds):
        tr, va = (data.take(r) for r in fold_rows(f))
        t0 = time.perf_counter()
        dtr = lgb.Dataset(
            np.ascontiguousarray(tr.X), label=tr.relevance, group=tr.group_sizes(), params=params, free_raw_data=False
        ).construct()
        lgb.Dataset(
            np.ascontiguousarray(va.X), label=va.relevance, group=va.group_sizes(), reference=dtr, params=params
        ).construct()
        naive.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    panel = BinnedPanel(data, params, history_end=data.dates[WINDOW * STOCKS - 1])
    build = time.perf_counter() - t0
    fast = []
    for f in range(folds):
        tr_rows, va_rows = fold_rows(f)
        t0 = time.perf_counter()
        panel.subset(tr_rows, data.relevance[tr_rows])
        panel.subset(va_rows, data.relevance[va_rows])
        fast.append(time.perf_counter() - t0)
    n, o = float(np.median(naive)), float(np.median(fast))
    print(f"  naive: new Dataset per fold (baseline)   {n:7.2f} s/fold (median of {folds})")
    print(f"  bin once: BinnedPanel build (one-off)    {build:7.2f} s")
    print(f"  bin once: subset per fold                {o:7.3f} s/fold   ratio {n / o:6.1f}x  [target >= 40x]")
    print(
        f"  over 100 weekly folds incl. the build    {100 * n:7.1f} s vs {build + 100 * o:.1f} s   "
        f"ratio {100 * n / (build + 100 * o):5.1f}x"
    )


def bench_retrain(data: RankingData, threads: int, reps: int) -> None:
    print(f"\n[retrain] fresh 200 rounds vs warm start +40 rounds, {threads} threads, {reps} repetitions", flush=True)
    base = dict(num_threads=threads, num_boost_round=200, early_stopping_rounds=None)
    history_end = data.dates[WINDOW * STOCKS - 1]
    panel = BinnedPanel(data, LambdaRankConfig(**base).lgb_params(), history_end=history_end)
    tr0, tr1 = data.take(fold_rows(0)[0]), data.take(fold_rows(1)[0])
    fresh_s, warm_s = [], []
    for _ in range(reps):
        warm = LambdaRankRanker(LambdaRankConfig(**base, warm_start=True, warm_start_rounds=40))
        fresh = LambdaRankRanker(LambdaRankConfig(**base))
        warm.panel = fresh.panel = panel  # the same binned panel: only the fit differs
        warm.fit(tr0)  # fresh (first fit)
        fresh_s.append(warm.last_fit["seconds"])
        warm.fit(tr1)
        assert warm.last_fit["kind"] == "warm"
        warm_s.append(warm.last_fit["seconds"])
        fresh.fit(tr1)
        fresh_s.append(fresh.last_fit["seconds"])
        print(f"  fresh {fresh_s[-2]:.2f} s, {fresh_s[-1]:.2f} s; warm {warm_s[-1]:.2f} s", flush=True)
    f, w = float(np.median(fresh_s)), float(np.median(warm_s))
    print(f"  fresh, 200 rounds (baseline)             {f:7.2f} s (median of {len(fresh_s)})")
    print(
        f"  warm start, +40 rounds                   {w:7.2f} s (median of {len(warm_s)})   "
        f"ratio {f / w:5.2f}x  [target >= 4x]"
    )


def market_features(panel: pd.DataFrame) -> pd.DataFrame:
    """Causal daily features (data up to the close of t), ranked per day among index members."""
    grid = WideGrid.of(panel)
    close = grid.to_wide(adjusted_price(panel, "close"), dtype=np.float64)
    amount = grid.to_wide(panel["amount"], dtype=np.float64)
    net = grid.to_wide(panel["net_mf_amount"], dtype=np.float64)
    big = grid.to_wide(
        panel["buy_lg_amount"] + panel["buy_elg_amount"] - panel["sell_lg_amount"] - panel["sell_elg_amount"],
        dtype=np.float64,
    )
    member = grid.to_wide(panel["in_universe"].astype(float), dtype=np.float64) > 0
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 on suspended days -> NaN = missing
        c = pd.DataFrame(close)
        ret1 = c.pct_change(fill_method=None)
        roll = lambda m, n: pd.DataFrame(m).rolling(n, min_periods=n).sum().to_numpy()  # noqa: E731
        raw = {
            "ret_1d": ret1.to_numpy(),
            "ret_5d": c.pct_change(5, fill_method=None).to_numpy(),
            "ret_20d": c.pct_change(20, fill_method=None).to_numpy(),
            "vol_20d": ret1.rolling(20, min_periods=20).std().to_numpy(),
            "dist_high_20d": (c / c.rolling(20, min_periods=20).max()).to_numpy(),
            "amount_ratio_5_20": roll(amount, 5) / roll(amount, 20),
            "net_mf_1d": net / amount,
            "net_mf_5d": roll(net, 5) / roll(amount, 5),
            "big_net_1d": big / amount,
            "big_net_5d": roll(big, 5) / roll(amount, 5),
        }
    cols = {}
    for name, m in raw.items():
        m = np.where(member & np.isfinite(m), m, np.nan)
        cols[name] = grid.to_long(pd.DataFrame(m).rank(axis=1, pct=True).to_numpy().astype(np.float32))
    return pd.DataFrame(cols, index=panel.index)


def bench_quality(threads: int, n_folds: int) -> None:
    print(f"\n[quality] default synthetic market, {n_folds} weekly folds, warm (refit every 4th) vs fresh", flush=True)
    t0 = time.perf_counter()
    panel = generate_market(SyntheticMarketConfig())
    labels = make_labels(panel, LabelSpec())
    feats = market_features(panel).loc[labels.index]
    data = RankingData.from_frame(feats, labels.target.to_numpy())
    calendar = panel.index.get_level_values(0).unique()
    schedule = RollingSchedule(
        retrain_every=5,
        train_window=500,
        valid_days=20,
        embargo=2,
        test_start=calendar[-(n_folds * 5 + 10)],
        test_end=calendar[-11],
    )
    folds = list(schedule.split(calendar, labels.label_end))
    print(
        f"  {data.n_samples:,} labelled samples, {data.n_features} features, {len(folds)} folds "
        f"({folds[0].decision_date.date()}..{folds[-1].predict_dates[-1].date()}), "
        f"prepared in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    base = dict(num_threads=threads)
    models = {
        "fresh": LambdaRankRanker(LambdaRankConfig(**base)),
        "warm": LambdaRankRanker(LambdaRankConfig(**base, warm_start=True, warm_start_rounds=40, full_refit_every=4)),
    }
    first_train_end = folds[0].train_dates[-1]
    for m in models.values():
        m.prepare(data, history_end=np.datetime64(first_train_end, "ns"))
    index = labels.index
    fwd = labels.fwd_return
    daily: dict[str, list[pd.Series]] = {k: [] for k in models}
    seconds = {k: 0.0 for k in models}
    for fold in folds:
        if fold.fold % 10 == 0:
            print(f"  ... fold {fold.fold}: {seconds}", flush=True)
        tr_rows, va_rows = fold.sample_positions(index)
        pr_rows = np.flatnonzero(index.get_level_values(0).isin(fold.predict_dates))
        train, valid, test = data.take(tr_rows), data.take(va_rows), data.take(pr_rows)
        for name, m in models.items():
            m.fit(train, valid)
            seconds[name] += m.last_fit["seconds"]
            scores = pd.Series(m.predict(test), index=index[pr_rows])
            daily[name].append(daily_ic(scores, fwd.iloc[pr_rows], "spearman"))
    ic = {k: pd.concat(v) for k, v in daily.items()}
    diff = (ic["warm"] - ic["fresh"]).dropna()
    se_fresh = ic["fresh"].std() / np.sqrt(ic["fresh"].count())
    for name in models:
        s = ic[name]
        print(
            f"  {name:<6} rank IC {s.mean():+.4f} (SE {s.std() / np.sqrt(s.count()):.4f}, {s.count()} days), "
            f"fit time {seconds[name]:6.1f} s"
        )
    gap = ic["warm"].mean() - ic["fresh"].mean()
    verdict = (
        "within one SE"
        if abs(gap) <= se_fresh
        else "warm HIGHER by more than one SE"
        if gap > 0
        else "warm LOWER by more than one SE"
    )
    print(
        f"  warm - fresh: {gap:+.4f} (paired SE {diff.std() / np.sqrt(len(diff)):.4f}); {verdict} of the "
        f"fresh IC ({se_fresh:.4f})  [target: within one SE]; fit-time ratio "
        f"{seconds['fresh'] / seconds['warm']:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--parts", nargs="*", default=["prep", "retrain", "quality"], choices=["prep", "retrain", "quality"]
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prep-folds", type=int, default=3)
    parser.add_argument("--retrain-reps", type=int, default=2)
    parser.add_argument("--quality-folds", type=int, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"lightgbm {lgb.__version__}")
    if {"prep", "retrain"} & set(args.parts):
        t0 = time.perf_counter()
        data = structured_data()
        print(f"structured data built in {time.perf_counter() - t0:.1f} s")
        params = LambdaRankConfig(num_threads=args.threads).lgb_params()
        if "prep" in args.parts:
            bench_prep(data, params, args.prep_folds)
        if "retrain" in args.parts:
            bench_retrain(data, args.threads, args.retrain_reps)
    if "quality" in args.parts:
        bench_quality(args.threads, args.quality_folds)


if __name__ == "__main__":
    main()
