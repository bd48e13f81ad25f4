"""The sidebar's reward normalisation and clip on Rewards: bars redrawn in the browser.

A burst of sidebar moves (the normalisation switched to batch, then the reward clip stepped up
twice) reruns only the sidebar's algorithm fragment; its relay dispatches the sidebar's
resolved config and the page's bars (``ui/instant/rewards.js``) recompute the processed rewards
and the clip fraction with pipeline.js. Checked as on Advantages (test_knob_relay): the numbers
drawn (and the metrics' text) equal ``roll_viz.core.pipeline.run`` on the same batch with the
config the new sidebar values mean (built here, not read from the relay); no full-page run
finishes during the burst; the server-only sections are marked meanwhile and unmarked after
the one full run; axe-core finds no serious violation in the marked state.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.core.records import Batch
from roll_viz.ui.settings import generic_defaults, native_config, norm_overrides
from tests.browser import streamlit_page as sp
from tests.browser.test_accessibility import BLOCKING, axe, report
from tests.browser.test_knob_relay import (
    FULL_RUN,
    TOL,
    _chromium,  # noqa: F401  (autouse: chromium must be there)
    _full_runs_since,
    _relay_log,
)

BARS = "[data-testid=rv-reward-bars]"
READY = f"{BARS}[data-state=ready]"
STALE = ("rewards_setting", "rewards_formula", "rewards_per_sample")


def _bars_state(page) -> dict:
    """The bars' batch, the config they drew with and their numbers, from the page."""
    return page.locator(BARS).evaluate(
        """(el) => {
          const s = el.parentNode.__rvRw;
          const m = (x) => x.map((r) => Array.from(r));
          const b = s.batch;
          return {detail: s.detail, source: el.dataset.source, from: el.dataset.from,
                  raw: s.nums.raw, processed: s.nums.processed, clip_frac: s.nums.clipFrac,
                  clip_text: el.querySelector('[data-testid=rv-rw-clip]').textContent,
                  mean_text: el.querySelector('[data-testid=rv-rw-mean]').textContent,
                  label: el.querySelector('svg[role=img]').getAttribute('aria-label'),
                  bars: el.querySelectorAll('svg rect').length,
                  batch: {scores: Array.from(b.scores), response_mask: m(b.response_mask),
                          group_ids: Array.from(b.group_ids), group_labels: b.group_labels,
                          logprobs: b.logprobs && m(b.logprobs),
                          ref_logprobs: b.ref_logprobs && m(b.ref_logprobs),
                          values: b.values && m(b.values),
                          baseline_scores: b.baseline_scores && Array.from(b.baseline_scores)}};
        }"""
    )


def _python(batch: dict, norm: str, clip: float):
    """pipeline.run on the page's batch with ROLL's sidebar at ``norm`` and ``clip``."""
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
    generic = {k: v for k, v in generic_defaults("roll").items() if v is not None}
    generic["clip"] = clip
    config = native_config("roll", generic, norm_overrides("roll", norm))
    return pipeline.run(b, "roll", config)


def _assert_drawn(state: dict, trace) -> None:
    want = trace.rewards.tolist()
    assert len(state["processed"]) == len(want)
    for b, (a, e) in enumerate(zip(state["processed"], want, strict=True)):
        assert abs(a - e) <= TOL * (1 + abs(e)), f"[{b}]: browser {a}, python {e}"
    assert state["clip_frac"] == pytest.approx(trace.clip_frac, abs=1e-12)
    assert state["clip_text"].startswith("clip fraction")
    assert f"{100 * trace.clip_frac:.1f}%" in state["clip_text"]
    assert state["mean_text"] == f"mean processed reward{float(trace.rewards.mean()):.3f}"
    assert state["bars"] == 2 * len(want)  # a raw and a processed bar per sample


