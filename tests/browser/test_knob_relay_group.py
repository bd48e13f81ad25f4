"""G over a preset on Advantages: the heatmaps pick the rows in the browser, the page reruns once.

The page holds the preset's whole batch (``flow.preset_payload``); a burst of presses on the
sidebar's G slider reruns only the G slider's fragment, whose relay dispatches the new G, and
the estimator heatmaps draw the first G samples of every prompt (pipeline.js ``subsetGroups``).
Checked: the rows and numbers drawn equal ``pipeline.run`` on ``payload.subset_groups`` of the
same whole batch with the sidebar's config; no full-page run finishes during the burst; the
server-only sections are marked meanwhile and unmarked after the one full run; the URL holds G;
axe-core finds no serious violation in the marked state.
"""

from __future__ import annotations

import torch

from roll_viz.core import pipeline
from roll_viz.core.records import Batch
from roll_viz.ui.instant.payload import subset_groups
from tests.browser import streamlit_page as sp
from tests.browser.test_accessibility import BLOCKING, axe, report
from tests.browser.test_knob_relay import (
    FULL_RUN,
    _assert_same,
    _browser_state,
    _chromium,  # noqa: F401  (autouse: chromium must be there)
    _full_runs_since,
    _relay_log,
)

HEATMAPS = "[data-testid=rv-est-heatmaps]"
READY = f"{HEATMAPS}[data-state=ready]"


def _whole_batch(page) -> Batch:
    """The preset's whole batch the heatmaps hold (every sample of every prompt)."""
    raw = page.locator(HEATMAPS).evaluate(
        """(el) => {
          const b = el.parentNode.__rvEst.full;
          const m = (x) => x && x.map((r) => Array.from(r));
          return {scores: Array.from(b.scores), response_mask: m(b.response_mask),
                  group_ids: Array.from(b.group_ids), group_labels: b.group_labels,
                  logprobs: m(b.logprobs), ref_logprobs: m(b.ref_logprobs), values: m(b.values),
                  baseline_scores: b.baseline_scores && Array.from(b.baseline_scores)};
        }"""
    )
    t = lambda x: None if x is None else torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return Batch(
        scores=t(raw["scores"]),
        response_mask=t(raw["response_mask"]),
        group_ids=torch.tensor(raw["group_ids"]),
        group_labels=tuple(raw["group_labels"]),
        logprobs=t(raw["logprobs"]),
        ref_logprobs=t(raw["ref_logprobs"]),
        values=t(raw["values"]),
        baseline_scores=t(raw["baseline_scores"]),
    )


def _python_at(whole: Batch, detail: dict, group_size: int) -> dict[str, list]:
    """Each browser-computed estimator's advantages on the first G samples of every prompt."""
    rows = subset_groups(whole, group_size)
    return {
        est: pipeline.run(rows, detail["framework"], cfg).advantages.tolist()
        for est, cfg in detail["configs"].items()
        if est not in detail["server"]
    }


def test_group_burst_picks_the_rows_in_the_browser_and_reruns_once(page, server, shots):
    sp.goto(page, f"{server}/Advantages?preset=sentiment&G=4")
    page.wait_for_selector(READY, timeout=60_000)
    whole = _whole_batch(page)
    assert len(whole.group_ids) == 8  # 2 prompts x the preset's 4
    before = _browser_state(page)
    assert before["source"] == "server"
    want = _python_at(whole, before["detail"], 4)
    for est, adv in want.items():
        _assert_same(before["advantages"][est], adv, before["batch"]["response_mask"])

    mark = sp.runs(page)
    log0 = len(_relay_log(page))
    thumb = page.locator(".st-key-G input[type='range']").first
    presses = 2
    for i in range(presses):
        thumb.focus()
        page.keyboard.press("ArrowLeft")  # G 4 -> 3 -> 2, each a release
        page.wait_for_function(
            "([n, k]) => (window.__rvRelayLog || []).slice(n)"
            ".filter((x) => x.e === 'dispatch').length >= k",
            arg=[log0, i + 1],
        )
    page.locator(f"{HEATMAPS}[data-source=relay][data-rows='4']").wait_for()
    moved = _browser_state(page)
    assert moved["detail"]["G"] == 2
    assert len(moved["batch"]["group_ids"]) == 4  # the first 2 samples of each prompt
    want = _python_at(whole, moved["detail"], 2)
    assert want
    for est, adv in want.items():
        _assert_same(moved["advantages"][est], adv, moved["batch"]["response_mask"])
    assert page.evaluate("() => document.documentElement.dataset.rvStale") == "sections"
    # the instant strip holds the same whole batch and takes the sidebar's G too
    assert "4 samples" in page.locator("[data-testid=rv-instant]").first.inner_text()
    assert page.locator(".st-key-rv_stale_token_detail").is_visible()
    sp.full_page_screenshot(page, str(shots / "knob_relay_group_burst.png"))
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)

    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    # the relay clears its marks mid-run; the run's record comes when it has finished
    page.wait_for_function(
        f"(n) => window.__rvRuns.slice(n).some((x) => x.e === 'finish' && x.status === {FULL_RUN})",
        arg=mark,
    )
    log = _relay_log(page)[log0:]
    settles = [x["t"] for x in log if x["e"] == "settle"]
    assert len([x for x in log if x["e"] == "dispatch"]) == presses
    assert settles, log
    full = _full_runs_since(page, mark)
    assert full, "no full-page run after the pause"
    assert min(full) > settles[0], "the page reran during the burst"
    sp.wait_idle(page)
    assert page.evaluate("() => document.documentElement.dataset.rvStale") is None
    assert sp.query(page.url).get("G") == "2"
    after = _browser_state(page)
    assert after["source"] == "server"
    assert len(after["batch"]["group_ids"]) == 4
    for est in want:
        _assert_same(
            after["advantages"][est], moved["advantages"][est], moved["batch"]["response_mask"]
        )
    assert not sp.exceptions(page)
    sp.full_page_screenshot(page, str(shots / "knob_relay_group_settled.png"))


