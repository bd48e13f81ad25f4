"""The lesson pages in AppTest: the teacher starts a room and runs it; phones join and vote."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.data.lessons import LessonError, builtin_lessons
from roll_viz.ui import lesson_page, lesson_steps, reconnect, vote_page
from roll_viz.ui.rooms import STORE
from roll_viz.ui.votes import owner_key, voter_token
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


def _open(script: str, browser: str | None, params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(script, default_timeout=TIMEOUT)
    if browser is not None:  # the same browser again: its student-key cookie, as after a reload
        at.session_state[reconnect.KEY_STUDENT] = browser
    for key, value in params.items():
        at.query_params[key] = value
    return run(at)


def teacher(browser: str | None = None, **params: str) -> AppTest:
    """A teacher page in a new session (``browser``: the student key of a browser seen before)."""
    return _open(TEACHER, browser, params)


def phone(browser: str | None = None, **params: str) -> AppTest:
    """A phone page in a new session (``browser``: the student key of a browser seen before)."""
    return _open(PHONE, browser, params)


def browser_key(at: AppTest) -> str:
    return at.session_state[reconnect.KEY_STUDENT]


def url_param(at: AppTest, name: str) -> str | None:
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


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
    code = url_param(at, "room")
    key = owner_key(browser_key(at), code)  # the teacher's browser holds it, the URL does not
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
    assert "The pipeline's answer:" in plain(at)
    # the reveal points at one number: the answer alone, large (its own element)
    assert any(m.value.replace("\\", "") == "Answer 2 (6.5)" for m in at.markdown)
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
    csv = lesson_steps.export_csv(code, key, seed)
    lines = csv.strip().splitlines()
    assert lines[0].startswith("room,lesson,step,gate,role,seed,round,student,answer,right")
    assert len(lines) == 7
    assert sum(",yes," in line for line in lines) == 5
    # next and back
    click(at, "lesson_next")
    assert "question 2 of 14" in texts(at)
    click(at, "lesson_back")
    assert "question 1 of 14" in texts(at)


def test_room_survives_a_refresh(started):
    at, code, key = started
    STORE.next(code, key)
    # a new session of the same browser (its cookie): the teacher's page was refreshed
    again = teacher(browser_key(at), room=code)
    assert "question 2 of 14" in texts(again)
    assert again.button(key="lesson_next") is not None


def test_teacher_key_is_never_in_the_url(started):
    at, code, key = started
    assert url_param(at, "room") == code
    assert "key" not in at.query_params
    assert not [v for v in at.query_params.values() if key in str(v)]
    # an old link that still carries a key: the key leaves the URL and is not obeyed
    copied = teacher(room=code, key=key)
    assert url_param(copied, "key") is None
    assert not [b for b in copied.button if b.key in ("lesson_next", "lesson_revealed")]


def test_projected_link_in_another_browser_does_not_control_the_room(started):
    _, code, _ = started
    at = teacher(room=code)  # another browser (a student copied the projected URL)
    assert f"Lesson room {code} is run from the teacher's browser" in texts(at)
    assert not [b for b in at.button if (b.key or "").startswith("lesson_")]
    assert STORE.view(code).step == 0


def test_an_ended_room_says_so(started):
    at, code, key = started
    STORE.close(code, key)
    again = teacher(browser_key(at), room=code)
    assert "ended or expired" in texts(again)
    assert not again.button(key="lesson_start").disabled


def test_bad_upload_gets_one_message():
    with pytest.raises(LessonError) as info:
        lesson_steps.read_upload(b'title = "x"\n[[gates]]\nid = "a"\nstage = "nope"\n', "mine.toml")
    assert str(info.value) == "mine.toml: gate 'a', field 'stage': must be one of " + ", ".join(
        (
            "reward",
            "normalisation",
            "kl",
            "advantage",
            "local_global",
            "update",
            "training",
            "episodes",
        )
    )


def test_phone_joins_and_votes(started):
    _, code, key = started
    at = phone(room=code)
    token = voter_token(browser_key(at), code)
    assert STORE.knows(code, token)
    assert url_param(at, "s") is None  # the token is not in the phone's URL either
    labels = [b.label for b in at.button]
    assert any("Answer 2" in label for label in labels)
    click(at, "vote_0_1_2")
    assert STORE.my_answer(code, token) == 2.0
    assert "Your answer: Answer 2" in texts(at).replace("\\", "")
    # a refresh keeps the same student (the browser's cookie): still one vote
    again = phone(browser_key(at), room=code)
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
    token = voter_token(browser_key(at), code)
    at.slider(key=f"{vote_page.KEY_NUMBER}_1_1").set_value(-1.1)
    click(at, "vote_send_1_1")
    assert STORE.my_answer(code, token) == pytest.approx(-1.1)


def test_a_made_up_voter_token_adds_no_student(started):
    _, code, key = started
    at = phone(room=code)
    click(at, "vote_0_1_2")
    assert STORE.view(code).students == 1
    for forged in ("madeUpToken12345", "AAAAAAAAAAAAAAAAAAAAAAAA", "x"):
        again = phone(browser_key(at), room=code, s=forged)  # the same phone, a doctored link
        assert url_param(again, "s") is None
        assert not STORE.knows(code, forged)
    assert STORE.view(code).students == 1
    assert STORE.tally(code, key).answered[1] == 1


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
    lesson = lesson_steps.read_upload(text.encode(), "hostile.toml")
    code, key = STORE.create_room(
        lesson.id, [lesson_steps.answer_spec(g) for g in lesson.steps], content=lesson
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
    lesson = lesson_steps.read_upload(LIVE_LESSON.encode(), "live.toml")
    browser = reconnect.new_student_key()
    code, key = STORE.create_room(
        lesson.id,
        [lesson_steps.answer_spec(g) for g in lesson.steps],
        content=lesson,
        owner=browser,
    )
    try:
        STORE.set_phase(code, key, "revealed")
        # not live in the sidebar: one clear message naming the gate and the field
        at = teacher(browser, room=code)
        assert "gate 'mine', field 'batch'" in plain(at)
        # the sidebar samples live (tiny test model): the reveal is computed on that batch
        at = teacher(browser, room=code, live="true", G="2", T="4")
        assert "The pipeline's answer:" in plain(at)
        assert not at.error
    finally:
        STORE.close(code, key)


def test_lesson_choice_is_in_the_url():
    at = teacher(lesson="seed_chain")
    assert at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).value == "seed_chain"
    # a link names a lesson by its id (the selectbox shows its title)
    at = teacher(lesson="teaching_loop")
    assert at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).value == "teaching_loop"
    assert url_param(at, "lesson") == "teaching_loop"
    at.selectbox(key=lesson_page.KEY_LESSON_CHOICE).set_value("seed_chain")
    run(at)
    assert url_param(at, "lesson") is None  # the default stays out of the link
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


@pytest.mark.parametrize(
    ("page_url", "lan_ip", "link", "note"),
    [
        # the teacher's browser on the server: the phones get the network address, same port
        ("http://localhost:8501/Lesson", "192.168.1.23", "http://192.168.1.23:8501", "same"),
        ("http://127.0.0.1:8765/Lesson", "10.0.0.7", "http://10.0.0.7:8765", "same"),
        ("http://[::1]:8501/Lesson", "10.0.0.7", "http://10.0.0.7:8501", "same"),
        ("https://localhost/Lesson", "10.0.0.7", "https://10.0.0.7", "same"),
        # already on an address phones reach: kept as the browser used it
        ("http://192.168.1.23:8501/Lesson", "10.9.9.9", "http://192.168.1.23:8501", ""),
        ("https://class.example.org/Lesson", None, "https://class.example.org", ""),
        # on the server and no network at all: no dead link, one plain sentence
        ("http://localhost:8501/Lesson", None, None, "no network"),
    ],
)
def test_phone_link_on_a_loopback_host_uses_the_network_address(page_url, lan_ip, link, note):
    got = lesson_page.phone_link(page_url, "ABCDE", lan_ip)
    assert got.url == (None if link is None else f"{link}/vote?room=ABCDE")
    assert {"same": "same network", "no network": "no network address", "": ""}[note] in got.note
    assert bool(note) == bool(got.note)


def test_teacher_page_shows_the_network_link_and_says_so(monkeypatch):
    monkeypatch.setattr(lesson_page, "_page_url", lambda: "http://localhost:8501/Lesson")
    monkeypatch.setattr(lesson_page.models, "network_ip", lambda: "192.168.1.23")
    at = teacher()
    click(at, "lesson_start")
    code = url_param(at, "room")
    try:
        shown = plain(at)
        assert f"http://192.168.1.23:8501/vote?room={code}" in shown
        assert "localhost" not in shown
        assert "Phones must be on the same network" in shown
        assert at.get("image")  # the QR code
        # no network address at all: said plainly, no QR code of a dead link
        monkeypatch.setattr(lesson_page.models, "network_ip", lambda: None)
        run(at)
        assert "no network address" in plain(at)
        assert not at.get("image")
        assert "/vote?room=" not in plain(at)
    finally:
        STORE.close(code, owner_key(browser_key(at), code))
