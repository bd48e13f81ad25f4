"""Local (per-prompt group) vs global (batch) normalization of the same response-level rewards.

Simplified against production recipes: both sides use ROLL's ``reward_norm`` conventions
(unbiased std, ``/(std + 1e-6)``) on response-level rewards (one number per sample).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import ROLL_EPS, one_thread
from roll_viz.analysis.reward_table import GLOBAL_CONFIG, LOCAL_CONFIG
from roll_viz.core.ops import group_stats
from roll_viz.core.pipeline import ALIASES, run
from roll_viz.core.records import Batch


@dataclass(frozen=True)
class LocalGlobal:
    """Per-sample advantages under local and global normalization of the same rewards.

    Attributes:
        local: (B,) ``(r - group mean) / (group std + 1e-6)``; NaN for single-sample groups.
        global_: (B,) ``(r - batch mean) / (batch std + 1e-6)``.
        group_mean: (P,) mean reward of each prompt's group.
        group_std: (P,) unbiased std of each group (NaN for a group of one).
        batch_mean: mean of all B rewards.
        batch_std: unbiased std of all B rewards (NaN when B == 1).
        samples: per-sample table (prompt, sample, reward, group stats, both advantages).
        groups: per-prompt table (n, mean, std, and how much local normalization amplifies it).
    """

    local: Tensor
    global_: Tensor
    group_mean: Tensor
    group_std: Tensor
    batch_mean: float
    batch_std: float
    samples: pd.DataFrame
    groups: pd.DataFrame


def _response_batch(scores: Tensor, group_ids: Tensor) -> Batch:
    """A Batch of one token per sample (response-level rewards only, no KL inputs)."""
    n = scores.shape[0]
    labels = tuple(range(int(group_ids.max()) + 1)) if n else ()
    return Batch(
        scores=scores.to(torch.float64),
        response_mask=torch.ones(n, 1, dtype=torch.float64),
        group_ids=group_ids.to(torch.long),
        group_labels=labels,
    )


def _renumber(group_ids: Tensor) -> Tensor:
    """Map arbitrary group ids to 0..P'-1 in order of first appearance."""
    _, first = np.unique(group_ids.numpy(), return_index=True)
    order = group_ids.numpy()[np.sort(first)]
    lookup = {int(g): k for k, g in enumerate(order)}
    return torch.tensor([lookup[int(g)] for g in group_ids.tolist()], dtype=torch.long)


def _normalized_rewards(scores: Tensor, group_ids: Tensor, config: Mapping) -> Tensor:
    """ROLL's response-level normalized rewards for rows sorted into contiguous groups."""
    order = torch.argsort(group_ids, stable=True)
    trace = run(_response_batch(scores[order], _renumber(group_ids[order])), "roll", config)
    out = torch.empty_like(scores, dtype=torch.float64)
    out[order] = trace.rewards.to(torch.float64)
    return out


def prompt_group_stats(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-prompt count, mean and unbiased std (``ops.group_stats`` reduced to one row a group).

    Args:
        scores: (B,) rewards.
        group_ids: (B,) long prompt index 0..P-1.

    Returns:
        (count, mean, std), each (P,); std is NaN for a group of one.
    """
    stats = group_stats(scores.to(torch.float64), group_ids)
    n_groups = int(group_ids.max()) + 1
    first = torch.full((n_groups,), len(group_ids), dtype=torch.long)
    first = first.scatter_reduce(0, group_ids, torch.arange(len(group_ids)), reduce="amin")
    return stats.count[first], stats.mean[first], stats.std[first]


@one_thread
def local_vs_global(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
) -> LocalGlobal:
    """Normalize the same rewards per prompt (local) and over the whole batch (global).

    Both sides run through the pipeline's ROLL dialect (``norm_mean_type``/``norm_std_type``
    ``group`` vs ``batch``), so the numbers carry ROLL's conventions: unbiased std, 1e-6 added
    to the std. Single-sample groups get a NaN local advantage (their std is undefined).

    Args:
        scores: (B,) response-level rewards.
        group_ids: (B,) long prompt index of each sample, 0..P-1.
        prompts: (P,) display names of the prompts (defaults to "prompt 0", ...).

    Returns:
        Both advantage vectors, the group and batch statistics, and the two tables.
    """
    scores = scores.to(torch.float64)
    group_ids = group_ids.to(torch.long)
    count, g_mean, g_std = prompt_group_stats(scores, group_ids)
    n_groups = count.shape[0]
    names = list(prompts) if prompts is not None else [f"prompt {p}" for p in range(n_groups)]

    local = torch.full_like(scores, torch.nan)
    multi = count[group_ids] > 1
    if bool(multi.any()):
        local[multi] = _normalized_rewards(scores[multi], group_ids[multi], LOCAL_CONFIG)
    if scores.numel() > 1:
        global_ = _normalized_rewards(scores, torch.zeros_like(group_ids), GLOBAL_CONFIG)
        b_std = float(scores.std())
    else:
        global_ = torch.full_like(scores, torch.nan)
        b_std = math.nan
    b_mean = float(scores.mean())

    # Position of each sample inside its group (0..G-1), vectorised via a stable sort.
    order = torch.argsort(group_ids, stable=True)
    starts = torch.cumsum(count.to(torch.long), 0) - count.to(torch.long)
    within = torch.empty_like(group_ids)
    within[order] = torch.arange(len(group_ids)) - starts[group_ids[order]]

    samples = pd.DataFrame(
        {
            "prompt": [names[g] for g in group_ids.tolist()],
            "sample": within.tolist(),
            "reward": scores.numpy(),
            "group mean": g_mean[group_ids].numpy(),
            "group std": g_std[group_ids].numpy(),
            "local advantage": local.numpy(),
            "batch mean": np.full(len(scores), b_mean),
            "batch std": np.full(len(scores), b_std),
            "global advantage": global_.numpy(),
        }
    )
    amplification = (b_std + ROLL_EPS) / (g_std + ROLL_EPS)
    groups = pd.DataFrame(
        {
            "prompt": names,
            "n": count.to(torch.long).numpy(),
            "group mean": g_mean.numpy(),
            "group std": g_std.numpy(),
            "batch std": np.full(n_groups, b_std),
            "local / global scale": amplification.numpy(),
        }
    )
    return LocalGlobal(
        local=local,
        global_=global_,
        group_mean=g_mean,
        group_std=g_std,
        batch_mean=b_mean,
        batch_std=b_std,
        samples=samples,
        groups=groups,
    )


# ---------------------------------------------------------------------------------------------
# Generic settings -> framework configs
# ---------------------------------------------------------------------------------------------


def framework_config(
    framework: str, generic: Mapping[str, object], base: Mapping[str, object] | None = None
) -> tuple[dict, tuple[str, ...]]:
    """Translate generic settings (beta, gamma, lam, ...) into one dialect's own config keys.

    Args:
        framework: "roll", "verl", "openrlhf" or "trl".
        generic: values keyed by the generic names of ``pipeline.ALIASES[framework]``.
        base: the dialect's config to start from (its own keys); not modified.

    Returns:
        (config in the dialect's keys, generic names the dialect has no key for).
    """
    aliases = ALIASES[framework]
    config = dict(base or {})
    ignored: list[str] = []
    for name, value in generic.items():
        key = aliases.get(name)
        if key is None:
            ignored.append(name)
        else:
            config[key] = value
    return config, tuple(ignored)
