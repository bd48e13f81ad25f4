"""The "Sampler != trainer" page in a real browser at 1280 x 720: the first figure in the first
screen, nothing off the right edge, the whole page as a screenshot."""

from __future__ import annotations

import pytest

from roll_viz import nav
from tests.browser import streamlit_page as sp
from tests.browser.test_projector import MEASURE_JS

WIDTH, HEIGHT = 1280, 720
FIRST_FIGURE_BELOW = 600  # px from the top of the window
PLOTS = ".js-plotly-plot"


@pytest.fixture
def window(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    yield pg
    context.close()


@pytest.mark.browser
def test_mismatch_page_first_figure_and_screenshot(window, server, shots, tmp_path):
    sp.goto(window, f"{server}/{nav.url_path('mismatch')}?preset=pirate&mm_src=int8", 240_000)
    assert sp.exceptions(window) == []
    assert window.get_by_text("This page could not be drawn").count() == 0
    window.locator(PLOTS).first.wait_for()
    assert window.locator(PLOTS).count() == 11  # sections 1-3: 6; 4 (sequence masks): 4; 5: 1
    m = window.evaluate(MEASURE_JS, PLOTS)
    assert m["first"] is not None
    assert m["first"] < FIRST_FIGURE_BELOW, f"first figure starts at y = {m['first']:.0f}"
    assert m["docWidth"] <= m["inner"], m["wide"]
    window.screenshot(path=str(tmp_path / "mismatch_first_screen.png"))
    sp.full_page_screenshot(window, str(shots / "12_mismatch.png"))
