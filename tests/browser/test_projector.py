"""Projector mode: at 1280 x 720 with ``?present=true`` every page's key figure starts in the
first screen and nothing runs off the right edge.

For each page the test opens the lecture link (``present=true&hide=sidebar``, as the README's
recipe projects it) in a 1280 x 720 window, measures where the first figure (a Plotly chart, a
table, an image, the instant component or Home's chain) starts in the main column, and checks that
neither the document nor the main column scrolls sideways and that every table shows all its
columns (``ui.table`` fits them to the screen; formulas scroll inside themselves). At 800 px
the explainer of a figure stacks under it instead of squeezing into a narrow column
(``test_explainer_stacks_below_1000_px``). The screenshots are the projector's view (first screen
only).
"""

from __future__ import annotations

import re
import urllib.parse

import pytest

from roll_viz import nav
from tests.browser import streamlit_page as sp
from tests.browser.conftest import fresh_page

WIDTH, HEIGHT = 1280, 720
#: the first figure must start this far above the bottom edge: some of it is in view, not its top
IN_VIEW = 120
#: the pages a lecture projects, by key (the lesson pages have their own presentation test)
PROJECTED = (
    "home", "samples", "rewards", "kl", "advantages", "local_global", "normalisation", "update",
    "sensitivity", "frameworks", "eras", "teacher", "mismatch", "training", "your_run",
    "episodes", "self_test",
)  # fmt: skip
#: a page's figure: a chart, a table, an image, Home's chain or token chips; not the instant
#: strip (a small in-browser view of the main figure, drawn under it)
FIGURE = (
    ".js-plotly-plot, [data-testid='stDataFrame'], [data-testid='stImage'], "
    ".st-key-rv_chain, .rv-chips, .st-key-adv_heatmaps, .st-key-rewards_bars"
)
#: where the first figure starts (px from the top of the window) and the widths that overflow
MEASURE_JS = """(sel) => {
  const main = document.querySelector("[data-testid='stMain']");
  const figs = Array.from(main.querySelectorAll(sel))
    .filter(e => e.getBoundingClientRect().height > 0);
  const tops = figs.map(e => e.getBoundingClientRect().top + main.scrollTop);
  const wide = Array.from(main.querySelectorAll("*"))
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
              && getComputedStyle(e).visibility !== 'hidden')
    .filter(e => !e.closest(
      "[data-testid='stDataFrame'], [data-testid='stCode'], .katex-display, iframe"))
    .slice(0, 5).map(e => (e.getAttribute('data-testid') || e.className || e.tagName) + ' '
                    + Math.round(e.getBoundingClientRect().right));
  return {first: tops.length ? Math.min(...tops) : null,
          docWidth: document.documentElement.scrollWidth,
          mainWidth: main.scrollWidth, mainClient: main.clientWidth,
          inner: window.innerWidth, wide: wide};
}"""

#: every visible table whose columns run past its own width (it would scroll sideways and the
#: projector would show its first columns only): its header cells and the two widths
TABLES_JS = """() => Array.from(
    document.querySelectorAll("[data-testid='stMain'] [data-testid='stDataFrame']"))
  .filter(df => df.getBoundingClientRect().height > 0)
  .map(df => ({scroller: df.querySelector('.dvn-scroller'),
               heads: Array.from(df.querySelectorAll('th')).map(h => h.textContent).slice(0, 4)}))
  .filter(t => t.scroller && t.scroller.scrollWidth > t.scroller.clientWidth + 1)
  .map(t => ({heads: t.heads, content: t.scroller.scrollWidth, shown: t.scroller.clientWidth}))"""

