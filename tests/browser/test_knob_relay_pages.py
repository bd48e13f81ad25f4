"""A sidebar knob on a page the browser cannot redraw, and on a page that reads no knob.

Sensitivity sweeps the knobs on the server: a burst of gamma presses reruns only the sidebar's
fragment, the whole main column is marked "computed for the previous knob values" and the page
reruns once, after the relay's short pause (``relay.WHOLE_PAUSE_MS``), with the new gamma.
Normalisation reads no algorithm knob (``ui.steady_page``): a press reruns the fragment and
nothing else, nothing is marked, and its figures stay the very same elements. Waits are on app
signals (relay log, run records); the one wait for something NOT to happen is bounded by the
relay's own pause, three times over.
"""

from __future__ import annotations

import os

import pytest

from roll_viz.ui.instant import relay
from tests.browser import streamlit_page as sp
from tests.browser.conftest import CHROMIUM
from tests.browser.test_accessibility import BLOCKING, axe, report
from tests.browser.test_knob_relay import FRAGMENT_RUN, _full_runs_since, _relay_log

MAIN = "[data-testid=stMainBlockContainer]"


@pytest.fixture(autouse=True)
def _chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"REQUIRE_E2E=1 but {CHROMIUM} is missing")


def _sweep(page) -> list:
    """Sensitivity's first figure: every line of the sweep (x and y)."""
    return [(t["x"], t["y"]) for t in sp.chart_data(page, 0)]


def _press(page, key: str, times: int, log0: int, event: str) -> None:
    """Press ``key``'s slider ``times`` times, each waiting for the relay's ``event`` note."""
    thumb = page.locator(f".st-key-{key} input[type='range']").first
    for i in range(times):
        thumb.focus()
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(
            "([n, e, k]) => (window.__rvRelayLog || []).slice(n)"
            ".filter((x) => x.e === e).length >= k",
            arg=[log0, event, i + 1],
        )


def test_a_burst_on_a_server_page_marks_it_whole_and_reruns_once(page, server, shots):
    sp.goto(page, f"{server}/Sensitivity?gamma=0.99")
    before = _sweep(page)
    mark, log0 = sp.runs(page), len(_relay_log(page))
    _press(page, "gamma", 3, log0, "whole")  # 0.99 -> 0.96, each a release
    assert page.evaluate("() => document.documentElement.dataset.rvStale") == "whole"
    label = page.locator(MAIN).first.evaluate("(el) => getComputedStyle(el, '::before').content")
    assert "this page updates when you pause" in label
    status = page.locator(".st-key-rv_knob_relay").get_by_test_id("rv-relay")
    assert status.inner_text() == "This page updates when you pause."
    sp.full_page_screenshot(page, str(shots / "knob_relay_whole_burst.png"))
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)

    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    log = _relay_log(page)[log0:]
    settles = [x["t"] for x in log if x["e"] == "settle"]
    assert not [x for x in log if x["e"] == "dispatch"]  # the browser redrew nothing
    full = _full_runs_since(page, mark)
    assert settles, log
    assert full, log
    assert min(full) > settles[0], "the page reran during the burst"
    fragments = page.evaluate(
        f"(n) => window.__rvRuns.slice(n).filter((x) => x.e === 'finish' && x.status === "
        f"{FRAGMENT_RUN}).length",
        mark,
    )
    assert fragments >= 3
    sp.wait_idle(page)
    assert page.evaluate("() => document.documentElement.dataset.rvStale") is None
    assert sp.query(page.url).get("gamma") == "0.96"
    assert _sweep(page) != before, "the page run after the pause did not take the new gamma"
    assert not sp.exceptions(page)
    sp.full_page_screenshot(page, str(shots / "knob_relay_whole_settled.png"))


def test_a_page_that_reads_no_knob_does_nothing_on_a_press(page, server):
    sp.goto(page, f"{server}/Normalisation?gamma=0.99")
    figure = page.get_by_test_id("stPlotlyChart").first
    figure.evaluate("(el) => { el.__rvKept = true; }")  # the same element after the press?
    mark, log0 = sp.runs(page), len(_relay_log(page))
    _press(page, "gamma", 2, log0, "steady")
    assert (
        page.locator(".st-key-rv_knob_relay")
        .get_by_test_id("rv-relay")
        .inner_text()
        .startswith("Nothing on this page")
    )
    page.wait_for_timeout(3 * relay.WHOLE_PAUSE_MS)  # longer than any pause the relay waits
    log = _relay_log(page)[log0:]
    assert not [x for x in log if x["e"] in ("dispatch", "whole", "settle", "full")], log
    assert _full_runs_since(page, mark, wait=False) == []
    assert page.evaluate("() => document.documentElement.dataset.rvStale") is None
    assert page.get_by_test_id("stPlotlyChart").first.evaluate("(el) => el.__rvKept === true")
    assert sp.query(page.url).get("gamma") == "0.97"
    assert not sp.exceptions(page)
