"""Stages 4-5: token-level rewards and the advantage estimators (one uniform signature).

Every estimator is ``fn(token_rewards (B, T), response_mask (B, T), group_ids (B,), params)
-> Estimate(advantages (B, T), returns (B, T), baseline (B,), scale (B,))``; what an estimator
needs beyond the rewards (critic values, greedy baseline scores, eps, ddof, singleton rule, how
masked tokens are treated) travels in ``EstimatorParams``, so the call site never branches.

Outcome estimators (grpo, dr_grpo, rloo, reinforce_pp_baseline) reduce the token rewards to one
sequence reward ``s_i = sum_t r_{i,t}`` (so an in-reward KL penalty counts, as in verl) and
broadcast the result back to every valid token. Token estimators (gae, reinforce, reinforce_pp,
remax) run a reverse discounted cumsum over the tokens (``core.ops``: no Python loop over T).

The defaults of ``EstimatorParams`` are verl's conventions; the dialects (``dialects.py``) pass
their own framework's.

Masked tokens in recursions (``carry_through``): True skips them entirely (verl: the next value
and the running advantage jump over tool/observation tokens with no extra decay; implemented by
compacting each row's valid tokens to the front); False runs the recursion over the full width
on whatever values the caller passes (ROLL passes unmasked critic values, OpenRLHF masked ones;
algorithms.md T8).

Also: the length-weighted baseline (OPO), GPG's batch factor, pass@k (only the best sample
learns), MaxRL (divide by the group's pass rate; roll-viz's own, no framework ships it) and
GDPO's per-component normalisation (``decoupled_norm_advantages``, which takes the
reward components rather than the token rewards).

What roll-viz simplifies against the real recipes: no critic training (values are given), no
multi-session/agentic estimators (GiGPO, step REINFORCE), no rollout IS weights in the optimal
token baseline (it takes the batch's sum of squared next-token probabilities), and verl's fp32
one-pass ``grpo_vectorized`` is not emulated (float64, two-pass; see T6 in algorithms.md for the
difference).

Size: every estimator behind the one signature, the 2026 ones (OPO, GPG, pass@k, GDPO, the
optimal token baseline, MaxRL) next to the helpers and classic estimators they reuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from roll_viz.core.ops import (
    apply_mask,
    compact_valid,
    group_stats,
    last_token_index,
    masked_whiten,
    reverse_discounted_cumsum,
    scatter_back,
)
from roll_viz.core.pipeline.postprocess import leave_one_out_baseline, require_group_size

SINGLETON_RULES = ("raw", "zero", "raise")
EstimatorName = Literal[
    "gae",
    "reinforce",
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
]


@dataclass(frozen=True)
class EstimatorParams:
    """Everything an estimator may need besides the token rewards (verl's conventions by default).

    Attributes:
        gamma: discount in [0, 1] (gae, reinforce, reinforce_pp).
        lam: GAE lambda in [0, 1].
        values: (B, T) critic values V(s_t) (gae), or None.
        baseline_scores: (B,) greedy-rollout score per sample (remax), or None.
        seq_rewards: (B,) sequence rewards for the outcome estimators; None = sum of the token
            rewards (a zero-length response's score has no token, so dialects pass it here).
        std_eps: eps added to the group std (grpo).
        std_ddof: group std degrees of freedom (1 = unbiased, every framework).
        singleton: group of one: "raw" (mean 0 / std 1 for grpo, baseline 0 for rloo: the raw
            reward passes through, verl), "zero" (advantage 0, ROLL agentic), "raise".
        carry_through: skip masked tokens in gae/reinforce recursions (verl) or not.
        whiten_ddof: variance ddof of the token-weighted whitening (reinforce_pp*).
        whiten_eps: eps of that whitening.
        whiten_eps_mode: "add" (rsqrt(var + eps)) or "floor" (rsqrt(max(var, eps))).
        group_labels: (P,) prompt ids for error messages.
        logprobs: (B, T) rollout-policy log-probs of the sampled tokens (optimal token baseline).
        sum_pi_squared: (B, T) sum of the squared next-token probabilities (same).
        float32_stats: grpo's group mean and std in float32 as verl's ``group_mean_std`` computes
            them (one index_add pass, no refinement; verl ``grpo_vectorized``), the advantage
            in the rewards' dtype.
    """

    gamma: float = 1.0
    lam: float = 1.0
    values: Tensor | None = None
    baseline_scores: Tensor | None = None
    seq_rewards: Tensor | None = None
    std_eps: float = 1e-6
    std_ddof: int = 1
    singleton: str = "raw"
    carry_through: bool = True
    whiten_ddof: int = 1
    whiten_eps: float = 1e-8
    whiten_eps_mode: str = "add"
    group_labels: tuple = ()
    logprobs: Tensor | None = None
    sum_pi_squared: Tensor | None = None
    float32_stats: bool = False


class Estimate(NamedTuple):
    """Output of an estimator.

    Attributes:
        advantages: (B, T) advantages, 0 on masked positions.
        returns: (B, T) returns as the framework defines them, 0 on masked positions (may be the
            same tensor as ``advantages``; no stage ever modifies a tensor in place).
        baseline: (B,) response-level baseline subtracted (0 where none).
        scale: (B,) response-level divisor (1 where none).
    """

    advantages: Tensor
    returns: Tensor
    baseline: Tensor
    scale: Tensor


AdvantageFn = Callable[[Tensor, Tensor, Tensor, EstimatorParams], Estimate]


def token_rewards(
    rewards: Tensor, response_mask: Tensor, kl: Tensor | None = None, beta: float = 0.0
) -> Tensor:
    """Response-level reward on the last valid token, minus beta * kl on every valid token.

    Equivalent loop: ``r[b, last_valid(b)] += rewards[b]; r[b, t] -= beta * kl[b, t]`` for valid t.
    A zero-length row (all-zero mask) receives nothing: its reward has no token to land on.

    Args:
        rewards: (B,) processed response-level rewards.
        response_mask: (B, T) float 0/1.
        kl: (B, T) per-token KL estimate, or None (no KL in the reward).
        beta: KL coefficient.

    Returns:
        (B, T) token rewards, exactly 0 where response_mask == 0.
    """
    assert rewards.shape == response_mask.shape[:1], "rewards must be (B,)"
    last = last_token_index(response_mask)  # (B,)
    out = torch.zeros_like(response_mask, dtype=rewards.dtype).scatter(
        -1, last[:, None], rewards[:, None]
    )  # (B,) -> (B, T), the reward at each row's last valid token
    if kl is not None and beta != 0.0:
        out = torch.sub(out, kl, alpha=beta)  # out - beta * kl in one pass
    return apply_mask(out, response_mask)


def _seq_rewards(token_rewards: Tensor, mask: Tensor, params: EstimatorParams) -> Tensor:
    if params.seq_rewards is not None:
        return params.seq_rewards
    return apply_mask(token_rewards, mask).sum(dim=-1)  # token rewards are finite on padding


def _broadcast(seq: Tensor, mask: Tensor) -> Tensor:
    """(B,) -> (B, T) repeated on valid tokens, 0 elsewhere."""
    return apply_mask(seq[:, None].expand_as(mask), mask)


def discounted_returns(
    token_rewards: Tensor, response_mask: Tensor, gamma: float, carry_through: bool
) -> Tensor:
    """R_t = r_t + gamma * R_{t+1}, over valid tokens (carry_through) or the full width.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        gamma: discount in [0, 1].
        carry_through: skip masked tokens without decay (verl) instead of decaying through them.

    Returns:
        (B, T) returns, 0 on masked positions.
    """
    rewards = apply_mask(token_rewards, response_mask)
    if carry_through:
        compact, _, order = compact_valid(rewards, response_mask)
        returns = scatter_back(reverse_discounted_cumsum(compact, gamma), order)
    else:
        returns = reverse_discounted_cumsum(rewards, gamma)
    return apply_mask(returns, response_mask)


def gae(token_rewards: Tensor, values: Tensor, gamma: float, lam: float) -> Tensor:
    """Plain GAE over the full width: delta_t = r_t + gamma V_{t+1} - V_t, V_T = 0.

    ``A_t = sum_k (gamma lam)**k delta_{t+k}`` (Schulman et al. 2015,
    https://arxiv.org/abs/1506.02438). Equivalent loop::

        last = 0
        for t in reversed(range(T)):
            next_v = V[:, t + 1] if t + 1 < T else 0
            last = r[:, t] + gamma * next_v - V[:, t] + gamma * lam * last
            A[:, t] = last

    Args:
        token_rewards: (B, T) rewards (the caller masks them or not).
        values: (B, T) critic values (the caller masks them or not).
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1].

    Returns:
        (B, T) advantages (unmasked).
    """
    next_values = torch.cat([values[:, 1:], values.new_zeros(values.shape[0], 1)], dim=1)
    deltas = torch.add(token_rewards, next_values, alpha=gamma) - values
    return reverse_discounted_cumsum(deltas, gamma * lam)


def gae_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """GAE with a critic; returns = A + V (the value targets). Not whitened here.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) unused.
        params: needs ``values`` (B, T), ``gamma``, ``lam``, ``carry_through``.

    Returns:
        Estimate; baseline 0 and scale 1 (the baseline is the per-token critic).
    """
    if params.values is None:
        raise ValueError("gae needs critic values (batch.values, shape (B, T))")
    values = params.values
    rewards = apply_mask(token_rewards, response_mask)
    if params.carry_through:
        r_c, m_c, order = compact_valid(rewards, response_mask)
        v_c = apply_mask(values.gather(-1, order), m_c)
        adv = scatter_back(gae(r_c, v_c, params.gamma, params.lam), order)
    else:
        adv = gae(rewards, values, params.gamma, params.lam)
    B = token_rewards.shape[0]
    return Estimate(
        apply_mask(adv, response_mask),
        apply_mask(adv + values, response_mask),
        token_rewards.new_zeros(B),
        token_rewards.new_ones(B),
    )


def reinforce_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """REINFORCE: advantage = discounted reward-to-go R_t (no baseline); returns = R.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) unused.
        params: ``gamma``, ``carry_through``.

    Returns:
        Estimate with advantages == returns.
    """
    returns = discounted_returns(token_rewards, response_mask, params.gamma, params.carry_through)
    B = token_rewards.shape[0]
    return Estimate(returns, returns, token_rewards.new_zeros(B), token_rewards.new_ones(B))


def _group_stats_float32(seq: Tensor, group_ids: Tensor, ddof: int) -> tuple[Tensor, Tensor]:
    """Per-sample group (mean, std) in float32, as verl's ``group_mean_std`` (eps 0) has them.

    mean = sum / count and var = sum (s - mean)^2 / max(count - ddof, 1), each one float32
    ``index_add`` pass; cast back to ``seq``'s dtype.
    """
    s32 = seq.to(torch.float32)
    n = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    zeros = torch.zeros(n, dtype=torch.float32, device=seq.device)
    count = zeros.index_add(0, group_ids, torch.ones_like(s32))
    mean = zeros.index_add(0, group_ids, s32) / count.clamp_min(1.0)
    centered = s32 - mean[group_ids]
    var = zeros.index_add(0, group_ids, centered * centered) / (count - ddof).clamp_min(1.0)
    std = torch.sqrt(var.clamp(min=0.0))
    return mean[group_ids].to(seq.dtype), std[group_ids].to(seq.dtype)


def _group_baseline(seq: Tensor, group_ids: Tensor, params: EstimatorParams, what: str):
    """Group mean and std per sample with the singleton rule applied; ((B,), (B,), (B,) bool)."""
    stats = group_stats(seq, group_ids, ddof=params.std_ddof)
    if params.float32_stats:
        f32_mean, f32_std = _group_stats_float32(seq, group_ids, params.std_ddof)
        stats = stats._replace(mean=f32_mean, std=f32_std)
    single = stats.count <= 1
    if params.singleton == "raise":
        require_group_size(group_ids, params.group_labels, what)
    elif params.singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton must be one of {SINGLETON_RULES}, got {params.singleton!r}")
    mean = torch.where(single, torch.zeros_like(seq), stats.mean)
    std = torch.where(single, torch.ones_like(seq), stats.std)
    return mean, std, single


def grpo_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """GRPO: A_i = (s_i - mean_group) / (std_group + eps), broadcast to every valid token.

    Equivalent loop: for each prompt, ``xs = [s_i in group]``, ``(s_i - mean(xs)) /
    (std(xs, ddof) + eps)``. Singletons follow ``params.singleton`` ("raw": mean 0, std 1 as in
    verl, so A = s / (1 + eps)). returns = advantages (verl).

    Args:
        token_rewards: (B, T) token rewards (summed per row into s_i).
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``std_eps``, ``std_ddof``, ``singleton``, optional ``seq_rewards``.

    Returns:
        Estimate with baseline = group mean, scale = std + eps.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    mean, std, single = _group_baseline(seq, group_ids, params, "grpo")
    scale = std + params.std_eps
    adv_seq = (seq - mean) / scale
    if params.singleton == "zero":
        adv_seq = torch.where(single, torch.zeros_like(seq), adv_seq)
    adv = _broadcast(adv_seq, response_mask)
    return Estimate(adv, adv, mean, scale)