#: text boxes of each figure (title, legend, axis titles, subplot titles) that overlap one
#: another or stick out of the figure: "kind:text" pairs
OVERLAPS_JS = """() => {
  const out = [];
  const apart = (a, b) => a.right <= b.left + 1 || b.right <= a.left + 1
                       || a.bottom <= b.top + 1 || b.bottom <= a.top + 1;
  document.querySelectorAll("[data-testid='stMain'] .js-plotly-plot").forEach(plot => {
    const fig = plot.getBoundingClientRect();
    if (fig.height === 0) return;
    const boxes = [];
    const add = (sel, kind) => plot.querySelectorAll(sel).forEach(e => {
      const r = e.getBoundingClientRect();
      const name = kind + ':' + e.textContent.slice(0, 30);
      if (r.width > 0 && r.height > 0) boxes.push({name, r});
    });
    add('.gtitle, .gtitle-subtitle', 'title'); add('.legend .bg', 'legend');
    add('.annotation-text-g', 'note');
    add("text[class$='title']:not(.gtitle):not(.gtitle-subtitle)", 'axis');  // xtitle, ...
    boxes.forEach((a, i) => {
      if (a.r.left < fig.left - 1 || a.r.right > fig.right + 1 || a.r.top < fig.top - 1)
        out.push(a.name + ' sticks out');
      boxes.slice(i + 1).forEach(b => { if (!apart(a.r, b.r)) out.push(a.name + ' / ' + b.name); });
    });
  });
  return out;
}"""


#: pages whose figure needs one action first: extra query and the button or option to press
SETUP = {
    "update": ("live=true&G=4&T=16", ".st-key-upd_step button"),
    "your_run": ("", "rllb"),
}


def _measure(page) -> dict:
    return page.evaluate(MEASURE_JS, FIGURE)


def _setup(page, key: str) -> None:
    """Take the action that draws the page's figure (a step, a run picked)."""
    _, action = SETUP[key]
    if key == "your_run":
        page.locator(".st-key-run_pick").click()
        option = page.get_by_role("option", name=action, exact=True)
        sp.after_rerun(page, option.click)
    else:
        sp.after_rerun(page, lambda: page.locator(action).click(), timeout=240_000)
    page.locator("[data-testid='stMain']").evaluate("e => e.scrollTo(0, 0)")


