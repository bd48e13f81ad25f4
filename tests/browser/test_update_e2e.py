"""The Update page in a real browser: one real LoRA step on the live tiny model, then its views."""

from __future__ import annotations

import urllib.parse

from tests.browser import streamlit_page as sp


def test_one_update_step_draws_every_view(server, page, shots):
    query = urllib.parse.urlencode({"live": "true", "G": "4", "T": "16", "policy": "steered"})
    sp.goto(page, f"{server}/Update?{query}", timeout=240_000)
    assert sp.exceptions(page) == []
    sp.after_rerun(page, lambda: page.locator(".st-key-upd_step button").click(), timeout=240_000)
    assert sp.exceptions(page) == []
    assert page.get_by_test_id("stPlotlyChart").count() >= 5
    sp.full_page_screenshot(page, str(shots / "09_update.png"))
