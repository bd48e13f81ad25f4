"""The Episodes page's tables: the selected episode first, every mask and credit rule laid out.

Expected numbers are counted on the hand-built calculator transcript (prompt 7 | tool call 4 |
tool answer 2 | answer 4) or written out by hand here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from roll_viz.analysis import episode_lab as lab
from roll_viz.analysis import episode_sets as sets
from roll_viz.core.agentic import credit, masks


def _group():
    one, _ = sets.make_episode(sets.TRANSCRIPT)
    return (
        replace(one, outcome=1.0),
        replace(one, outcome=0.0),
        replace(one, task="other", outcome=0.5),
    )


def test_selected_first_keeps_every_advantage():
    episodes = _group()
    moved = lab.selected_first(episodes, 1)
    assert moved == (episodes[1], episodes[0], episodes[2])
    before = credit.credit("episode_grpo", episodes).turn_advantages
    after = credit.credit("episode_grpo", moved).turn_advantages
    assert after == (before[1], before[0], before[2])
    with pytest.raises(ValueError, match="episode 4 of 3"):
        lab.selected_first(episodes, 3)


def test_rule_table_counts_by_hand():
    table = lab.rule_table(lab.mask_lab(_group(), eos_id=sets.eos_id()))
    rows = table.set_index("rule")
    label = {n: r.label for n, r in masks.MASK_RULES.items()}
    assert len(table) == len(masks.MASK_RULES)
    assert rows.loc[label["correct"], "tokens trained"] == 3 * 8
    assert rows.loc[label["tool_trained"], "trained, not sampled"] == 3 * 2
    assert rows.loc[label["last_turn_only"], "sampled, not trained"] == 3 * 4
    assert rows.loc[label["pad_is_eos"], "sampled, not trained"] == 3 * 2
    # group "calc-1": outcomes 1 and 0 -> A = +-0.7071; group "other" alone: A = 0.5 (verl's
    # singleton: mean 0, std 1). Tool trained: 2 of 10 tokens per row are the tool's.
    assert rows.loc[label["tool_trained"], "gradient on context"] == pytest.approx(0.2, abs=1e-4)
    assert rows.loc[label["tool_trained"], "scale of a right token's gradient"] == 0.8


def test_credit_and_stop_tables():
    episodes = _group()
    credits = lab.all_credit(episodes, credit.CreditParams())
    table = lab.credit_table(credits)
    assert list(table["rule"]) == [r.label for r in credit.CREDIT_RULES.values()]
    grpo = table.set_index("rule").loc[credit.CREDIT_RULES["episode_grpo"].label]
    a = 0.5 / (2**0.5 / 2 + 1e-6)  # (1 - 0.5) / (std of [1, 0] + eps)
    assert grpo["turn 1"] == pytest.approx(a, abs=1e-4)
    assert grpo["turn 2"] == pytest.approx(a, abs=1e-4)
    stops = lab.stop_table(episodes, credits)
    assert list(stops["turns taken"]) == [2]
    assert stops.loc[0, "episodes"] == 3
    assert stops.loc[0, "mean outcome"] == 0.5


def test_differing_positions_marks_changed_and_shifted_tokens():
    assert lab.differing_positions([1, 2, 3, 4], [1, 2, 3, 4]) == ()
    assert lab.differing_positions([1, 2, 3, 4], [1, 9, 3]) == (1, 3)
