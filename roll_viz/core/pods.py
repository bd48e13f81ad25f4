"""PODS max-variance down-sampling (pure): which m of the n rollouts of a prompt to train on.

Xu, Savani, Fang, Kolter, "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM
Reinforcement Learning" (arXiv 2504.13818); official code ``YixuanEvenXu/pods@187f43b6``.
A max-variance subset of size m is the k highest plus the m - k lowest rewards for some k: sort
each group once and scan the m + 1 splits with prefix sums, O(n log n), vectorised over groups.
The training loop (``lm.train``) and the analyses (``analysis.downsampling``) both use it.
"""

from __future__ import annotations

import torch
from torch import Tensor

_TIE_RTOL = 1e-12


def as_groups(rewards: Tensor) -> Tensor:
    """(n,) or (P, n) finite rewards -> a (P, n) float64 tensor; ValueError otherwise."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.dim() == 1:
        r = r[None, :]
    if r.dim() != 2 or r.shape[1] == 0:
        raise ValueError(f"rewards must be (n,) or (P, n) with n >= 1, got {tuple(r.shape)}")
    if not bool(torch.isfinite(r).all()):
        raise ValueError("rewards must be finite")
    return r


def check_m(m: int, n: int) -> None:
    """ValueError unless the subset size m is in 1..n."""
    if not 1 <= m <= n:
        raise ValueError(f"m must be in 1..n={n}, got {m}")


def max_variance_subset(rewards: Tensor, m: int) -> Tensor:
    """Indices of the size-m subset of each group with the largest reward variance.

    Args:
        rewards: (P, n) or (n,) rewards of n rollouts per prompt.
        m: rollouts kept per prompt, 1 <= m <= n.

    Returns:
        (P, m) long indices into each row, ascending.
    """
    r = as_groups(rewards)
    P, n = r.shape
    check_m(m, n)
    order = torch.sort(r, dim=1, descending=True, stable=True).indices  # (P, n)
    s = torch.gather(r, 1, order)  # (P, n) descending
    zero = torch.zeros(P, 1, dtype=r.dtype)
    c1 = torch.cat([zero, s.cumsum(dim=1)], dim=1)  # (P, n+1) prefix sums
    c2 = torch.cat([zero, (s * s).cumsum(dim=1)], dim=1)
    k = torch.arange(m + 1)  # k from the top, m - k from the bottom
    lo = n - (m - k)  # first index of the bottom part
    total = c1[:, k] + c1[:, n : n + 1] - c1[:, lo]  # (P, m+1)
    total2 = c2[:, k] + c2[:, n : n + 1] - c2[:, lo]
    mean = total / m
    var = (total2 - total * mean).clamp(min=0.0)  # m * population variance; same argmax
    # official scan order: k = m first, then k = 0, 1, ..., m-1 (first strictly larger wins)
    scan = torch.cat([torch.tensor([m]), torch.arange(m)])
    v = var[:, scan]
    best = v.max(dim=1, keepdim=True).values
    tied = v >= best - _TIE_RTOL * best.abs().clamp(min=1.0)
    pick = scan[tied.to(torch.int8).argmax(dim=1)]  # (P,) chosen k
    j = torch.arange(n)[None, :]
    keep_sorted = (j < pick[:, None]) | (j >= (n - (m - pick))[:, None])  # (P, n), m per row
    kept = order[keep_sorted].view(P, m)
    return kept.sort(dim=1).values
