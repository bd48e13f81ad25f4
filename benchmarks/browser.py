"""Browser pieces shared by the classroom benchmark and the e2e fixtures (playwright, lazily).

Chromium's flags, the wait-for-the-app helpers, the input -> redraw timer of the instant
components (``bench_inputs``) and a websocket / HTTP traffic counter (``Traffic``). Nothing here
imports playwright: the functions take its page objects.
"""

from __future__ import annotations

import dataclasses
import weakref
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
#: Installed before the page's own scripts (``watch_runs``): records, with timestamps, what the
#: app's websocket says about script runs. Streamlit speaks protobuf there: BackMsg field 11
#: ``rerun_script`` (the browser asks for a run), ForwardMsg field 4 ``new_session`` (a run
#: starts) and field 6 ``script_finished`` (its status; 2 = stopped early for the next rerun).
#: The DOM's ``data-test-script-state`` is not a record of runs: under load React can paint a fast
#: run's "running" and "notRunning" as one frame, so a run that happened leaves no trace there
#: (measured: 1 of 80 key presses on a loaded 2-core machine, while the websocket showed the run).
RUNS_JS = """
(() => {
  if (window.__rvRuns) return;
  const runs = (window.__rvRuns = []);
  const varint = (b, i) => {
    let v = 0, m = 1;
    for (;;) { const x = b[i++]; v += (x & 127) * m; m *= 128; if (x < 128) return [v, i]; }
  };
  const fields = (b) => {  // the top-level fields of one protobuf message: number -> value
    const f = new Map();
    let i = 0;
    while (i < b.length) {
      let tag, v;
      [tag, i] = varint(b, i);
      const wire = tag & 7;
      if (wire === 0) [v, i] = varint(b, i);
      else if (wire === 2) { [v, i] = varint(b, i); i += v; }
      else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else return f;
      f.set(tag >>> 3, v);
    }
    return f;
  };
  const bytes = (d) => d instanceof ArrayBuffer ? new Uint8Array(d)
      : ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : null;
  const note = (data, sent) => {
    const b = bytes(data);
    if (!b) return;
    const f = fields(b), t = performance.now();
    if (sent) {
      if (f.has(11)) runs.push({t, e: 'request'});
      return;
    }
    if (f.has(4)) runs.push({t, e: 'start'});
    if (f.has(6)) {
      runs.push({t, e: 'finish', status: f.get(6)});
      requestAnimationFrame(() => requestAnimationFrame(
          () => runs.push({t: performance.now(), e: 'painted'})));
    }
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (ev) => note(ev.data, false));
    }
    send(data) {
      note(data, true);
      return super.send(data);
    }
  };
})();
"""
#: Records key releases with timestamps (the start of a slider move's latency).
OBSERVE_JS = """
() => {
  window.__rv = window.__rv || {keys: []};
  if (!window.__rvKeys) {
    window.__rvKeys = true;
    document.addEventListener('keyup', () => window.__rv.keys.push(performance.now()), true);
  }
  return true;
}
"""
#: True once the browser asked for a run after record ``n``, a run started after that request,
#: and a run after that start finished (not stopped early for yet another rerun).
RERUN_DONE_JS = """(n) => {
  const r = window.__rvRuns.slice(n);
  const q = r.findIndex((x) => x.e === 'request');
  const s = r.findIndex((x, i) => i > q && x.e === 'start');
  return q >= 0 && s >= 0 && r.some((x, i) => i > s && x.e === 'finish' && x.status !== 2);
}"""
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
#: True once a rerun was asked for after record ``n``, a run finished after the last key release,
#: and the frame after it is painted.
MOVE_DONE_JS = """(n) => {
  const k = window.__rv.keys[window.__rv.keys.length - 1];
  const r = window.__rvRuns.slice(n);
  const done = r.findIndex((x) => x.t >= k && x.e === 'finish' && x.status !== 2);
  return k !== undefined && r.some((x) => x.e === 'request') && done >= 0
      && r.some((x, i) => i > done && x.e === 'painted');
}"""
#: From the last key release: ms until the run finished and until the frame after it.
MOVE_LATENCY_JS = """() => {
  const k = window.__rv.keys[window.__rv.keys.length - 1];
  const after = window.__rvRuns.filter((x) => x.t >= k);
  const done = after.find((x) => x.e === 'finish' && x.status !== 2);
  const painted = done && after.find((x) => x.t >= done.t && x.e === 'painted');
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


_WATCHED: weakref.WeakSet[Any] = weakref.WeakSet()


def watch_runs(page: Any) -> None:
    """Record ``page``'s script runs from its websocket (``RUNS_JS``) in every document it loads."""
    if page not in _WATCHED:
        page.add_init_script(RUNS_JS)
        _WATCHED.add(page)


def run_mark(page: Any) -> int:
    """How many run records ``page`` holds now (pass it to ``wait_rerun``)."""
    if page not in _WATCHED:
        raise RuntimeError("the page's runs are not recorded: open it with goto() first")
    return page.evaluate("() => window.__rvRuns.length")


def wait_rerun(page: Any, mark: int, timeout: float = PAGE_TIMEOUT_MS) -> None:
    """Wait until a run the browser asked for after ``mark`` has finished, then until idle.

    On timeout the error says which step never came: the browser's request (the input went
    nowhere), the run's start (the server lost it) or its end.
    """
    try:
        page.wait_for_function(RERUN_DONE_JS, arg=mark, timeout=timeout)
    except Exception as err:  # playwright's TimeoutError, without importing playwright here
        seen = [x["e"] for x in page.evaluate("(n) => window.__rvRuns.slice(n)", mark)]
        step = "request" if "request" not in seen else "start" if "start" not in seen else "finish"
        raise AssertionError(f"no rerun {step} within {timeout / 1000:.0f} s; saw {seen}") from err
    wait_idle(page, timeout)


def goto(page: Any, url: str, timeout: float = PAGE_TIMEOUT_MS) -> None:
    """Navigate and wait for the first full run to finish."""
    watch_runs(page)
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
