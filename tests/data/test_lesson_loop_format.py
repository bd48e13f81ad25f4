"""The teaching loop's lesson fields ``[gates.seen]`` and ``[gates.followup]``: checked, bounded."""

from __future__ import annotations

import pytest

from roll_viz.data.lessons import MAX_STEPS, LessonError, parse_lesson

GATE = """
[[gates]]
id = "g{i}"
stage = "advantage"
batch = "{batch}"
{rewards}
question = "Which answer is pushed down?"
kind = "choice"
choices = ["Answer 1", "Answer 2", "Answer 3"]
answer = "argmin(advantage)"
"""
SEEN = """
[gates.seen]
question = "What did you see?"
choices = ["the right reading", "a misreading"]
answer = {answer}
"""


def lesson(*parts: str) -> str:
    return 'title = "t"\n' + "".join(parts)


def gate(i: int = 0, batch: str = "inline") -> str:
    rewards = "rewards = [[8.2, 6.5, 9.1]]" if batch == "inline" else ""
    return GATE.format(i=i, batch=batch, rewards=rewards)


def test_seen_and_followup_steps_in_order_and_a_summary_at_the_end():
    text = lesson(
        gate(0, "arithmetic"), SEEN.format(answer=0), '[gates.followup]\nbatch = "sample"\n'
    )
    steps = parse_lesson(text).steps
    assert [(s.id, s.role) for s in steps] == [
        ("g0", "gate"),
        ("g0.seen", "seen"),
        ("g0.followup", "followup"),
        ("summary", "summary"),
    ]
    seen, follow = steps[1], steps[2]
    assert [c.label for c in seen.choices] == ["the right reading", "a misreading"]
    assert follow.resample
    assert follow.question == steps[0].question  # the same question on a fresh batch
    assert follow.batch == "arithmetic"


def test_a_lesson_without_followups_has_no_summary():
    assert [s.role for s in parse_lesson(lesson(gate(), SEEN.format(answer=1))).steps] == [
        "gate",
        "seen",
    ]


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        (SEEN.format(answer=2), "answer", "must be 0..1"),
        (SEEN.format(answer='"0"'), "answer", "index of the right reading"),
        (SEEN.format(answer="true"), "answer", "index of the right reading"),
        ('[gates.followup]\nbatch = "sample"\n', "batch", "a sampled follow-up needs a gate"),
        ('[gates.followup]\nbatch = "inline"\nrewards = [[1, 2]]\n', "question", "own question"),
        ('[gates.followup]\nbatch = "model"\n', "batch", "must be one of sample, inline"),
        ("[gates.followup]\nseed = 3\n", "seed", "is not a field"),
        (
            '[gates.seen]\nquestion = "q"\nchoices = ["a"]\nanswer = 0\nfigure = "kl"\n',
            "figure",
            "not a field",
        ),
    ],
)
def test_bad_loop_fields_get_one_message(extra, field, problem):
    with pytest.raises(LessonError) as info:
        parse_lesson(lesson(gate(), extra))
    message = str(info.value)
    assert f"field {field!r}" in message
    assert problem in message
    assert "gate 'g0." in message


def test_a_lesson_walks_at_most_max_steps():
    loop = SEEN.format(answer=0) + '[gates.followup]\nbatch = "sample"\n'
    n = MAX_STEPS // 3 + 1  # each gate walks three steps
    with pytest.raises(LessonError, match=f"more than {MAX_STEPS}"):
        parse_lesson(lesson(*(gate(i, "arithmetic") + loop for i in range(n))))
