"""The inputs of one policy-update loss: a typed record, checked and converted in one place.

``LossInputs`` is what a dialect hands ``losses.loss_from_spec``; ``prepare_inputs`` checks the
shapes, the values on response tokens and the inputs the spec needs, and returns the float64
``LossBatch`` (0 on padding) the terms run on. Dimension letters: B sequences, T response tokens
(right-padded).

What roll-viz simplifies: nothing beyond ``losses`` (one micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline.loss_spec import LossSpec

F64 = torch.float64


@dataclass(frozen=True)
class LossInputs:
    """The tensors one loss reads: (B, T) unless said otherwise, constants unless said otherwise.

    Padding may hold anything (even inf) in every tensor.

    Attributes:
        logprobs: current-policy log-probs of the sampled tokens; may require grad.
        old_logprobs: rollout ("old") log-probs.
        advantages: (B, T) or (B,) advantages.
        response_mask: 0/1 loss mask.
        ref_logprobs: reference log-probs; needed when the KL loss is on.
        entropy: policy entropy per position; needed when the entropy coefficient is not 0.
            Kept differentiable if it requires grad.
        values: new critic predictions (kept differentiable); with ``returns`` (and
            ``old_values`` when the framework clips) gives ``terms["value"]``.
        old_values: critic values at rollout time.
        returns: value targets.
        scores: (B,) response scores (ROLL ``pg_variant: topr`` splits the rows by their sign).
        rollout_logprobs: the sampler's log-probs mu; needed by a train/rollout correction
            (``LossSpec.is_correction``).
        difficulty: (B,) each sample's difficulty in [0, 1] (ROLL ``difficulty_loss_weight``;
            without it the weight is skipped, as ROLL skips it without the data).
        policy_mask: 0/1 subset of ``response_mask`` the policy term and its metrics run on
            (verl ``bypass_mode``: the rejection mask); the KL and entropy terms keep
            ``response_mask``, and token-mean still divides by ``response_mask``'s token count
            (verl's ``batch_num_tokens`` is counted before the loss rejects tokens).
        policy_weights: constant multipliers of the per-token policy loss (verl ``bypass_mode``
            reinforce: the rollout IS weights).
        metric_mask: 0/1 mask the dialect's metric function may read as
            ``MetricContext.metric_mask`` (ROLL: the response mask before its sample-level mask,
            over which it logs some metrics); the loss does not use it.
        entropy_mask: 0/1 mask of the entropy term in place of ``response_mask`` (ROLL
            aggregates its entropy over the unmasked ``response_mask``).
        batch_num_tokens: the token-mean denominator of every term in place of
            ``response_mask``'s token count (verl's v1 trainer counts ``loss_mask``, the response
            before its decoupled rollout rejection narrowed ``response_mask``).
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    response_mask: Tensor
    ref_logprobs: Tensor | None = None
    entropy: Tensor | None = None
    values: Tensor | None = None
    old_values: Tensor | None = None
    returns: Tensor | None = None
    scores: Tensor | None = None
    rollout_logprobs: Tensor | None = None
    difficulty: Tensor | None = None
    policy_mask: Tensor | None = None
    policy_weights: Tensor | None = None
    metric_mask: Tensor | None = None
    entropy_mask: Tensor | None = None
    batch_num_tokens: float | None = None


def as_input(name: str, x: Any, shape: tuple, mask: Tensor, keep_grad: bool) -> Tensor:
    """``x`` as a float64 tensor of ``shape``, 0 off ``mask``; (B,) advantages broadcast to (B, T).

    Raises:
        ValueError: a wrong shape or a non-finite value on ``mask`` (the message names ``name``).
    """
    t = torch.as_tensor(x)
    if not keep_grad:
        t = t.detach()
    if name == "advantages" and t.dim() == 1 and t.shape[0] == shape[0]:
        t = t[:, None].expand(shape)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    bad = torch.nonzero(mask & ~torch.isfinite(t.detach()))
    if bad.numel():
        b, tok = bad[0].tolist()
        raise ValueError(f"{name}[{b}][{tok}]: non-finite value on a response token")
    return torch.where(mask, t.to(F64), 0.0)


