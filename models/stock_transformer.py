"""StockTransformer: score every stock of a day from its last ``window`` days of features.

Reading order (one module per concept, each step's tensor shape in the comments)::

    x     (days, stocks, window, features)     mask (days, stocks)
    TemporalEncoder      per stock, attention over its own days      -> (days*stocks, window, d_model)
    FeatureAttention     attention pooling over the last 5/10/30 days -> (days*stocks, d_model)
    CrossStockAttention  the day's stocks attend to each other        -> (days, stocks, d_model)
    MoERankingHead       routed experts per stock (+ load balancing)  -> (days, stocks, d_model)
    ScoreHead            one score per stock                          -> (days, stocks)
    + linear path        (``linear_path``) a linear map of today's row added to the score

Masked stocks (padding, missing members) are zeroed at the input, excluded as keys of the cross-stock
attention and from the routing statistics, and get score 0: a masked stock cannot change another
stock's score. Without positional information across stocks the model is permutation-equivariant over
the stocks of a day.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backtest.errors import ConfigError

#: Flash / memory-efficient attention kernels take at most 65,535 sequences per call (CUDA grid limit).
ATTENTION_BATCH_LIMIT = 65_535


@dataclass(frozen=True)
class StockTransformerConfig:
    """Architecture of :class:`StockTransformer`.

    Parameters
    ----------
    n_features : features per stock and day (the last axis of the input); 0 in a ranker's config, which
        sets it from the training data.
    window : days of history per stock (the window axis of the input).
    d_model, n_heads, n_layers : width, heads and depth of the temporal encoder.
    dim_feedforward : hidden width of the encoder's feed-forward block; None -> ``4 * d_model``
        (PyTorch's own default of 2048 is slower at d_model 64 and buys nothing:
        ``benchmarks/bench_transformer.py``).
    dropout : dropout in every block (off at predict time).
    scales : lengths (last days) of the attention pools of :class:`FeatureAttention`; each <= window.
    cross_stock : let the stocks of a day attend to each other (ablation switch).
    cross_heads : heads of the cross-stock attention.
    moe : a mixture of ``n_experts`` routed experts (``experts_per_stock`` of them mixed for each stock)
        as ranking head; False uses a single expert (the ablation baseline, no routing).
    n_experts, experts_per_stock, expert_hidden : the mixture; ``expert_hidden`` None -> ``2 * d_model``.
    linear_path : add a linear map of each stock's latest row (the window's last day) to its score, a
        wide-and-deep skip: the deep part then learns what the linear ranker misses. Starts at zero.
    max_attention_batch : sequences per temporal attention call are kept strictly below this bound
        (the kernel limit); larger batches are run in chunks.
    """

    n_features: int = 0
    window: int = 30
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dim_feedforward: int | None = None
    dropout: float = 0.1
    scales: tuple[int, ...] = (5, 10, 30)
    cross_stock: bool = True
    cross_heads: int = 4
    moe: bool = True
    n_experts: int = 4
    experts_per_stock: int = 2
    expert_hidden: int | None = None
    linear_path: bool = False
    max_attention_batch: int = ATTENTION_BATCH_LIMIT

    def __post_init__(self) -> None:
        object.__setattr__(self, "scales", tuple(int(s) for s in self.scales))
        problems = []
        if self.n_features < 0 or self.window < 1:
            problems.append(f"n_features={self.n_features} must be >= 0 and window={self.window} >= 1")
        if self.d_model % self.n_heads or self.d_model % self.cross_heads:
            problems.append(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} and cross_heads={self.cross_heads}"
            )
        if not self.scales or min(self.scales) < 1 or max(self.scales) > self.window:
            problems.append(f"scales={self.scales} must lie in [1, window={self.window}]")
        if self.moe and not 1 <= self.experts_per_stock <= self.n_experts:
            problems.append(f"experts_per_stock={self.experts_per_stock} must lie in [1, n_experts={self.n_experts}]")
        if self.max_attention_batch < 2:
            problems.append(f"max_attention_batch={self.max_attention_batch} must be >= 2")
        if problems:
            raise ConfigError("model (StockTransformer): " + "; ".join(problems) + ".")

    @property
    def ff_dim(self) -> int:
        return self.dim_feedforward or 4 * self.d_model

    @property
    def hidden(self) -> int:
        return self.expert_hidden or 2 * self.d_model


#: On CUDA, attention over at most this many positions (the temporal window's 30 days) is computed
#: explicitly: two batched matrix products around a softmax, which torch.compile fuses with the scaling,
#: the dropout and their backward. On such short sequences the fused SDPA kernels spend most of their
#: time in the backward pass, so a compiled bf16 training step of the default network runs faster with
#: the explicit form (``benchmarks/bench_transformer.py --device cuda``: its ``through SDPA`` row sets
#: this to 0; the figures are in benchmarks/README.md). Longer
#: sequences (the cross-stock attention over a day's ~300 stocks) and the CPU keep
#: F.scaled_dot_product_attention.
EXPLICIT_ATTENTION_MAX_LENGTH = 64


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    explicit: bool | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention of (batch, heads, length, head_dim) tensors, dropout on the
    attention weights.

    Parameters
    ----------
    mask : None, or bool broadcastable to (batch, heads, length, length), True where a key may be
        attended; every query needs at least one such key.
    dropout : dropout probability of the attention weights (0 at predict time).
    explicit : compute ``softmax(q k^T / sqrt(head_dim)) v`` with batched matrix products (the softmax
        in float32) rather than ``F.scaled_dot_product_attention``; None chooses it on CUDA for lengths
        up to :data:`EXPLICIT_ATTENTION_MAX_LENGTH`. Both compute the same function.
    """
    if explicit is None:
        explicit = q.is_cuda and q.shape[-2] <= EXPLICIT_ATTENTION_MAX_LENGTH
    if not explicit:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)  # (batch, heads, length, length)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
    if dropout > 0:
        weights = F.dropout(weights, dropout)
    return torch.matmul(weights, v)  # (batch, heads, length, head_dim)


