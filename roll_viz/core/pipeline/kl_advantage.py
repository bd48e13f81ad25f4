"""The KL as a centred adjustment of the advantage: a fourth placement of the penalty.

Besides in the reward (r_t -= beta k_t), in the loss (+ beta k_t) and none (beta = 0), Tinker
(``tinker_cookbook/rl/metrics.py::incorporate_kl_penalty``, tinker-cookbook at 9dfcc3a) and
OpenPipe ART (PR #562) add the penalty to the ADVANTAGE, centred over the batch::

    x_t   = log pi_sample(y_t) - log pi_ref(y_t)         (k1, the sampled token, 0 off the mask)
    x_bar = sum_t x_t / number of valid tokens          (over the whole batch)
    A'_t  = A_t + coef * (x_bar - x_t)                  (valid tokens; padding unchanged)

Tokens that drifted from the reference more than the batch's average lose advantage, the others
gain; the adjustments sum to 0 over the batch (the policy gradient's total push is unchanged,
only moved between tokens). Tinker's ``kl_discount_factor`` > 0 turns the adjustment into its
discounted future sum per sequence (``ops.reverse_discounted_cumsum``), which no longer sums to 0.
Everything is computed without a gradient (the frameworks adjust the advantages in place).

What roll-viz simplifies: nothing; float64 instead of Tinker's float32.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from roll_viz.core.ops import as_bool, reverse_discounted_cumsum

F64 = torch.float64


class CentredKL(NamedTuple):
    """The centred KL adjustment on one batch ((B, T) float64, 0 off the mask).

    Attributes:
        kl: x_t = log pi - log pi_ref per token.
        mean_kl: x_bar over the batch's valid tokens (0 without one).
        adjustment: coef * (x_bar - x_t), or its discounted future sum.
        advantages: A + adjustment (the input's values off the mask).
    """

    kl: Tensor
    mean_kl: float
    adjustment: Tensor
    advantages: Tensor


def centred_kl_advantages(
    advantages: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    coef: float,
    discount: float = 0.0,
) -> CentredKL:
    """A'_t = A_t + coef * (mean KL - KL_t) (Tinker ``kl_penalty_coef``, ``kl_discount_factor``).

    Args:
        advantages: (B, T) or (B,) advantages before the adjustment.
        logprobs: (B, T) log-probs of the sampled tokens under the sampling policy.
        ref_logprobs: (B, T) under the reference (Tinker's base model).
        mask: (B, T) 0/1 action tokens.
        coef: the penalty coefficient (>= 0).
        discount: 0 (default) or a factor in (0, 1]: the adjustment's discounted future sum.

    Raises:
        ValueError: coef < 0 or not finite; discount outside [0, 1]; a non-finite log-prob on a
            valid token.
    """
    if not (math.isfinite(coef) and coef >= 0):
        raise ValueError(f"coef must be a finite number >= 0, got {coef!r}")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount!r}")
    m = as_bool(torch.as_tensor(mask))
    lp = torch.as_tensor(logprobs).detach().to(F64)
    ref = torch.as_tensor(ref_logprobs).detach().to(F64)
    if bool((m & ~(torch.isfinite(lp) & torch.isfinite(ref))).any()):
        raise ValueError("logprobs and ref_logprobs must be finite on the valid tokens")
    adv = torch.as_tensor(advantages).detach().to(F64)
    if adv.dim() == 1:
        adv = adv[:, None].expand(m.shape)
    kl = torch.where(m, lp - ref, 0.0)
    count = int(m.sum())
    mean = float(kl.sum()) / count if count else 0.0
    adjustment = torch.where(m, coef * (mean - kl), 0.0)
    if discount > 0:
        adjustment = torch.where(m, reverse_discounted_cumsum(adjustment, discount), 0.0)
    return CentredKL(kl, mean, adjustment, adv + adjustment)
