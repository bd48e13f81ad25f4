"""The sidebar's beta on Token KL: token rewards redrawn in the browser, the page rerun once.

A burst of presses on the sidebar's beta slider reruns only the sidebar's algorithm fragment;
its relay dispatches the placement configs and the two token-reward heatmaps ("in the reward",
"as a loss term") recompute with pipeline.js. Checked as on Advantages (test_knob_relay): the
numbers drawn equal ``roll_viz.core.pipeline.run`` on the same batch with the configs the
sidebar's beta means (built here from the URL's values); no full-page run finishes during the
burst; the server-only sections are marked meanwhile and unmarked after the one full run;
axe-core finds no serious violation in the marked state.
"""

from __future__ import annotations

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.core.records import Batch
from roll_viz.ui.settings import generic_defaults, kl_placement_overrides, native_config
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
PLACEMENTS = {"in the reward": True, "as a loss term": False}


def _python_rewards(batch: dict, framework: str, beta: float) -> dict[str, list]:
    """pipeline.run on the page's batch: each placement's token rewards at the sidebar's beta."""
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
    generic["beta"] = beta
    out = {}
    for name, in_reward in PLACEMENTS.items():
        config = native_config(
            framework, generic, kl_placement_overrides(framework, in_reward, beta)
        )
        out[name] = pipeline.run(b, framework, config).token_rewards.tolist()
    return out


def test_beta_burst_redraws_the_token_rewards_and_reruns_once(page, server, shots):
    sp.goto(page, f"{server}/Token_KL?preset=pirate&beta=0.05")
    page.wait_for_selector(READY, timeout=60_000)
    before = _browser_state(page)
    assert before["source"] == "server"
    assert before["detail"]["placements_covered"]
    assert set(before["advantages"]) == set(PLACEMENTS)  # the token rewards of each placement
    framework = before["detail"]["framework"]
    mask = before["batch"]["response_mask"]
    want = _python_rewards(before["batch"], framework, 0.05)
    for name in PLACEMENTS:
        _assert_same(before["advantages"][name], want[name], mask)

    mark = sp.runs(page)
    log0 = len(_relay_log(page))
    thumb = page.locator(".st-key-beta input[type='range']").first
    presses = 3
    for i in range(presses):
        thumb.focus()
        page.keyboard.press("ArrowRight")  # 0.050 -> 0.051 -> 0.052 -> 0.053, each a release
        page.wait_for_function(
            "([n, k]) => (window.__rvRelayLog || []).slice(n)"
            ".filter((x) => x.e === 'dispatch').length >= k",
            arg=[log0, i + 1],
        )
    page.locator(f"{HEATMAPS}[data-source=relay]").wait_for()
    moved = _browser_state(page)
    beta = 0.053
    want = _python_rewards(moved["batch"], framework, beta)
    for name in PLACEMENTS:
        _assert_same(moved["advantages"][name], want[name], mask)
    # beta moves the reward placement's numbers, not the loss placement's
    assert moved["advantages"]["in the reward"] != before["advantages"]["in the reward"]
    _assert_same(
        moved["advantages"]["as a loss term"], before["advantages"]["as a loss term"], mask
    )
    # the server-only sections are marked while the burst lasts
    assert page.evaluate("() => document.documentElement.dataset.rvStale") == "sections"
    for name in ("kl_placement_notes", "kl_centred", "kl_every_token"):
        assert page.locator(f".st-key-rv_stale_{name}").first.is_visible(), name
    sp.full_page_screenshot(page, str(shots / "knob_relay_kl_burst.png"))
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
    assert float(sp.query(page.url).get("beta")) == pytest.approx(beta)
    after = _browser_state(page)
    assert after["source"] == "server"
    for name in PLACEMENTS:
        _assert_same(after["advantages"][name], moved["advantages"][name], mask)
    assert not sp.exceptions(page)
    sp.full_page_screenshot(page, str(shots / "knob_relay_kl_settled.png"))
