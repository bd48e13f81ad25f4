"""The sampler's mu next to the trainer's pi_old: the mismatch and each framework's correction.

The sampler (vLLM, a bf16 or int8 kernel, a top-p sampler reporting processed log-probs) draws
the tokens under mu; the trainer recomputes them under pi_old. With d = log pi_old - log mu per
token (0 on padding), the ratio the update needs splits in two::

    pi_theta / mu = (pi_old / mu) * (pi_theta / pi_old)
                  =  mismatch     *  staleness

At the first update pi_theta = pi_old, so the whole ratio is the mismatch. Each framework
corrects it with a weight per token (``Correction.weights``, multiplying the per-token policy
loss, a constant: the frameworks detach it) and some drop tokens from the loss. The
framework-specific rules (verl, TRL, OpenRLHF, ROLL) live with the dialects, in
``dialects/corrections.py``, each returning a ``Correction`` (weights and masks under the
framework's own names and defaults); this module holds what they share.

``lab_loss`` puts a correction into one PPO-clip token-mean loss and returns its value and the
closed-form d loss / d log pi_theta per token, so a page shows the loss and gradient with and
without each correction on the same tokens.

Effective sample size (``effective_sample_size``): ESS = (sum w)^2 / (n sum w^2) over the n
valid tokens, in (0, 1], 1 when every weight is equal (verl's own logged variant is
``corrections.verl_ess``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline.losses import ppo_token_loss

F64 = torch.float64


@dataclass(frozen=True)
class Correction:
    """One framework's train/rollout correction on one batch.

    Attributes:
        framework: "verl", "trl", "openrlhf" or "roll".
        name: the method's usual name ("token-TIS", "IcePop", "seq-MIS", ...).
        config: the framework's own keys and values, in order.
        weights: (B, T) float64 multiplier of the per-token policy loss (a constant), 0 on
            padding and on masked or rejected tokens.
        counted: (B, T) bool, tokens the loss's token-mean denominator counts.
        truncated: (B, T) bool, tokens whose weight was clamped to a bound.
        masked: (B, T) bool, tokens whose weight was set to 0 or that were rejected.
        note: how the framework applies it, in one or two sentences.
        dual_clip: the dual-clip constant c of the PPO loss the weights multiply (verl's
            clip_ratio_c, always on for A < 0), None where the framework's default has none.
    """

    framework: str
    name: str
    config: tuple[tuple[str, Any], ...]
    weights: Tensor
    counted: Tensor
    truncated: Tensor
    masked: Tensor
    note: str
    dual_clip: float | None = None


@dataclass(frozen=True)
class TwoFactor:
    """The ratio pi_theta / mu and its two factors, per token (0 on padding).

    Attributes:
        mismatch: pi_old / mu (sampler vs trainer on the same weights).
        staleness: pi_theta / pi_old (the policy moved since the rollout).
        total: pi_theta / mu = mismatch * staleness.
    """

    mismatch: Tensor
    staleness: Tensor
    total: Tensor


# ------------------------------------------------------------------------------ basic quantities


def prep(mask: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    """(bool mask, each tensor as float64 with 0 on padding); ValueError on a bad shape or value."""
    m = torch.as_tensor(mask).detach() > 0
    out = [m]
    for t in tensors:
        t = torch.as_tensor(t).detach().to(F64)
        if t.shape != m.shape:
            raise ValueError(f"expected shape {tuple(m.shape)}, got {tuple(t.shape)}")
        bad = m & ~torch.isfinite(t)
        if bool(bad.any()):
            b, tok = torch.nonzero(bad)[0].tolist()
            raise ValueError(f"non-finite log-prob at [{b}][{tok}] on a response token")
        out.append(torch.where(m, t, 0.0))
    return tuple(out)


def log_mismatch(old: Tensor, mu: Tensor, mask: Tensor) -> Tensor:
    """Per-token d = log pi_old - log mu, 0 on padding (float64)."""
    _, o, u = prep(mask, old, mu)
    return o - u


def two_factor_ratio(logp: Tensor, old: Tensor, mu: Tensor, mask: Tensor) -> TwoFactor:
    """pi_theta / mu = (pi_old / mu) * (pi_theta / pi_old) per token, 0 on padding."""
    m, lp, o, u = prep(mask, logp, old, mu)
    mismatch = torch.where(m, torch.exp(o - u), 0.0)
    staleness = torch.where(m, torch.exp(lp - o), 0.0)
    return TwoFactor(mismatch, staleness, torch.where(m, torch.exp(lp - u), 0.0))


def effective_sample_size(weights: Tensor, mask: Tensor) -> float:
    """Normalised ESS = (sum w)^2 / (n * sum w^2) over the n valid tokens, in [0, 1].

    1 when all weights are equal; 1/n when one token carries all the weight; 0 when every
    weight is 0 (nothing left to learn from). NaN without a valid token.
    """
    m, w = prep(mask, weights)
    n = int(m.sum())
    if n == 0:
        return math.nan
    sq = float((w * w).sum())
    if sq == 0.0:
        return 0.0
    return float(w.sum()) ** 2 / (n * sq)


def row_sum(x: Tensor, m: Tensor) -> Tensor:
    """(B,) masked sum per row."""
    return (x * m).sum(-1)


def row_mean(x: Tensor, m: Tensor) -> Tensor:
    """Masked mean per row; rows without a token give 0 (verl / ROLL masked_mean divide by +eps)."""
    count = m.sum(-1)
    return torch.where(count > 0, row_sum(x, m) / count.clamp(min=1.0), 0.0)


# ----------------------------------------------------------------------------- loss and gradient


@dataclass(frozen=True)
class LabLoss:
    """A PPO-clip token-mean loss with a correction's weights, and its gradient.

    Attributes:
        loss: the loss value.
        grad: (B, T) d loss / d log pi_theta per token (closed form), 0 on padding.
        denominator: tokens the mean divides by.
    """

    loss: float
    grad: Tensor
    denominator: int


def lab_loss(
    logp: Tensor,
    old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    correction: Correction | None = None,
    eps: float = 0.2,
) -> LabLoss:
    """A PPO-clip token-mean loss with a correction: sum_t w_t * ppo_t / N, and its gradient.

    ppo_t = -min(r A, clip(r, 1-eps, 1+eps) A) with r = pi_theta / pi_old; with the
    correction's ``dual_clip`` c, capped at -c A where A < 0 (verl's dual clip; gradient 0 there).

    Without a correction w = 1 and N counts every valid token; with one, w and N are the
    correction's ``weights`` and ``counted``. The gradient is ``w_t / N * dppo_t/dlog pi``:
    ``-A r`` where the unclipped term is the minimum, 0 where the clip bound is (ties at the
    bound split like ``torch.minimum``).
    """
    m, lp, o = prep(mask, logp, old)
    adv = torch.as_tensor(advantages).detach().to(F64)
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(lp)
    adv = torch.where(m, adv, 0.0)
    r = torch.where(m, torch.exp(lp - o), 0.0)
    dual = None if correction is None else correction.dual_clip
    per_token = torch.where(m, ppo_token_loss(r, adv, eps, eps, dual), 0.0)
    if correction is None:
        w, counted = m.to(F64), m
    else:
        w, counted = correction.weights.to(F64), correction.counted & m
    n = int(counted.sum())
    denom = max(n, 1)
    loss = float((w * per_token).sum() / denom)
    lo, hi = 1.0 - eps, 1.0 + eps
    a1, a2 = r * adv, r.clamp(lo, hi) * adv
    d1 = -adv
    d2 = -adv * ((r >= lo) & (r <= hi)).to(F64)
    dl_dr = torch.where(a1 < a2, d1, torch.where(a2 < a1, d2, 0.5 * (d1 + d2)))
    if dual is not None:  # the cap -c A binds: a constant
        dl_dr = torch.where((adv < 0) & (-torch.minimum(a1, a2) > -dual * adv), 0.0, dl_dr)
    grad = torch.where(m, w * dl_dr * r / denom, 0.0)
    return LabLoss(loss, grad, n)
