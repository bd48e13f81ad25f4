"""The normalisation matrix: mean level x std level on the same rewards, with the methods' names.

Every group method turns a response reward r into ``A = (r - mu) / (sigma + eps)``, and the
methods differ in where mu and sigma come from: nothing, the prompt's group, or the whole batch.
``normalisation_matrix`` computes all nine cells on one batch; ``CELL_METHODS`` names the methods
that use each cell and where they ship. ``phantom_advantages`` is the shaped-reward trap of
verl-recipe PR #125: a group whose answers all fail gets a std only from a small length term, and
dividing by that std turns the length noise into full-size advantages.

Conventions (ROLL's ``reward_norm``, so ``run(batch, "roll", {"norm_mean_type": m,
"norm_std_type": s})`` gives the same rewards, checked in the tests, except the two cells with a
group std but no group mean, which ROLL refuses): unbiased std, eps added to
the std, no division when the std level is "none"; sigma of "batch" is the std of the raw rewards
of the batch. A group of one has no group std: its group-std cells are NaN.

Simplified against the real recipes: response-level rewards only (one number per answer); the
token-weighted whitening of REINFORCE++ / REINFORCE++-baseline in verl and OpenRLHF weighs each
answer by its length, which equals the "batch" cells here when all answers have the same length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import ROLL_EPS
from roll_viz.core.ops import group_stats

LEVELS: tuple[str, ...] = ("none", "group", "batch")

#: (mean level, std level) -> the methods that use that cell, with where they ship.
CELL_METHODS: dict[tuple[str, str], tuple[str, ...]] = {
    ("none", "none"): ("REINFORCE (raw reward, no baseline)",),
    ("none", "group"): ("(no named method: scale without a baseline; ROLL raises)",),
    ("none", "batch"): ("reward scaling without centring (ROLL norm_mean_type None, std batch)",),
    ("group", "none"): (
        "Dr. GRPO (verl norm_adv_by_std_in_grpo=False, OpenRLHF dr_grpo, TRL scale_rewards=none)",
        "RLOO up to n/(n-1) (leave-one-out mean)",
    ),
    ("group", "group"): (
        "GRPO (DeepSeekMath; ROLL/verl grpo, OpenRLHF group_norm, TRL scale_rewards=group)",
    ),
    ("group", "batch"): (
        "LitePPO (ROLL norm_mean_type group, norm_std_type batch)",
        "ScaleRL batch-level advantage normalisation",
        "TRL scale_rewards=batch",
        "REINFORCE++-baseline (std of the group-centred rewards, token-weighted)",
    ),
    ("batch", "none"): ("REINFORCE with a batch-mean baseline",),
    ("batch", "group"): ("(no named method; ROLL raises: a group std needs a group mean)",),
    ("batch", "batch"): (
        "REINFORCE++ (global whitening; ROLL norm batch/batch, verl/OpenRLHF whiten returns)",
    ),
}


def cell_name(mean: str, std: str) -> str:
    """The short name of a cell: its first method, or "mean <m> / std <s>"."""
    first = CELL_METHODS[(mean, std)][0]
    return first.split(" (")[0] if not first.startswith("(") else f"mean {mean} / std {std}"


@dataclass(frozen=True)
class NormMatrix:
    """All nine normalisations of one batch of response rewards.

    Attributes:
        cells: (mean level, std level) -> (B,) advantages (NaN where a group std is undefined).
        samples: long table, one row per (cell, answer): mean, std, method, prompt, sample,
            reward, advantage.
        summary: one row per cell: mean level, std level, methods, mean |A|, max |A|, and the
            mean |A| of the flat groups (all rewards equal) and of the others.
    """

    cells: dict[tuple[str, str], Tensor]
    samples: pd.DataFrame
    summary: pd.DataFrame


def _levels(scores: Tensor, group_ids: Tensor, ddof: int) -> dict[str, tuple[Tensor, Tensor]]:
    """Level -> ((B,) mean, (B,) std) of each answer's reference set."""
    stats = group_stats(scores, group_ids, ddof=ddof)
    batch_std = scores.std(correction=ddof) if scores.numel() > ddof else torch.tensor(torch.nan)
    zeros = torch.zeros_like(scores)
    return {
        "none": (zeros, zeros),
        "group": (stats.mean, stats.std),
        "batch": (zeros + scores.mean(), zeros + batch_std),
    }


def normalise(
    scores: Tensor,
    group_ids: Tensor,
    mean: str,
    std: str,
    eps: float = ROLL_EPS,
    ddof: int = 1,
) -> Tensor:
    """``(r - mu_mean) / (sigma_std + eps)`` (no division for std "none") for every answer.

    Args:
        scores: (B,) response rewards.
        group_ids: (B,) long prompt index.
        mean: "none", "group" or "batch".
        std: "none", "group" or "batch".
        eps: added to the std.
        ddof: 1 = unbiased std (every framework).

    Returns:
        (B,) advantages; NaN where the std is undefined (a group of one, a batch of one).
    """
    if mean not in LEVELS or std not in LEVELS:
        raise ValueError(f"levels must be one of {LEVELS}, got mean={mean!r}, std={std!r}")
    scores = scores.to(torch.float64)
    levels = _levels(scores, group_ids.to(torch.long), ddof)
    centred = scores - levels[mean][0]
    if std == "none":
        return centred
    return centred / (levels[std][1] + eps)


def _flat_groups(scores: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) bool: the answer's group has two or more answers, all with the same reward."""
    stats = group_stats(scores, group_ids, ddof=0)
    return (stats.count > 1) & (stats.std == 0)


