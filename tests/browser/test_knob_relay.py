"""The sidebar's knobs on Advantages: redrawn in the browser, the page rerun once per burst.

A press on the sidebar's gamma slider reruns only the sidebar's algorithm fragment; its relay
dispatches the new configs and the estimator heatmaps recompute with pipeline.js. Checked here:
the numbers drawn equal ``roll_viz.core.pipeline.run`` on the same batch with the config the
sidebar's gamma means (built in this test from the URL, not read from the relay); no full-page
run finishes during the burst (the websocket's script_finished records, ``benchmarks.browser``);
the server-only sections are marked while the burst lasts and the marks go once the one
full-page run after the pause has finished; axe-core finds no serious violation in the marked
state. Waits are on app signals (relay log, run records, data attributes), never fixed sleeps.
"""

from __future__ import annotations

import os

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.core.records import Batch
from roll_viz.ui.settings import generic_defaults, native_config
from tests.browser import streamlit_page as sp
from tests.browser.conftest import CHROMIUM
from tests.browser.test_accessibility import BLOCKING, axe, report

HEATMAPS = "[data-testid=rv-est-heatmaps]"
READY = f"{HEATMAPS}[data-state=ready]"
TOL = 1e-9
#: script_finished statuses (ForwardMsg.ScriptFinishedStatus)
FULL_RUN, EARLY, FRAGMENT_RUN = 0, 2, 3


@pytest.fixture(autouse=True)
def _chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"REQUIRE_E2E=1 but {CHROMIUM} is missing")


def _browser_state(page) -> dict:
    """The heatmaps' batch, the configs they drew with and their advantages, from the page."""
    return page.locator(HEATMAPS).evaluate(
        """(el) => {
          const s = el.parentNode.__rvEst;
          const m = (x) => x.map((r) => Array.from(r));
          const adv = {};
          for (const [e, r] of Object.entries(s.results)) {
            if (r.advantages) adv[e] = m(r.advantages);
          }
          const b = s.batch;
          return {detail: s.detail, advantages: adv, source: el.dataset.source,
                  updates: Number(el.dataset.updates), seq: el.dataset.seq,
                  batch: {scores: Array.from(b.scores), response_mask: m(b.response_mask),
                          group_ids: Array.from(b.group_ids), group_labels: b.group_labels,
                          logprobs: b.logprobs && m(b.logprobs),
                          ref_logprobs: b.ref_logprobs && m(b.ref_logprobs),
                          values: b.values && m(b.values),
                          baseline_scores: b.baseline_scores && Array.from(b.baseline_scores)}};
        }"""
    )


def _python_advantages(batch: dict, framework: str, gamma: float, estimator: str):
    """pipeline.run on the page's batch with the config the sidebar's gamma means."""
    t = lambda x: None if x is None else torch.tensor(x, dtype=torch.float64)  # noqa: E731
    b = Batch(
        scores=t(batch["scores"]),
        response_mask=t(batch["response_mask"]),
        group_ids=torch.tensor(batch["group_ids"]),
        group_labels=tuple(batch["group_labels"]),
        logprobs=t(batch["logprobs"]),
        ref_logprobs=t(batch["ref_logprobs"]),
        values=t(batch["values"]),
        baseline_scores=t(batch["baseline_scores"]),
    )
    generic = {k: v for k, v in generic_defaults(framework).items() if v is not None}
    generic["gamma"] = gamma
    config = native_config(framework, generic, {pipeline.ESTIMATOR_KEY[framework]: estimator})
    return pipeline.run(b, framework, config).advantages.tolist()


def _assert_same(js: list[list[float]], py: list[list[float]], mask: list[list[float]]) -> None:
    assert len(js) == len(py)
    for b, (rj, rp, rm) in enumerate(zip(js, py, mask, strict=True)):
        for t, (a, e, m) in enumerate(zip(rj, rp, rm, strict=True)):
            if m > 0:
                assert abs(a - e) <= TOL * (1 + abs(e)), f"[{b}][{t}]: browser {a}, python {e}"


