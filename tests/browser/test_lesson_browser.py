"""A lesson end to end in a real browser: one teacher page, three phones at 360 px.

The teacher starts the built-in lesson; three phones open the room link, two answer right and
one wrong; the teacher's count reaches 3 by itself (polling), the reveal shows the pipeline's
answer and the class's distribution; after a re-vote both rounds are shown. Screenshots:
``lesson_teacher.png`` and ``lesson_reveal.png`` (1280 x 720) and ``lesson_phone.png`` (360 px
wide), see the ``shots`` fixture.
"""

from __future__ import annotations

import urllib.parse

from roll_viz.lm import network
from tests.browser import streamlit_page as sp

PHONE = {"width": 360, "height": 740}
POLL_MS = 30_000  # the pages poll the room every 2 s; a slow CI machine gets time


def _click(page, key: str) -> None:
    sp.after_rerun(page, lambda: page.locator(f".st-key-{key} button").first.click())


def _wait_text(page, text: str, timeout: float = POLL_MS) -> None:
    page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=timeout)


def _metric(page, value: str) -> None:
    page.wait_for_function(
        """(v) => Array.from(document.querySelectorAll("[data-testid='stMetricValue']"))
                  .some(e => e.innerText.trim() === v)""",
        arg=value,
        timeout=POLL_MS,
    )


def test_a_lesson_with_three_phones(server, browser, shots):
    teacher_ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    teacher = teacher_ctx.new_page()
    teacher.set_default_timeout(120_000)
    sp.goto(teacher, f"{server}/Lesson?present=true&hide=sidebar")  # projector mode
    _click(teacher, "lesson_start")
    teacher.wait_for_url("**room=*", timeout=60_000)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(teacher.url).query)
    code = query["room"][0]
    assert set(query) <= {"room", "present", "hide", "lesson"}, query  # no teacher key in it
    sp.wait_idle(teacher)
    _wait_text(teacher, code)
    # the teacher's page is on 127.0.0.1: the room link and QR code use the network address
    lan = network.network_ip()
    main = teacher.get_by_test_id("stMain").inner_text()
    port = urllib.parse.urlparse(server).port
    if lan is None:  # a machine with no network: said plainly, no link
        assert "no network address" in main
    else:
        assert f"http://{lan}:{port}/vote?room={code}" in main
        assert "Phones must be on the same network" in main
        assert teacher.get_by_test_id("stImage").count() >= 1  # the QR code
    assert "127.0.0.1" not in main

    phones = []
    for _ in range(3):
        ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        pg = ctx.new_page()
        pg.set_default_timeout(120_000)
        sp.goto(pg, f"{server}/vote?room={code}")
        pg.locator(".st-key-vote_0_1_2 button").wait_for(state="visible")
        phones.append((ctx, pg))
    for _, pg in phones:
        assert sp.exceptions(pg) == []
        assert not pg.get_by_test_id("stSidebar").is_visible()
        width = pg.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width  # nothing wider than the phone
        box = pg.locator(".st-key-vote_0_1_2 button").bounding_box()
        assert box is not None
        assert box["height"] >= 48  # a large touch target
        assert box["width"] >= 0.8 * PHONE["width"] - 40

    # round 1: two right (option 2 is "Answer 2 (6.5)"), one wrong
    for (_, pg), option in zip(phones, (2, 2, 0), strict=True):
        pg.locator(f".st-key-vote_0_1_{option} button").click()
        _wait_text(pg, "Your answer")
    shot_phone = phones[0][1]
    shot_phone.screenshot(path=str(shots / "lesson_phone.png"), full_page=True)
    _metric(teacher, "3 / 3")
    teacher.screenshot(path=str(shots / "lesson_teacher.png"))
    for _, pg in phones:  # no phone ever shows a count or the others' answers
        text = pg.get_by_test_id("stMain").inner_text()
        assert "3 / 3" not in text
        assert "votes" not in text.lower()

    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "The pipeline's answer")
    main = teacher.get_by_test_id("stMain").inner_text()
    assert "Answer 2 (6.5)" in main
    assert "first vote: 3 answers, 67% right" in main
    assert teacher.get_by_test_id("stPlotlyChart").count() == 2
    data = sp.chart_data(teacher, 0)
    assert data[0]["x"] == [1, 0, 2, 0]  # votes per option, as cast
    votes = teacher.get_by_test_id("stPlotlyChart").first.bounding_box()
    assert votes["y"] < 720 - 120, f"the vote chart starts at y = {votes['y']:.0f}"  # first screen
    for _, pg in phones:
        _wait_text(pg, "Look at the screen")
    teacher.get_by_test_id("stPlotlyChart").first.scroll_into_view_if_needed()
    teacher.screenshot(path=str(shots / "lesson_reveal.png"))

    # round 2 after discussion: everyone right
    _click(teacher, "lesson_revote")
    for _, pg in phones:
        pg.locator(".st-key-vote_0_2_2 button").wait_for(state="visible", timeout=POLL_MS)
        pg.locator(".st-key-vote_0_2_2 button").click()
        _wait_text(pg, "Your answer")
    _metric(teacher, "3 / 3")
    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "after discussion: 3 answers, 100% right")
    main = teacher.get_by_test_id("stMain").inner_text()
    assert "first vote: 3 answers, 67% right" in main
    assert sp.exceptions(teacher) == []

    # a refresh keeps the room and the step (the browser's cookie, not the URL)
    teacher.reload()
    sp.wait_idle(teacher)
    _wait_text(teacher, "question 1 of 14")
    assert teacher.locator(".st-key-lesson_next button").is_visible()

    # a phone that reloads, then opens a doctored link with a made-up token: still one student
    _, pg = phones[0]
    pg.reload()
    sp.wait_idle(pg)
    _wait_text(pg, "Your answer")
    sp.goto(pg, f"{server}/vote?room={code}&s=madeUpVoterToken123456")
    _wait_text(pg, "Your answer")
    teacher.reload()  # a fresh run of the count: answers / phones in the room
    sp.wait_idle(teacher)
    _metric(teacher, "3 / 3")
    assert "s" not in sp.query(pg.url)

    # the projected link opened in another browser: the room, but none of its controls
    copy_ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    copy = copy_ctx.new_page()
    sp.goto(copy, teacher.url)
    _wait_text(copy, f"Lesson room {code} is run from the teacher's browser")
    assert copy.locator(".st-key-lesson_next button").count() == 0
    assert copy.locator(".st-key-lesson_end button").count() == 0
    assert sp.exceptions(copy) == []
    copy_ctx.close()
    for ctx, _ in phones:
        ctx.close()
    teacher_ctx.close()


