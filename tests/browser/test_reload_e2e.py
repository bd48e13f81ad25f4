"""In Chromium: a reload finds the student's training run (cookie key), another browser does not;
the instant demos (adaptive beta, GRPO vs REINFORCE++) paint from their recordings.

A reload is a new websocket session; the runs are parked under the student key the page stored
in a first-party cookie (``ui.reconnect``), so the reloaded page shows the same run. A second
browser context (another student) has its own cookie and sees no run.
"""

from __future__ import annotations

import re

import pytest

from roll_viz.ui.reconnect import STUDENT_COOKIE, valid_student_key
from tests.browser.streamlit_page import after_rerun, goto, wait_idle

pytestmark = pytest.mark.browser

STEP_RE = re.compile(r"step (\d+) / 50")


def _step(page) -> int | None:
    found = STEP_RE.search(page.locator("[data-testid='stMain']").inner_text())
    return int(found.group(1)) if found else None


def _cookie(page) -> str | None:
    return next((c["value"] for c in page.context.cookies() if c["name"] == STUDENT_COOKIE), None)


def test_a_reload_keeps_the_run_and_another_browser_sees_none(server, browser, page, shots):
    url = f"{server}/Training?tab=Train+live&tr_steps=50"
    goto(page, url)
    key = _cookie(page)
    assert valid_student_key(key)
    assert key not in page.url
    after_rerun(page, lambda: page.get_by_role("button", name="Start training in slot A").click())
    page.wait_for_function(
        "() => /step [1-9][0-9]* \\/ 50/.test(document.body.innerText)", timeout=120_000
    )
    before = _step(page)
    assert before
    page.reload()
    wait_idle(page)
    page.wait_for_function("() => /step \\d+ \\/ 50/.test(document.body.innerText)")
    assert _cookie(page) == key
    after = _step(page)
    assert after is not None
    assert after >= before
    assert "No run yet" not in page.locator("[data-testid='stMain']").inner_text()
    page.screenshot(path=str(shots / "reload_training.png"))
    other = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        goto(other, url)
        assert _cookie(other) not in (None, key)
        main = other.locator("[data-testid='stMain']").inner_text()
        assert "No run yet" in main
        assert not STEP_RE.search(main)
    finally:
        other.context.close()


@pytest.mark.parametrize(
    ("tab", "name"),
    [("Adaptive+beta", "adaptive_beta"), ("GRPO+vs+REINFORCE%2B%2B", "grpo_vs_rpp")],
)
def test_the_demo_tabs_paint_their_recordings(server, page, shots, tab, name):
    page.set_viewport_size({"width": 1280, "height": 720})
    goto(page, f"{server}/Training?tab={tab}")
    chart = page.locator("[data-testid='stPlotlyChart']").first
    chart.wait_for()
    assert chart.bounding_box()["width"] > 600
    chart.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"demo_{name}.png"))