def test_a_server_drawn_estimator_stays_marked_on_a_group_move(page, server, shots):
    # verl's optimal_token_baseline is the server's (pipeline.js does not compute it; on a
    # preset the server cannot either: it says why): on a G move it keeps the last full run's
    # panel, marked, while the others draw the new rows in the browser
    sp.goto(page, f"{server}/Advantages?preset=sentiment&G=4&fw=verl")
    page.wait_for_selector(READY, timeout=60_000)
    assert _browser_state(page)["detail"]["server"] == ["optimal_token_baseline"]
    log0 = len(_relay_log(page))
    thumb = page.locator(".st-key-G input[type='range']").first
    thumb.focus()
    page.keyboard.press("ArrowLeft")  # G 4 -> 3
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'dispatch')", arg=log0
    )
    page.locator(f"{HEATMAPS}[data-source=relay][data-rows='6']").wait_for()
    js = """(el) => Object.fromEntries(Array.from(el.querySelectorAll('[data-testid=rv-est]'),
             (b) => [b.dataset.estimator, [b.querySelectorAll('.rv-rows > div').length,
                                           b.classList.contains('rv-est-stale')]]))"""
    rows = page.locator(HEATMAPS).evaluate(js)
    assert rows["optimal_token_baseline"] == [0, True]  # the server's message, marked
    assert rows["grpo"] == [6, False]  # the first 3 samples of each prompt, in the browser
    sp.full_page_screenshot(page, str(shots / "knob_relay_group_server.png"))
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    sp.wait_idle(page)
    page.locator(f"{HEATMAPS}[data-source=server][data-rows='6']").wait_for()
    rows = page.locator(HEATMAPS).evaluate(js)
    assert rows["optimal_token_baseline"] == [0, False]
    assert sp.query(page.url).get("G") == "3"
    assert not sp.exceptions(page)


def test_the_probe_critics_estimators_stay_marked_on_a_group_move(page, server, shots):
    # the probe critic is fitted on the rows shown: GAE reads it, so after a G move it keeps
    # the server's numbers on the last full run's rows, marked; GRPO does not and follows G
    sp.goto(page, f"{server}/Advantages?preset=sentiment&G=2&critic=probe")
    page.wait_for_selector(READY, timeout=60_000)
    log0 = len(_relay_log(page))
    thumb = page.locator(".st-key-G input[type='range']").first
    thumb.focus()
    page.keyboard.press("ArrowRight")  # G 2 -> 3
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'dispatch')", arg=log0
    )
    page.locator(f"{HEATMAPS}[data-source=relay][data-rows='6']").wait_for()
    js = """(el) => Object.fromEntries(Array.from(el.querySelectorAll('[data-testid=rv-est]'),
             (b) => [b.dataset.estimator, [b.querySelectorAll('.rv-rows > div').length,
                                           b.classList.contains('rv-est-stale')]]))"""
    rows = page.locator(HEATMAPS).evaluate(js)
    assert rows["gae"] == [4, True]  # the server's probe numbers at G = 2, marked
    assert rows["grpo"] == [6, False]  # the first 3 samples of each prompt, in the browser
    assert page.locator(".st-key-rv_stale_instant_strip").first.is_visible()
    sp.full_page_screenshot(page, str(shots / "knob_relay_group_probe.png"))
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    sp.wait_idle(page)
    page.locator(f"{HEATMAPS}[data-source=server][data-rows='6']").wait_for()
    assert page.locator(HEATMAPS).evaluate(js)["gae"] == [6, False]
    assert sp.query(page.url).get("G") == "3"
    assert not sp.exceptions(page)
