"""Helpers to drive a Streamlit page in Playwright without sleeping: wait on the app's run state.

After every navigation or interaction the helpers wait until the app is CONNECTED and its script
state is ``notRunning``. Interactions that trigger a rerun wait for the browser's rerun request,
a run started after it and that run's end, as the app's websocket reports them
(``benchmarks.browser.RUNS_JS``), so a stale page is never mistaken for the redrawn one and a
fast run the DOM never showed as running is not missed. Key releases and the frame after a run
are timestamped too, which gives the slider-release -> redrawn latency.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from benchmarks import browser
from roll_viz import nav
from roll_viz.ui.state import KEY_SAMPLE_APPLY

# the run-state selectors, the observer and the waits are the benchmark's (one copy)
APP, CONNECTED, IDLE = browser.APP, browser.CONNECTED, browser.IDLE

#: The pages every-page tests visit, in the README's order: screenshot name -> URL path. The
#: names (00_home, 03_token_kl, ...) are the README's image files; paths come from roll_viz.nav.
README_ORDER = (
    "home", "samples", "rewards", "kl", "advantages", "local_global", "sensitivity",
    "frameworks", "self_test", "update", "training",
)  # fmt: skip
PAGES = {
    f"{i:02d}_{Path(nav.page(key).file).stem}": nav.url_path(key)
    for i, key in enumerate(README_ORDER)
}


def query(url: str) -> dict[str, str]:
    """The query parameters of ``url`` (the last value of each)."""
    return {k: v[-1] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(url).query).items()}


def wait_idle(page, timeout: float = 120_000) -> None:
    """Wait until the app is connected, not running, and has no loading skeleton."""
    browser.wait_idle(page, timeout)


def goto(page, url: str, timeout: float = 180_000) -> None:
    """Navigate and wait for the first full run to finish."""
    browser.goto(page, url, timeout)


def runs(page) -> int:
    """Number of script-run records (requests, starts, ends) seen on this page so far."""
    return browser.run_mark(page)


def after_rerun(page, action: Callable[[], None], timeout: float = 180_000) -> None:
    """Do ``action`` and wait until the rerun it asks for has finished."""
    mark = browser.run_mark(page)
    action()
    browser.wait_rerun(page, mark, timeout)


def last_latency_ms(page) -> dict[str, float]:
    """From the last key release: ms until the script finished and until the next repaint."""
    page.wait_for_function(browser.MOVE_DONE_JS, arg=0)
    return page.evaluate(browser.MOVE_LATENCY_JS)


def press_slider(page, key: str, keys: str = "ArrowRight") -> None:
    """Focus the slider thumb of widget ``key`` and press a key (one rerun)."""
    thumb = page.locator(f".st-key-{key} input[type='range']").first
    thumb.focus()
    after_rerun(page, lambda: page.keyboard.press(keys))


def press_knob_and_settle(page, key: str, keys: str = "ArrowRight") -> None:
    """Press a sidebar algorithm knob, then wait for the page's one rerun after the pause.

    The knob reruns only the sidebar's fragment (the page's instant figures redraw in the
    browser); the relay asks for the full page run when no move follows (relay.PAUSE_MS).
    """
    log = page.evaluate("() => (window.__rvRelayLog || []).length")
    press_slider(page, key, keys)
    page.wait_for_function(
        "(n) => (window.__rvRelayLog || []).slice(n).some((x) => x.e === 'full')", arg=log
    )
    wait_idle(page)


def press_form_slider(page, key: str, keys: str = "ArrowRight") -> None:
    """Move a slider of the live sidebar's Sample form, then press Sample (one rerun)."""
    thumb = page.locator(f".st-key-{key} input[type='range']").first
    thumb.focus()
    page.keyboard.press(keys)
    after_rerun(page, lambda: page.locator(f".st-key-{KEY_SAMPLE_APPLY} button").first.click())


def slider_value(page, key: str) -> str:
    """The value text shown on a slider's thumb."""
    return page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']").first.inner_text()


