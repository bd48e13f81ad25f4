"""The editable reward table of the Local vs global page: its starting rows and a strict parser."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import (
    EXAMPLE_PROMPT,
    EXAMPLE_REWARDS,
    LOW_VARIANCE_PROMPT,
    LOW_VARIANCE_REWARDS,
)


def default_reward_table() -> pd.DataFrame:
    """The editable reward table's starting rows: the seed example plus a low-variance prompt.

    Returns:
        DataFrame with columns ``prompt`` (str) and ``reward`` (float), 6 rows.
    """
    rows = [(EXAMPLE_PROMPT, r) for r in EXAMPLE_REWARDS]
    rows += [(LOW_VARIANCE_PROMPT, r) for r in LOW_VARIANCE_REWARDS]
    return pd.DataFrame(rows, columns=["prompt", "reward"])


# ---------------------------------------------------------------------------------------------
# Editable reward table -> scores and groups
# ---------------------------------------------------------------------------------------------

#: What each dialect does with a prompt that has a single sample (docs/algorithms.md, section 3).
SINGLETON_BEHAVIOUR: dict[str, str] = {
    "roll": (
        "ROLL (RLVR grpo) takes the unbiased std of one value, which is NaN, so the reward becomes "
        "NaN (the agentic pipeline returns 0 instead)."
    ),
    "verl": (
        "verl grpo uses mean 0 and std 1 for a group of one, so the advantage is the raw reward "
        "divided by 1 + 1e-6."
    ),
    "openrlhf": "OpenRLHF refuses to run: group estimators assert n_samples_per_prompt > 1.",
    "trl": "TRL refuses to run: GRPOTrainer requires num_generations >= 2 (nanstd would be NaN).",
}


class RewardTableError(ValueError):
    """A cell of the editable reward table cannot be read; the message names the row."""


@dataclass(frozen=True)
class RewardTable:
    """The editable reward table, parsed.

    Attributes:
        scores: (B,) float64 rewards, in table order (blank rows dropped).
        group_ids: (B,) long prompt index of each row, by first appearance (0..P-1).
        prompts: (P,) prompt text of each group.
        rows: (B,) 1-based row number in the editor of each kept row (for messages).
        singletons: prompts that have only one sample.
        messages: plain-language warnings for the page (singleton groups, constant groups).
    """

    scores: Tensor
    group_ids: Tensor
    prompts: tuple[str, ...]
    rows: tuple[int, ...]
    singletons: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()


def _is_blank(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def parse_reward_table(table: pd.DataFrame) -> RewardTable:
    """Read an editable (prompt, reward) table into scores and group ids.

    Rows whose prompt and reward are both blank are dropped (the editor's empty new rows).
    Rows of one prompt need not be contiguous; groups are numbered by first appearance.

    Args:
        table: DataFrame with columns ``prompt`` and ``reward``, one row per sampled answer.

    Returns:
        The parsed table; ``messages`` explains singleton and zero-variance groups.

    Raises:
        RewardTableError: a missing column, an empty prompt or reward on a filled row, a reward
            that is not a finite number, or no rows at all. The message names the row.
    """
    missing = [c for c in ("prompt", "reward") if c not in table.columns]
    if missing:
        raise RewardTableError(f"the table needs the column(s) {', '.join(missing)}")
    scores: list[float] = []
    prompts: list[str] = []
    rows: list[int] = []
    for i, (prompt, reward) in enumerate(zip(table["prompt"], table["reward"], strict=True)):
        row = i + 1
        if _is_blank(prompt) and _is_blank(reward):
            continue
        if _is_blank(prompt):
            raise RewardTableError(f"row {row}: the prompt is empty (type any name for the prompt)")
        if _is_blank(reward):
            raise RewardTableError(f"row {row}: the reward is empty (type a number such as 8.2)")
        try:
            value = float(str(reward).strip()) if isinstance(reward, str) else float(reward)
        except (TypeError, ValueError):
            raise RewardTableError(
                f"row {row}: the reward {str(reward)[:40]!r} is not a number (type e.g. 8.2)"
            ) from None
        if not math.isfinite(value):
            raise RewardTableError(f"row {row}: the reward {value} is not a finite number")
        scores.append(value)
        prompts.append(str(prompt).strip())
        rows.append(row)
    if not scores:
        raise RewardTableError("the table is empty: add at least two rows for one prompt")
    labels = tuple(dict.fromkeys(prompts))
    index = {p: k for k, p in enumerate(labels)}
    group_ids = torch.tensor([index[p] for p in prompts], dtype=torch.long)
    score_t = torch.tensor(scores, dtype=torch.float64)
    counts = torch.bincount(group_ids, minlength=len(labels))
    singletons = tuple(p for p, n in zip(labels, counts.tolist(), strict=True) if n == 1)
    messages: list[str] = []
    if singletons:
        names = ", ".join(repr(p) for p in singletons)
        how = " ".join(f"{fw}: {SINGLETON_BEHAVIOUR[fw]}" for fw in SINGLETON_BEHAVIOUR)
        messages.append(
            f"{names} has only one sample, so its group std is undefined and the local "
            f"advantage is left blank (NaN). What the dialects do: {how}"
        )
    for k, p in enumerate(labels):
        member = score_t[group_ids == k]
        if member.numel() > 1 and bool((member == member[0]).all()):
            messages.append(
                f"every reward of {p!r} is equal, so its local advantages are exactly 0: the "
                "prompt gives no learning signal under group normalization."
            )
    return RewardTable(
        scores=score_t,
        group_ids=group_ids,
        prompts=labels,
        rows=tuple(rows),
        singletons=singletons,
        messages=tuple(messages),
    )


# ---------------------------------------------------------------------------------------------
# Local (per-prompt group) vs global (whole batch) normalization
# ---------------------------------------------------------------------------------------------

#: ROLL configs (its own key names) for the two normalizations, on response-level rewards.
LOCAL_CONFIG: dict[str, object] = {
    "adv_estimator": "reinforce",
    "norm_mean_type": "group",
    "norm_std_type": "group",
    "gamma": 1.0,
    "add_token_level_kl": False,
}
GLOBAL_CONFIG: dict[str, object] = {
    **LOCAL_CONFIG,
    "norm_mean_type": "batch",
    "norm_std_type": "batch",
}
