"""Masked tensor primitives shared by every pipeline stage (no framework conventions here).

Dimension letters: B sequences, T response tokens (right-padded), V vocabulary, N groups.
Masks are float 0/1 with the shape of the data. No function modifies its inputs.

What roll-viz simplifies against the frameworks' own helpers:
- everything runs in the caller's dtype (the app uses float64); the frameworks run fp32/bf16, so
  their one-pass variance can differ in the last digits (algorithms.md T6);
- group statistics use the explicit prompt ids (``index_add`` scatter), not ROLL's positional
  ``reshape(-1, n_sample)`` (which silently mixes prompts when rows are not contiguous and of equal
  size) nor verl's Python loop over ``uid``;
- the reverse discounted cumsum (returns, GAE) is a blocked scan: a (K, K) decay-matrix matmul
  inside blocks of K tokens and a second (T/K, T/K) matmul across blocks, instead of the Python
  loop over T every framework writes. It is exact for discount 0 and 1 (no division by the
  discount anywhere).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

SCAN_BLOCK = 16  # K; ~sqrt(T) balances the two matmuls (measured fastest for T = 256..1024)


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is 1.

    Args:
        x: (B, T) (any shape) values.
        mask: same shape as ``x``, float 0/1.
        dim: dimension to reduce, or None for all.

    Returns:
        () when ``dim`` is None, else ``x`` reduced over ``dim``.
    """
    assert x.shape == mask.shape, f"x {tuple(x.shape)} vs mask {tuple(mask.shape)}"
    masked = torch.where(as_bool(mask), x, 0.0)  # where, not x * mask: padding may hold inf
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 where nothing is valid.

    Equivalent loop: ``sum(x[i] for i if mask[i]) / max(count, 1)``. ROLL and verl divide by
    ``count + 1e-8`` instead, which also gives 0 for an empty row and differs by ~1e-8 relative
    otherwise; roll-viz uses the exact count.

    Args:
        x: (B, T) (any shape) values.
        mask: same shape as ``x``, float 0/1.
        dim: dimension to reduce, or None for all.

    Returns:
        () when ``dim`` is None, else ``x`` reduced over ``dim`` (e.g. (B,) for dim=-1).
    """
    valid = as_bool(mask)
    count = torch.count_nonzero(valid, dim=dim).to(x.dtype)
    return masked_sum(x, valid, dim) / count.clamp(min=1.0)


def masked_var(x: Tensor, mask: Tensor, ddof: int = 1) -> Tensor:
    """Token-weighted variance of ``x`` over all valid positions (two-pass).

    ``sum(mask * (x - mean)**2) / (count - ddof)``; ddof=1 is verl/ROLL's unbiased
    ``masked_var``, ddof=0 is OpenRLHF's biased one.

    Args:
        x: (B, T) values (finite on padding with a float mask; see ``apply_mask``).
        mask: (B, T) float 0/1, or bool.
        ddof: 1 for the unbiased (Bessel) variance, 0 for the biased one.

    Returns:
        () variance.

    Raises:
        ValueError: with ``count <= ddof`` valid positions (verl raises here too).
    """
    return _var_and_deviations(x, mask, ddof)[0]


def _var_and_deviations(x: Tensor, mask: Tensor, ddof: int) -> tuple[Tensor, Tensor]:
    """(() variance, (B, T) x - mean on valid positions and +0.0 elsewhere)."""
    count = int(torch.count_nonzero(mask).item())
    if count <= ddof:
        raise ValueError(
            f"variance with ddof={ddof} needs at least {ddof + 1} valid tokens, got {count}"
        )
    dev = apply_mask(x - masked_mean(x, mask), mask)
    flat = dev.flatten()
    return torch.dot(flat, flat) / (count - ddof), dev  # no extra (B, T) tensor for squares


def masked_whiten(
    x: Tensor,
    mask: Tensor,
    ddof: int = 1,
    eps: float = 1e-8,
    eps_mode: str = "add",
    shift_mean: bool = True,
) -> Tensor:
    """Token-weighted whitening over all valid positions of the batch.

    ``(x - mean) * rsqrt(var + eps)`` (eps_mode "add": verl, ROLL, TRL-PPO) or
    ``(x - mean) * rsqrt(max(var, eps))`` (eps_mode "floor": OpenRLHF). A response of length L
    counts L times in mean and var, so after whitening a sequence's tokens need not average to 0.
    With ``shift_mean=False`` the mean is added back (TRL's ``whiten_rewards``).

    Args:
        x: (B, T) values (finite on padding with a float mask; see ``apply_mask``).
        mask: (B, T) float 0/1, or bool.
        ddof: variance degrees of freedom (1 unbiased, 0 biased).
        eps: numerical floor, see ``eps_mode``.
        eps_mode: "add" or "floor".
        shift_mean: subtract the mean (True) or keep it (False).

    Returns:
        (B, T) whitened values, exactly 0 where ``mask`` is 0.

    Raises:
        ValueError: too few valid tokens for ``ddof`` (see ``masked_var``) or a bad ``eps_mode``.
    """
    var, dev = _var_and_deviations(x, mask, ddof)  # dev: (B, T), +0.0 on padding
    if eps_mode == "add":
        inv_std = torch.rsqrt(var + eps)
    elif eps_mode == "floor":
        inv_std = torch.rsqrt(var.clamp(min=eps))
    else:
        raise ValueError(f"eps_mode must be 'add' or 'floor', got {eps_mode!r}")
    if shift_mean:
        return dev * inv_std  # padding stays exactly +0.0
    return apply_mask(dev * inv_std + masked_mean(x, mask), mask)


def as_bool(mask: Tensor) -> Tensor:
    """A 0/1 float mask as bool (a bool mask passes through), so it is compared only once."""
    return mask if mask.dtype == torch.bool else mask > 0


def apply_mask(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` is 1, +0.0 elsewhere (never -0.0).

    With a float 0/1 mask this is one fused pass ``0 + x * mask`` (several times faster than
    ``torch.where`` on CPU; adding to +0.0 turns -0.0 into +0.0), so ``x`` must be finite on
    padding (inf * 0 is NaN). With a bool mask it is ``torch.where``, safe for any padding.

    Args:
        x: (B, T) values.
        mask: (B, T) float 0/1, or bool.

    Returns:
        (B, T) masked copy.
    """
    if mask.dtype == torch.bool:
        return torch.where(mask, x, 0.0)
    return torch.addcmul(x.new_zeros(()), x, mask)


class GroupStats(NamedTuple):
    """Per-sample view of its group's statistics; every field is (B,)."""

    mean: Tensor
    std: Tensor
    count: Tensor
    sum: Tensor


def group_stats(values: Tensor, group_ids: Tensor, ddof: int = 1) -> GroupStats:
    """Mean, std, size and sum of each sample's group, gathered back to the samples.

    Vectorized with ``index_add`` over the prompt ids (any order, any group sizes). Equivalent
    loop: for each id g, ``xs = [values[b] for b if group_ids[b] == g]`` and the usual two-pass
    mean/std of ``xs``.

    Args:
        values: (B,) response-level values.
        group_ids: (B,) long prompt index of each sample.
        ddof: 1 for the unbiased group std (every framework), 0 for the biased one.

    Returns:
        GroupStats of (B,) tensors; ``std`` is NaN where the group size is <= ddof (as
        ``torch.std``), so callers must decide what a singleton means before using it.
    """
    assert values.dim() == 1, "values must be (B,)"
    assert values.shape == group_ids.shape, "values/group_ids must both be (B,)"
    n_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    zeros = torch.zeros(n_groups, dtype=values.dtype, device=values.device)
    sums = zeros.index_add(0, group_ids, values)  # (N,)
    counts = zeros.index_add(0, group_ids, torch.ones_like(values))  # (N,)
    means = sums / counts.clamp(min=1.0)
    # one refinement pass (mean += mean of residuals) makes a constant group's mean exact,
    # so all-equal rewards give exactly 0 advantage instead of ~1e-17 / (std + eps)
    means = means + zeros.index_add(0, group_ids, values - means[group_ids]) / counts.clamp(min=1.0)
    dev = values - means[group_ids]  # (B,)
    sq = zeros.index_add(0, group_ids, dev * dev)
    denom = counts - ddof
    var = torch.where(denom > 0, sq / denom.clamp(min=1.0), torch.full_like(sq, float("nan")))
    return GroupStats(
        mean=means[group_ids],
        std=var.sqrt()[group_ids],
        count=counts[group_ids],
        sum=sums[group_ids],
    )


def last_token_index(response_mask: Tensor) -> Tensor:
    """Index of the last valid token of each row (0 for an all-zero row; check ``mask.any``).

    Args:
        response_mask: (B, T) float 0/1.

    Returns:
        (B,) long.
    """
    T = response_mask.shape[-1]
    positions = torch.arange(1, T + 1, dtype=response_mask.dtype, device=response_mask.device)
    return ((response_mask > 0) * positions).argmax(dim=-1)


def _decay_matrix(discount: float, size: int, stride: int, offset: int, like: Tensor) -> Tensor:
    """(size, size) matrix M[j, i] = discount**(stride*(j - i) + offset) for j >= i + (offset<0).

    Used as ``y = x @ M`` so y_i = sum_j x_j * M[j, i] (future j contributes to earlier i).
    """
    idx = torch.arange(size, device=like.device)
    power = (idx[:, None] - idx[None, :]) * stride + offset  # (size, size), row j, column i
    base = torch.tensor(discount, dtype=like.dtype, device=like.device)
    keep = power >= 0
    return torch.where(
        keep, base ** power.clamp(min=0).to(like.dtype), torch.zeros((), dtype=like.dtype)
    )


def reverse_discounted_cumsum(x: Tensor, discount: float, block: int = SCAN_BLOCK) -> Tensor:
    """y_t = sum_{k >= 0} discount**k * x_{t+k} along the last dimension, without a loop over T.

    Equivalent loop (what verl/ROLL/OpenRLHF write)::

        running = 0
        for t in reversed(range(T)):
            running = x[:, t] + discount * running
            y[:, t] = running

    Blocked scan: inside each block of K tokens a (K, K) decay matrix gives the local suffix sums;
    the value entering each block from the right is another matmul over the (T/K,) block starts.
    Only powers discount**n with n >= 0 appear (0**0 = 1), so discount 0 and 1 are exact.

    Args:
        x: (B, T) values (any leading shape).
        discount: factor in [0, 1] (gamma for returns, gamma * lam for GAE).
        block: tokens per block K.

    Returns:
        (B, T) suffix sums, same shape and dtype as ``x``.
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    shape = x.shape
    T = shape[-1]
    if T == 0:
        return x.clone()
    flat = x.reshape(-1, T)  # (B, T)
    K = min(block, T)
    n_blocks = -(-T // K)
    pad = n_blocks * K - T
    if pad:
        flat = torch.cat([flat, flat.new_zeros(flat.shape[0], pad)], dim=1)
    blocks = flat.reshape(-1, n_blocks, K)  # (B, T) -> (B, nb, K)
    local = blocks @ _decay_matrix(discount, K, 1, 0, flat)  # (B, nb, K) suffix sums per block
    if n_blocks > 1:
        # carry[b] = full suffix sum at the start of block b+1:
        # sum_{b' > b} discount**(K*(b'-b-1)) * local[b', 0]
        starts = local[..., 0]  # (B, nb)
        carry = starts @ _decay_matrix(discount, n_blocks, K, -K, flat)  # (B, nb)
        tail = _decay_matrix(discount, K, 1, 0, flat)[K - 1] * discount  # (K,) discount**(K-i)
        local = torch.addcmul(local, carry[..., None], tail)  # local + carry * tail
    return local.reshape(flat.shape[0], -1)[:, :T].reshape(shape)


def compact_valid(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Move each row's valid tokens to the front (stable), so masked tokens can be skipped.

    Args:
        x: (B, T) values.
        mask: (B, T) float 0/1.

    Returns:
        ``(x_compact (B, T), mask_compact (B, T), order (B, T) long)`` where
        ``x_compact[b, j] = x[b, order[b, j]]``; undo with ``scatter_back``.
    """
    order = torch.sort((mask <= 0).to(torch.int8), dim=-1, stable=True).indices
    return x.gather(-1, order), mask.gather(-1, order), order


def scatter_back(y_compact: Tensor, order: Tensor) -> Tensor:
    """Inverse of ``compact_valid``: (B, T) compact values back to their original positions."""
    return torch.zeros_like(y_compact).scatter(-1, order, y_compact)


def full_vocab_kl(policy_logits: Tensor, ref_logits: Tensor, chunk_size: int = 1024) -> Tensor:
    """Exact KL(policy || ref) = sum_v p_v (log p_v - log q_v) over the full vocabulary.

    Computed over chunks of ``chunk_size`` rows so the (rows, V) log-softmax temporaries stay
    bounded. This is the quantity that k1 and k3 estimate without bias from one sampled token.

    Args:
        policy_logits: (..., V) logits of the policy.
        ref_logits: (..., V) logits of the reference at the same positions.
        chunk_size: rows per chunk.

    Returns:
        (...) exact KL per position (>= 0 up to rounding).
    """
    assert policy_logits.shape == ref_logits.shape, "policy/ref logits must have the same shape"
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    lead, V = policy_logits.shape[:-1], policy_logits.shape[-1]
    p_flat = policy_logits.reshape(-1, V)
    q_flat = ref_logits.reshape(-1, V)
    parts = []
    for start in range(0, p_flat.shape[0], chunk_size):
        logp = torch.log_softmax(p_flat[start : start + chunk_size], dim=-1)
        logq = torch.log_softmax(q_flat[start : start + chunk_size], dim=-1)
        parts.append((logp.exp() * (logp - logq)).sum(dim=-1))
    out = torch.cat(parts) if parts else p_flat.new_zeros(0)
    return out.reshape(lead)
