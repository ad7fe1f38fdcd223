"""Benchmark: StockTransformer training throughput (day-samples/s) on CPU and, when present, CUDA.

    .venv/bin/python benchmarks/bench_transformer.py                  # CPU (2 threads) and CUDA if any
    .venv/bin/python benchmarks/bench_transformer.py --device cuda --epoch-days 750

One day-sample is one day's list: 300 stocks x 30 days x 72 features through the default network
(d_model 64, 2 encoder layers, ff 256, cross-stock attention, 4-expert MoE head), forward + ListNet loss
+ backward + AdamW step (fused on CUDA, as StockTransformerRanker.fit steps). Ratios are against a
baseline measured in the same process (CPU: fp32; CUDA: fp32 at one day per step). On CUDA the best
compile mode is measured once more with the temporal attention through the fused SDPA kernels (the
``through SDPA`` row, see :data:`models.stock_transformer.EXPLICIT_ATTENTION_MAX_LENGTH`), and the script
trains 750-day epochs through StockTransformerRanker.fit (windows gathered on the device from the wide
tensor), eager and with the best compile mode, and reports the epoch time and peak memory.

The figures measured on an H200 are in benchmarks/README.md ("GPU").

Targets: >= 5,000 day-samples/s (bf16, compiled) and <= 0.2 s per 750-day epoch on an H200.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import replace

import numpy as np
import torch

from models import stock_transformer
from models.data import RankingData
from models.ranking_losses import listnet_loss
from models.stock_transformer import StockTransformer, StockTransformerConfig
from models.transformer_ranker import StockTransformerRanker, TransformerTrainingConfig

STOCKS, WINDOW, FEATURES = 300, 30, 72


def step_rate(
    cfg: StockTransformerConfig,
    device: str,
    bf16: bool,
    days: int,
    steps: int,
    compile_mode: str | None = None,
    explicit_attention: bool = True,
) -> tuple[float, float]:
    """(day-samples/s, peak GPU MiB or NaN) of forward + loss + backward + AdamW on random batches.

    ``explicit_attention`` False sends the temporal attention through the fused SDPA kernels on CUDA too
    (:data:`models.stock_transformer.EXPLICIT_ATTENTION_MAX_LENGTH` set to 0 for the measurement).
    """
    if not explicit_attention:
        saved = stock_transformer.EXPLICIT_ATTENTION_MAX_LENGTH
        stock_transformer.EXPLICIT_ATTENTION_MAX_LENGTH = 0
        try:
            return step_rate(cfg, device, bf16, days, steps, compile_mode)
        finally:
            stock_transformer.EXPLICIT_ATTENTION_MAX_LENGTH = saved
    torch.manual_seed(0)
    net = StockTransformer(cfg).to(device).train()
    fwd = torch.compile(net, mode=compile_mode) if compile_mode else net
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=device.startswith("cuda"))  # as the ranker's
    x = torch.randn(days, STOCKS, WINDOW, FEATURES, device=device)
    mask = torch.ones(days, STOCKS, dtype=torch.bool, device=device)
    rel = torch.randint(0, 10, (days, STOCKS), device=device)
    cast = torch.autocast(device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step() -> None:
        with cast:
            scores, aux = fwd(x, mask)
        loss = listnet_loss(scores, rel, mask) + 0.01 * aux.float()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    cuda = device.startswith("cuda")
    if cuda:  # the peak includes the warm-up: CUDA graphs allocate their private pool at capture
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3 if compile_mode else 1):  # warm-up (and compilation / graph capture)
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    rate = days * steps / (time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    return rate, peak


def synthetic_days(n_days: int, seed: int = 0) -> RankingData:
    """``n_days`` x 300 stocks with a wide tensor of 72 random features (a planted signal in f0)."""
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal((n_days, STOCKS, FEATURES), dtype=np.float32)
    rel = np.clip((wide[..., 0] + rng.standard_normal((n_days, STOCKS))) * 2 + 5, 0, 9).astype(np.int32)
    dates = np.repeat(np.datetime64("2020-01-01", "ns") + np.arange(n_days).astype("timedelta64[D]"), STOCKS)
    codes = np.tile(np.array([f"{i:06d}.SH" for i in range(STOCKS)]), n_days)
    return RankingData(
        X=wide.reshape(-1, FEATURES),
        dates=dates,
        codes=codes,
        feature_names=tuple(f"f{i}" for i in range(FEATURES)),
        relevance=rel.ravel(),
        wide=wide,
        date_pos=np.repeat(np.arange(n_days), STOCKS),
        code_pos=np.tile(np.arange(STOCKS), n_days),
    )


def epoch_time(
    arch: StockTransformerConfig, training: TransformerTrainingConfig, n_days: int, epochs: int
) -> tuple[float, float]:
    """(best epoch seconds after the first, peak GPU MiB) of StockTransformerRanker.fit over n_days."""
    data = synthetic_days(n_days)
    model = StockTransformerRanker(replace(arch, n_features=0), replace(training, max_epochs=epochs))
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model.fit(data)
    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
    return min(h["seconds"] for h in model.history[1:]), peak


def row(name: str, rate: float, base: float, peak: float) -> None:
    mem = f"{peak:9.0f}" if peak == peak else f"{'-':>9}"
    print(f"{name:<44} {rate:10.1f} {rate / base:8.2f}x {mem}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--cpu-threads", type=int, default=2)
    parser.add_argument("--cpu-days", type=int, default=2, help="days per step on CPU")
    parser.add_argument("--cpu-steps", type=int, default=3)
    parser.add_argument("--gpu-days", type=int, default=192, help="days per step on CUDA (x300 < 65,535)")
    parser.add_argument("--gpu-steps", type=int, default=20)
    parser.add_argument("--epoch-days", type=int, default=750)
    parser.add_argument(
        "--compile", nargs="*", default=["default", "reduce-overhead"], help="torch.compile modes to try on CUDA (bf16)"
    )
    parser.add_argument(
        "--no-sdpa-row",
        dest="sdpa_row",
        action="store_false",
        help="skip the row of the best compile mode with the temporal attention through SDPA",
    )
    args = parser.parse_args()
    cfg = StockTransformerConfig(n_features=FEATURES, window=WINDOW)
    print(
        f"torch {torch.__version__}; default network: d_model {cfg.d_model}, {cfg.n_layers} layers, "
        f"ff {cfg.ff_dim}, {cfg.n_experts} experts; a day-sample = {STOCKS} stocks x {WINDOW} days x "
        f"{FEATURES} features"
    )
    print(f"{'configuration':<44} {'days/s':>10} {'ratio':>9} {'peak MiB':>9}")

    if args.device in ("cpu", "all"):
        torch.set_num_threads(args.cpu_threads)
        base, _ = step_rate(cfg, "cpu", False, args.cpu_days, args.cpu_steps)
        row(f"cpu {args.cpu_threads} threads fp32 (baseline)", base, base, float("nan"))
        rate, _ = step_rate(cfg, "cpu", True, args.cpu_days, args.cpu_steps)
        row(f"cpu {args.cpu_threads} threads bf16 autocast", rate, base, float("nan"))
        rate, _ = step_rate(replace(cfg, dim_feedforward=2048), "cpu", False, 1, 2)
        row(f"cpu {args.cpu_threads} threads fp32, ff 2048 (PyTorch default)", rate, base, float("nan"))

    if args.device in ("cuda", "all") and torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)
        print(f"device: {torch.cuda.get_device_name()}")
        base, peak = step_rate(cfg, "cuda", False, 1, args.gpu_steps)
        row("cuda fp32, 1 day/step (baseline)", base, base, peak)
        for bf16 in (False, True):
            rate, peak = step_rate(cfg, "cuda", bf16, args.gpu_days, args.gpu_steps)
            row(f"cuda {'bf16' if bf16 else 'fp32'}, {args.gpu_days} days/step", rate, base, peak)
        best_mode = None
        best_rate = 0.0
        for mode in args.compile:
            try:
                rate, peak = step_rate(cfg, "cuda", True, args.gpu_days, args.gpu_steps, compile_mode=mode)
            except Exception as exc:  # report and go on: the other configurations still count
                print(f"cuda bf16 compile={mode}: failed ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
                continue
            row(f"cuda bf16, {args.gpu_days} days/step, compile={mode}", rate, base, peak)
            if rate > best_rate:
                best_mode, best_rate = mode, rate
        if best_mode is not None and args.sdpa_row:
            rate, peak = step_rate(
                cfg, "cuda", True, args.gpu_days, args.gpu_steps, compile_mode=best_mode, explicit_attention=False
            )
            row("  the same, temporal attention through SDPA", rate, base, peak)
        for mode in dict.fromkeys([None, best_mode]):
            training = TransformerTrainingConfig(
                device="cuda", precision="bf16", days_per_step=args.gpu_days, compile=mode
            )
            seconds, peak = epoch_time(cfg, training, args.epoch_days, epochs=3)
            print(
                f"{args.epoch_days}-day epoch via StockTransformerRanker.fit, bf16, compile={mode}: "
                f"{seconds:.3f} s ({args.epoch_days / seconds:.0f} days/s), peak {peak:.0f} MiB "
                "[target <= 0.2 s]",
                flush=True,
            )
    elif args.device == "cuda":
        print("CUDA is not available here")


if __name__ == "__main__":
    main()
