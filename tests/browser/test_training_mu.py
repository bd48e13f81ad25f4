"""The Training page's loss option and sampler selects in a real browser: a two-step int8 run
with OpenRLHF's is_correction from a link, the sampler's gap drawn under the curves, and the page
as a screenshot."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from roll_viz import nav
from tests.browser import streamlit_page as sp

PLOTS = ".js-plotly-plot"


@pytest.mark.browser
def test_training_page_sampler_and_loss_option(page, server, tmp_path):
    link = (
        f"{server}/{nav.url_path('training')}?tab={quote('Train live')}&fw=openrlhf&tr_steps=2"
        f"&tr_loss={quote('is_correction_level: token')}&tr_sampler=int8"
    )
    sp.goto(page, link, 240_000)
    assert sp.exceptions(page) == []
    assert page.get_by_text("Loss option", exact=True).count() == 1
    assert page.get_by_text("Sampler (behaviour policy mu)", exact=True).count() == 1
    assert page.get_by_text("corrects for the gap").count() == 1
    sp.after_rerun(
        page, lambda: page.get_by_role("button", name="Start training in slot A").click()
    )
    page.get_by_text("done, step 2 / 2").first.wait_for(timeout=180_000)
    sp.wait_idle(page)
    page.locator(PLOTS).first.wait_for()
    assert sp.exceptions(page) == []
    assert page.get_by_text("sampler gap: mean |log pi_old - log mu|").count() >= 1
    # a 2-step run on the tiny test model (its answers are not words): looked at, not a README
    # image, so it goes to the test's own folder even under ``make screenshots``
    sp.full_page_screenshot(page, str(tmp_path / "10_training_mu.png"))


@pytest.mark.browser
def test_training_era_tab_plays_the_recorded_pair(page, server, shots):
    sp.goto(page, f"{server}/{nav.url_path('training')}?tab={quote('2024 vs 2026')}", 240_000)
    assert sp.exceptions(page) == []
    page.locator(PLOTS).first.wait_for()
    assert page.get_by_text("2024 vs 2026: what to look at").count() == 1
    assert page.get_by_text("GRPO as published (2024) (recorded)").count() >= 1
    sp.full_page_screenshot(page, str(shots / "10_training_eras.png"))
