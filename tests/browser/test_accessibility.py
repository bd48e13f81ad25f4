"""Every page passes axe-core's WCAG 2.0 / 2.1 A and AA rules with no serious or critical violation.

axe-core is the copy pinned in requirements-dev.txt (``axe-playwright-python`` ships
``axe.min.js``; nothing is fetched at test time). Each page of ``roll_viz.nav.PAGES`` is opened
in a fresh browser, in the default and in the projector mode, and axe runs once the app is idle
and ``roll_viz/ui/a11y.js`` has applied its fixes, then again with every expander open. A
failure prints each rule, its impact, how many nodes and the first node's target. The same visit
checks that every chart has a text alternative with its numbers. Two more tests use the keyboard
alone: a wide formula scrolls, and the README's lecture recipe is walked with Tab and Enter.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import pytest
from axe_playwright_python.base import AXE_SCRIPT

from roll_viz import nav
from tests.browser import streamlit_page as sp
from tests.ui.test_recipe import recipe_links

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")
MODES = {"default": "", "projector": "?present=true"}
#: resolves once a11y.js has no fix pending (true at once on a page that never loaded it)
SETTLED = "() => !window.__rvA11y || !window.__rvA11y.pending"


def show_everything(page) -> None:
    """Grow the viewport to the content's height (Streamlit scrolls inside its main block).

    axe checks colour contrast only where an element is on screen, and the main block is a
    scroll container: at 1000 px it saw the first screen only.
    """
    height = page.evaluate(
        """() => Math.max(...["[data-testid='stMain']", "[data-testid='stMainBlockContainer']",
                              "[data-testid='stSidebarContent']"]
                 .map(s => document.querySelector(s)).filter(Boolean)
                 .map(e => e.scrollHeight + e.getBoundingClientRect().top))"""
    )
    page.set_viewport_size({"width": page.viewport_size["width"], "height": int(height) + 40})
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    sp.wait_idle(page)


def axe(page) -> list[dict]:
    """The WCAG A/AA violations axe-core finds on the whole page as it is now."""
    show_everything(page)
    page.wait_for_function(SETTLED)
    page.evaluate(AXE_SCRIPT)
    options = {"runOnly": {"type": "tag", "values": TAGS}, "resultTypes": ["violations"]}
    return page.evaluate(f"() => axe.run(document, {json.dumps(options)})")["violations"]


def report(violations: list[dict]) -> str:
    """One line per rule: id, impact, node count, the first node's target and its markup."""
    return "\n".join(
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['nodes'][0]['target']} "
        f"{v['nodes'][0]['html'][:160]}"
        for v in violations
    )


def js_number(v: float) -> str:
    """A number as a11y.js writes it: 3 significant digits, exponent when tiny or huge."""
    if v and not 1e-3 <= abs(v) < 1e5:
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{v:.2e}")
    return f"{float(f'{v:.3g}'):g}"


