"""The Episodes page in a real browser at 1280 x 720: the recorded episodes paint with no model,
the mask and its mistakes, an ATIF upload, axe-core on the drawn views, screenshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from roll_viz import nav
from tests.browser import streamlit_page as sp
from tests.browser.test_accessibility import BLOCKING, axe, report
from tests.browser.test_projector import MEASURE_JS

WIDTH, HEIGHT = 1280, 720
PLOTS = ".js-plotly-plot"
CHIPS = ".rv-transcript span[tabindex='0']"
ATIF = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "atif"


@pytest.fixture
def window(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    context.close()


def _url(server: str, query: str = "") -> str:
    return f"{server}/{nav.url_path('episodes')}{query}"


@pytest.mark.browser
def test_recorded_episodes_paint_with_their_mask(window, server, shots):
    sp.goto(window, _url(server), 240_000)
    assert sp.exceptions(window) == []
    assert window.get_by_text("This page could not be drawn").count() == 0
    window.locator(CHIPS).first.wait_for()
    assert window.locator(CHIPS).count() > 50
    assert window.locator(PLOTS).count() == 2  # credit per turn, the #7244 bias
    m = window.evaluate(MEASURE_JS, PLOTS)
    assert m["docWidth"] <= m["inner"], m["wide"]
    blocking = [v for v in axe(window) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)
    sp.full_page_screenshot(window, str(shots / "14_episodes.png"))


@pytest.mark.browser
def test_a_mistake_from_the_link_marks_the_tokens_it_trains(window, server, shots):
    sp.goto(window, _url(server, "?ep_mask=tool+output+trained"), 240_000)
    assert sp.exceptions(window) == []
    window.locator(CHIPS).first.wait_for()
    wrong = window.locator(f"{CHIPS}[title*='trained by the mistake']")
    assert wrong.count() > 0
    # colour is not the only cue: the chip's tooltip says it, the legend names it
    assert window.get_by_text("trained by the mistake", exact=True).count() >= 1
    window.locator(".rv-transcript").first.screenshot(path=str(shots / "14_episodes_mistake.png"))


@pytest.mark.browser
def test_an_atif_upload_opens_the_views_and_runs_nothing(window, server, tmp_path):
    sp.goto(window, _url(server, "?ep_src=file"), 240_000)
    hostile = tmp_path / "hostile.json"
    text = (ATIF / "calculator.json").read_text()
    hostile.write_text(text.replace("The answer is 17.", "<img src=x onerror=alert(1)>17"))
    sp.after_rerun(
        window, lambda: window.locator("input[type='file']").set_input_files(str(hostile))
    )
    window.locator(CHIPS).first.wait_for()
    sp.wait_idle(window)
    assert sp.exceptions(window) == []
    assert window.dialogs == []
    assert window.locator(".rv-transcript img").count() == 0  # the text is shown, never markup
    blocking = [v for v in axe(window) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)
    sp.full_page_screenshot(window, str(tmp_path / "episodes_atif.png"))
