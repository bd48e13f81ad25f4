"""The instant knobs on the real Advantages page: drag in the browser, release drives the sidebar.

Prints the input -> redrawn time on the classroom batch (8 prompts x 8 x 128 tokens, tiny live
model), moving to a new value every time, next to the server path's figure printed by
test_app_e2e.py. Printed, not asserted.
"""

from __future__ import annotations

import statistics
import urllib.parse

from benchmarks.browser import bench_inputs
from benchmarks.classroom import CLASSROOM
from tests.browser import streamlit_page as sp

READY = "[data-testid=rv-instant][data-state=ready]"


def test_release_moves_the_sidebar_and_the_url(server, page):
    sp.goto(page, f"{server}/Advantages?preset=quantum")
    page.wait_for_selector(READY, timeout=60_000)
    thumb = page.locator("[data-testid=rv-gamma]")
    thumb.focus()
    sp.after_rerun(page, lambda: page.keyboard.press("ArrowLeft"))
    assert sp.exceptions(page) == []
    assert sp.query(page.url)["gamma"] == "0.99"
    assert sp.slider_value(page, "gamma").startswith("0.99")


def test_instant_redraw_benchmark_on_the_classroom_batch(server, page, capsys):
    query = urllib.parse.urlencode(CLASSROOM)
    sp.goto(page, f"{server}/Advantages?{query}", timeout=240_000)
    page.wait_for_selector(READY, timeout=120_000)
    values = [round(1 - 0.01 * i, 2) for i in range(1, 31)]  # a new value every time
    timing = bench_inputs(page, "rv-gamma", values)
    assert sp.exceptions(page) == []
    line = (
        "BENCHMARK instant-knob input->redrawn page=Advantages batch=8x8x128 client-path "
        f"n={len(values)} recompute+redraw median={statistics.median(timing['sync']):.1f}ms "
        f"max={max(timing['sync']):.1f}ms "
        f"painted median={statistics.median(timing['painted']):.1f}ms "
        "bytes-sent-per-move=0 (server path: see slider-release->redrawn)"
    )
    with capsys.disabled():
        print("\n" + line)
