"""The instant component's batch crosses the websocket once per mount, in a real browser.

On the Advantages page a sidebar move (a server-path rerun) used to resend the whole encoded
batch with the component; now the rerun carries only its id and the browser takes the batch from
its store (bulk.js: kept on the window, since a live page remounts the component on such a
move). Checked on the websocket frames themselves (the batch's base64 never comes
again) and on their size (the component's message is smaller than the batch alone); the instant
slider still recomputes afterwards. Navigating away and back (a fresh mount) finds the batch in
the tab's store: nothing is sent again. A tab that lost it while the session believes it was
sent shows "loading", asks for it with the ``missing_payload`` trigger and recovers. Bytes per
move are printed (BENCHMARK), not asserted against a budget.
"""

from __future__ import annotations

import json
import urllib.parse

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from benchmarks.browser import Traffic, bench_inputs
from benchmarks.classroom import CLASSROOM
from tests.browser import streamlit_page as sp

ROOT_SEL = "[data-testid=rv-instant]"
READY = f"{ROOT_SEL}[data-state=ready]"


class Frames:
    """Every websocket frame of a page, as bytes, in order (received and sent separately)."""

    def __init__(self, page) -> None:
        self.received: list[bytes] = []
        self.sent: list[bytes] = []

        def on_ws(ws) -> None:
            ws.on("framereceived", lambda p: self.received.append(_bytes(p)))
            ws.on("framesent", lambda p: self.sent.append(_bytes(p)))

        page.on("websocket", on_ws)

    def counts(self, page) -> tuple[int, int]:
        page.evaluate("() => 1")  # one round trip, so pending frame events are in
        return len(self.received), len(self.sent)


def _bytes(payload: str | bytes) -> bytes:
    return payload.encode() if isinstance(payload, str) else bytes(payload)


def _batch(page) -> dict:
    """Size of the mounted component's encoded batch (its JSON) and a piece of its base64."""
    return page.locator(ROOT_SEL).evaluate(
        """(el) => {
          const batch = el.parentNode.__rvInstant.payload.batch;
          const b64 = Object.values(batch).filter((a) => a && a.b64).map((a) => a.b64)
            .reduce((x, y) => (y.length > x.length ? y : x), "");
          const mid = Math.floor(b64.length / 2);
          return {bytes: JSON.stringify(batch).length, needle: b64.slice(mid, mid + 96),
                  stored: window.__rvBulks.size};
        }"""
    )


def _seen(frames: list[bytes], needle: str) -> bool:
    return any(needle.encode() in f for f in frames)


def _component_bytes(frames: list[bytes]) -> list[int]:
    """Sizes of the messages among ``frames`` that (re)draw an instant component."""
    sizes = []
    for frame in frames:
        msg = ForwardMsg()
        msg.ParseFromString(frame)
        element = msg.delta.new_element
        if (
            msg.WhichOneof("type") == "delta"
            and msg.delta.WhichOneof("type") == "new_element"
            and element.WhichOneof("type") == "bidi_component"
        ):
            sizes.append(len(frame))
    return sizes


def _table(page) -> list[str]:
    return page.locator("[data-testid=rv-table] tr").all_inner_texts()[1:]


def _updates(page) -> int:
    return int(page.locator(ROOT_SEL).get_attribute("data-updates"))


def _assert_recomputes(page) -> None:
    """The instant gamma slider recomputes in the browser: new numbers, one update, no rerun."""
    before, updates = _table(page), _updates(page)
    bench_inputs(page, "rv-gamma", [0.5])
    assert _updates(page) == updates + 1
    assert page.locator("[data-testid=rv-gamma-value]").inner_text() == "0.5"
    status = page.locator("[data-testid=rv-status]").inner_text()
    assert status.startswith("Computed in the browser"), status
    assert _table(page) != before  # GAE: gamma reaches every advantage


