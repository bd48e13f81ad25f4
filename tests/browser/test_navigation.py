"""A shared link keeps its state on every page: sidebar links, in-page links, Back and Forward.

A student opens the teacher's link in a fresh browser and moves through the pages. Each page
must show the same settings and the same batch as the link opened on that page directly, with
the query string in the address bar after every step and one history entry per navigation.
"""

from __future__ import annotations

import json
import re
import urllib.parse

from tests.browser import streamlit_page as sp

LINK = {"preset": "pirate", "est": "grpo"}
NAV = "[data-testid=stSidebarNav] a[href$='/{}']"


def _path(url: str) -> str:
    return urllib.parse.urlparse(url).path.rsplit("/", 1)[-1]


def _sidebar_value(page, key: str) -> str:
    return page.locator(f"[data-testid=stSidebar] .st-key-{key} input").first.input_value()


def _first_chart(page) -> str:
    """The first figure's data (every trace's x, y, z) as text: the page's batch and numbers."""
    return json.dumps(sp.first_figure(page), sort_keys=True)


def _numbers(value):
    """Every number in a trace field (lists, nested lists, typed arrays serialized as dicts)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)
    elif isinstance(value, dict):
        for key in sorted(value, key=lambda k: int(k) if str(k).isdigit() else 0):
            yield from _numbers(value[key])
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def _first_number(chart: str) -> float:
    """One number of the figure (its first y or z value), for a readable failure."""
    for trace in json.loads(chart):
        for field in ("z", "y"):
            for number in _numbers(trace.get(field)):
                return number
    raise AssertionError("the first figure has no number")


def _history(page) -> int:
    return page.evaluate("() => history.length")


def _direct(browser, server: str, path: str) -> str:
    """The first figure of ``path`` opened directly with the link's query in a fresh browser."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        sp.goto(pg, f"{server}/{path}?{urllib.parse.urlencode(LINK)}")
        assert sp.exceptions(pg) == []
        return _first_chart(pg)
    finally:
        context.close()


def _check(page, expected: dict[str, str], path: str) -> None:
    """The page, its URL and its sidebar show the link's state; its figure is the direct one's."""
    assert sp.exceptions(page) == []
    assert _path(page.url) == path
    query = sp.query(page.url)
    for key, value in LINK.items():
        assert query.get(key) == value, (path, page.url)
        assert _sidebar_value(page, key) == value, (path, key)
    chart = _first_chart(page)
    assert _first_number(chart) == _first_number(expected[path]), path
    assert chart == expected[path], path


def _click(page, selector: str) -> None:
    sp.after_rerun(page, lambda: page.locator(selector).first.click())


def test_a_shared_link_keeps_its_state_through_sidebar_links_and_back(server, browser, page):
    pages = ("Rewards", "Advantages", "Token_KL")
    expected = {path: _direct(browser, server, path) for path in pages}
    assert expected["Advantages"] != _direct_defaults(browser, server, "Advantages")

    sp.goto(page, f"{server}/Rewards?{urllib.parse.urlencode(LINK)}")
    _check(page, expected, "Rewards")
    entries = _history(page)

    _click(page, NAV.format("Advantages"))
    _check(page, expected, "Advantages")
    assert _history(page) == entries + 1  # one history entry per navigation

    _click(page, NAV.format("Token_KL"))
    _check(page, expected, "Token_KL")
    assert _history(page) == entries + 2

    sp.after_rerun(page, page.go_back)
    _check(page, expected, "Advantages")
    sp.after_rerun(page, page.go_back)
    _check(page, expected, "Rewards")
    sp.after_rerun(page, page.go_forward)
    _check(page, expected, "Advantages")
    assert _history(page) == entries + 2

    # the in-page "Next" link keeps the state too
    link = page.get_by_role("link", name=re.compile(r"^Next: 5\. Local vs global"))
    sp.after_rerun(page, link.click)
    assert _path(page.url) == "Local_vs_Global"
    assert {k: sp.query(page.url).get(k) for k in LINK} == LINK
    assert _sidebar_value(page, "preset") == "pirate"


def _direct_defaults(browser, server: str, path: str) -> str:
    """The first figure of ``path`` with the default settings (the link must differ from it)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        sp.goto(pg, f"{server}/{path}")
        return _first_chart(pg)
    finally:
        context.close()


def test_the_run_step_from_your_run_stays_in_the_url_on_the_next_pages(server, page):
    sp.goto(page, f"{server}/Your_run")
    page.locator(".st-key-run_pick").click()
    sp.after_rerun(page, page.get_by_role("option", name="rllb", exact=True).click)
    sp.after_rerun(page, lambda: page.locator(".st-key-run_use button").click())
    run = {k: sp.query(page.url).get(k) for k in ("dump", "dump_step")}
    assert run["dump"] == "dir:rllb"
    assert run["dump_step"]
    for path in ("Advantages", "Token_KL"):
        _click(page, NAV.format(path))
        assert sp.exceptions(page) == []
        assert _path(page.url) == path
        assert {k: sp.query(page.url).get(k) for k in run} == run
        assert "your run" in page.get_by_test_id("stSidebar").inner_text()
    sp.after_rerun(page, page.go_back)
    assert _path(page.url) == "Advantages"
    assert {k: sp.query(page.url).get(k) for k in run} == run
    assert "your run" in page.get_by_test_id("stSidebar").inner_text()