def _full_runs_since(page, mark: int, wait: bool = True) -> list[float]:
    """Times of the full-page runs that finished after run record ``mark``.

    ``wait``: first wait until one has (the relay notes "full" when the run mounts the sidebar,
    before the page below it has finished).
    """
    if wait:
        page.wait_for_function(
            f"(n) => window.__rvRuns.slice(n).some((x) => x.e === 'finish' && x.status === "
            f"{FULL_RUN})",
            arg=mark,
        )
    return page.evaluate(
        f"(n) => window.__rvRuns.slice(n).filter((x) => x.e === 'finish' && x.status === "
        f"{FULL_RUN}).map((x) => x.t)",
        mark,
    )


def _relay_log(page) -> list[dict]:
    return page.evaluate("() => window.__rvRelayLog || []")


def test_gamma_burst_redraws_in_the_browser_and_reruns_once(page, server, shots):
    sp.goto(page, f"{server}/Advantages?gamma=0.99")
    page.wait_for_selector(READY, timeout=60_000)
    before = _browser_state(page)
    assert before["source"] == "server"
    assert before["detail"]["covered"]
    first = before["detail"]["order"][0]
    mask = before["batch"]["response_mask"]
    _assert_same(
        before["advantages"][first],
        _python_advantages(before["batch"], before["detail"]["framework"], 0.99, first),
        mask,
    )

    mark = sp.runs(page)
    log0 = len(_relay_log(page))
    thumb = page.locator(".st-key-gamma input[type='range']").first
    presses = 3
    for i in range(presses):
        thumb.focus()
        page.keyboard.press("ArrowLeft")  # 0.99 -> 0.98 -> 0.97 -> 0.96, each a release
        # the relay dispatched this move and the heatmaps redrew from it
        page.wait_for_function(
            "([n, k]) => (window.__rvRelayLog || []).slice(n)"
            ".filter((x) => x.e === 'dispatch').length >= k",
            arg=[log0, i + 1],
        )
    page.locator(f"{HEATMAPS}[data-source=relay]").wait_for()
    moved = _browser_state(page)
    gamma = moved["detail"]["configs"][first]["gamma"]
    assert gamma == pytest.approx(0.96)
    assert moved["detail"]["order"][0] == first
    _assert_same(
        moved["advantages"][first],
        _python_advantages(moved["batch"], moved["detail"]["framework"], 0.96, first),
        mask,
    )
    assert moved["advantages"][first] != before["advantages"][first]
    # the server-only sections are marked while the burst lasts
    assert page.evaluate("() => document.documentElement.dataset.rvStale") == "sections"
    assert page.locator(".st-key-rv_stale_token_detail").is_visible()
    sp.full_page_screenshot(page, str(shots / "knob_relay_burst.png"))
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)

    # the pause: one settle, then one full-page run; none finished before the settle
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    log = _relay_log(page)[log0:]
    settles = [x["t"] for x in log if x["e"] == "settle"]
    dispatches = [x for x in log if x["e"] == "dispatch"]
    assert len(dispatches) == presses
    assert settles, log
    full = _full_runs_since(page, mark)
    assert full, "no full-page run after the pause"
    assert min(full) > settles[0], "the page reran during the burst"
    fragment_runs = page.evaluate(
        f"(n) => window.__rvRuns.slice(n).filter((x) => x.e === 'finish' && x.status === "
        f"{FRAGMENT_RUN}).length",
        mark,
    )
    assert fragment_runs >= presses
    sp.wait_idle(page)
    assert page.evaluate("() => document.documentElement.dataset.rvStale") is None
    assert sp.query(page.url).get("gamma") == "0.96"
    after = _browser_state(page)
    assert after["source"] == "server"
    _assert_same(after["advantages"][first], moved["advantages"][first], mask)
    assert not sp.exceptions(page)
    sp.full_page_screenshot(page, str(shots / "knob_relay_settled.png"))