def normalisation_matrix(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
    eps: float = ROLL_EPS,
    ddof: int = 1,
) -> NormMatrix:
    """The nine (mean level, std level) normalisations of the same rewards.

    Args:
        scores: (B,) response rewards.
        group_ids: (B,) long prompt index 0..P-1.
        prompts: (P,) display names (default "prompt 0", ...).
        eps: added to the std.
        ddof: std degrees of freedom.

    Returns:
        NormMatrix.
    """
    scores = scores.to(torch.float64)
    group_ids = group_ids.to(torch.long)
    n_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    names = list(prompts) if prompts is not None else [f"prompt {p}" for p in range(n_groups)]
    flat = _flat_groups(scores, group_ids)
    within = torch.zeros_like(group_ids)
    seen: dict[int, int] = {}
    for i, g in enumerate(group_ids.tolist()):
        within[i] = seen.get(g, 0)
        seen[g] = seen.get(g, 0) + 1
    cells: dict[tuple[str, str], Tensor] = {}
    rows, summary = [], []
    for m in LEVELS:
        for s in LEVELS:
            adv = normalise(scores, group_ids, m, s, eps, ddof)
            cells[(m, s)] = adv
            method = cell_name(m, s)
            for i in range(scores.shape[0]):
                rows.append(
                    {
                        "mean": m,
                        "std": s,
                        "method": method,
                        "prompt": names[int(group_ids[i])],
                        "sample": int(within[i]),
                        "reward": float(scores[i]),
                        "advantage": float(adv[i]),
                    }
                )
            mag = adv.abs()
            summary.append(
                {
                    "mean": m,
                    "std": s,
                    "methods": "; ".join(CELL_METHODS[(m, s)]),
                    "mean |A|": float(mag.nanmean()) if mag.numel() else float("nan"),
                    "max |A|": float(mag[~mag.isnan()].max())
                    if bool((~mag.isnan()).any())
                    else float("nan"),
                    "mean |A|, flat groups": float(mag[flat].nanmean())
                    if bool(flat.any())
                    else float("nan"),
                    "mean |A|, other groups": float(mag[~flat].nanmean())
                    if bool((~flat).any())
                    else float("nan"),
                }
            )
    return NormMatrix(cells=cells, samples=pd.DataFrame(rows), summary=pd.DataFrame(summary))


# ------------------------------------------------------------------------- phantom advantages


@dataclass(frozen=True)
class Phantom:
    """The shaped-reward demo: correctness plus a small length term, two normalisations.

    Attributes:
        table: one row per answer: prompt, correct (0/1), length, length term, reward, and the
            advantage under group std (GRPO), no std (Dr. GRPO) and batch std (LitePPO).
        fail_group_std: the all-fail group's std (only the length term).
        fail_max_abs_group: max |A| of the all-fail group under group std (full size).
        fail_max_abs_batch: the same under batch std (small).
    """

    table: pd.DataFrame
    fail_group_std: float
    fail_max_abs_group: float
    fail_max_abs_batch: float


#: The demo batch: prompt -> (correct flags, lengths). "hard" fails everywhere.
PHANTOM_BATCH: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "easy": ((1, 1, 0, 1), (120, 90, 200, 150)),
    "hard": ((0, 0, 0, 0), (180, 220, 160, 240)),
}


def phantom_advantages(
    length_coef: float = 0.001,
    batch: dict[str, tuple[Sequence[int], Sequence[int]]] | None = None,
    eps: float = ROLL_EPS,
) -> Phantom:
    """Reward = correct - length_coef * length; GRPO's group std makes the failures "learn".

    In the all-fail group every answer is wrong, so the only differences are the length term
    (a few hundredths); the group std is that small, and ``(r - mean) / std`` rescales them to
    advantages of order 1, as large as a real right/wrong difference (verl-recipe PR #125). The
    batch std (LitePPO, ScaleRL) or no std (Dr. GRPO) keeps them small.

    Args:
        length_coef: weight of the length penalty.
        batch: prompt -> (correct flags, lengths); default ``PHANTOM_BATCH``.
        eps: added to the std.

    Returns:
        Phantom.
    """
    batch = batch or PHANTOM_BATCH
    prompts, correct, lengths, gids = [], [], [], []
    for g, (name, (flags, lens)) in enumerate(batch.items()):
        for c, n in zip(flags, lens, strict=True):
            prompts.append(name)
            correct.append(float(c))
            lengths.append(float(n))
            gids.append(g)
    c = torch.tensor(correct, dtype=torch.float64)
    length = torch.tensor(lengths, dtype=torch.float64)
    reward = c - length_coef * length
    group_ids = torch.tensor(gids, dtype=torch.long)
    adv = {
        "A, group std (GRPO)": normalise(reward, group_ids, "group", "group", eps),
        "A, no std (Dr. GRPO)": normalise(reward, group_ids, "group", "none", eps),
        "A, batch std (LitePPO)": normalise(reward, group_ids, "group", "batch", eps),
    }
    table = pd.DataFrame(
        {
            "prompt": prompts,
            "correct": c.numpy(),
            "length": length.numpy(),
            "length term": (-length_coef * length).numpy(),
            "reward": reward.numpy(),
            **{k: v.numpy() for k, v in adv.items()},
        }
    )
    fail = torch.tensor([c_ == 0 for c_ in correct]) & (
        group_stats(c, group_ids).mean[torch.arange(len(gids))] == 0
    )
    if not bool(fail.any()):
        return Phantom(
            table=table, fail_group_std=0.0, fail_max_abs_group=0.0, fail_max_abs_batch=0.0
        )
    return Phantom(
        table=table,
        fail_group_std=float(group_stats(reward, group_ids).std[fail][0]),
        fail_max_abs_group=float(adv["A, group std (GRPO)"][fail].abs().max()),
        fail_max_abs_batch=float(adv["A, batch std (LitePPO)"][fail].abs().max()),
    )