def chart_data(page, index: int = 0) -> list[dict]:
    """x / y / z arrays of the index-th Plotly chart on the page (read from the live figure)."""
    raw = page.evaluate(
        """(i) => {
          const gd = document.querySelectorAll('.js-plotly-plot')[i];
          if (!gd || !gd._fullData) return null;
          const plain = (v) => (v && v.length !== undefined) ? Array.from(v) : v;
          return JSON.stringify(gd._fullData.map(t => ({name: t.name, x: plain(t.x),
                                                   y: plain(t.y), z: t.z})));
        }""",
        index,
    )
    assert raw is not None, f"no plotly chart #{index} on {page.url}"
    return json.loads(raw)


#: the estimator heatmaps Advantages draws in the browser (roll_viz/ui/instant/estimators.js)
BROWSER_HEATMAPS = "[data-testid=rv-est-heatmaps]"


def browser_heatmaps(page) -> list[dict]:
    """The browser-drawn estimator heatmaps as traces: one {name, z} per estimator, in order."""
    page.locator(f"{BROWSER_HEATMAPS}[data-state=ready]").first.wait_for(state="attached")
    raw = page.locator(BROWSER_HEATMAPS).first.evaluate(
        """(el) => {
          const s = el.parentNode.__rvEst;
          return Object.entries(s.results).filter(([e, r]) => r.advantages)
            .map(([e, r]) => ({name: e, z: r.advantages.map((row) => Array.from(row))}));
        }"""
    )
    return sorted(raw, key=lambda t: t["name"])


#: the raw-vs-processed reward bars Rewards draws in the browser (roll_viz/ui/instant/rewards.js)
BROWSER_REWARD_BARS = "[data-testid=rv-reward-bars]"


def browser_reward_bars(page) -> list[dict]:
    """The browser-drawn reward bars as traces: {name, x (sample labels), y} raw, processed."""
    page.locator(f"{BROWSER_REWARD_BARS}[data-state=ready]").first.wait_for(state="attached")
    return page.locator(BROWSER_REWARD_BARS).first.evaluate(
        """(el) => {
          const s = el.parentNode.__rvRw;
          const x = Array.from(el.querySelectorAll("svg rect[data-kind=raw]"),
                               (r) => r.dataset.sample);
          return [{name: "raw reward", x, y: s.nums.raw},
                  {name: "processed reward", x, y: s.nums.processed}];
        }"""
    )


def first_figure(page) -> list[dict]:
    """The page's first figure as traces: the browser's heatmaps on Advantages, its bars on
    Rewards, else Plotly's."""
    path = urllib.parse.urlsplit(page.url).path.rstrip("/")
    if path.endswith("/Advantages"):
        return browser_heatmaps(page)
    if path.endswith("/Rewards"):
        return browser_reward_bars(page)
    return chart_data(page, 0)


def exceptions(page) -> list[str]:
    """Texts of Streamlit exception boxes on the page."""
    return page.locator("[data-testid='stException']").all_inner_texts()


#: every visible Plotly chart drawn no wider than its container (after a viewport change the
#: charts keep the old width until their resize handler redraws them: legends and last bars were
#: cut off); a chart in a closed expander is redrawn when it opens
CHARTS_FIT_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].every(plot => {
    const svg = plot.querySelector('svg.main-svg');
    return !svg || !plot.checkVisibility()
        || svg.getBoundingClientRect().width <= plot.parentElement.clientWidth + 1;
})"""


def full_page_screenshot(page, path: str, width: int = 1280, max_height: int = 9000) -> None:
    """Screenshot the whole page at the projector's width (1280 px, the README's images).

    Streamlit scrolls inside its main block, so the viewport grows to the content's height
    first (no rerun happens on resize), then is restored.
    """
    height = page.evaluate(
        """() => Math.max(...["[data-testid='stMain']", "[data-testid='stMainBlockContainer']",
                              "[data-testid='stSidebarContent']"]
                 .map(s => document.querySelector(s)).filter(Boolean)
                 .map(e => e.scrollHeight + e.getBoundingClientRect().top))"""
    )
    old = page.viewport_size
    page.set_viewport_size({"width": width, "height": min(max_height, int(height) + 40)})
    page.evaluate(
        "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))"
    )
    wait_idle(page)
    page.wait_for_function(CHARTS_FIT_JS)  # Plotly redraws at the new width after the resize
    page.screenshot(path=path, full_page=True)
    if old:
        page.set_viewport_size(old)
