"""Async training one or two steps behind: the three policies, and discarding stale groups.

Two questions of the 2026 async recipe (field-2026-b.md §1 rows 10-13, §4 "Async by default"):

``three_policies(mu, old, theta, advantages, mask, eps)``: the sampler mu (the adapter of k steps
ago, as the sampler reported its log-probs), pi_old (the trainer recomputing those tokens at the
sampler's weights) and pi_theta (the trainer now) are three log-prob columns per token. PPO's
ratio is pi_theta / anchor, and which column a framework puts in the anchor decides what clipping
does:

- ``recomputed``: anchor = pi_old, the correct one (miles PR #1829 ``--keep-old-actor``);
- ``current``: anchor = pi_theta itself (miles #1829's default recomputed pi_old with the current
  actor; SkyRL #1315 keeps no old weights, ``log_probs = old_log_probs``): ratio = 1 on every
  token, nothing is ever clipped however stale the batch;
- ``mu``: anchor = mu (miles ``--use-rollout-logprobs``, TRL AsyncGRPO #6945): the ratio folds the
  sampler's numeric gap into the drift.

A token counts as clipped as verl counts ``pg_clipfrac``: where the clipped term is the larger
loss, (A > 0 and r > 1 + eps) or (A < 0 and r < 1 - eps).

``discard_vs_pace(lengths, tokens_per_step, max_staleness)``: a group's staleness is the number
of trainer steps that pass while it is generated beyond the first, ceil(length / tokens_per_step)
- 1. Discard-and-requeue (tinker-cookbook's ``max_steps_off_policy``) throws away an attempt
staler than the bound and samples the prompt again; a prompt whose every attempt is too slow is
never trained on, so what gets trained is shorter than the data (tinker-cookbook PR #822).
Pacing (AReaL, Magistral) trains every group's first attempt and holds staleness at the bound by
making the trainer wait: the trained lengths are the data's, the cost is idle trainer steps.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

#: what a framework uses as PPO's old log-prob in an async step (``lm.runfile.OLD_POLICIES``, the
#: run settings' choices, the same three: a test holds them equal)
ANCHORS = ("recomputed", "current", "mu")
ANCHOR_LABELS = {
    "recomputed": "π_old recomputed at the sampler's weights (correct)",
    "current": "π_old := π_θ (miles #1829 default, SkyRL #1315)",
    "mu": "π_old := μ (the sampler's log-probs)",
}
#: bounds of the discard-vs-pace inputs (a page states them)
MAX_GROUPS = 2_000
MAX_ATTEMPTS = 64
MAX_STALENESS = 16


@dataclass(frozen=True)
class ThreePolicies:
    """Three log-prob columns per token and what each anchor makes of them.

    Attributes:
        mask: (B, T) bool valid tokens.
        mu: (B, T) log mu (0 off the mask), float64.
        old: (B, T) log pi_old.
        theta: (B, T) log pi_theta.
        delta: (B, T) log pi_old - log mu (the sampler's numeric gap; 0 for the fp32 sampler).
        drift: (B, T) log pi_theta - log pi_old (how far the trainer moved in k steps).
        ratio: anchor -> (B, T) pi_theta / anchor (1 off the mask).
        clipped: anchor -> (B, T) bool tokens whose clipped term wins (verl ``pg_clipfrac``).
        table: one row per anchor: ratio mean / min / max and the clip fraction over the tokens.
    """

    mask: Tensor
    mu: Tensor
    old: Tensor
    theta: Tensor
    delta: Tensor
    drift: Tensor
    ratio: dict[str, Tensor]
    clipped: dict[str, Tensor]
    table: pd.DataFrame


def clipped_tokens(ratio: Tensor, advantages: Tensor, mask: Tensor, eps: float) -> Tensor:
    """(B, T) bool: (A > 0 and r > 1 + eps) or (A < 0 and r < 1 - eps), on valid tokens."""
    high = (advantages > 0) & (ratio > 1.0 + eps)
    low = (advantages < 0) & (ratio < 1.0 - eps)
    return (high | low) & mask


def three_policies(
    mu: Tensor, old: Tensor, theta: Tensor, advantages: Tensor, mask: Tensor, eps: float = 0.2
) -> ThreePolicies:
    """The three columns, the two gaps and PPO's ratio and clip share under every anchor.

    Args:
        mu: (B, T) log mu: the sampler's log-probs as it reported them.
        old: (B, T) log pi_old: the trainer at the sampler's weights.
        theta: (B, T) log pi_theta: the trainer now.
        advantages: (B, T) or (B,) advantages (their sign decides which side clips).
        mask: (B, T) valid tokens.
        eps: PPO's clip range (symmetric).

    Raises:
        ValueError: shapes differ or eps is not in (0, 1).
    """
    m = torch.as_tensor(mask).bool()
    cols = [torch.as_tensor(x).double() for x in (mu, old, theta)]
    if any(c.shape != m.shape for c in cols):
        raise ValueError(f"mu, pi_old and pi_theta must all have the mask's shape {tuple(m.shape)}")
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must be in (0, 1), got {eps}")
    mu64, old64, theta64 = (torch.where(m, c, 0.0) for c in cols)
    adv = torch.as_tensor(advantages).double()
    if adv.dim() == 1:
        adv = adv[:, None].expand(m.shape)
    adv = torch.where(m, adv, 0.0)
    anchors = {"recomputed": old64, "current": theta64, "mu": mu64}
    ratio = {a: torch.where(m, torch.exp(theta64 - x), 1.0) for a, x in anchors.items()}
    clipped = {a: clipped_tokens(r, adv, m, eps) for a, r in ratio.items()}
    n = int(m.sum())
    rows = []
    for a in ANCHORS:
        r = ratio[a][m]
        rows.append(
            {
                "anchor": a,
                "what": ANCHOR_LABELS[a],
                "ratio mean": float(r.mean()) if n else math.nan,
                "ratio min": float(r.min()) if n else math.nan,
                "ratio max": float(r.max()) if n else math.nan,
                "clip fraction": int(clipped[a].sum()) / n if n else math.nan,
            }
        )
    return ThreePolicies(
        mask=m,
        mu=mu64,
        old=old64,
        theta=theta64,
        delta=old64 - mu64,
        drift=theta64 - old64,
        ratio=ratio,
        clipped=clipped,
        table=pd.DataFrame(rows),
    )


def token_rows(three: ThreePolicies, row: int, tokens: Sequence[str] = ()) -> pd.DataFrame:
    """One sample's tokens, one line each: the three columns, the two gaps, the ratios.

    ``tokens``: the display strings of the row's tokens (untrusted model text: shown as plain
    cells); positions past them are numbered.
    """
    m = three.mask[row]
    idx = torch.nonzero(m).flatten().tolist()
    return pd.DataFrame(
        {
            "token": [tokens[t] if t < len(tokens) else f"#{t}" for t in idx],
            "log μ": [float(three.mu[row, t]) for t in idx],
            "log π_old": [float(three.old[row, t]) for t in idx],
            "log π_θ": [float(three.theta[row, t]) for t in idx],
            "δ = log π_old − log μ": [float(three.delta[row, t]) for t in idx],
            "drift = log π_θ − log π_old": [float(three.drift[row, t]) for t in idx],
            "ratio (recomputed)": [float(three.ratio["recomputed"][row, t]) for t in idx],
            "ratio (π_old := π_θ)": [float(three.ratio["current"][row, t]) for t in idx],
            "ratio (π_old := μ)": [float(three.ratio["mu"][row, t]) for t in idx],
        }
    )


# ---------------------------------------------------------------------------------------------
# Discard stale groups, or pace the sampler


@dataclass(frozen=True)
class Trained:
    """What one staleness policy trains on.

    Attributes:
        policy: "discard" or "pace".
        lengths: the trained groups' lengths, in group order (one per trained group).
        groups: the indices of the trained groups.
        never: groups never trained (every attempt too stale; empty under pacing).
        attempts_used: how many attempts each trained group took (1 under pacing).
        wasted_tokens: tokens generated and thrown away.
        wait_steps: trainer steps spent waiting for slow groups (0 under discard).
    """

    policy: str
    lengths: tuple[int, ...]
    groups: tuple[int, ...]
    never: tuple[int, ...]
    attempts_used: tuple[int, ...]
    wasted_tokens: int
    wait_steps: int

    @property
    def mean_length(self) -> float:
        """Mean trained length (nan when nothing is trained)."""
        return sum(self.lengths) / len(self.lengths) if self.lengths else math.nan


#: what one unit of work is when reading attempts from a run (``attempts_of``)
UNITS = ("answer", "group")


def attempts_of(
    steps: Sequence[tuple[Sequence[int], Sequence[int]]], unit: str = "answer"
) -> list[list[int]]:
    """Per unit of work, its length at each step given: the attempts a requeue would draw.

    A training run samples the same prompts every step, so a unit's later lengths are what
    sampling it again gives. ``unit`` "answer": the j-th answer of each prompt; "group": a
    prompt's whole group, as long as its longest answer (a group is done when its slowest
    answer is).

    Args:
        steps: per step, in order, (group id of each answer, answer length in tokens), group
            ids 0..P-1.
        unit: one of ``UNITS``.

    Returns:
        One list per unit (ordered by group, then answer), its lengths (at least 1) at the
        steps where it has one.

    Raises:
        ValueError: an unknown unit.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    out: dict[tuple[int, int], list[int]] = {}
    for group_ids, lengths in steps:
        seen: dict[int, int] = {}
        longest: dict[tuple[int, int], int] = {}
        for g, n in zip(group_ids, lengths, strict=True):
            j = seen.get(int(g), 0) if unit == "answer" else 0
            seen[int(g)] = j + 1
            key = (int(g), j)
            longest[key] = max(longest.get(key, 1), int(n))
        for key, n in longest.items():
            out.setdefault(key, []).append(n)
    return [out[k] for k in sorted(out)]