def mask_input(name: str, x: Any, shape: tuple) -> Tensor:
    """A 0/1 mask input as bool, checked for shape."""
    flags = torch.as_tensor(x).detach() > 0
    if tuple(flags.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(flags.shape)}")
    return flags


@dataclass(frozen=True)
class LossBatch:
    """The validated float64 inputs (0 on padding) and the masks the terms run on."""

    shape: tuple
    full_m: Tensor  # (B, T) float response_mask: the KL / entropy terms, token-mean's count
    mask: Tensor  # (B, T) bool policy-term mask (response_mask, narrowed by policy_mask)
    m: Tensor  # (B, T) float of ``mask``
    lengths: Tensor  # (B, 1) tokens per row of ``mask``
    lp: Tensor  # differentiable
    old: Tensor
    adv: Tensor
    d: Tensor  # lp - old on response_mask, detached
    ref: Tensor | None
    ent: Tensor | None
    ent_m: Tensor
    mu: Tensor | None
    metric_bool: Tensor | None
    metric_d: Tensor | None
    num_tokens: float | None = None  # token-mean's denominator where not the mask's count


def prepare_inputs(spec: LossSpec, x: LossInputs) -> LossBatch:
    """Check and convert the inputs (the error names the argument first)."""
    mask_raw = torch.as_tensor(x.response_mask).detach()
    if mask_raw.dim() != 2 or mask_raw.shape[1] == 0:
        raise ValueError(f"response_mask: expected (B, T>=1), got {tuple(mask_raw.shape)}")
    if not bool(((mask_raw == 0) | (mask_raw == 1)).all()):
        raise ValueError("response_mask: must contain only 0 and 1")
    mask = mask_raw > 0
    shape = tuple(mask.shape)
    m = mask.to(F64)
    lp = as_input("logprobs", x.logprobs, shape, mask, keep_grad=True)
    old = as_input("old_logprobs", x.old_logprobs, shape, mask, keep_grad=False)
    adv = as_input("advantages", x.advantages, shape, mask, keep_grad=False)
    ref = None
    if x.ref_logprobs is not None:
        ref = as_input("ref_logprobs", x.ref_logprobs, shape, mask, keep_grad=False)
    if spec.kl_on and not spec.kl_zero and ref is None:
        raise ValueError("ref_logprobs: needed for the KL loss term")
    ent, ent_m = None, m
    if x.entropy_mask is not None:
        ent_m = mask_input("entropy_mask", x.entropy_mask, shape).to(F64)
    if x.entropy is not None:
        ent = as_input("entropy", x.entropy, shape, ent_m > 0, keep_grad=True)
    if spec.entropy_coef != 0 and ent is None:
        raise ValueError("entropy: needed when the entropy coefficient is not 0")
    mu = None
    if x.rollout_logprobs is not None:
        mu = as_input("rollout_logprobs", x.rollout_logprobs, shape, mask, keep_grad=False)
    if (spec.is_correction is not None or spec.ratio_vs_rollout) and mu is None:
        raise ValueError("rollout_logprobs: needed for the train/rollout correction")
    metric_bool, metric_d = None, None
    if x.metric_mask is not None:
        metric_bool = mask_input("metric_mask", x.metric_mask, shape)
        if bool((mask & ~metric_bool).any()):
            raise ValueError("metric_mask: must cover every token of response_mask")
        lp_u = as_input("logprobs", x.logprobs, shape, metric_bool, keep_grad=False)
        metric_d = lp_u - as_input("old_logprobs", x.old_logprobs, shape, metric_bool, False)
    full_m = m
    if x.policy_mask is not None:
        mask = mask & mask_input("policy_mask", x.policy_mask, shape)
        m = mask.to(F64)
    return LossBatch(
        shape,
        full_m,
        mask,
        m,
        m.sum(-1, keepdim=True),
        lp,
        old,
        adv,
        lp.detach() - old,
        ref,
        ent,
        ent_m,
        mu,
        metric_bool,
        metric_d,
        x.batch_num_tokens,
    )
