"""PODS: train on m of the n rollouts of each prompt, chosen so the rewards' variance is largest.

Xu, Savani, Fang, Kolter, "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM
Reinforcement Learning" (arXiv 2504.13818); official code ``YixuanEvenXu/pods@187f43b6``
(``trainer/maxvargrpo_trainer.py::_prepare_inputs``), run-formats.md section 4.

Rule: a max-variance subset of size m is always the k highest rewards plus the m - k lowest for
some k in 0..m. So each group is sorted once (descending) and the m + 1 splits are scanned with
prefix sums of r and r**2: O(n log n) per group, vectorised over groups of equal size. Ties are
broken as the official scan does: it starts from the top m (k = m) and replaces the current best
only when a split (k = 0, 1, ..., m - 1) is strictly larger; candidates within a relative 1e-12
of the largest variance count as equal, so float rounding of the prefix sums cannot reorder
exact ties. Advantages are then GRPO's, normalised over the **kept subset only**:
``(r - mean_S) / (std_S + 1e-4)`` with the unbiased std (torch ``.std()``), as the official code.

Comparisons (the paper's ablations): ``top`` keeps the m highest rewards (max-reward; collapses
a mostly-correct group to std 0), ``random`` keeps m uniformly at random (seeded generator).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.pods import as_groups, check_m, max_variance_subset

#: eps added to the kept subset's std (official code).
PODS_EPS = 1e-4
METHODS = ("max_variance", "top", "random")


def top_subset(rewards: Tensor, m: int) -> Tensor:
    """Indices of the m highest rewards of each group (ties: earlier rollout first), ascending."""
    r = as_groups(rewards)
    check_m(m, r.shape[1])
    order = torch.sort(r, dim=1, descending=True, stable=True).indices
    return order[:, :m].sort(dim=1).values


def random_subset(rewards: Tensor, m: int, generator: torch.Generator) -> Tensor:
    """Indices of m uniformly random rollouts of each group (seeded generator), ascending."""
    r = as_groups(rewards)
    check_m(m, r.shape[1])
    keys = torch.rand(r.shape, generator=generator, dtype=torch.float64)
    return keys.argsort(dim=1)[:, :m].sort(dim=1).values


def subset_advantages(rewards: Tensor, eps: float = PODS_EPS) -> Tensor:
    """GRPO advantages over each row: (r - mean) / (unbiased std + eps).

    Args:
        rewards: (P, k) rewards, k >= 2.
        eps: added to the std.

    Returns:
        (P, k) advantages (exactly 0 for a row of equal rewards).
    """
    r = as_groups(rewards)
    if r.shape[1] < 2:
        raise ValueError("advantages need at least 2 rollouts per prompt (unbiased std)")
    mean = r.mean(dim=1, keepdim=True)
    mean = mean + (r - mean).mean(dim=1, keepdim=True)  # exact for a constant row
    return (r - mean) / (r.std(dim=1, keepdim=True) + eps)


@dataclass(frozen=True)
class PodsResult:
    """One down-sampling of every group.

    Attributes:
        method: "max_variance", "top" or "random".
        m: rollouts kept per prompt.
        rewards: (P, n) all rewards.
        kept: (P, m) long indices kept, ascending.
        kept_rewards: (P, m) their rewards.
        advantages_before: (P, n) GRPO advantages over all n (same formula and eps).
        advantages_after: (P, m) advantages over the kept subset only (the official PODS).
        std_before: (P,) unbiased std of all n rewards.
        std_after: (P,) unbiased std of the kept rewards.
    """

    method: str
    m: int
    rewards: Tensor
    kept: Tensor
    kept_rewards: Tensor
    advantages_before: Tensor
    advantages_after: Tensor
    std_before: Tensor
    std_after: Tensor

    @property
    def zero_signal(self) -> Tensor:
        """(P,) bool: the kept rewards are all equal (every advantage 0)."""
        return self.kept_rewards.max(dim=1).values == self.kept_rewards.min(dim=1).values


def down_sample(
    rewards: Tensor,
    m: int,
    method: str = "max_variance",
    generator: torch.Generator | None = None,
    eps: float = PODS_EPS,
) -> PodsResult:
    """Keep m of the n rollouts of each prompt and recompute the advantages on the subset.

    Args:
        rewards: (P, n) or (n,) rewards.
        m: kept per prompt, 2 <= m <= n (advantages need an unbiased std).
        method: "max_variance" (PODS), "top" (max-reward) or "random".
        generator: required for "random" (no global RNG).
        eps: added to the std.

    Returns:
        PodsResult.
    """
    r = as_groups(rewards)
    if method == "max_variance":
        kept = max_variance_subset(r, m)
    elif method == "top":
        kept = top_subset(r, m)
    elif method == "random":
        if generator is None:
            raise ValueError("method 'random' needs a torch.Generator")
        kept = random_subset(r, m, generator)
    else:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    kept_rewards = torch.gather(r, 1, kept)
    return PodsResult(
        method=method,
        m=m,
        rewards=r,
        kept=kept,
        kept_rewards=kept_rewards,
        advantages_before=subset_advantages(r, eps),
        advantages_after=subset_advantages(kept_rewards, eps),
        std_before=r.std(dim=1) if r.shape[1] > 1 else torch.zeros(r.shape[0], dtype=r.dtype),
        std_after=kept_rewards.std(dim=1),
    )


def compare(rewards: Tensor, m: int, seed: int = 0) -> dict[str, PodsResult]:
    """PODS beside its two comparisons (top-m, random-m with ``torch.Generator(seed)``)."""
    gen = torch.Generator().manual_seed(seed)
    return {
        method: down_sample(rewards, m, method, generator=gen if method == "random" else None)
        for method in METHODS
    }


def sweep(rewards: Tensor, ms: list[int] | None = None, seed: int = 0) -> pd.DataFrame:
    """Each method at each m: how much signal the kept subsets carry.

    Args:
        rewards: (P, n) or (n,) rewards.
        ms: subset sizes (default 2..n).
        seed: seed of the random comparison (one generator per m).

    Returns:
        One row per (m, method): m, method, mean_std_after (mean over prompts of the kept
        rewards' std), zero_signal_share (prompts whose kept rewards are all equal),
        mean_abs_advantage (over kept rollouts), mean_kept_reward.
    """
    r = as_groups(rewards)
    n = r.shape[1]
    rows = []
    for m in ms if ms is not None else range(2, n + 1):
        for method, res in compare(r, m, seed).items():
            rows.append(
                {
                    "m": m,
                    "method": method,
                    "mean_std_after": float(res.std_after.mean()),
                    "zero_signal_share": float(res.zero_signal.to(torch.float64).mean()),
                    "mean_abs_advantage": float(res.advantages_after.abs().mean()),
                    "mean_kept_reward": float(res.kept_rewards.mean()),
                }
            )
    return pd.DataFrame(rows)


def groups_matrix(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) scores of equal-size groups -> (P, n) rewards and (P, n) row numbers.

    Raises:
        ValueError: groups of different sizes (down-sample each size separately).
    """
    counts = torch.bincount(group_ids)
    counts = counts[counts > 0]
    if counts.numel() == 0 or bool((counts != counts[0]).any()):
        raise ValueError(
            f"PODS needs groups of equal size, got sizes {sorted(set(counts.tolist()))}"
        )
    order = torch.sort(group_ids, stable=True).indices
    n = int(counts[0])
    rows = order.view(-1, n)
    return scores.to(torch.float64)[rows], rows


@dataclass(frozen=True)
class StepPods:
    """PODS and its comparisons on the groups of one imported step.

    Attributes:
        m: rollouts kept per prompt.
        results: method -> PodsResult over the P' groups used.
        group_labels: (P',) ids of the groups used (those of the most common size n).
        rows: (P', n) the step's sample row of each rollout in ``results`` (``kept`` indexes
            into these rows).
        skipped: ids of groups left out (a size other than n).
    """

    m: int
    results: dict
    group_labels: tuple
    rows: Tensor
    skipped: tuple


def compare_step(
    scores: Tensor, group_ids: Tensor, group_labels: tuple, m: int, seed: int = 0
) -> StepPods:
    """PODS beside top-m and random-m on a step's groups (of its most common size).

    Args:
        scores: (B,) rewards.
        group_ids: (B,) long group index.
        group_labels: (P,) group ids.
        m: kept per prompt (2 <= m <= n).
        seed: seed of the random comparison.

    Returns:
        StepPods; groups of another size are listed in ``skipped``.
    """
    counts = torch.bincount(group_ids, minlength=len(group_labels))
    present = counts[counts > 0]
    if present.numel() == 0:
        raise ValueError("no groups")
    sizes, freq = torch.unique(present, return_counts=True)
    n = int(sizes[freq == freq.max()].max())  # the most common size (ties: the larger)
    use = torch.nonzero(counts == n).flatten()
    skipped = tuple(group_labels[g] for g in torch.nonzero((counts > 0) & (counts != n)).flatten())
    keep = torch.isin(group_ids, use)
    local = torch.searchsorted(use, group_ids[keep])
    matrix, rows_local = groups_matrix(scores[keep], local)
    rows = torch.nonzero(keep).flatten()[rows_local]
    return StepPods(
        m=m,
        results=compare(matrix, m, seed),
        group_labels=tuple(group_labels[g] for g in use.tolist()),
        rows=rows,
        skipped=skipped,
    )