def dr_grpo_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """Dr.GRPO: A_i = s_i - mean_group (no std division), broadcast; returns = advantages.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``singleton``, optional ``seq_rewards``.

    Returns:
        Estimate with baseline = group mean, scale = 1.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    mean, _, single = _group_baseline(seq, group_ids, params, "dr_grpo")
    adv_seq = seq - mean
    if params.singleton == "zero":
        adv_seq = torch.where(single, torch.zeros_like(seq), adv_seq)
    adv = _broadcast(adv_seq, response_mask)
    return Estimate(adv, adv, mean, torch.ones_like(seq))


def rloo_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """RLOO: A_i = s_i - mean_{j != i} s_j = n/(n-1) (s_i - mean), broadcast.

    Singletons: "raw" keeps s_i (verl ``rloo``), "zero" gives 0 (verl ``rloo_vectorized``).

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``singleton``, optional ``seq_rewards``.

    Returns:
        Estimate with baseline = leave-one-out mean, scale = 1; returns = advantages.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    if params.singleton == "raise":
        require_group_size(group_ids, params.group_labels, "rloo")
    baseline = leave_one_out_baseline(seq, group_ids)
    if params.singleton == "zero":
        single = group_stats(seq, group_ids).count <= 1
        baseline = torch.where(single, seq, baseline)
    adv = _broadcast(seq - baseline, response_mask)
    return Estimate(adv, adv, baseline, torch.ones_like(seq))


