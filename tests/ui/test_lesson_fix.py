"""The 'Fix this run' lesson on the Lesson and Vote pages (AppTest, in-process store).

The class sees the collapse and says what went wrong; pairs choose a knob change on their
phones; the reveal plays the recorded runs of the class's top choices side by side against the
collapse, then the explanation; nothing advances by itself; the seen step follows.
"""

from __future__ import annotations

import json

import pytest

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
    url_param,
)

FIX_LESSON = builtin_lessons()["fix_this_run"]
FIX_STEP = 2  # collapse, its seen step, then the fix gate


@pytest.fixture
def room():
    at = teacher(lesson="fix_this_run")
    assert not at.error, [e.value for e in at.error]
    click(at, "lesson_start")
    code = url_param(at, "room")
    key = owner_key(browser_key(at), code)
    yield at, code, key
    if STORE.is_teacher(code, key):
        STORE.close(code, key)


def _charts(at) -> dict[str, dict]:
    """The page's plotly figures by title."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def test_pairs_vote_and_the_reveal_plays_the_top_choices_side_by_side(room):
    at, code, key = room
    assert FIX_LESSON.steps[FIX_STEP].kind == "fix"
    STORE.goto(code, key, FIX_STEP)
    run(at)
    text = plain(at)
    assert "fix this run: pairs choose one change" in text
    # while the class votes: the collapsing run, no outcome yet
    charts = _charts(at)
    assert "The run to fix: Reward hacking, beta = 0" in charts
    assert "What each change did (recorded runs)" not in charts
    assert "Both climb" not in text
    # pairs vote on their phones: D (REINFORCE++) 3, A (beta = 1) 2, B (adaptive) 2, F 1
    phones = [phone(room=code) for _ in range(2)]
    assert "A. Add a KL penalty to the reward: beta = 1" in plain(phones[0])
    click(phones[0], f"vote_{FIX_STEP}_1_3")
    tokens = [voter_token(browser_key(phones[1]), code)] + [STORE.join(code) for _ in range(6)]
    for token, answer in zip(tokens, (3, 3, 0, 0, 1, 1, 5), strict=True):
        STORE.vote(code, token, FIX_STEP, 1, answer)
    click(at, "lesson_revealed")
    text = plain(at)
    # A and B tie at 2 votes: the option listed first (A) comes first
    assert "The class's top choices (first vote): D (3 votes) · A (2 votes) · B (2 votes)" in text
    charts = _charts(at)
    grid = charts["What each change did (recorded runs)"]
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert [t.split("<br>") for t in titles] == [
        ["D. REINFORCE++: advantages on the", "whole batch's scale", "still collapses"],
        ["A. Add a KL penalty to the reward:", "beta = 1", "fixed"],
        ["B. Let beta adapt to keep the KL", "near 0.1", "fixed"],
    ]
    # each column: the collapse (dashed) and the change's run, four metrics: 3 x 4 x 2 curves
    assert len(grid["data"]) == 24
    result = lesson_steps.step_result(FIX_LESSON, FIX_STEP)
    kl_rpp = next(o for o in result.outcomes if o.run == "rpp_global").env["run_kl"]
    assert grid["data"][3]["y"] == kl_rpp  # column 1, row 2 (KL): the change's recorded KL
    # the recorded runs' answer, the votes, then the explanation
    assert "Fixes the run: Add a KL penalty to the reward: beta = 1 · Let beta adapt" in text
    assert "first vote: 8 answers, 50% right" in text  # 4 of 8 chose A or B (the fixes)
    assert "Two changes fixed it" in text
    csv = lesson_steps.export_csv(code, key, FIX_LESSON)
    assert csv.count(",fix,gate,,1,") == 8
    assert csv.count("Add a KL penalty to the reward: beta = 1,yes,") == 2
    assert csv.count("REINFORCE++: advantages on the whole batch's scale,no,") == 3
    # nothing advances by itself; the seen step comes when the teacher moves on
    run(at)
    assert STORE.view(code).step == FIX_STEP
    click(at, "lesson_next")
    assert "What did the recorded runs show?" in plain(at)
    assert "What each change did (recorded runs)" not in _charts(at)


def test_a_revote_decides_and_no_votes_plays_the_first_options(room):
    at, code, key = room
    STORE.goto(code, key, FIX_STEP)
    click(at, "lesson_revealed")
    assert "Nobody voted: the first 3 options, in the lesson's order." in plain(at)
    click(at, "lesson_reset")
    tokens = [STORE.join(code) for _ in range(3)]
    for token in tokens:
        STORE.vote(code, token, FIX_STEP, 1, 5)  # a first vote the re-vote replaces
    click(at, "lesson_revote")
    for token, answer in zip(tokens, (4, 4, 0), strict=True):
        STORE.vote(code, token, FIX_STEP, 2, answer)
    click(at, "lesson_revealed")
    assert "(after discussion): E (2 votes) · A (1 vote)" in plain(at)
    titles = [
        a["text"]
        for a in _charts(at)["What each change did (recorded runs)"]["layout"]["annotations"]
    ]
    assert [t[0] for t in titles[:2]] == ["E", "A"]