def synthetic_attempts(
    prompts: int = 64, attempts: int = 8, seed: int = 0, max_len: int = 256
) -> list[list[int]]:
    """Seeded lengths with hard prompts that are long every time they are sampled.

    Each prompt has its own length scale (log-normal around 40 tokens, sigma 0.7: a long tail
    of hard prompts) and each attempt varies around it (sigma 0.25), clipped to 1..``max_len``.
    Its own ``random.Random(seed)``: no global RNG.

    Raises:
        ValueError: prompts or attempts out of their bounds, max_len < 1.
    """
    if not 1 <= prompts <= MAX_GROUPS or not 1 <= attempts <= MAX_ATTEMPTS or max_len < 1:
        raise ValueError(f"prompts in 1..{MAX_GROUPS}, attempts in 1..{MAX_ATTEMPTS}, max_len >= 1")
    rng = random.Random(seed)
    out = []
    for _ in range(prompts):
        scale = rng.lognormvariate(math.log(40.0), 0.7)
        tries = [round(scale * rng.lognormvariate(0.0, 0.25)) for _ in range(attempts)]
        out.append([min(max(n, 1), max_len) for n in tries])
    return out


def staleness_of(length: int, tokens_per_step: int) -> int:
    """Trainer steps that pass beyond the first while ``length`` tokens are generated."""
    return max(math.ceil(length / tokens_per_step) - 1, 0)


