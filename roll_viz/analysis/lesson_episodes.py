"""The answers of lesson gates on multi-turn episodes: a mask rule and a credit rule, computed.

A gate with ``batch = "episodes:<set>"`` (``data.lesson_fields.EPISODE_SETS``) names a hand-built
set (``episode_sets``), a mask rule (``settings.mask``, default the right one) and a credit rule
(``settings.credit``, default episode-level GRPO). ``episodes_env`` runs ``core.agentic`` on it
and returns the names the answer expression reads (``data.lesson_fields.NAMES``, "episodes:");
``lesson_answers`` calls it as it calls the pipeline for the other batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_viz.analysis import episode_sets
from roll_viz.core.agentic import credit as credit_mod
from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode
from roll_viz.data.lesson_fields import SETTING_CREDIT, SETTING_MASK

DEFAULT_MASK = "correct"
DEFAULT_CREDIT = "episode_grpo"


def episode_set(name: str) -> tuple[tuple[Episode, ...], tuple[str, ...], int | None]:
    """(episodes, labels, EOS id) of a set: token strings for one episode, else episode labels.

    Raises:
        KeyError: no set has that name.
    """
    if name == "calculator":
        episodes, pieces = episode_sets.calculator()
        return episodes, pieces, episode_sets.eos_id()
    if name == "stops":
        episodes = episode_sets.stops()
        return episodes, tuple(f"{e.n_turns}-turn episode" for e in episodes), None
    raise KeyError(name)


def extra_turn(episodes: tuple[Episode, ...], first: list[float]) -> float:
    """Change of the mean first-turn advantage per extra turn (longest vs shortest; 0 if one)."""
    by_turns: dict[int, list[float]] = {}
    for e, a in zip(episodes, first, strict=True):
        by_turns.setdefault(e.n_turns, []).append(a)
    low, high = min(by_turns), max(by_turns)
    if low == high:
        return 0.0
    mean = {n: sum(v) / len(v) for n, v in by_turns.items()}
    return (mean[high] - mean[low]) / (high - low)


def episodes_env(name: str, settings: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The names a gate's expression reads on episode set ``name``, and the figure's labels.

    Args:
        name: the set (``EPISODE_SETS``).
        settings: the gate's settings (``mask``, ``credit``; others are ignored).

    Returns:
        (env, labels): ``labels`` name the tokens (one episode) or the episodes (several).
    """
    episodes, labels, eos = episode_set(name)
    mask = str(settings.get(SETTING_MASK, DEFAULT_MASK))
    rule = str(settings.get(SETTING_CREDIT, DEFAULT_CREDIT))
    batch = masks.batch_episodes(episodes)
    credited = credit_mod.credit(rule, episodes)
    effects = masks.rule_effects(batch, credited.token_advantages, eos_id=eos)
    effect = effects[mask]
    mass = effect.grad.abs()
    total = float(mass.sum())
    first = [float(a[0]) if a else 0.0 for a in credited.turn_advantages]
    n = int(batch.valid[0].sum())
    env: dict[str, Any] = {
        "trained": float(effect.n_trained),
        "sampled": float(effects["correct"].n_trained),
        "context_tokens": float(int(effect.added.sum())),
        "dropped": float(int(effect.removed.sum())),
        "context_share": float(mass[~batch.sampled].sum()) / total if total > 0 else 0.0,
        "grad_scale": float(effect.scale),
        "turns": [float(e.n_turns) for e in episodes],
        "outcome": [float(e.outcome) for e in episodes],
        "first_advantage": first,
        "extra_turn": extra_turn(episodes, first),
        "B": float(len(episodes)),
        # the figure's numbers (not in NAMES): the push on episode 1's tokens
        "token_push": [0.0 - float(g) for g in effect.grad[0, :n].tolist()],
    }
    return env, labels


def formula(settings: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    """LaTeX of the gate's formula with its numbers (the mask's gradient, or the credit rule)."""
    mask = str(settings.get(SETTING_MASK, DEFAULT_MASK))
    rule = credit_mod.CREDIT_RULES[str(settings.get(SETTING_CREDIT, DEFAULT_CREDIT))]
    if len(env["turns"]) == 1:
        label = masks.MASK_RULES[mask].label
        return (
            rf"\frac{{\partial L}}{{\partial \log \pi_t}} = -\frac{{m_t A_t}}{{\sum_s m_s}}:\ "
            rf"\text{{{label}}},\ \sum m = {env['trained']:g},\ "
            rf"\text{{share on context}} = {env['context_share']:.3f}"
        )
    return (
        rf"\text{{{rule.label}}}:\ \Delta \bar A_0 \text{{ per extra turn}} = "
        rf"{env['extra_turn']:.3f}"
    )