def test_norm_and_clip_burst_redraws_the_bars_and_reruns_once(page, server, shots):
    sp.goto(page, f"{server}/Rewards?preset=sentiment&clip=0.0")
    page.wait_for_selector(READY, timeout=60_000)
    before = _bars_state(page)
    assert before["source"] == "server"
    assert before["from"] == "browser"  # ROLL's sidebar: pipeline.js computes it
    assert before["detail"]["config_covered"]
    assert before["detail"]["framework"] == "roll"
    _assert_drawn(before, _python(before["batch"], "none", 0.0))
    assert before["processed"] == before["raw"]  # no normalisation, no clip
    assert f"{len(before['raw'])} samples" in before["label"]

    mark = sp.runs(page)
    log0 = len(_relay_log(page))
    moves = [
        lambda: page.locator(".st-key-norm button", has_text="batch").first.click(),
        lambda: page.locator(".st-key-clip [data-testid=stNumberInputStepUp]").click(),
        lambda: page.locator(".st-key-clip [data-testid=stNumberInputStepUp]").click(),
    ]
    for i, move in enumerate(moves):
        move()  # norm: batch; clip 0 -> 0.5 -> 1.0
        page.wait_for_function(
            "([n, k]) => (window.__rvRelayLog || []).slice(n)"
            ".filter((x) => x.e === 'dispatch').length >= k",
            arg=[log0, i + 1],
        )
    # the bars drew the last move (the component sits in a shadow root: a locator finds it)
    page.locator(f"{BARS}[data-seq='{_relay_log(page)[-1]['seq']}']").wait_for()
    moved = _bars_state(page)
    assert moved["source"] == "relay"
    assert moved["detail"]["config"]["norm_mean_type"] == "batch"
    assert moved["detail"]["config"]["reward_clip"] == pytest.approx(1.0)
    trace = _python(moved["batch"], "batch", 1.0)
    _assert_drawn(moved, trace)
    assert trace.clip_frac > 0  # batch z-scores beyond 1 are clipped: the fraction moved
    assert max(abs(v) for v in moved["processed"]) <= 1.0
    # the server-only sections are marked while the burst lasts
    assert page.evaluate("() => document.documentElement.dataset.rvStale") == "sections"
    for name in STALE:
        assert page.locator(f".st-key-rv_stale_{name}").first.is_visible(), name
    page.locator(BARS).scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "knob_relay_rewards_burst.png"))
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, report(blocking)

    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log0
    )
    page.wait_for_function(
        f"(n) => window.__rvRuns.slice(n).some((x) => x.e === 'finish' && x.status === {FULL_RUN})",
        arg=mark,
    )
    log = _relay_log(page)[log0:]
    settles = [x["t"] for x in log if x["e"] == "settle"]
    assert len([x for x in log if x["e"] == "dispatch"]) == len(moves)
    assert settles, log
    full = _full_runs_since(page, mark)
    assert full, "no full-page run after the pause"
    assert min(full) > settles[0], "the page reran during the burst"
    sp.wait_idle(page)
    assert page.evaluate("() => document.documentElement.dataset.rvStale") is None
    query = sp.query(page.url)
    assert query.get("norm") == "batch"
    assert float(query.get("clip")) == pytest.approx(1.0)
    after = _bars_state(page)
    assert after["source"] == "server"
    _assert_drawn(after, trace)
    assert not sp.exceptions(page)
    page.locator(BARS).scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "knob_relay_rewards_settled.png"))

    # a bar's hover tip and its <title> give its value to 4 decimals (the label is p<g>/s<k>)
    bar = page.locator(f"{BARS} svg rect[data-kind=processed]").nth(3)
    bar.hover()
    tip = f"p0/s3: processed reward = {after['processed'][3]:.4f}"
    page.locator(f"{BARS} [data-testid=rv-rw-tip]", has_text=tip).wait_for()
    assert bar.locator("title").text_content() == tip
    # the numbers drawn, as CSV, computed in the browser
    with page.expect_download() as download:
        page.locator(f"{BARS} button", has_text="CSV").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "sample,raw_reward,processed_reward"
    assert len(lines) == 1 + len(after["processed"])
    for line, raw, processed in zip(lines[1:], after["raw"], after["processed"], strict=True):
        _label, r, p = line.split(",")
        assert (float(r), float(p)) == (raw, processed)
