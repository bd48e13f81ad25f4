"""The lesson pages in AppTest: the teacher starts a room and runs it; phones join and vote."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.data.lessons import LessonError, builtin_lessons
from roll_viz.ui import lesson_page, vote_page
from roll_viz.ui.votes import STORE
from tests.ui.apptest import ROOT, TIMEOUT

TEACHER = str(ROOT / nav.page("lesson").file)
PHONE = str(ROOT / nav.page("vote").file)


def run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click()
    return run(at)


def teacher(**params: str) -> AppTest:
    at = AppTest.from_file(TEACHER, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return run(at)


def phone(**params: str) -> AppTest:
    at = AppTest.from_file(PHONE, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return run(at)


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += (
        [e.value for e in at.success] + [e.value for e in at.info] + [e.value for e in at.error]
    )
    parts += [e.value for e in at.warning] + [b.label for b in at.button]
    parts += [h.value for h in at.subheader] + [h.value for h in at.title]
    return "\n".join(str(p) for p in parts)


def plain(at: AppTest) -> str:
    """The page's text with Markdown escapes removed."""
    return texts(at).replace("\\", "")


@pytest.fixture
def started():
    """A teacher page that started the built-in lesson: (AppTest, code, key)."""
    at = teacher()
    assert at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).value == "seed_chain"
    click(at, "lesson_start")
    code, key = at.query_params["room"], at.query_params["key"]
    code = code[0] if isinstance(code, list) else code
    key = key[0] if isinstance(key, list) else key
    assert STORE.is_teacher(code, key)
    yield at, code, key
    STORE.close(code, key) if STORE.is_teacher(code, key) else None


def test_start_page_lists_the_builtin_lesson():
    at = teacher()
    seed = builtin_lessons()["seed_chain"]
    assert seed.title in plain(at)
    assert f"{len(seed.steps)} questions" in texts(at)
    assert not at.error


def test_teacher_runs_a_room(started):
    at, code, key = started
    shown = texts(at)
    seed = builtin_lessons()["seed_chain"]
    assert seed.steps[0].question.split("(")[0][:40] in shown.replace("\\", "")
    assert "question 1 of 14" in shown
    assert at.metric[0].value == "0 / 0"
    # three phones answer through the store (the phone page is tested below)
    tokens = [STORE.join(code) for _ in range(3)]
    for token, answer in zip(tokens, (2, 2, 0), strict=True):  # option 2 is "Answer 2 (6.5)"
        STORE.vote(code, token, 0, 1, answer)
    run(at)
    assert at.metric[0].value == "3 / 3"
    click(at, "lesson_revealed")
    assert "The pipeline's answer: **Answer 2 (6.5)**" in plain(at)
    assert len(at.get("plotly_chart")) == 2  # votes and the explaining figure
    assert at.latex
    # re-vote: round 2 keeps round 1
    click(at, "lesson_revote")
    for token in tokens:
        STORE.vote(code, token, 0, 2, 2)
    click(at, "lesson_revealed")
    assert "first vote: 3 answers, 67% right" in texts(at)
    assert "after discussion: 3 answers, 100% right" in texts(at)
    # CSV of both rounds
    csv = lesson_page.export_csv(code, key, seed)
    lines = csv.strip().splitlines()
    assert lines[0].startswith("room,lesson,step,gate,round,student,answer,right")
    assert len(lines) == 7
    assert sum(",yes," in line for line in lines) == 5
    # next and back
    click(at, "lesson_next")
    assert "question 2 of 14" in texts(at)
    click(at, "lesson_back")
    assert "question 1 of 14" in texts(at)


def test_room_survives_a_refresh(started):
    _, code, key = started
    STORE.next(code, key)
    again = teacher(room=code, key=key)  # a new session: the teacher's browser refreshed
    assert "question 2 of 14" in texts(again)


def test_wrong_key_does_not_control_the_room(started):
    _, code, _ = started
    at = teacher(room=code, key="not-the-key")
    assert "ended or expired" in texts(at)
    assert not at.button(key="lesson_start").disabled


def test_bad_upload_gets_one_message():
    with pytest.raises(LessonError) as info:
        lesson_page.read_upload(b'title = "x"\n[[gates]]\nid = "a"\nstage = "nope"\n', "mine.toml")
    assert str(info.value) == "mine.toml: gate 'a', field 'stage': must be one of " + ", ".join(
        ("reward", "normalisation", "kl", "advantage", "local_global", "update", "training")
    )


