"""Ranking losses over the stocks of each day (torch).

All take ``scores`` (days, stocks), ``relevance`` (days, stocks) and ``mask`` (days, stocks), True for a
real stock; masked stocks are excluded from every sum, and a day with no real stock adds nothing. Relevance
is the training target: integer levels (the label's bins or three classes) or a real-valued label (raw
forward returns, percentile ranks); only the order of a day's values matters to ListMLE and RankNet,
ListNet reads their spacing (see :func:`listnet_loss`). Each returns the mean loss over days (a scalar),
computed in float32 whatever the scores' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Stand-in score of a masked stock: finite (so no inf - inf in the gradients), and exp() of it is 0.
_MASKED = -1.0e4

#: A standardised ListNet target is clipped to +-this many standard deviations of the day.
ZSCORE_CLIP = 3.0


def _day_mean(per_day: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    has = mask.any(dim=1).to(per_day.dtype)  # (days,)
    return (per_day * has).sum() / has.sum().clamp(min=1.0)


def listnet_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    standardize: bool = False,
) -> torch.Tensor:
    """ListNet (top-one probability): cross-entropy between ``softmax(target / temperature)`` and
    ``softmax(scores)`` over the day's real stocks.

    ``target`` is the relevance itself (integer levels: one level is one unit; with 10 bins and
    ``temperature`` 1 the target puts ~63% of a day's mass on its top bin), or with ``standardize`` its
    z-score over the day's real stocks, clipped to +-``ZSCORE_CLIP``. Standardise a real-valued label:
    raw 5-day returns spread by ~1% would give an almost flat target (``exp(0.01)`` is 1.01) and a
    volatile day a sharper one than a calm day; the z-score makes the target's sharpness the same every
    day (~e^5 between a +2.5 and a -2.5 sd stock at temperature 1), and the clip keeps one limit-up jump
    from taking the whole day's mass.
    """
    s = scores.float().masked_fill(~mask, _MASKED)
    rel = relevance.float()
    if standardize:
        m = mask.float()
        n = m.sum(dim=1, keepdim=True).clamp(min=1.0)  # (days, 1)
        mean = (rel * m).sum(dim=1, keepdim=True) / n
        std = (((rel - mean) * m) ** 2).sum(dim=1, keepdim=True).div(n).sqrt()  # (days, 1)
        rel = ((rel - mean) / std.clamp(min=1e-12)).clamp(-ZSCORE_CLIP, ZSCORE_CLIP)  # constant day -> 0
    target = torch.softmax((rel / temperature).masked_fill(~mask, _MASKED), dim=1)  # (days, stocks)
    per_day = -(target * F.log_softmax(s, dim=1)).masked_fill(~mask, 0.0).sum(dim=1)  # (days,)
    return _day_mean(per_day, mask)


def listmle_loss(
    scores: torch.Tensor, relevance: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """ListMLE: negative log-likelihood of the relevance order under the Plackett-Luce model of the scores.

    Relevance levels have many ties; they are broken uniformly at random (``generator``) at every call.
    The per-day likelihood is divided by the number of real stocks so that days of different sizes weigh
    the same.
    """
    s = scores.float()
    noise = torch.rand(s.shape, generator=generator, device=s.device if generator is None else generator.device)
    shuffle = noise.to(s.device).argsort(dim=1, descending=True)  # (days, stocks): a random order...
    key = relevance.float().masked_fill(~mask, -torch.inf).gather(1, shuffle)  # masked stocks sort last
    by_relevance = key.argsort(dim=1, descending=True, stable=True)  # ...kept among ties (any scale)
    order = shuffle.gather(1, by_relevance)  # (days, stocks)
    s_sorted = s.gather(1, order).masked_fill(~mask.gather(1, order), _MASKED)  # (days, stocks)
    m_sorted = mask.gather(1, order)
    # log-sum-exp of the scores from position i to the end of the list
    tail = torch.logcumsumexp(s_sorted.flip(1), dim=1).flip(1)  # (days, stocks)
    per_day = ((tail - s_sorted) * m_sorted).sum(dim=1) / m_sorted.sum(dim=1).clamp(min=1)
    return _day_mean(per_day, mask)


def ranknet_loss(scores: torch.Tensor, relevance: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RankNet (pairwise logistic): mean of ``log(1 + exp(-(s_i - s_j)))`` over the day's pairs with
    ``relevance_i > relevance_j``."""
    s = scores.float()
    diff = s[:, :, None] - s[:, None, :]  # (days, stocks, stocks)
    better = (relevance[:, :, None] > relevance[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    per_pair = F.softplus(-diff) * better
    per_day = per_pair.sum(dim=(1, 2)) / better.sum(dim=(1, 2)).clamp(min=1)
    return _day_mean(per_day, better.flatten(1))


def _day_zscore(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` standardised over each day's real stocks (0 where masked or on a constant day)."""
    m = mask.float()
    n = m.sum(dim=1, keepdim=True).clamp(min=1.0)
    mean = (values * m).sum(dim=1, keepdim=True) / n
    std = (((values - mean) * m) ** 2).sum(dim=1, keepdim=True).div(n).sqrt()
    return ((values - mean) / std.clamp(min=1e-12)) * m


def regression_loss(scores: torch.Tensor, relevance: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pointwise regression within the day: mean squared difference between the day-centred scores and
    the target's z-score over the day's real stocks (the linear baseline's objective, a ridge of the
    target's daily rank, in a network's form). Reads the whole list, each stock once, symmetrically: a
    stock at the bottom of the day counts as much as one at the top."""
    s = scores.float()
    m = mask.float()
    n = m.sum(dim=1, keepdim=True).clamp(min=1.0)
    centred = (s - (s * m).sum(dim=1, keepdim=True) / n) * m
    per_day = ((centred - _day_zscore(relevance.float(), mask)) ** 2 * m).sum(dim=1) / n.squeeze(1)
    return _day_mean(per_day, mask)


LOSSES = {"listnet": listnet_loss, "listmle": listmle_loss, "ranknet": ranknet_loss, "regression": regression_loss}
