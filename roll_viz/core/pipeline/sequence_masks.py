"""Sequence-level off-policy masks: decide per SEQUENCE which rows the policy loss keeps.

The token-level corrections (``rollout_correction``, the frameworks' rules in
``dialects/corrections``) weight or drop single tokens. The masks here look at a whole response
and keep or drop all of its tokens at once. With d_t = log pi(y_t) - log mu(y_t) per valid token
(pi the trainer's policy, mu the sampler's) and L the response length:

- **OPSM**, off-policy sequence masking (DeepSeek-V3.2, eq. 9; TRL ``get_off_policy_mask``):
  drop a sequence when its advantage is negative AND its mean KL estimate
  ``(1/L) sum_t (log mu - log pi)`` exceeds delta. The decision is per sequence: the sequence's
  advantage is the masked mean of its token advantages (miles PR #1127's fix), never each
  token's own sign (the slime PR #1917 leak: a positive-advantage token of a rejected sequence
  stays in the loss).
- **Product vs geometric-mean ratio** (TRL ``sequence_mask``; TRL PR #4891; verl Geo-RS): the
  sequence ratio ``exp(sum_t d)`` grows or shrinks with L; the geometric mean ``exp(mean_t d)``
  does not. A mask keeps rows whose ratio lies in [low, high].
- **TRM**, trust region masking (arXiv 2512.23075): drop a sequence when ANY token's KL
  estimate exceeds delta (the bound depends on the maximum token divergence, not the mean).
- **Keep sampling mask** (DeepSeek-V3.2): a top-p / top-k sampler draws from a truncated support
  S; training pi on the same support uses ``log pi(y) - log pi(S)``, the renormalisation term
  ``-log pi(S)`` per token. ``support_log_mass`` and ``keep_sampling_logprobs`` compute it from
  logits, differentiably.

All tensors (B, T) float64 with 0 off the mask unless said otherwise; masks are bool; nothing is
modified in place. Framework names and defaults are the dialects' (``dialects/sequence_rules``).

What roll-viz simplifies: one process (no all-reduce of the sequence statistics, which the
frameworks compute per sequence anyway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

F64 = torch.float64

#: the per-token KL estimates of log mu - log pi (x = log pi - log mu): k1 = -x, k2, k3
TOKEN_KL = ("k1", "k2", "k3")


@dataclass(frozen=True)
class SequenceMask:
    """One sequence-level rule on one batch.

    Attributes:
        keep_rows: (B,) bool, the sequences the loss keeps (rows without a token are kept).
        keep: (B, T) bool, the valid tokens of the kept sequences.
        statistic: (B,) float64, the number each row's decision compares with the threshold.
    """

    keep_rows: Tensor
    keep: Tensor
    statistic: Tensor

    @property
    def removed_rows(self) -> int:
        """How many sequences the rule drops."""
        return int((~self.keep_rows).sum())


def _prep(mask: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    m = torch.as_tensor(mask).detach() > 0
    out = [m]
    for t in tensors:
        t = torch.as_tensor(t).detach().to(F64)
        if t.dim() == 1:
            t = t[:, None].expand(m.shape)
        if t.shape != m.shape:
            raise ValueError(f"expected shape {tuple(m.shape)}, got {tuple(t.shape)}")
        out.append(torch.where(m, t, 0.0))
    return tuple(out)


def _row_mean(x: Tensor, m: Tensor) -> Tensor:
    count = m.sum(-1)
    return torch.where(count > 0, (x * m).sum(-1) / count.clamp(min=1), 0.0)


def _mask(keep_rows: Tensor, m: Tensor, statistic: Tensor) -> SequenceMask:
    return SequenceMask(keep_rows, m & keep_rows[:, None], statistic)


def sequence_advantage(advantages: Tensor, mask: Tensor) -> Tensor:
    """(B,) masked mean of each row's token advantages (0 for a row without a token)."""
    m, adv = _prep(mask, advantages)
    return _row_mean(adv, m)