class SelfAttention(nn.Module):
    """Multi-head self-attention over the middle axis of (batch, length, d_model).

    The parameters, their names (``in_proj_weight``, ``in_proj_bias``, ``out_proj``) and their
    initialisation are those of ``nn.MultiheadAttention`` (a state dict of either loads into the other);
    the forward pass is one packed input projection, one :func:`attention` call on
    (batch, heads, length, head_dim) views and the output projection, without the sequence-first
    transposes and copies of ``nn.MultiheadAttention``'s training path. Without dropout it gives
    ``nn.MultiheadAttention``'s outputs; with dropout the same distribution, from other random draws.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        # nn.MultiheadAttention's initialisation, in its order (the out projection's default init first)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        # x: (batch, length, d_model), key_mask: (batch, length) True = a key to attend -> (batch, length, d_model)
        b, n, d = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)  # (batch, length, 3*d_model)
        q, k, v = qkv.view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4).unbind(0)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (batch, 1, 1, length)
        a = attention(q, k, v, mask, self.dropout if self.training else 0.0)  # (batch, heads, length, head_dim)
        return self.out_proj(a.transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    """Pre-norm Transformer encoder layer with GELU: ``nn.TransformerEncoderLayer(norm_first=True,
    activation="gelu", batch_first=True)``, the same parameters under the same names, with its attention
    through :class:`SelfAttention`."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model, n_heads, dropout)
        self.linear1 = nn.Linear(d_model, ff_dim)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ff_dim, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (sequences, window, d_model) -> (sequences, window, d_model)
        x = x + self.dropout1(self.self_attn(self.norm1(x)))
        return x + self.dropout2(self.linear2(self.dropout(F.gelu(self.linear1(self.norm2(x))))))