def test_sidebar_move_does_not_resend_the_batch(server, page, capsys):
    traffic, frames = Traffic(), Frames(page)
    traffic.attach(page)
    query = urllib.parse.urlencode({**CLASSROOM, "est": "gae"})
    sp.goto(page, f"{server}/Advantages?{query}", timeout=240_000)
    page.wait_for_selector(READY, timeout=120_000)
    batch = _batch(page)
    assert batch["bytes"] > 100_000  # 64 samples x 128 tokens of float64 arrays
    assert _seen(frames.received, batch["needle"])  # the first render brought it

    mark, (n_received, _) = traffic.mark(page), frames.counts(page)
    # the sidebar's fragment reruns; its relay hands gamma to the page's components
    sp.press_slider(page, "gamma", "ArrowLeft")
    moved = traffic.since(page, mark)
    component = _component_bytes(frames.received[n_received:])
    with capsys.disabled():
        print(
            "\nBENCHMARK "
            + json.dumps(
                {
                    "name": "advantages_sidebar_move_bytes",
                    "batch_json_bytes": batch["bytes"],
                    "ws_received": moved["ws_received"],
                    "ws_sent": moved["ws_sent"],
                    "instant_component_message_bytes": component,
                }
            )
        )
    assert sp.exceptions(page) == []
    assert not _seen(frames.received[n_received:], batch["needle"])
    # the component's message (its inline JS, config and params) is smaller than the batch
    # alone; the whole rerun is not: the page's own heatmaps are bigger than the batch
    assert len(component) == 1
    assert component[0] < batch["bytes"]

    # the component rebuilt with Python's new gamma from its stored batch, and still works
    page.wait_for_selector(READY)
    assert page.locator("[data-testid=rv-gamma-value]").inner_text() == "0.99"
    assert _batch(page)["needle"] == batch["needle"]
    _assert_recomputes(page)


NAV = "[data-testid=stSidebarNav] a[href$='/{}']"


def test_navigating_away_and_back_keeps_the_batch(server, page):
    frames = Frames(page)
    sp.goto(page, f"{server}/Advantages?preset=quantum&est=gae")
    page.wait_for_selector(READY, timeout=60_000)
    batch = _batch(page)

    sp.after_rerun(page, lambda: page.locator(NAV.format("Rewards")).click())
    assert page.locator(ROOT_SEL).count() == 0
    n_received, n_sent = frames.counts(page)
    # back: a fresh mount, whose bulk the tab's store still holds
    sp.after_rerun(page, lambda: page.locator(NAV.format("Advantages")).click())
    page.wait_for_selector(READY, timeout=60_000)
    sp.wait_idle(page)
    assert sp.exceptions(page) == []
    assert not _seen(frames.received[n_received:], batch["needle"])
    assert not _seen(frames.sent[n_sent:], "missing_payload")
    assert _batch(page) == batch
    _assert_recomputes(page)


def test_a_lost_batch_shows_loading_and_is_sent_again(server, page):
    frames = Frames(page)
    sp.goto(page, f"{server}/Advantages?preset=quantum&est=gae")
    page.wait_for_selector(READY, timeout=60_000)
    batch = _batch(page)
    # the tab loses it (as after an eviction or a dropped update), the session still
    # believes it was sent; record the states the component goes through
    page.locator(ROOT_SEL).evaluate(
        """(el) => {
          window.__rvBulks.clear();
          window.__rvStates = [];
          new MutationObserver(() => window.__rvStates.push(el.dataset.state))
            .observe(el, {attributes: true, attributeFilter: ["data-state"]});
        }"""
    )
    n_received, n_sent = frames.counts(page)
    # a new config: after the pause the page reruns and the component must rebuild
    sp.press_knob_and_settle(page, "gamma", "ArrowLeft")
    page.wait_for_selector(READY, timeout=60_000)
    sp.wait_idle(page)
    assert sp.exceptions(page) == []
    assert "loading" in page.evaluate("() => window.__rvStates")
    assert _seen(frames.sent[n_sent:], "missing_payload")  # the browser asked for it ...
    assert _seen(frames.received[n_received:], batch["needle"])  # ... and it came again
    after = _batch(page)
    assert after["needle"] == batch["needle"]
    assert after["stored"] == 2  # this component's bulk, and the estimator heatmaps' one
    assert page.locator("[data-testid=rv-gamma-value]").inner_text() == "0.99"
    _assert_recomputes(page)