@pytest.fixture(scope="module")
def projector_context(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    yield context
    context.close()


@pytest.fixture
def projector(projector_context):
    """A fresh page at the projector's size (``conftest.fresh_page``: no earlier session state)."""
    pg = fresh_page(projector_context, 90_000)
    yield pg
    pg.close()


@pytest.mark.parametrize("key", PROJECTED)
def test_first_figure_in_first_screen(projector, server, tmp_path, key):
    """The page's first figure starts above 720 px and the page is no wider than the window."""
    extra = SETUP[key][0] + "&" if key in SETUP else ""
    sp.goto(projector, f"{server}/{nav.url_path(key)}?{extra}present=true&hide=sidebar", 240_000)
    if key in SETUP:
        _setup(projector, key)
    assert sp.exceptions(projector) == []
    assert projector.get_by_text("This page could not be drawn").count() == 0, key
    m = _measure(projector)
    # a measurement's picture, kept with the test's temporary files (not a README image)
    projector.screenshot(path=str(tmp_path / f"projector_{key}.png"))
    assert m["first"] is not None, f"{key}: no figure on the page"
    assert m["first"] < HEIGHT - IN_VIEW, f"{key}: first figure starts at y = {m['first']:.0f}"
    assert m["docWidth"] <= m["inner"], f"{key}: page is {m['docWidth']} px wide, {m['wide']}"
    assert m["mainWidth"] <= m["mainClient"], f"{key}: main column scrolls sideways, {m['wide']}"
    assert projector.evaluate(TABLES_JS) == [], f"{key}: tables cut at the right edge"
    assert projector.evaluate(OVERLAPS_JS) == [], f"{key}: text boxes overlap in a figure"


#: width of the column holding each explainer, and of the main block around it
EXPLAINER_JS = """() => {
  const block = document.querySelector("[data-testid='stMainBlockContainer']");
  const cols = Array.from(document.querySelectorAll(".rv-explainer"))
    .map(e => e.closest("[data-testid='stColumn']")).filter(Boolean);
  return {block: block.getBoundingClientRect().width,
          columns: cols.map(c => c.getBoundingClientRect().width)};
}"""


@pytest.mark.parametrize("path", ["Advantages", "Rewards"])
def test_explainer_stacks_below_1000_px(browser, server, path):
    """At 800 px the explainer beside a figure takes the full width under it (not 90 px)."""
    context = browser.new_context(viewport={"width": 800, "height": 720})
    try:
        pg = context.new_page()
        pg.set_default_timeout(90_000)
        sp.goto(pg, f"{server}/{path}")
        assert sp.exceptions(pg) == []
        widths = pg.evaluate(EXPLAINER_JS)
        assert widths["columns"], f"{path}: no explainer in a column"
        for width in widths["columns"]:
            assert width >= 0.9 * widths["block"] - 40, (path, widths)
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= 800
    finally:
        context.close()


#: font sizes (px) of the first metric's value and label text
METRIC_JS = """() => {
  const v = document.querySelector("[data-testid='stMetricValue'] p");
  const l = document.querySelector("[data-testid='stMetricLabel'] p");
  return {value: parseFloat(getComputedStyle(v).fontSize),
          label: parseFloat(getComputedStyle(l).fontSize)};
}"""


def test_metric_values_stay_large_in_presentation_mode(projector, server):
    """A metric's value is Markdown: the prose rule must not shrink it to its label's size."""
    sp.goto(projector, f"{server}/?present=true&hide=sidebar")
    sizes = projector.evaluate(METRIC_JS)
    assert sizes["value"] >= 2 * sizes["label"], sizes


def test_silent_bugs_revealed_numbers_in_the_first_screen(projector, server):
    """After Reveal, the wrong and the right number are in the first screen, for every bug.

    One visit: each lesson is picked with its button, as in class (one rerun; the URL then says
    ``?bug=<id>``), and the main column is scrolled back to the top, where a link opens it,
    before Reveal is clicked. A fresh page load per lesson (35 of them) took 50 s.
    """
    from roll_viz.analysis import silent_bugs

    url = f"{server}/{nav.url_path('silent_bugs')}?present=true&hide=sidebar"
    sp.goto(projector, url, 240_000)
    # the lesson buttons read "1. ...", "2. ...": not the control's help icon
    choices = projector.locator(".st-key-silent_bug_choice button").filter(
        has_text=re.compile(r"^\d+\. ")
    )
    assert choices.count() == len(silent_bugs.IDS)
    for i, bug_id in enumerate(silent_bugs.IDS):
        if i:
            sp.after_rerun(projector, choices.nth(i).click)
            assert sp.query(projector.url).get("bug") == bug_id
        # at the top, where the link opens it (the click scrolls the button into view)
        projector.locator("[data-testid='stMain']").evaluate("e => e.scrollTo(0, 0)")
        reveal = projector.locator(f".st-key-silent_bug_reveal_{bug_id} button")
        sp.after_rerun(projector, reveal.click)
        metrics = projector.locator("[data-testid='stMetric']")
        assert metrics.count() == 2, bug_id
        for k in range(2):
            box = metrics.nth(k).bounding_box()
            assert box["y"] + box["height"] <= HEIGHT, f"{bug_id}: number at y = {box['y']:.0f}"


def test_every_training_tab_has_its_figures_text_clear(projector, server):
    """Each Training tab at the projector's size: no title, legend or axis title over another."""
    base = f"{server}/{nav.url_path('training')}"
    sp.goto(projector, f"{base}?present=true&hide=sidebar", 240_000)
    labels = projector.locator("[data-testid=stMain] [role=tab]").all_inner_texts()
    assert len(labels) > 1, labels
    for label in labels[1:]:  # the first tab is the page the per-page test saw
        query = urllib.parse.urlencode({"tab": label.strip(), "present": "true", "hide": "sidebar"})
        sp.goto(projector, f"{base}?{query}", 240_000)
        assert projector.evaluate(OVERLAPS_JS) == [], f"Training, tab {label!r}"