def token_kl(logp: Tensor, mu: Tensor, mask: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimate of KL(mu || pi) from the sampled token (x = log pi - log mu).

    k1 = -x (log mu - log pi), k2 = x^2 / 2, k3 = e^x - 1 - x; 0 off the mask.
    """
    if estimator not in TOKEN_KL:
        raise ValueError(f"estimator must be one of {TOKEN_KL}, got {estimator!r}")
    m, lp, u = _prep(mask, logp, mu)
    x = lp - u
    est = {"k1": -x, "k2": 0.5 * x * x, "k3": torch.expm1(x) - x}[estimator]
    return torch.where(m, est, 0.0)


def opsm(advantages: Tensor, logp: Tensor, mu: Tensor, mask: Tensor, delta: float) -> SequenceMask:
    """OPSM: drop a sequence with mean_t(A) < 0 and mean_t(log mu - log pi) > delta.

    TRL ``get_off_policy_mask`` keeps ``A >= 0 or seq_kl <= delta`` with A one number per
    sequence; with per-token advantages the sequence's number is their masked mean. The
    statistic is the sequence's mean KL estimate.

    Raises:
        ValueError: delta < 0 or not finite.
    """
    if not (math.isfinite(delta) and delta >= 0):
        raise ValueError(f"delta must be a finite number >= 0, got {delta!r}")
    m, lp, u = _prep(mask, logp, mu)
    seq_kl = _row_mean(u - lp, m)
    reject = (sequence_advantage(advantages, m) < 0) & (seq_kl > delta)
    return _mask(~reject, m, seq_kl)


def log_sequence_ratios(logp: Tensor, mu: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) log of the product ratio sum_t d and of the geometric-mean ratio mean_t d."""
    m, lp, u = _prep(mask, logp, mu)
    d = lp - u
    return (d * m).sum(-1), _row_mean(d, m)


def ratio_mask(
    logp: Tensor,
    mu: Tensor,
    mask: Tensor,
    low: float | None,
    high: float | None,
    geometric: bool,
) -> SequenceMask:
    """Keep a sequence whose ratio (product, or geometric mean) lies in [low, high].

    None drops that side of the bound. The statistic is the ratio itself (exp of the log,
    computed in float64: a product of many tokens may overflow to inf, which the mask drops).

    Raises:
        ValueError: a bound <= 0 or not finite, or low > high.
    """
    for bound in (low, high):
        if bound is not None and not (math.isfinite(bound) and bound > 0):
            raise ValueError(f"ratio bounds must be finite and > 0, got {bound!r}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"low {low:g} > high {high:g}")
    m = torch.as_tensor(mask).detach() > 0
    log_prod, log_geo = log_sequence_ratios(logp, mu, m)
    ratio = torch.exp(log_geo if geometric else log_prod)
    keep = torch.ones_like(ratio, dtype=torch.bool)
    if low is not None:
        keep &= ratio >= low
    if high is not None:
        keep &= ratio <= high
    return _mask(keep | (m.sum(-1) == 0), m, ratio)


def trust_region_mask(
    logp: Tensor, mu: Tensor, mask: Tensor, delta: float, estimator: str = "k2"
) -> SequenceMask:
    """TRM: drop a sequence when max_t of the token KL estimate exceeds delta.

    The statistic is that maximum (0 for a row without a token).

    Raises:
        ValueError: delta < 0 or not finite, or an unknown estimator.
    """
    if not (math.isfinite(delta) and delta >= 0):
        raise ValueError(f"delta must be a finite number >= 0, got {delta!r}")
    m = torch.as_tensor(mask).detach() > 0
    est = token_kl(logp, mu, m, estimator)
    top = est.masked_fill(~m, -math.inf).max(-1).values
    top = torch.where(m.any(-1), top, 0.0)
    return _mask(top <= delta, m, top)


# ---------------------------------------------------------------------- keep sampling mask


def top_p_support(logits: Tensor, top_p: float) -> Tensor:
    """(..., V) bool: the nucleus a top-p sampler draws from at each position.

    A token stays while the probability mass before it (in descending order) is below top_p;
    the most likely token always stays.

    Raises:
        ValueError: top_p outside (0, 1].
    """
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    probs = torch.softmax(logits.detach().to(F64), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def support_log_mass(logits: Tensor, support: Tensor) -> Tensor:
    """(...) log pi(S): the log of the probability mass the support S holds (differentiable)."""
    inside = logits.masked_fill(~support, -math.inf)
    return torch.logsumexp(inside, dim=-1) - torch.logsumexp(logits, dim=-1)


def keep_sampling_logprobs(
    logits: Tensor, tokens: Tensor, support: Tensor
) -> tuple[Tensor, Tensor]:
    """The sampled tokens' log-probs under pi renormalised on the sampler's support.

    Args:
        logits: (B, T, V) the trainer's logits (differentiable).
        tokens: (B, T) long, the sampled token ids (inside the support).
        support: (B, T, V) bool, the sampler's support at each position.

    Returns:
        (log pi(y) - log pi(S), the renormalisation term -log pi(S)), both (B, T).
    """
    logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
    term = -support_log_mass(logits, support)
    return logp + term, term
