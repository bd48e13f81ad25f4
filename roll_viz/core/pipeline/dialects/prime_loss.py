"""prime-rl's default RL loss under its own names (``[trainer.loss] type = "default"``).

prime-rl (``src/prime_rl/trainer/rl/loss.py::default_loss_fn`` at 559b447; knobs in
``prime_rl/configs/trainer.py::DefaultLossConfig``) trains against the INFERENCE policy mu (no
pi_old): ratio r = pi / mu, a DPPO-Binary-TV token mask conditioned on the advantage's sign
(A > 0: masked when p - p_mu > ``dppo_mask_high``; otherwise when p - p_mu < -``dppo_mask_low``),
the policy term ``-keep * adv_tau * A * r`` and Kimi-K2.5's ``kl_tau * log^2(pi / mu)`` on every
loss token, summed and divided by the batch's loss-token count. The term is the registered
policy kind ``prime_default`` (``policy_terms``); this module gives its defaults and runs it on
the mismatch lab's tokens as a ``Correction`` (the mask) with its loss and gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline.losses import LossInputs, LossSpec, loss_from_spec
from roll_viz.core.pipeline.rollout_correction import F64, Correction, LabLoss, prep

#: DefaultLossConfig's defaults
DEFAULTS: dict[str, float] = {
    "dppo_mask_low": 0.2,
    "dppo_mask_high": 0.2,
    "adv_tau": 1.0,
    "kl_tau": 1e-3,
}
_ORDER = ("dppo_mask_low", "dppo_mask_high", "adv_tau", "kl_tau")


def prime_spec(**params: float) -> LossSpec:
    """The ``prime_default`` LossSpec at prime-rl's defaults, overridden by ``params``.

    Raises:
        ValueError: an unknown knob or a negative value (prime-rl's ``ge=0``).
    """
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"prime-rl default loss has no knob {sorted(unknown)}")
    values = {**DEFAULTS, **params}
    if any(not values[k] >= 0 for k in _ORDER):
        raise ValueError("prime-rl's loss knobs must be >= 0")
    return LossSpec(
        kind="prime_default", level="token", clamp=None, prime=tuple(values[k] for k in _ORDER)
    )


def prime_default_loss(
    logp: Tensor, mu: Tensor, advantages: Tensor, mask: Tensor, **params: float
) -> tuple[Correction, LabLoss]:
    """prime-rl's default loss on a batch: its DPPO mask as a Correction, and loss + gradient.

    Args:
        logp: (B, T) log pi (the trainer's current policy).
        mu: (B, T) log mu (the inference engine's log-probs of the same tokens).
        advantages: (B, T) advantages.
        mask: (B, T) loss tokens.
        **params: prime-rl knobs (``DEFAULTS``).

    Returns:
        (the mask as a Correction: weight 1 kept / 0 masked, every token counted; the loss with
        its closed-form d loss / d log pi per token and the token count it divides by).
    """
    spec = prime_spec(**params)
    m, lp, u, adv = prep(mask, logp, mu, advantages)
    mf = m.to(F64)
    modes = {name: ("token-mean", None) for name in ("policy", "kl", "entropy")}
    inputs = LossInputs(logprobs=lp, old_logprobs=u, advantages=adv, response_mask=mf)
    res = loss_from_spec(
        spec,
        modes | {"value": None},
        lambda ctx: {},
        framework="prime-rl",
        config={},
        notes=[],
        inputs=inputs,
    )
    keep = res.per_token["valid"] & m
    masked = m & ~keep
    config: tuple[tuple[str, Any], ...] = tuple(zip(_ORDER, spec.prime, strict=True))
    note = (
        "prime-rl default loss: ratio pi / mu (no pi_old); DPPO mask on p - p_mu by the sign of "
        "A; -A r on kept tokens plus kl_tau * log^2(pi / mu) on every token; token mean."
    )
    corr = Correction(
        "prime-rl",
        "default loss (DPPO + KL)",
        config,
        keep.to(F64),
        m,
        torch.zeros_like(m),
        masked,
        note,
    )
    loss = LabLoss(float(res.total), res.per_token["grad_coef"], int(m.sum()))
    return corr, loss
