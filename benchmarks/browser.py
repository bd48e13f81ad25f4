"""Browser pieces shared by the classroom benchmark and the e2e fixtures (playwright, lazily).

Chromium's flags, the wait-for-the-app helpers, the input -> redraw timer of the instant
components (``bench_inputs``) and a websocket / HTTP traffic counter (``Traffic``). Nothing here
imports playwright: the functions take its page objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

CHROMIUM = "/usr/bin/chromium"
#: Chromium flags of every browser run of the project (the e2e fixtures import them).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = 300_000

APP = "[data-testid='stApp']"
CONNECTED = f"{APP}[data-test-connection-state='CONNECTED']"
IDLE = f"{APP}[data-test-script-state='notRunning']"
#: Records the app's run-state changes and key releases with timestamps (as the e2e helpers do).
OBSERVE_JS = """
() => {
  const app = document.querySelector("[data-testid='stApp']");
  if (!app) return false;
  window.__rv = window.__rv || {changes: [], keys: []};
  if (!window.__rvKeys) {
    window.__rvKeys = true;
    document.addEventListener('keyup', () => window.__rv.keys.push(performance.now()), true);
  }
  if (app.__rvObserved) return true;
  app.__rvObserved = true;
  new MutationObserver(() => {
    const s = app.getAttribute('data-test-script-state');
    window.__rv.changes.push({t: performance.now(), s: s});
    if (s === 'notRunning') {
      requestAnimationFrame(() => requestAnimationFrame(
        () => window.__rv.changes.push({t: performance.now(), s: 'painted'})));
    }
  }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  return true;
}
"""
#: Programmatic input events on a range input: ms to recompute + redraw, and to the next frame.
BENCH_INPUTS_JS = """async (el, values) => {
  const frame = () => new Promise((r) => requestAnimationFrame(() =>
      requestAnimationFrame(r)));
  const sync = [], painted = [];
  for (const v of values) {
    const t0 = performance.now();
    el.value = String(v);
    el.dispatchEvent(new Event('input', {bubbles: true}));
    sync.push(performance.now() - t0);
    await frame();
    painted.push(performance.now() - t0);
  }
  return {sync, painted};
}"""
#: True once a rerun started after change ``n`` has finished and the next frame is painted.
MOVE_DONE_JS = """(n) => {
  const k = window.__rv.keys[window.__rv.keys.length - 1];
  const c = window.__rv.changes.slice(n);
  const app = document.querySelector("[data-testid='stApp']");
  return k !== undefined && c.some(x => x.s === 'running')
      && app.getAttribute('data-test-script-state') === 'notRunning'
      && c.some(x => x.t >= k && x.s === 'painted');
}"""
MOVE_LATENCY_JS = """() => {
  const k = window.__rv.keys[window.__rv.keys.length - 1];
  const after = window.__rv.changes.filter(x => x.t >= k);
  const done = after.find(x => x.s === 'notRunning');
  const painted = after.find(x => x.s === 'painted');
  return {script: done ? done.t - k : NaN, painted: painted ? painted.t - k : NaN};
}"""


def bench_inputs(page: Any, testid: str, values: list[float]) -> dict[str, list[float]]:
    """Move the range input ``[data-testid=testid]`` through ``values`` by ``input`` events.

    Args:
        page: a playwright page showing the input (shadow roots are pierced).
        testid: the input's ``data-testid``.
        values: the values to set, one input event each.

    Returns:
        ``{"sync": [...], "painted": [...]}``: per value, ms from setting it to the end of the
        synchronous recompute + redraw, and to the frame after.
    """
    return page.locator(f"[data-testid={testid}]").evaluate(BENCH_INPUTS_JS, values)


def wait_idle(page: Any, timeout: float = PAGE_TIMEOUT_MS) -> None:
    """Wait until the app is connected, not running and without loading skeletons."""
    page.wait_for_selector(CONNECTED, timeout=timeout)
    page.wait_for_selector(IDLE, timeout=timeout)
    page.wait_for_function(
        "() => document.querySelectorAll(\"[data-testid='stSkeleton']\").length === 0",
        timeout=timeout,
    )
    page.evaluate(OBSERVE_JS)


def goto(page: Any, url: str, timeout: float = PAGE_TIMEOUT_MS) -> None:
    """Navigate and wait for the first full run to finish."""
    page.goto(url)
    page.wait_for_selector(APP, timeout=timeout)
    page.wait_for_function(
        "() => document.querySelectorAll(\"[data-testid='stMainBlockContainer'] "
        "[data-testid='stElementContainer']\").length > 0",
        timeout=timeout,
    )
    wait_idle(page, timeout)


@dataclasses.dataclass
class Traffic:
    """Running totals of one page's network traffic (websocket payloads, HTTP responses)."""

    ws_sent: int = 0
    ws_received: int = 0
    ws_frames: int = 0
    responses: list[Any] = dataclasses.field(default_factory=list)

    def attach(self, page: Any) -> None:
        """Count every websocket frame and HTTP response of ``page`` from now on."""

        def on_ws(ws: Any) -> None:
            ws.on("framesent", lambda payload: self._frame(payload, sent=True))
            ws.on("framereceived", lambda payload: self._frame(payload, sent=False))

        page.on("websocket", on_ws)
        page.on("response", lambda resp: self.responses.append(resp))

    def _frame(self, payload: str | bytes, sent: bool) -> None:
        size = len(payload.encode() if isinstance(payload, str) else payload)
        self.ws_frames += 1
        if sent:
            self.ws_sent += size
        else:
            self.ws_received += size

    def mark(self, page: Any) -> tuple[int, int, int, int]:
        """A snapshot (after one round trip to the browser, so pending events are in)."""
        page.evaluate("() => 1")
        return self.ws_sent, self.ws_received, self.ws_frames, len(self.responses)

    def since(self, page: Any, mark: tuple[int, int, int, int]) -> dict[str, int]:
        """Traffic since ``mark``: websocket bytes sent / received, frames, HTTP responses."""
        now = self.mark(page)
        http = 0
        for resp in self.responses[mark[3] : now[3]]:
            try:
                sizes = resp.request.sizes()
                http += sizes["responseBodySize"] + sizes["responseHeadersSize"]
            except Exception:  # a response that never completed: count its headers only
                http += sum(len(k) + len(v) for k, v in resp.headers.items())
        return {
            "ws_sent": now[0] - mark[0],
            "ws_received": now[1] - mark[1],
            "ws_frames": now[2] - mark[2],
            "http_responses": now[3] - mark[3],
            "http_bytes": http,
        }
