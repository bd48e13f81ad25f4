"""The Your run page in a real browser: open a ROLL logging-board dump, use a step everywhere."""

from __future__ import annotations

from tests.browser import streamlit_page as sp


def test_open_a_run_and_walk_the_pages(server, page, shots):
    sp.goto(page, f"{server}/Your_run")
    picker = page.locator(".st-key-run_pick")
    picker.click()
    option = page.get_by_role("option", name="rllb", exact=True)
    sp.after_rerun(page, option.click)
    assert sp.exceptions(page) == []
    assert page.get_by_test_id("stPlotlyChart").count() >= 2
    sp.full_page_screenshot(page, str(shots / "11_your_run.png"))
    sp.after_rerun(page, lambda: page.locator(".st-key-run_use button").click())
    assert "dump=dir" in page.url
    sp.goto(page, page.url.replace("/Your_run", "/Advantages"))
    assert sp.exceptions(page) == []
    assert "your run" in page.get_by_test_id("stSidebar").inner_text()