class Encoder(nn.Module):
    """``n_layers`` copies of one :class:`EncoderLayer` (the same initial weights, as
    ``nn.TransformerEncoder`` clones its layer), then a final LayerNorm."""

    def __init__(self, layer: EncoderLayer, n_layers: int, d_model: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class TemporalEncoder(nn.Module):
    """Each stock's window: feature projection + learned positions + a pre-norm Transformer encoder."""

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        self.chunk = cfg.max_attention_batch - 1
        self.proj = nn.Linear(cfg.n_features, cfg.d_model)
        self.pos = nn.Parameter(torch.zeros(cfg.window, cfg.d_model))
        nn.init.normal_(self.pos, std=0.02)
        layer = EncoderLayer(cfg.d_model, cfg.n_heads, cfg.ff_dim, cfg.dropout)
        self.encoder = Encoder(layer, cfg.n_layers, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (sequences, window, features) -> (sequences, window, d_model)
        h = self.proj(x) + self.pos  # (sequences, window, d_model)
        if h.shape[0] <= self.chunk:
            return self.encoder(h)
        # the attention kernels' batch limit: run the sequences in chunks
        return torch.cat([self.encoder(part) for part in h.split(self.chunk)], dim=0)


class FeatureAttention(nn.Module):
    """Attention pooling over time at several scales (the last 5, 10, 30 days), then combined.

    Each scale has its own learned query; its pool is a softmax-weighted mean of the last ``s`` steps.
    """

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        self.scales = cfg.scales
        self.score = nn.ModuleList(nn.Linear(cfg.d_model, 1) for _ in cfg.scales)
        self.combine = nn.Linear(len(cfg.scales) * cfg.d_model, cfg.d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # h: (sequences, window, d_model) -> (sequences, d_model)
        pools = []
        for s, score in zip(self.scales, self.score):
            recent = h[:, -s:, :]  # (sequences, s, d_model)
            weight = torch.softmax(score(recent), dim=1)  # (sequences, s, 1)
            pools.append((weight * recent).sum(dim=1))  # (sequences, d_model)
        return self.combine(torch.cat(pools, dim=-1))  # (sequences, scales*d_model) -> (sequences, d_model)


class CrossStockAttention(nn.Module):
    """Multi-head attention across the stocks of a day (pre-norm residual block with a feed-forward)."""

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.cross_heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ff_dim),
            nn.GELU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.ff_dim, cfg.d_model),
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # h: (days, stocks, d_model), mask: (days, stocks) True = real stock -> (days, stocks, d_model)
        keys = mask.clone()
        keys[:, 0] |= ~mask.any(dim=1)  # a day with no stock keeps one key (its outputs are unused)
        h = h + self.drop(self.attn(self.norm1(h), keys))
        return h + self.drop(self.ff(self.norm2(h)))


class MoERankingHead(nn.Module):
    """A mixture of expert MLPs with top-k gating (Switch / GShard style, k = ``experts_per_stock``),
    applied per stock.

    Every expert is evaluated densely and the gates (zero outside each stock's ``experts_per_stock`` best)
    mix them: no capacity limit, so no stock is dropped and a stock's output never depends on other
    stocks' routing.
    The load-balancing loss is ``E * sum_e f_e * P_e`` (``f_e``: share of real stocks whose first choice is
    expert e; ``P_e``: their mean gate probability); it is 1 when routing is uniform.
    """

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        self.n_experts = cfg.n_experts if cfg.moe else 1
        self.experts_per_stock = cfg.experts_per_stock if cfg.moe else 1
        d, hdim, e = cfg.d_model, cfg.hidden, self.n_experts
        self.norm = nn.LayerNorm(d)
        self.gate = nn.Linear(d, e, bias=False) if e > 1 else None
        self.w1 = nn.Parameter(torch.randn(e, d, hdim) / math.sqrt(d))
        self.b1 = nn.Parameter(torch.zeros(e, hdim))
        self.w2 = nn.Parameter(torch.randn(e, hdim, d) / math.sqrt(hdim))
        self.b2 = nn.Parameter(torch.zeros(e, d))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # h: (days, stocks, d_model) -> (days, stocks, d_model) and the scalar balancing loss
        a = self.norm(h)
        hidden = F.gelu(torch.einsum("bsd,edh->bseh", a, self.w1) + self.b1)  # (days, stocks, experts, hidden)
        out = torch.einsum("bseh,ehd->bsed", self.drop(hidden), self.w2) + self.b2  # (days, stocks, experts, d)
        if self.gate is None:
            return h + out.squeeze(2), h.new_zeros(())
        probs = torch.softmax(self.gate(a).float(), dim=-1)  # (days, stocks, experts)
        top_p, top_i = probs.topk(self.experts_per_stock, dim=-1)  # (days, stocks, experts_per_stock)
        gates = torch.zeros_like(probs).scatter(-1, top_i, top_p / top_p.sum(-1, keepdim=True))
        mixed = (gates.to(out.dtype).unsqueeze(-1) * out).sum(dim=2)  # (days, stocks, d_model)
        weight = mask.to(probs.dtype).unsqueeze(-1)  # (days, stocks, 1): routing stats over real stocks
        n = weight.sum().clamp(min=1.0)
        first = F.one_hot(top_i[..., 0], self.n_experts).to(probs.dtype)  # (days, stocks, experts)
        f = (first * weight).sum(dim=(0, 1)) / n  # (experts,)
        p = (probs * weight).sum(dim=(0, 1)) / n  # (experts,)
        return h + mixed, self.n_experts * (f * p).sum()


class ScoreHead(nn.Module):
    """One score per stock."""

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # h: (days, stocks, d_model) -> (days, stocks)
        return self.out(self.norm(h)).squeeze(-1)


class StockTransformer(nn.Module):
    """The full network: x (days, stocks, window, features) + mask (days, stocks) -> scores, aux loss."""

    def __init__(self, cfg: StockTransformerConfig) -> None:
        super().__init__()
        if cfg.n_features < 1:
            raise ConfigError(
                f"StockTransformer: n_features must be >= 1, received {cfg.n_features}; set it to the number "
                "of feature columns (StockTransformerRanker does this from the training data)."
            )
        self.cfg = cfg
        self.temporal = TemporalEncoder(cfg)
        self.pool = FeatureAttention(cfg)
        self.cross = CrossStockAttention(cfg) if cfg.cross_stock else None
        self.head = MoERankingHead(cfg)
        self.score = ScoreHead(cfg)
        self.linear = nn.Linear(cfg.n_features, 1, bias=False) if cfg.linear_path else None
        if self.linear is not None:
            nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (days, stocks), 0 where masked, and the MoE load-balancing loss (a scalar)."""
        days, stocks, window, feats = x.shape
        x = torch.where(mask[:, :, None, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
        h = self.temporal(x.reshape(days * stocks, window, feats))  # (days*stocks, window, d_model)
        h = self.pool(h)  # (days*stocks, d_model)
        h = h.reshape(days, stocks, -1)  # (days, stocks, d_model)
        if self.cross is not None:
            h = self.cross(h, mask)  # (days, stocks, d_model)
        h, aux = self.head(h, mask)  # (days, stocks, d_model), ()
        scores = self.score(h)  # (days, stocks)
        if self.linear is not None:
            scores = scores + self.linear(x[:, :, -1, :]).squeeze(-1)  # today's row: (days, stocks, features)
        return scores.masked_fill(~mask, 0.0), aux
