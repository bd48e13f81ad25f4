"""The two multi-turn lessons: their gates parse, and every revealed number is checked by hand.

The calculator transcript: prompt 7 | tool call 4 (ends in EOS) | tool answer 2 | answer 4 (ends
in EOS). The stops group: returns 0.5 n + 1 for n = 1, 2, 3 turns, two episodes each.
"""

from __future__ import annotations

import math

import pytest

from roll_viz.analysis.lesson_answers import compute_lesson
from roll_viz.data.lessons import LessonError, builtin_lessons, parse_lesson
from roll_viz.views.lesson_charts import gate_figure

LESSONS = builtin_lessons()


def _values(lesson_id: str) -> dict[str, float]:
    return {r.gate.id: r.value for r in compute_lesson(LESSONS[lesson_id])}


def test_mask_lesson_counts_by_hand():
    got = _values("trained_tokens")
    assert got["count_trained"] == 8  # 4 + 4 sampled tokens
    assert got["count_trained.knob"] == pytest.approx(2 / 10)  # tool's 2 of 10 completion tokens
    assert got["pad_eos"] == 2  # both EOS
    assert got["last_turn"] == pytest.approx(8 / 4)  # token mean over 4 instead of 8


def test_turn_credit_lesson_by_hand():
    returns = [1.5, 1.5, 2.0, 2.0, 2.5, 2.5]
    mean = sum(returns) / 6
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / 5)
    per_turn = ((2.5 - mean) / (std + 1e-6) - (1.5 - mean) / (std + 1e-6)) / 2
    got = _values("turn_credit")
    assert got["grpo_extra_turn"] == pytest.approx(per_turn)
    # every turn's 0.5 minus its index's mean 0.5, outcome 1 minus 1: zero everywhere
    assert got["grpo_extra_turn.knob"] == 0.0


def test_reveals_pick_the_intended_choice_and_draw_a_figure():
    for lesson_id in ("trained_tokens", "turn_credit"):
        for result in compute_lesson(LESSONS[lesson_id]):
            fig = gate_figure(result)
            assert fig is not None
            assert len(fig.data[0].y) == len(result.source.responses)
            if result.correct is not None:
                assert result.shown == result.gate.choices[result.correct].label
    by_id = {r.gate.id: r for r in compute_lesson(LESSONS["turn_credit"])}
    assert by_id["grpo_extra_turn"].shown.startswith("Raises it")
    assert by_id["grpo_extra_turn.knob"].shown.startswith("Nothing")


def test_token_labels_are_escaped_in_the_figure():
    result = compute_lesson(LESSONS["trained_tokens"])[0]
    ticks = list(gate_figure(result).data[0].x)
    assert "7: &lt;call&gt;" in ticks


BAD = """
title = "t"
[[gates]]
id = "g"
stage = "{stage}"
batch = "{batch}"
settings = {settings}
question = "q"
kind = "number"
answer = "trained"
"""


@pytest.mark.parametrize(
    ("stage", "batch", "settings", "field"),
    [
        ("advantage", "episodes:calculator", "{}", "stage"),
        ("episodes", "inline", "{}", "stage"),
        ("episodes", "episodes:nowhere", "{}", "batch"),
        ("episodes", "episodes:calculator", '{ mask = "everything" }', "settings.mask"),
        ("episodes", "episodes:stops", '{ credit = "vibes" }', "settings.credit"),
    ],
)
def test_bad_episode_gates_name_the_field(stage, batch, settings, field):
    text = BAD.format(stage=stage, batch=batch, settings=settings)
    if batch == "inline":
        text = text.replace('batch = "inline"', 'batch = "inline"\nrewards = [[1.0, 0.0]]')
    with pytest.raises(LessonError, match=f"field '{field}'"):
        parse_lesson(text)
