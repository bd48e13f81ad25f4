"""Chromium: the Teacher-as-reference page and the 'Recipes of record' switch of a batch page.

At the projector's size (1280 x 720, ``present=true&hide=sidebar``) the Teacher page paints the
preset's recorded teacher at once: its token chips start in the first screen and nothing runs off
the right edge. On Advantages the group-health row sits above the batch and its switch opens the
page's numbers under each recipe of record. The screenshots stay with the test's temporary
files, except the README's ``13_teacher.png``: the whole page on the preset's recorded teacher
(no model run).
"""

from __future__ import annotations

import pytest

from roll_viz import nav
from tests.browser import streamlit_page as sp
from tests.browser.test_projector import TABLES_JS

WIDTH, HEIGHT = 1280, 720


@pytest.fixture
def projector(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    yield pg
    context.close()


def test_teacher_page_paints_the_recorded_teacher(projector, server, tmp_path):
    url = f"{server}/{nav.url_path('teacher')}?preset=arithmetic&present=true&hide=sidebar"
    sp.goto(projector, url, 240_000)
    assert sp.exceptions(projector) == []
    chips = projector.locator(".rv-chips")
    assert chips.count() == 8
    top = chips.first.bounding_box()["y"]
    projector.screenshot(path=str(tmp_path / "teacher.png"))
    sp.full_page_screenshot(projector, str(tmp_path / "teacher_full.png"))
    assert top < HEIGHT - 120, f"the teacher's chips start at y = {top:.0f}"
    assert projector.locator(".rv-health").count() == 1
    width = projector.evaluate("() => document.documentElement.scrollWidth")
    assert width <= WIDTH
    assert projector.get_by_text("recorded with the preset").count() == 1


def test_teacher_page_readme_screenshot(page, server, shots):
    sp.goto(page, f"{server}/{nav.url_path('teacher')}?preset=arithmetic", 240_000)
    assert sp.exceptions(page) == []
    assert page.get_by_text("recorded with the preset").count() == 1
    page.locator(".js-plotly-plot").first.wait_for()
    sp.full_page_screenshot(page, str(shots / "13_teacher.png"))


def test_era_switch_opens_the_page_numbers(projector, server, tmp_path):
    url = f"{server}/{nav.url_path('advantages')}?preset=arithmetic&present=true&hide=sidebar"
    sp.goto(projector, url, 240_000)
    assert projector.locator(".rv-health").count() == 1
    switch = projector.locator(".st-key-adv_health_era")
    sp.after_rerun(projector, lambda: switch.get_by_text("Recipes of record").click())
    assert sp.exceptions(projector) == []
    box = projector.locator(".st-key-adv_health_eras_box")
    box.wait_for()
    assert box.get_by_text("This page's number").count() == 1
    box.screenshot(path=str(tmp_path / "era_switch.png"))
    # five recipes beside the quantity: on the projector every column is on the screen
    assert projector.evaluate(TABLES_JS) == []
