"""'Fix this run' in a real browser: a teacher at 1280 x 720 and two phones choosing a fix.

The teacher opens ``/Lesson?lesson=fix_this_run`` and walks to the fix gate: the collapsing run
is on the projector while the phones vote; the reveal plays the two chosen changes' recorded
runs side by side, then the explanation. Screenshot: ``fix_reveal.png`` (the runs).
"""

from __future__ import annotations

import urllib.parse

from tests.browser import streamlit_page as sp
from tests.browser.test_lesson_browser import PHONE, POLL_MS, _click, _metric, _wait_text
from tests.browser.test_lesson_loop_browser import _phones_press


def test_two_phones_choose_and_the_reveal_plays_both_runs(server, browser, shots):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    teacher = ctx.new_page()
    teacher.set_default_timeout(120_000)
    sp.goto(teacher, f"{server}/Lesson?lesson=fix_this_run&present=true&hide=sidebar")
    _wait_text(teacher, "Fix this run: reward hacking")
    _click(teacher, "lesson_start")
    teacher.wait_for_url("**room=*", timeout=60_000)
    code = urllib.parse.parse_qs(urllib.parse.urlparse(teacher.url).query)["room"][0]
    _click(teacher, "lesson_next")
    _click(teacher, "lesson_next")
    _wait_text(teacher, "fix this run: pairs choose one change")
    teacher.locator(".st-key-lesson_fix_run").wait_for(state="visible", timeout=POLL_MS)
    phones = []
    for option in (0, 3):
        pg = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
        pg.set_default_timeout(120_000)
        sp.goto(pg, f"{server}/vote?room={code}")
        _phones_press([pg], f"vote_2_1_{option}")
        phones.append(pg)
    _metric(teacher, "2 / 2")
    _click(teacher, "lesson_revealed")
    _wait_text(teacher, "The class's top choices (first vote): A (1 vote) · D (1 vote)")
    grid = teacher.locator(".st-key-lesson_fix_outcomes")
    grid.wait_for(state="visible", timeout=POLL_MS)
    _wait_text(teacher, "still collapses")
    _wait_text(teacher, "Two changes fixed it")
    assert teacher.locator(".st-key-lesson_fix_run").count() == 0
    grid.scroll_into_view_if_needed()
    teacher.screenshot(path=str(shots / "fix_reveal.png"))
    for pg in phones:
        pg.context.close()
    ctx.close()
