"""Ranking losses over the stocks of each day (torch).

All take ``scores`` (days, stocks), integer ``relevance`` (days, stocks) and ``mask`` (days, stocks), True
for a real stock; masked stocks are excluded from every sum, and a day with no real stock adds nothing.
Each returns the mean loss over days (a scalar), computed in float32 whatever the scores' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Stand-in score of a masked stock: finite (so no inf - inf in the gradients), and exp() of it is 0.
_MASKED = -1.0e4


def _day_mean(per_day: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    has = mask.any(dim=1).to(per_day.dtype)  # (days,)
    return (per_day * has).sum() / has.sum().clamp(min=1.0)


def listnet_loss(
    scores: torch.Tensor, relevance: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """ListNet (top-one probability): cross-entropy between ``softmax(relevance / temperature)`` and
    ``softmax(scores)`` over the day's real stocks.

    With 10 bins and ``temperature`` 1 the target puts ~63% of a day's mass on its top bin.
    """
    s = scores.float().masked_fill(~mask, _MASKED)
    target = torch.softmax((relevance.float() / temperature).masked_fill(~mask, _MASKED), dim=1)  # (days, stocks)
    per_day = -(target * F.log_softmax(s, dim=1)).masked_fill(~mask, 0.0).sum(dim=1)  # (days,)
    return _day_mean(per_day, mask)


def listmle_loss(
    scores: torch.Tensor, relevance: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """ListMLE: negative log-likelihood of the relevance order under the Plackett-Luce model of the scores.

    Relevance bins have many ties; they are broken uniformly at random (``generator``) at every call.
    The per-day likelihood is divided by the number of real stocks so that days of different sizes weigh
    the same.
    """
    s = scores.float()
    noise = torch.rand(s.shape, generator=generator, device=s.device if generator is None else generator.device)
    key = relevance.float() + 0.5 * noise.to(s.device)  # ties broken at random, bins kept in order
    key = key.masked_fill(~mask, -1.0)  # masked stocks sort last
    order = key.argsort(dim=1, descending=True)  # (days, stocks)
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


LOSSES = {"listnet": listnet_loss, "listmle": listmle_loss, "ranknet": ranknet_loss}
