"""Stage 2: per-token KL between policy and reference, and the KL coefficient controllers.

With log_r = logprobs - ref_logprobs at the sampled token (Schulman 2020, "Approximating KL
divergence", http://joschu.net/blog/kl-approx.html):
k1 = log_r (unbiased, can be negative), abs = |log_r|, k2 = log_r**2 / 2 (ROLL/verl "mse"),
k3 = exp(-log_r) - 1 + log_r (verl "low_var_kl"; unbiased, always >= 0).
E_p[k1] = E_p[k3] = KL(p || q) exactly; ``core.ops.full_vocab_kl`` computes that exact value.

Clamps, as each framework applies them (algorithms.md T7): ROLL k3 to [-10, 10]; verl k3 with the
inner log-ratio clamped to [-20, 20] and the result to [-10, 10]; OpenRLHF every estimator to
[-10, 10]; TRL none.

What roll-viz simplifies against the real recipes:
- one training step: the KL uses the rollout ("old") log-probs for both the reward KL and the
  KL loss (the frameworks compute the loss KL on the current policy during the update);
- verl's straight-through "k1+"/"k3+" only change gradients: the loss (``losses``) applies them,
  the values here are the plain estimators';
- the adaptive controller is the pure function ``next_beta``; it is applied once per batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask, as_bool, masked_mean

KLName = Literal["k1", "abs", "k2", "k3"]


def kl_k1(log_ratio: Tensor) -> Tensor:
    """k1 = log_r. (B, T) -> (B, T) (the input itself: tensors are never modified in place)."""
    return log_ratio


def kl_abs(log_ratio: Tensor) -> Tensor:
    """|log_r|. (B, T) -> (B, T)."""
    return log_ratio.abs()


def kl_k2(log_ratio: Tensor) -> Tensor:
    """k2 = log_r**2 / 2. (B, T) -> (B, T)."""
    return 0.5 * log_ratio * log_ratio


def kl_k3(log_ratio: Tensor) -> Tensor:
    """k3 = exp(-log_r) - 1 + log_r. (B, T) -> (B, T)."""
    return torch.expm1(-log_ratio) + log_ratio


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {
    "k1": kl_k1,
    "abs": kl_abs,
    "k2": kl_k2,
    "k3": kl_k3,
}


def token_kl(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    response_mask: Tensor,
    estimator: KLName = "k1",
    clamp: float | None = None,
    log_ratio_clamp: float | None = None,
) -> Tensor:
    """Per-token estimate of KL(policy || ref) at the sampled tokens.

    Args:
        logprobs: (B, T) log-prob of each sampled token under the policy.
        ref_logprobs: (B, T) log-prob of the same tokens under the reference model.
        response_mask: (B, T) 1.0 on response tokens, 0.0 on padding.
        estimator: "k1", "abs", "k2" or "k3" (canonical names; dialects map their own).
        clamp: clamp the estimate to [-clamp, clamp] (None: no clamp).
        log_ratio_clamp: clamp log_r to [-c, c] before the estimator (verl k3 uses 20).

    Returns:
        (B, T) KL estimate, exactly 0 where response_mask == 0.
    """
    assert logprobs.shape == ref_logprobs.shape == response_mask.shape, "shape mismatch"
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"KL estimator must be one of {tuple(KL_ESTIMATORS)}, got {estimator!r}")
    # padding may hold anything (even -inf): zero the log-ratio there; every estimator maps 0 to
    # exactly +0.0, so the result needs no second mask
    log_ratio = apply_mask(logprobs - ref_logprobs, as_bool(response_mask))
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    kl = KL_ESTIMATORS[estimator](log_ratio)
    if clamp is not None:
        kl = kl.clamp(-clamp, clamp)
    return kl


def observed_kl(kl: Tensor, response_mask: Tensor) -> float:
    """The controller's KL: mean over samples of each sample's token-mean KL (verl, ROLL).

    Args:
        kl: (B, T) per-token KL.
        response_mask: (B, T) float 0/1.

    Returns:
        Scalar; a zero-length row counts as 0 (the frameworks' ``/(count + 1e-8)`` does the same).
    """
    if kl.shape[0] == 0:
        return 0.0
    return masked_mean(kl, response_mask, dim=-1).mean().item()


def next_beta(
    beta: float, observed_kl: float, target: float, horizon: float, n_steps: int
) -> float:
    """Adaptive KL controller (Ziegler et al. 2019, https://arxiv.org/abs/1909.08593).

    ``beta * (1 + clip(observed / target - 1, -0.2, 0.2) * n_steps / horizon)``; the same formula
    in ROLL, verl and OpenRLHF, called with n_steps = batch size (verl issue #1984).

    Args:
        beta: current KL coefficient.
        observed_kl: KL measured on this batch.
        target: target KL (> 0).
        horizon: horizon (> 0).
        n_steps: samples in this batch (>= 0).

    Returns:
        The next beta.

    Raises:
        ValueError: target <= 0 (ZeroDivisionError in OpenRLHF) or horizon <= 0 (OpenRLHF PR
            #1289: -inf) or n_steps < 0.
    """
    if not target > 0:
        raise ValueError(f"adaptive KL controller needs target > 0, got {target}")
    if not horizon > 0:
        raise ValueError(f"adaptive KL controller needs horizon > 0, got {horizon}")
    if n_steps < 0:
        raise ValueError(f"n_steps must be >= 0, got {n_steps}")
    error = min(max(observed_kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + error * n_steps / horizon)


def kl_term_mean(kl: Tensor, response_mask: Tensor) -> float:
    """Token-mean of a KL term over all valid tokens (verl token-mean, OpenRLHF, TRL's "kl").

    ROLL and verl aggregate their KL loss with ``loss_agg_mode`` instead; the dialects use
    ``losses.aggregate`` for them.

    Args:
        kl: (B, T) per-token KL.
        response_mask: (B, T) float 0/1.

    Returns:
        Scalar (0.0 when there is no valid token).
    """
    return masked_mean(kl, response_mask).item()