def _whiten(x: Tensor, mask: Tensor, params: EstimatorParams) -> Tensor:
    return masked_whiten(
        x, mask, ddof=params.whiten_ddof, eps=params.whiten_eps, eps_mode=params.whiten_eps_mode
    )


def reinforce_pp_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """REINFORCE++: token returns R_t (gamma), then token-weighted whitening over the batch.

    https://arxiv.org/abs/2501.03262. returns = unwhitened R (verl).

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) unused.
        params: ``gamma``, ``carry_through``, ``whiten_*``.

    Returns:
        Estimate; baseline 0, scale 1 (the whitening is token-level, not per response).

    Raises:
        ValueError: fewer valid tokens than the whitening needs.
    """
    returns = discounted_returns(token_rewards, response_mask, params.gamma, params.carry_through)
    B = token_rewards.shape[0]
    adv = _whiten(returns, response_mask, params)
    return Estimate(adv, returns, token_rewards.new_zeros(B), token_rewards.new_ones(B))


def reinforce_pp_baseline_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """REINFORCE++-baseline: (s_i - mean_group) on every valid token, then token-weighted whitening.

    Singleton groups subtract 0 (verl). returns = advantages (verl).

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``whiten_*``, ``singleton``, optional ``seq_rewards``.

    Returns:
        Estimate with baseline = group mean, scale = 1.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    mean, _, _ = _group_baseline(seq, group_ids, params, "reinforce_pp_baseline")
    adv = _whiten(_broadcast(seq - mean, response_mask), response_mask, params)
    return Estimate(adv, adv, mean, torch.ones_like(seq))


def remax_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """ReMax: returns_t = sum_{t' >= t} r_t' (undiscounted), A_t = returns_t - b_greedy.

    https://arxiv.org/abs/2310.10505; b_greedy is the score of the prompt's greedy response.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) unused.
        params: needs ``baseline_scores`` (B,).

    Returns:
        Estimate with baseline = greedy score, scale = 1.
    """
    if params.baseline_scores is None:
        raise ValueError("remax needs greedy baseline scores (batch.baseline_scores, shape (B,))")
    returns = discounted_returns(token_rewards, response_mask, 1.0, carry_through=False)
    adv = apply_mask(returns - params.baseline_scores[:, None], response_mask)
    return Estimate(
        adv, returns, params.baseline_scores.clone(), token_rewards.new_ones(adv.shape[0])
    )


def length_weighted_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """OPO (https://arxiv.org/abs/2505.23585): A_i = s_i - sum_j L_j s_j / sum_j L_j.

    The baseline is the group's length-weighted mean score (L = response length); a group of one
    has baseline 0. Equivalent loop: for each prompt, ``b = sum(L_j * s_j) / sum(L_j)``.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: optional ``seq_rewards``.

    Returns:
        Estimate with baseline = length-weighted group mean, scale = 1; returns = advantages.

    Raises:
        ValueError: a group of two or more whose responses are all empty (0 / 0).
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    lengths = response_mask.sum(-1)
    weighted = group_stats(lengths * seq, group_ids).sum
    total_len = group_stats(lengths, group_ids).sum
    count = group_stats(seq, group_ids).count
    if bool(((count > 1) & (total_len == 0)).any()):
        raise ValueError("opo: a group whose responses are all empty has no length-weighted mean")
    baseline = torch.where(count > 1, weighted / total_len.clamp(min=1.0), torch.zeros_like(seq))
    adv = _broadcast(seq - baseline, response_mask)
    return Estimate(adv, adv, baseline, torch.ones_like(seq))


def gpg_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """GPG: A_i = alpha (s_i - mean_group), alpha = B / max(#{s_j != 0}, 1).

    The batch-level factor alpha rescales the batch as if only the samples with a non-zero
    reward counted (f_norm = 1: the group std is computed by the reference code but unused). A
    group of one has mean 0.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: optional ``seq_rewards``.

    Returns:
        Estimate with baseline = group mean, scale = 1 / alpha; returns = advantages.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    alpha = seq.shape[0] / max(int(torch.count_nonzero(seq).item()), 1)
    stats = group_stats(seq, group_ids)
    mean = torch.where(stats.count > 1, stats.mean, torch.zeros_like(seq))
    adv = _broadcast(alpha * (seq - mean), response_mask)
    return Estimate(adv, adv, mean, torch.full_like(seq, 1.0 / alpha))


def passk_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """Pass@k (https://arxiv.org/abs/2503.19595): only each group's best sample learns.

    The best sample gets ``(r_max - r_second) / (std_group + eps)`` (no division when
    ``std_eps`` is None: ``norm_adv_by_std_in_grpo=False``), every other sample 0. With a tie
    at the top the difference is 0, so which of the tied samples is "best" does not matter.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``std_eps`` (None: no std division), ``std_ddof``, optional ``seq_rewards``.

    Returns:
        Estimate with baseline = the group's second-best score for the best sample (the sample's
        own score elsewhere), scale = std + eps; returns = advantages.

    Raises:
        ValueError: a group with fewer than 2 samples.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    require_group_size(group_ids, params.group_labels, "grpo_passk")
    stats = group_stats(seq, group_ids, ddof=params.std_ddof)
    adv_seq = torch.zeros_like(seq)
    baseline = seq.clone()
    for g in torch.unique(group_ids).tolist():
        idx = torch.nonzero(group_ids == g).flatten()
        top = torch.topk(seq[idx], 2)
        best = idx[top.indices[0]]
        baseline[best] = top.values[1]
        adv_seq[best] = top.values[0] - top.values[1]
    scale = torch.ones_like(seq) if params.std_eps is None else stats.std + params.std_eps
    adv_seq = adv_seq / scale
    adv = _broadcast(adv_seq, response_mask)
    return Estimate(adv, adv, baseline, scale)


def decoupled_norm_advantages(
    components: Tensor,
    weights: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    params: EstimatorParams,
    by_std: bool = True,
) -> Estimate:
    """GDPO (https://arxiv.org/abs/2601.05242): normalise each reward per group, sum, whiten.

    ``A = whiten(sum_k w_k grpo(r_k))``: each component is group-normalised on its own (the
    ``grpo`` estimator with ``params``), the weighted sum is broadcast to the tokens and whitened
    token-weighted over the batch (``whiten_ddof``, ``whiten_eps``).

    Args:
        components: (K, B) per-component sequence scores.
        weights: (K,) component weights.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: the grpo conventions and the whitening's.
        by_std: divide each component by its group std (False: only subtract the group mean).

    Returns:
        Estimate with baseline 0 and scale 1 (the normalisation is per component); returns =
        advantages.
    """
    total = torch.zeros_like(response_mask)
    estimator = grpo_advantages if by_std else dr_grpo_advantages
    for k in range(components.shape[0]):
        per = replace(params, seq_rewards=components[k])
        part = estimator(torch.zeros_like(response_mask), response_mask, group_ids, per)
        total = total + weights[k] * part.advantages
    adv = apply_mask(_whiten(total, response_mask, params), response_mask)
    zeros = torch.zeros(response_mask.shape[0], dtype=adv.dtype)
    return Estimate(adv, adv, zeros, torch.ones_like(zeros))


def optimal_token_baseline_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """Optimal token baseline (arXiv 2602.07078): one baseline per position and prompt group.

    ``G_t`` = undiscounted reward-to-go; ``w_t = 1 - 2 pi_t + sum_v pi(v)^2`` (pi_t the sampled
    token's probability), ``W_t = sum_{j <= t} w_j``; per group and position
    ``B_t = sum_i G_t W_t m_t / (sum_i W_t m_t + 1e-8)``, ``A_t = (G_t - B_t) m_t``. A group of
    one has no baseline; in a group where one response is strictly the longest, its baseline
    past the second-longest length is 0. No rollout IS weights.

    Args:
        token_rewards: (B, T) token rewards.
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: needs ``logprobs`` and ``sum_pi_squared`` (B, T).

    Returns:
        Estimate with returns = reward-to-go; baseline / scale as (B,) 0 / 1 (the baseline is
        per token).
    """
    if params.logprobs is None or params.sum_pi_squared is None:
        raise ValueError(
            "optimal_token_baseline needs the rollout log-probs and sum_pi_squared "
            "(batch.sum_pi_squared, the actor's sum of squared next-token probabilities)"
        )
    m = response_mask
    returns = (token_rewards * m).flip(-1).cumsum(-1).flip(-1)
    w = 1.0 - 2.0 * torch.exp(params.logprobs) + params.sum_pi_squared
    w_cum = (w * m).cumsum(-1)
    baselines = torch.zeros_like(returns)
    for g in torch.unique(group_ids).tolist():
        idx = torch.nonzero(group_ids == g).flatten()
        if idx.numel() == 1:
            continue
        num = (returns[idx] * w_cum[idx] * m[idx]).sum(0)
        den = (w_cum[idx] * m[idx]).sum(0) + 1e-8
        baselines[idx] = (num / den).expand(idx.numel(), -1)
        lengths = m[idx].sum(-1)
        ordered = torch.sort(lengths).values
        longest, second = int(ordered[-1]), int(ordered[-2])
        at_max = torch.nonzero(lengths == longest).flatten()
        if at_max.numel() == 1 and longest > second:
            baselines[idx[at_max[0]], second:] = 0.0
    adv = apply_mask((returns - baselines) * m, m)
    zeros = torch.zeros(m.shape[0], dtype=adv.dtype)
    return Estimate(adv, apply_mask(returns, m), zeros, torch.ones_like(zeros))


def maxrl_advantages(
    token_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, params: EstimatorParams
) -> Estimate:
    """MaxRL (Tajwar et al. 2026, arXiv 2602.02710): A_i = (s_i - mean_g) / (|mean_g| + eps).

    Maximum-likelihood RL: the gradient of log p (p = the prompt's pass rate) instead of p.
    With binary rewards and K of N answers right, ``(1/N) sum_i A_i grad log pi(y_i)`` is
    ``(1/K) sum_{right} grad log pi - (1/N) sum_all grad log pi``: the mean over the right
    answers, minus a zero-mean control variate. Dividing by the pass rate p instead of the std
    sqrt(p (1 - p)) weights hard prompts more (a right answer gets (1 - p) / p). A group with no
    right answer (mean 0) gets 0: (0 - 0) / eps. The |mean| and eps follow a TRL pull request
    (``MaxRLTrainer``, eps 1e-6; not in a TRL release); the paper assumes rewards in {0, 1}.
    No framework ships this estimator: roll-viz offers it as its own. A group of one gets 0.
    Equivalent loop: for each prompt, ``m = mean(xs)``, ``(s_i - m) / (abs(m) + eps)``.

    Args:
        token_rewards: (B, T) token rewards (summed per row into s_i).
        response_mask: (B, T) float 0/1.
        group_ids: (B,) long prompt index.
        params: ``std_eps`` (the eps added to |mean|), optional ``seq_rewards``.

    Returns:
        Estimate with baseline = group mean, scale = |mean| + eps; returns = advantages.
    """
    seq = _seq_rewards(token_rewards, response_mask, params)
    mean = group_stats(seq, group_ids).mean
    scale = mean.abs() + params.std_eps
    adv = _broadcast((seq - mean) / scale, response_mask)
    return Estimate(adv, adv, mean, scale)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "gae": gae_advantages,
    "reinforce": reinforce_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
    "remax": remax_advantages,
}

#: Estimators added for the 2026 frameworks (OPO, GPG, pass@k; MaxRL, which no framework
#: ships, offered as roll-viz's own on the Eras page), kept out of
#: ``ADVANTAGE_ESTIMATORS`` because ``benchmarks`` pairs every entry there with its own loop
#: implementation; their loop oracles are in tests/core/test_estimators_2026.py (MaxRL's in
#: tests/core/test_maxrl.py).
EXTRA_ESTIMATORS: dict[str, AdvantageFn] = {
    "length_weighted": length_weighted_advantages,
    "gpg": gpg_advantages,
    "passk": passk_advantages,
    "optimal_token_baseline": optimal_token_baseline_advantages,
    "maxrl": maxrl_advantages,
}

#: Every estimator by name (the dialects look names up here).
ALL_ESTIMATORS: dict[str, AdvantageFn] = {**ADVANTAGE_ESTIMATORS, **EXTRA_ESTIMATORS}

#: The estimators whose ``advantages`` and ``returns`` are each the output of
#: ``apply_mask(x, response_mask)`` over the (float) mask they were given, so masking them again
#: with that mask changes no bit (+0.0 on padding, no -0.0 anywhere). The ones that end in a
#: whitening (reinforce_pp, reinforce_pp_baseline: ``dev * inv_std`` can underflow to -0.0) or
#: mask with a mask of their own (optimal_token_baseline) are not listed.
MASKED_OUTPUTS: frozenset[str] = frozenset(
    {"gae", "reinforce", "grpo", "dr_grpo", "rloo", "remax", "length_weighted", "gpg", "passk"}
    | {"maxrl"}
)
