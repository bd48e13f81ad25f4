"""AppTest of the Normalisation page: matrix, phantom advantages, group health, policies."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / nav.page("normalisation").file
TIMEOUT = 240


def _open() -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_page_draws_the_matrix_the_phantoms_and_the_policies():
    at = _open()
    banners = [h.proto.body for h in at.get("html") if "rv-health" in h.proto.body]
    assert len(banners) == 2  # the current batch's and the demo batch's
    assert all(re.search(r"\d+ groups?:", b) and "all-good" in b for b in banners)
    captions = [c.value for c in at.caption]  # the popover's sentence
    assert any("groups**" in c or "group**" in c for c in captions)
    charts = at.get("plotly_chart")
    assert len(charts) == 3
    texts = [m.value for m in at.markdown]
    assert any("All-fail group: std **0.0365**" in t for t in texts)


def test_length_penalty_slider_removes_the_phantoms():
    at = _open()
    at.slider(key="norm_length_coef").set_value(0.0).run()
    assert not at.exception
    texts = [m.value for m in at.markdown]
    assert any("largest |A| under group std **0**" in t for t in texts)
