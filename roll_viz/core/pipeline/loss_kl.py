"""The KL term of a policy-update loss: its value and closed-form gradient per token.

``kl_loss_term`` aggregates a KL estimator of (logp - ref) with the framework's clamps, in its
straight-through form (value of the estimator, gradient of k2) or ratio-corrected (KL times
pi / pi_old), and returns the gradient coefficient next to the value, as ``policy_terms`` does
for the policy term. Dimension letters: B sequences, T response tokens.

What roll-viz simplifies: nothing beyond ``losses`` (one micro-batch).
"""

from __future__ import annotations

import torch
from torch import Tensor

from roll_viz.core.pipeline.aggregation import agg_weights
from roll_viz.core.pipeline.kl import token_kl
from roll_viz.core.pipeline.loss_inputs import LossBatch
from roll_viz.core.pipeline.loss_spec import LossSpec

F64 = torch.float64


def kl_loss_term(spec: LossSpec, modes: dict, b: LossBatch, ratio: Tensor, r: Tensor):
    """The KL loss on response_mask (a policy_mask narrows the policy term only).

    ``ratio`` / ``r`` are the policy term's importance ratio (differentiable / detached), which
    the ratio-corrected KL multiplies in.

    Returns:
        ((B, T) per-token KL or None, () aggregated term or None, (B, T) its gradient share).
    """
    m = b.full_m
    mask = m > 0
    w_kl = agg_weights(m, *modes["kl"], b.num_tokens)
    if not spec.kl_on:
        return None, None, torch.zeros_like(m)
    if spec.kl_zero:
        return torch.zeros_like(m), torch.zeros((), dtype=F64), torch.zeros_like(m)
    lp, ref = b.lp, b.ref
    kl_tok = token_kl(lp, ref, m, spec.kl_estimator, spec.kl_clamp, spec.kl_log_ratio_clamp)
    slope = kl_slope(lp.detach() - ref, spec, mask)
    if spec.kl_straight_through:  # verl "+": forward value, k2 gradient
        k2 = 0.5 * torch.where(mask, lp - ref, 0.0) ** 2
        kl_tok = k2 - k2.detach() + kl_tok.detach()
        slope = torch.where(mask, lp.detach() - ref, 0.0)
    elif spec.kl_is_weight_clip is not None:  # OpenRLHF unbiased_gradient
        w = torch.exp(torch.where(mask, lp.detach() - b.old, 0.0))
        w = w.clamp(max=spec.kl_is_weight_clip)
        k2 = w * 0.5 * torch.where(mask, lp - ref, 0.0) ** 2
        kl_tok = k2 - k2.detach() + kl_tok.detach()
        slope = torch.where(mask, w * (lp.detach() - ref), 0.0)
    if spec.kl_ratio_correction:  # TRL use_bias_correction_kl: k3 * pi/pi_old
        value = kl_tok.detach()
        kl_tok = kl_tok * ratio
        g = w_kl * slope * r
        if spec.level == "token":
            g = g + w_kl * value * r
        else:
            coupling = (w_kl * value).sum(-1, keepdim=True)
            g = g + m * r / b.lengths.clamp(min=1.0) * coupling
        g_kl = spec.beta * g
    else:
        g_kl = spec.beta * w_kl * slope
    return kl_tok, (w_kl * kl_tok).sum(), g_kl


def kl_slope(log_ratio: Tensor, spec: LossSpec, mask: Tensor) -> Tensor:
    """Slope of KL_estimator(logp - ref) w.r.t. logp with the framework's clamps (0 if clamped)."""
    x = log_ratio
    inside = torch.ones_like(x)
    if spec.kl_log_ratio_clamp is not None:
        c = spec.kl_log_ratio_clamp
        inside = ((x >= -c) & (x <= c)).to(F64)
        x = x.clamp(-c, c)
    if spec.kl_estimator == "k1":
        value, slope = x, torch.ones_like(x)
    elif spec.kl_estimator == "abs":
        value, slope = x.abs(), torch.sign(x)
    elif spec.kl_estimator == "k2":
        value, slope = 0.5 * x * x, x
    else:
        value, slope = torch.expm1(-x) + x, -torch.expm1(-x)
    if spec.kl_clamp is not None:
        c = spec.kl_clamp
        inside = inside * ((value >= -c) & (value <= c)).to(F64)
    return torch.where(mask, slope * inside, 0.0)
