"""The teaching loop end to end in a real browser: a teacher at 1280 x 720 and three phones.

The teacher opens ``/Lesson?lesson=teaching_loop`` (the lesson chosen by the link) and starts it.
First question: two of three phones right, lock, re-vote (all right), the reveal's one number in
large type; "what did you see?" (phones tap a reading; the reveal shows the split); the follow-up
with new numbers, answered alone (no re-vote); the arithmetic follow-up the model samples in
class (its seed on the projector, the reveal computed on that batch by the tiny model); the
summary with the class's accuracy per question. Screenshots: ``loop_reveal.png``,
``loop_seen.png``, ``loop_followup_phone.png`` and ``loop_summary.png``.
"""

from __future__ import annotations

import re
import urllib.parse

from tests.browser import streamlit_page as sp
from tests.browser.test_lesson_browser import PHONE, POLL_MS, _click, _metric, _wait_text


def _phones_press(phones, key: str) -> None:
    for pg in phones:
        pg.locator(f".st-key-{key} button").wait_for(state="visible", timeout=POLL_MS)
        pg.locator(f".st-key-{key} button").click()
        _wait_text(pg, "Your answer")


def test_the_nine_step_loop_with_three_phones(server, browser, shots):
    teacher_ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    teacher = teacher_ctx.new_page()
    teacher.set_default_timeout(120_000)
    sp.goto(teacher, f"{server}/Lesson?lesson=teaching_loop&present=true&hide=sidebar")
    _wait_text(teacher, "The teaching loop")
    _click(teacher, "lesson_start")
    teacher.wait_for_url("**room=*", timeout=60_000)
    code = urllib.parse.parse_qs(urllib.parse.urlparse(teacher.url).query)["room"][0]
    _wait_text(teacher, "question 1 of 10")

    contexts, phones = [], []
    for _ in range(3):
        ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        pg = ctx.new_page()
        pg.set_default_timeout(120_000)
        sp.goto(pg, f"{server}/vote?room={code}")
        contexts.append(ctx)
        phones.append(pg)
    # 1-4: predict alone and vote (two right), lock, discuss, re-vote (all right)
    for pg, option in zip(phones, (2, 2, 0), strict=True):
        _phones_press([pg], f"vote_0_1_{option}")
    _metric(teacher, "3 / 3")
    _click(teacher, "lesson_locked")
    _click(teacher, "lesson_revote")
    _phones_press(phones, "vote_0_2_2")
    # 5: the reveal points at one number, large
    _click(teacher, "lesson_revealed")
    answer = teacher.locator(".st-key-lesson_answer p").first
    answer.wait_for(state="visible", timeout=POLL_MS)
    assert answer.inner_text() == "Answer 2 (6.5)"
    size = float(answer.evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))
    assert size >= 36, size  # the number the class looks at, readable from the back
    _wait_text(teacher, "after discussion: 3 answers, 100% right")
    teacher.screenshot(path=str(shots / "loop_reveal.png"))
    # 6: what did you see? one tap on the phones, no re-vote
    _click(teacher, "lesson_next")
    _wait_text(teacher, "what did you see?")
    assert teacher.locator(".st-key-lesson_revote button").is_disabled()
    for pg in phones:
        _wait_text(pg, "What did you see on the screen?")
    for pg, option in zip(phones, (0, 0, 1), strict=True):
        _phones_press([pg], f"vote_1_1_{option}")
    _metric(teacher, "3 / 3")
    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "first vote: 3 answers, 67% right")
    teacher.screenshot(path=str(shots / "loop_seen.png"))
    # 7-8: the teacher explains (nothing advances), then the follow-up alone with new numbers
    _click(teacher, "lesson_next")
    _wait_text(teacher, "answered alone")
    for pg in phones:
        _wait_text(pg, "answer alone")
    phones[0].screenshot(path=str(shots / "loop_followup_phone.png"), full_page=True)
    for pg, option in zip(phones, (1, 1, 2), strict=True):  # option 1 is "Answer 1 (7.0)"
        _phones_press([pg], f"vote_2_1_{option}")
    _metric(teacher, "3 / 3")
    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "Answer 1 (7.0)")
    # the follow-up the model samples in class: its seed on the projector, its reveal computed
    for _ in range(3):
        _click(teacher, "lesson_next")
    _wait_text(teacher, "drawn in class")
    main = teacher.get_by_test_id("stMain").inner_text()
    assert re.search(r"seed \d+, drawn in class", main), main[:400]
    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "The pipeline's answer", timeout=180_000)
    # 9: the class's accuracy per question
    for _ in range(4):
        _click(teacher, "lesson_next")
    _wait_text(teacher, "What the class learned")
    table = teacher.get_by_test_id("stTable").inner_text()
    assert "67% of 3" in table  # first vote
    assert "100% of 3" in table  # after discussion
    for pg in phones:
        _wait_text(pg, "The class's results are on the screen")
    teacher.screenshot(path=str(shots / "loop_summary.png"), full_page=True)
    assert sp.exceptions(teacher) == []
    for pg in phones:
        assert sp.exceptions(pg) == []
    for ctx in contexts:
        ctx.close()
    teacher_ctx.close()