GOOD = """title = "<script>alert(1)</script> My lesson"
[[gates]]
id = "mine"
stage = "advantage"
batch = "inline"
rewards = [[1.0, 0.0]]
settings = { estimator = "grpo" }
question = "Which answer is pushed down?"
kind = "choice"
choices = ["The first", "The second"]
answer = "argmin(advantage)"
"""


def test_upload_a_lesson_file(server, page, tmp_path):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sp.goto(page, f"{server}/Lesson?lesson=Upload+a+lesson+file+%28.toml%29")
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace('stage = "advantage"', 'stage = "magic"'))
    sp.after_rerun(page, lambda: page.locator("input[type='file']").set_input_files(str(bad)))
    alerts = page.get_by_test_id("stAlert").all_inner_texts()
    assert any("bad.toml: gate 'mine', field 'stage'" in a for a in alerts), alerts
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    # Replacing the file is two reruns: the old file's removal (no file) and the new upload. On a
    # loaded machine the first one can finish before the upload does, so wait for the lesson.
    page.locator("input[type='file']").set_input_files(str(good))
    _wait_text(page, "My lesson", timeout=180_000)
    sp.wait_idle(page)
    main = page.get_by_test_id("stMain").inner_text()
    assert "<script>alert(1)</script> My lesson" in main  # shown as text, never run
    assert dialogs == []
    assert page.locator(".st-key-lesson_start button").is_visible()
    assert sp.exceptions(page) == []