def chart_labels(page) -> list[tuple[str | None, str | None]]:
    """(role, aria-label) of every Plotly chart on the page."""
    return page.locator(".js-plotly-plot").evaluate_all(
        "els => els.map(e => [e.getAttribute('role'), e.getAttribute('aria-label')])"
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", [p.key for p in nav.PAGES])
def test_no_serious_or_critical_violation(key, mode, page, server):
    sp.goto(page, f"{server}/{nav.page(key).url_path}{MODES[mode]}")
    assert not sp.exceptions(page)
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert not blocking, f"{key} ({mode}):\n{report(blocking)}"
    # again with every expander open: explainers, code and the projector's folded prose
    opened = page.evaluate(
        """() => { const s = [...document.querySelectorAll('details')]
                     .filter(d => !d.open).map(d => d.querySelector('summary'));
                   s.forEach(x => x.click()); return s.length; }"""
    )
    if opened:
        sp.wait_idle(page)
        blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
        assert not blocking, f"{key} ({mode}, {opened} expanders opened):\n{report(blocking)}"
    # every chart is a named figure whose name carries numbers (WCAG 1.1.1 text alternative)
    for role, label in chart_labels(page):
        assert role == "figure", (key, role, label)
        assert (label or "").startswith("Chart"), (key, label)
        assert any(c.isdigit() for c in label), (key, label)


def test_every_training_tab_has_no_serious_or_critical_violation(page, server):
    """Only the open tab of Training runs: each is opened by its link (``?tab=``) and checked."""
    sp.goto(page, f"{server}/{nav.url_path('training')}")
    labels = page.locator("[data-testid=stMain] [role=tab]").all_inner_texts()
    assert len(labels) > 1, labels
    for label in labels[1:]:  # the first is the page the parametrized test saw
        query = urllib.parse.urlencode({"tab": label.strip()})
        sp.goto(page, f"{server}/{nav.url_path('training')}?{query}")
        page.set_viewport_size({"width": 1400, "height": 1000})  # axe grew it for the last tab
        selected = page.locator("[data-testid=stMain] [role=tab][aria-selected=true]")
        assert selected.inner_text().strip() == label.strip()
        blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
        assert not blocking, f"Training, tab {label!r}:\n{report(blocking)}"


def test_the_chart_text_names_the_figures_numbers(page, server):
    """Token KL's heatmap: its label gives the z grid's size and its value range."""
    sp.goto(page, f"{server}/{nav.url_path('kl')}")
    page.wait_for_function(SETTLED)
    rows, cols, low, top = page.evaluate(
        """() => {
          const z = Array.from(document.querySelector('.js-plotly-plot')._fullData[0].z);
          const vals = z.flatMap(r => Array.from(r)).filter(Number.isFinite);
          return [z.length, Math.max(...z.map(r => r.length)), Math.min(...vals),
                  Math.max(...vals)];
        }"""
    )
    _role, label = chart_labels(page)[0]
    assert f"{rows} by {cols}" in label, label
    assert f"values {js_number(low)} to {js_number(top)}" in label, (label, low, top)


def test_a_wide_formula_scrolls_from_the_keyboard(page, server):
    """A display formula wider than its column is a tab stop that the arrow keys scroll."""
    page.set_viewport_size({"width": 700, "height": 900})  # narrow: the formulas overflow
    sp.goto(page, f"{server}/{nav.url_path('kl')}")
    page.wait_for_function(SETTLED)
    wide = page.locator("[data-testid=stMain] .katex-display").evaluate_all(
        "els => els.map((e, i) => [i, e.scrollWidth > e.clientWidth, e.tabIndex])"
    )
    assert wide, "no display formula on Token KL"
    assert all(tab == 0 for _i, _w, tab in wide), wide
    first = next(i for i, overflows, _tab in wide if overflows)
    formula = page.locator("[data-testid=stMain] .katex-display").nth(first)
    formula.focus()
    assert formula.evaluate("e => document.activeElement === e")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("e => e.scrollLeft > 0", arg=formula.element_handle())


#: what a keyboard can reach: the element focused, its link target and whether focus is drawn
FOCUSED = """() => {
  const e = document.activeElement, s = e ? getComputedStyle(e) : null;
  return {href: e && e.href ? e.href : "", drawn: !!s && ((s.outlineStyle !== "none"
          && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none")};
}"""
MAX_TABS = 120  # the sidebar's widgets and the page's controls between two navigation links


def tab_to(page, path: str) -> dict:
    """Press Tab (then Shift+Tab) until a link to ``/path`` has the focus; its FOCUSED state."""
    for key in ("Tab", "Shift+Tab"):
        for _ in range(MAX_TABS):
            page.keyboard.press(key)
            state = page.evaluate(FOCUSED)
            if urllib.parse.urlparse(state["href"]).path == f"/{path}" and state["href"]:
                return state
    raise AssertionError(f"no link to /{path} within {MAX_TABS} Tab and Shift+Tab presses")


def test_the_recipe_is_given_from_the_keyboard(page, server):
    """The README's lecture recipe, page after page, with Tab and Enter on the navigation.

    Projector mode; each link the focus lands on shows a focus ring (WCAG 2.4.7).
    """
    paths = list(dict.fromkeys(link.lstrip("/").partition("?")[0] for link in recipe_links()))
    sp.goto(page, f"{server}/?present=true")
    for path in paths[1:]:  # the recipe starts on Home
        state = tab_to(page, path)
        assert state["drawn"], f"the focused link to /{path} shows no focus ring"
        sp.after_rerun(page, lambda: page.keyboard.press("Enter"))
        assert urllib.parse.urlparse(page.url).path == f"/{path}", page.url
        assert sp.query(page.url).get("present") == "true", page.url
        assert not sp.exceptions(page)


def _lesson_violations(page) -> list[dict]:
    """Blocking violations of a lesson page, the QR code's missing alt text left out.

    ``ui/lesson_page.py`` draws the QR code with ``st.image`` and no ``alt`` (image-alt, critical);
    that file is not this test's to change, and ``test_the_rooms_qr_code_has_a_text_alternative``
    keeps it visible until it is fixed.
    """
    found = []
    for v in axe(page):
        if v["impact"] not in BLOCKING:
            continue
        if v["id"] == "image-alt":
            v = {**v, "nodes": [n for n in v["nodes"] if "/media/" not in n["html"]]}
        if v["nodes"]:
            found.append(v)
    return found


def test_a_running_lesson_has_no_serious_or_critical_violation(browser, server):
    """The states the page visits miss: the teacher's open room, a phone's question, the reveal."""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    phone = browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True).new_page()
    try:
        sp.goto(teacher, f"{server}/Lesson?present=true")
        sp.after_rerun(teacher, lambda: teacher.locator(".st-key-lesson_start button").click())
        teacher.wait_for_url("**room=*", timeout=60_000)
        sp.wait_idle(teacher)
        assert not (bad := _lesson_violations(teacher)), f"teacher, room open:\n{report(bad)}"
        sp.goto(phone, f"{server}/vote?room={sp.query(teacher.url)['room']}")
        phone.locator(".st-key-vote_0_1_2 button").wait_for(state="visible")
        assert not (bad := _lesson_violations(phone)), f"phone, question:\n{report(bad)}"
        sp.after_rerun(phone, lambda: phone.locator(".st-key-vote_0_1_2 button").click())
        sp.after_rerun(teacher, lambda: teacher.locator(".st-key-lesson_revealed button").click())
        teacher.get_by_text("The pipeline's answer").first.wait_for()
        assert not (bad := _lesson_violations(teacher)), f"teacher, revealed:\n{report(bad)}"
        assert not sp.exceptions(teacher)
        assert not sp.exceptions(phone)
    finally:
        teacher.context.close()
        phone.context.close()


def test_the_rooms_qr_code_has_a_text_alternative(page, server):
    sp.goto(page, f"{server}/Lesson")
    sp.after_rerun(page, lambda: page.locator(".st-key-lesson_start button").click())
    page.wait_for_url("**room=*", timeout=60_000)
    sp.wait_idle(page)
    images = page.locator("[data-testid=stMain] img").evaluate_all(
        "els => els.map(e => e.getAttribute('alt'))"
    )
    assert images, "no QR code drawn"
    assert all(alt for alt in images), images
