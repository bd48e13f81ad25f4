"""The Episodes page's numbers: every mask rule and every credit rule on the same episodes.

``core.agentic`` has the math (``masks``: the correct mask, the known mistakes, their loss and
gradient; ``credit``: the credit rules; ``extension``: the re-encoded history). This module runs
them all on one batch and lays the results out as the page's tables: the episode the page shows
is put first (``selected_first``), so every rule's worked example (the first episode's numbers)
is that episode's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.agentic import credit as credit_mod
from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode

#: the advantages the mask section uses (the credit section compares the rules)
MASK_ADVANTAGES = "episode_grpo"


def selected_first(episodes: Sequence[Episode], row: int) -> tuple[Episode, ...]:
    """The episodes with episode ``row`` moved to the front (the rest keep their order).

    Group statistics do not depend on the order, so each episode's advantages stay the same.
    """
    if not 0 <= row < len(episodes):
        raise ValueError(f"episode {row + 1} of {len(episodes)}")
    return (episodes[row], *episodes[:row], *episodes[row + 1 :])


@dataclass(frozen=True)
class MaskLab:
    """Every mask rule on one batch, against the correct mask.

    Attributes:
        batch: the transcripts as (B, T) tensors.
        advantages: the (B, T) advantages the losses use (``MASK_ADVANTAGES``: the episode's
            on every position of its row).
        effects: rule name -> its ``RuleEffect``.
    """

    batch: masks.TranscriptBatch
    advantages: Tensor
    effects: dict[str, masks.RuleEffect]

    def row(self, values: Tensor, b: int = 0) -> list[float]:
        """Row ``b`` of a (B, T) tensor, cut to that transcript's length, as plain floats."""
        n = int(self.batch.valid[b].sum())
        return [float(v) for v in values[b, :n].to(torch.float64).tolist()]


def mask_lab(
    episodes: Sequence[Episode],
    eos_id: int | None = None,
    reencode: Callable[[str], Sequence[int]] | None = None,
    unit: str = "token",
) -> MaskLab:
    """Every mask rule's mask, loss and gradient on ``episodes``.

    The advantages are episode-level GRPO's, one per episode, broadcast over its row.

    Raises:
        ValueError: episodes the core refuses (too many, too long, turns not 0..N-1).
    """
    batch = masks.batch_episodes(episodes, unit=unit)
    # a trainer broadcasts the episode's advantage over its whole row; the mask picks the
    # tokens (so a mistake that trains the prompt's history gives it this advantage too)
    per_episode = credit_mod.credit(MASK_ADVANTAGES, episodes, unit=unit).turn_advantages
    first = torch.tensor([a[0] if a else 0.0 for a in per_episode], dtype=torch.float64)
    adv = first[:, None] * batch.valid
    effects = masks.rule_effects(batch, adv, eos_id=eos_id, reencode=reencode)
    return MaskLab(batch, adv, effects)


def context_share(effect: masks.RuleEffect, batch: masks.TranscriptBatch) -> float:
    """Share of the gradient's mass (sum |d L / d log pi|) on tokens the sampler did not write."""
    mass = effect.grad.abs()
    total = float(mass.sum())
    return float(mass[~batch.sampled].sum()) / total if total > 0 else 0.0


def rule_table(lab: MaskLab) -> pd.DataFrame:
    """One row per mask rule: what it trains, its loss and what it does to the gradient."""
    rows = []
    for name, effect in lab.effects.items():
        rule = masks.MASK_RULES[name]
        rows.append(
            {
                "rule": rule.label,
                "where it shipped": rule.source,
                "tokens trained": effect.n_trained,
                "trained, not sampled": int(effect.added.sum()),
                "sampled, not trained": int(effect.removed.sum()),
                "gradient on context": round(context_share(effect, lab.batch), 4),
                "scale of a right token's gradient": round(effect.scale, 4),
                "positions with broken context": int(effect.broken.sum()),
                "loss": effect.loss,
                "note": effect.note,
            }
        )
    return pd.DataFrame(rows)


def all_credit(
    episodes: Sequence[Episode], params: credit_mod.CreditParams, unit: str = "token"
) -> dict[str, credit_mod.Credit]:
    """Every credit rule on the same episodes."""
    return {
        name: credit_mod.credit(name, episodes, params, unit=unit)
        for name in credit_mod.CREDIT_RULES
    }


def credit_table(credits: dict[str, credit_mod.Credit], b: int = 0) -> pd.DataFrame:
    """One row per rule: name, paper or framework, formula, episode ``b``'s advantage per turn."""
    rows = []
    for c in credits.values():
        turns = c.turn_advantages[b]
        row = {"rule": c.label, "paper or framework": c.source, "formula": c.formula}
        row.update({f"turn {t + 1}": round(a, 4) for t, a in enumerate(turns)})
        row["with these numbers"] = c.worked
        rows.append(row)
    return pd.DataFrame(rows)


def stop_table(episodes: Sequence[Episode], credits: dict[str, credit_mod.Credit]) -> pd.DataFrame:
    """Mean first-turn advantage of the episodes that took n turns, under every rule.

    A rule that rewards taking more turns, whatever the outcome, shows it here first.
    """
    by_turns: dict[int, list[int]] = {}
    for i, e in enumerate(episodes):
        by_turns.setdefault(e.n_turns, []).append(i)
    rows = []
    for n in sorted(by_turns):
        members = by_turns[n]
        row: dict[str, object] = {"turns taken": n, "episodes": len(members)}
        row["mean outcome"] = round(sum(episodes[i].outcome for i in members) / len(members), 4)
        for c in credits.values():
            first = [c.turn_advantages[i][0] for i in members if c.turn_advantages[i]]
            row[c.label] = round(sum(first) / len(first), 4) if first else None
        rows.append(row)
    return pd.DataFrame(rows)


def differing_positions(sampled: Sequence[int], rendered: Sequence[int]) -> tuple[int, ...]:
    """Positions of the sampled transcript where a re-rendered one has another token (or none).

    A length change shifts every later position: the trainer then scores other tokens there.
    """
    return tuple(
        i for i, t in enumerate(sampled) if i >= len(rendered) or int(rendered[i]) != int(t)
    )