def test_phone_joins_and_votes(started):
    _, code, key = started
    at = phone(room=code)
    token = at.query_params["s"]
    token = token[0] if isinstance(token, list) else token
    assert STORE.knows(code, token)
    labels = [b.label for b in at.button]
    assert any("Answer 2" in label for label in labels)
    click(at, "vote_0_1_2")
    assert STORE.my_answer(code, token) == 2.0
    assert "Your answer: Answer 2" in texts(at).replace("\\", "")
    # a refresh keeps the same student (token in the URL): still one vote
    again = phone(room=code, s=token)
    click(again, "vote_0_1_1")
    assert STORE.tally(code, key).answered[1] == 1
    # the phone never shows other students' answers or counts
    other = STORE.join(code)
    STORE.vote(code, other, 0, 1, 0)
    run(again)
    shown = texts(again)
    assert "2 /" not in shown
    assert "votes" not in shown.lower()
    # after the lock the buttons are gone
    STORE.set_phase(code, key, "locked")
    run(again)
    assert "The vote is closed" in texts(again)
    assert not [b for b in again.button if b.key and b.key.startswith("vote_0_")]


def test_phone_number_gate(started):
    _, code, key = started
    STORE.next(code, key)  # "how_much": a number on a slider
    at = phone(room=code)
    token = at.query_params["s"]
    token = token[0] if isinstance(token, list) else token
    at.slider(key=f"{vote_page.KEY_NUMBER}_1_1").set_value(-1.1)
    click(at, "vote_send_1_1")
    assert STORE.my_answer(code, token) == pytest.approx(-1.1)


def test_phone_without_room_shows_the_join_form():
    at = phone()
    assert at.text_input(key="vote_code") is not None
    at = phone(room="<script>alert(1)</script>")
    assert "No lesson with this room code" in texts(at)


def test_phone_shows_lesson_text_literally():
    hostile = "<script>alert(1)</script> **bold**"
    text = f"""title = "t"
[[gates]]
id = "a"
stage = "advantage"
batch = "inline"
rewards = [[1.0, 2.0]]
settings = {{ estimator = "grpo" }}
question = "{hostile}"
kind = "choice"
choices = ["{hostile}", "b"]
answer = "argmin(advantage)"
"""
    lesson = lesson_page.read_upload(text.encode(), "hostile.toml")
    code, key = STORE.create_room(
        lesson.id, [lesson_page.answer_spec(g) for g in lesson.steps], content=lesson
    )
    try:
        at = phone(room=code)
        markdown = [m.value for m in at.markdown]
        assert any("\\<script\\>" in m and "\\*\\*bold\\*\\*" in m for m in markdown)
        assert not any("<script>" in m for m in markdown)
        assert any("\\<script\\>" in b.label for b in at.button)
    finally:
        STORE.close(code, key)


LIVE_LESSON = """title = "live"
[[gates]]
id = "mine"
stage = "advantage"
batch = "live"
seed = 3
settings = { estimator = "grpo" }
question = "Our own batch: is any advantage negative?"
kind = "choice"
choices = ["No", "Yes"]
answer = "where(min(advantage) < 0, 1, 0)"
"""


def test_live_gate_uses_the_class_batch():
    lesson = lesson_page.read_upload(LIVE_LESSON.encode(), "live.toml")
    code, key = STORE.create_room(
        lesson.id, [lesson_page.answer_spec(g) for g in lesson.steps], content=lesson
    )
    try:
        STORE.set_phase(code, key, "revealed")
        # not live in the sidebar: one clear message naming the gate and the field
        at = teacher(room=code, key=key)
        assert "gate 'mine', field 'batch'" in plain(at)
        # the sidebar samples live (tiny test model): the reveal is computed on that batch
        at = teacher(room=code, key=key, live="true", G="2", T="4")
        assert "The pipeline's answer:" in plain(at)
        assert not at.error
    finally:
        STORE.close(code, key)


def test_lesson_choice_is_in_the_url():
    at = teacher(lesson="seed_chain")
    assert at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).value == "seed_chain"
    at = teacher(lesson="no_such_lesson")  # an unknown value falls back to the default
    assert at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).value == "seed_chain"


def test_a_late_tap_after_the_teacher_moved_on(started):
    _, code, key = started
    at = phone(room=code)
    STORE.next(code, key)  # the phone still shows question 1
    click(at, "vote_0_1_2")
    assert "the teacher has moved on" in plain(at)
    assert "question 2 of 14" in plain(at)  # and it now shows the current question
    assert STORE.tally(code, key, step=0).answered[1] == 0
