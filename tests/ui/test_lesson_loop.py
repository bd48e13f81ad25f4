"""The teaching loop through all nine steps on the Lesson and Vote pages (AppTest, tiny model).

Predict alone (round 1), vote, discuss, re-vote (round 2), a reveal that points at one number,
"what did you see?" (its own step, one round), the teacher explains (nothing advances by
itself), the follow-up on a fresh batch answered alone (one round; a sampled one draws its seed
in class and keeps it across a refresh), and the class's accuracy at the end.
"""

from __future__ import annotations

from collections import Counter

import pytest

from roll_viz.analysis.class_gain import class_gain, share_right
from roll_viz.data.lessons import builtin_lessons
from roll_viz.ui import lesson_steps
from roll_viz.ui.rooms import STORE
from roll_viz.ui.votes import owner_key, voter_token
from tests.ui.test_lesson_pages import (
    browser_key,
    click,
    phone,
    plain,
    run,
    teacher,
    texts,
    url_param,
)

LOOP = builtin_lessons()["teaching_loop"]


@pytest.fixture
def room():
    at = teacher(lesson="teaching_loop")  # the link names the lesson
    assert not at.error, [e.value for e in at.error]
    click(at, "lesson_start")
    code = url_param(at, "room")
    browser = browser_key(at)
    key = owner_key(browser, code)
    yield at, code, key, browser
    if STORE.is_teacher(code, key):
        STORE.close(code, key)


def _answer(code: str, tokens: list[str], step: int, rnd: int, answers) -> None:
    for token, a in zip(tokens, answers, strict=True):
        STORE.vote(code, token, step, rnd, a)


def test_the_lesson_walks_gate_seen_followup_and_ends_with_the_summary():
    roles = [s.role for s in LOOP.steps]
    assert roles == ["gate", "seen", "followup"] * 3 + ["summary"]
    assert [s.resample for s in LOOP.steps if s.role == "followup"] == [False, True, True]


def test_nine_steps_with_phones_a_late_phone_and_a_teacher_refresh(room):
    at, code, key, browser = room
    phones = [phone(room=code) for _ in range(3)]
    tokens = [voter_token(browser_key(p), code) for p in phones]
    # 1-2. predict alone and vote: two of three right (option 2 is "Answer 2 (6.5)")
    click(phones[0], "vote_0_1_2")
    _answer(code, tokens[1:], 0, 1, (2, 0))
    # 3-4. lock, discuss, re-vote: all three right
    click(at, "lesson_locked")
    click(at, "lesson_revote")
    _answer(code, tokens, 0, 2, (2, 2, 2))
    # 5. the reveal points at one number
    click(at, "lesson_revealed")
    assert any(m.value.replace("\\", "") == "Answer 2 (6.5)" for m in at.markdown)
    assert "first vote: 3 answers, 67% right" in texts(at)
    # 6. what did you see? one tap, on its own step, no re-vote
    click(at, "lesson_next")
    assert "what did you see?" in texts(at)
    assert at.button(key="lesson_revote").disabled
    run(phones[1])
    assert "What did you see on the screen?" in plain(phones[1])
    _answer(code, tokens, 1, 1, (0, 0, 1))
    click(at, "lesson_revealed")
    # 7. the teacher explains: the gate's explanation stays up; nothing advances by itself
    run(at)
    assert STORE.view(code).step == 1
    # 8. the follow-up (new numbers), answered alone; a late phone joins here
    click(at, "lesson_next")
    assert "the same question on a fresh batch, answered alone" in texts(at)
    assert at.button(key="lesson_revote").disabled
    late = phone(room=code)
    assert "answer alone" in plain(late)
    late_token = voter_token(browser_key(late), code)
    _answer(code, [*tokens, late_token], 2, 1, (1, 1, 2, 1))  # option 1 is "Answer 1 (7.0)"
    click(at, "lesson_revealed")
    assert any(m.value.replace("\\", "") == "Answer 1 (7.0)" for m in at.markdown)
    # the sampled follow-up (arithmetic, step 5): a seed drawn in class, kept across a refresh
    STORE.goto(code, key, 5)
    run(at)
    seed = STORE.notes(code, key)[lesson_steps.seed_note(5)]
    assert f"seed {seed}, drawn in class" in texts(at)
    refreshed = teacher(browser, room=code)
    assert STORE.notes(code, key)[lesson_steps.seed_note(5)] == seed
    assert f"seed {seed}" in texts(refreshed)
    _answer(code, tokens, 5, 1, (0, 1, 2))
    click(refreshed, "lesson_revealed")  # computed on the fresh batch, with the tiny model
    assert not refreshed.error
    assert "The pipeline's answer:" in plain(refreshed)
    # 9. the class's accuracy per question: first vote, after discussion, follow-up alone
    STORE.goto(code, key, len(LOOP.steps) - 1)
    run(refreshed)
    assert "What the class learned" in str(refreshed.get("plotly_chart")[0].proto.spec)
    table = refreshed.table[0].value
    push_down = table.iloc[0]
    assert push_down["first vote"] == "67% of 3"
    assert push_down["after discussion"] == "100% of 3"
    assert push_down["follow-up, alone"] == "75% of 4"  # the late phone included
    assert table.iloc[2]["first vote"] == "-"  # nobody answered the third question
    run(phones[2])
    assert "The class's results are on the screen" in plain(phones[2])
    csv = lesson_steps.export_csv(code, key, LOOP)
    assert f",no_signal.followup,followup,{seed}," in csv
    # the fresh batch: the model's own sample with the drawn seed (the same seed, the same batch;
    # another seed, another batch), not the committed preset
    fresh = lesson_steps.step_result(LOOP, 5, None, seed).source
    assert lesson_steps.step_result(LOOP, 5, None, seed).source.responses == fresh.responses
    assert lesson_steps.step_result(LOOP, 5, None, seed + 1).source.responses != fresh.responses
    assert lesson_steps.step_result(LOOP, 5).source.responses != fresh.responses


def test_class_gain_by_hand():
    answers = {
        0: {1: Counter({2.0: 2, 0.0: 1}), 2: Counter({2.0: 3})},
        2: {1: Counter({1.0: 3, 2.0: 1})},
    }
    rights = {i: (lambda v, i=i: v == (2.0 if i == 0 else 1.0)) for i in range(len(LOOP.steps))}
    gains = class_gain(LOOP, answers, rights)
    first = gains[0]
    assert (first.gate, first.first, first.discussed, first.followup) == (
        "push_down",
        2 / 3,
        1.0,
        3 / 4,
    )
    assert first.answered == (3, 3, 4)
    assert gains[1].first is None  # nobody answered no_signal
    assert share_right(Counter(), lambda v: True) is None