def _check(lengths: Sequence[Sequence[int]], tokens_per_step: int, max_staleness: int) -> None:
    if not 1 <= len(lengths) <= MAX_GROUPS:
        raise ValueError(f"between 1 and {MAX_GROUPS} groups, got {len(lengths)}")
    for g, tries in enumerate(lengths):
        if not 1 <= len(tries) <= MAX_ATTEMPTS:
            raise ValueError(f"group {g}: between 1 and {MAX_ATTEMPTS} attempts")
        if any(int(x) < 1 for x in tries):
            raise ValueError(f"group {g}: lengths must be at least 1 token")
    if tokens_per_step < 1:
        raise ValueError("tokens_per_step must be at least 1")
    if not 0 <= max_staleness <= MAX_STALENESS:
        raise ValueError(f"max_staleness must be in 0..{MAX_STALENESS}")


def discard_vs_pace(
    lengths: Sequence[Sequence[int]], tokens_per_step: int, max_staleness: int
) -> tuple[Trained, Trained]:
    """What discard-and-requeue and pacing each train on, from the same attempts.

    Args:
        lengths: per group (or answer: any unit of work), the lengths (tokens, >= 1) of its
            successive attempts: attempt 0 is the data; a requeued group is sampled again as
            the next attempt. At most ``MAX_GROUPS`` groups of ``MAX_ATTEMPTS`` attempts.
        tokens_per_step: tokens the sampler generates per trainer step (>= 1).
        max_staleness: the bound K (0..``MAX_STALENESS``): discard drops an attempt staler than
            K; pacing waits so that no trained group is staler than K.

    Returns:
        (discard, pace).

    Raises:
        ValueError: an input out of its bounds.
    """
    _check(lengths, tokens_per_step, max_staleness)
    kept, groups, used, never, wasted = [], [], [], [], 0
    for g, tries in enumerate(lengths):
        for i, length in enumerate(int(x) for x in tries):
            if staleness_of(length, tokens_per_step) <= max_staleness:
                kept.append(length)
                groups.append(g)
                used.append(i + 1)
                break
            wasted += length
        else:
            never.append(g)
    discard = Trained("discard", tuple(kept), tuple(groups), tuple(never), tuple(used), wasted, 0)
    first = [int(tries[0]) for tries in lengths]
    slowest = max(staleness_of(x, tokens_per_step) for x in first)
    pace = Trained(
        "pace",
        tuple(first),
        tuple(range(len(first))),
        (),
        (1,) * len(first),
        0,
        max(slowest - max_staleness, 0),
    )
    return discard, pace


def summary(data: Sequence[int], discard: Trained, pace: Trained) -> pd.DataFrame:
    """One row per policy beside the data: units trained, mean length, waste, waiting."""
    n = len(data)
    rows = [
        {
            "what": "the data (first attempts)",
            "trained": n,
            "never trained": 0,
            "mean length": sum(data) / n if n else math.nan,
            "tokens wasted": 0,
            "trainer steps waiting": 0,
        }
    ]
    for t in (discard, pace):
        rows.append(
            {
                "what": "discard and requeue" if t.policy == "discard" else "pace the sampler",
                "trained": len(t.groups),
                "never trained": len(t.never),
                "mean length": t.mean_length,
                "tokens wasted": t.wasted_tokens,
                "trainer steps waiting": t.wait_steps,
            }
        )
    return pd.DataFrame(rows)
