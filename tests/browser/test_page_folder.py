"""The page scripts live in ``pages/``: the navigation is still exactly the page table.

A folder named ``pages`` beside the entry script makes Streamlit 1.67 run the first session of a
fresh server through its legacy multipage runner (every file of the folder plus ``app`` in the
navigation, and ``/vote`` run without the router). ``ui.guard.leave_legacy_pages_runner`` turns
that off and reruns. These tests each start a fresh server, so the first visit is the one at
risk: to a page whose URL path equals its file name (``/vote``), to Home, and to a deep link
(``/Update``: the legacy runner knows no such page and put "Page not found" over it).
``python -m roll_viz serve`` (how these servers start, and ``make run``) switches the legacy
runner off before the first session (``cli.serve.router_owns_the_pages``).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from benchmarks.server import streamlit_server
from roll_viz import nav
from tests.browser import streamlit_page as sp

ROOT = Path(__file__).resolve().parents[2]
NAV_LINKS = "[data-testid=stSidebarNav] a"


def _nav_paths(page) -> list[str]:
    """The URL path of every navigation link, in the order drawn."""
    hrefs = page.locator(NAV_LINKS).evaluate_all("links => links.map(a => a.href)")
    return [urllib.parse.urlparse(h).path.rsplit("/", 1)[-1] for h in hrefs]


@pytest.mark.parametrize("first", ["vote", "", "Update"])
def test_a_fresh_server_lists_exactly_the_page_table(first, browser, tmp_path):
    assert (ROOT / "pages" / "vote.py").is_file()  # the case at risk: URL path == file name
    with streamlit_server(script=nav.ENTRY, log=tmp_path / "streamlit.log") as srv:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        try:
            sp.goto(page, f"{srv.base}/{first}")
            paths = _nav_paths(page)
            assert paths == [p.url_path for p in nav.PAGES], paths  # none twice, none missing
            assert "app" not in paths  # the legacy runner names the entry script's own page so
            if first == "vote":  # the router drew the phone page (no sidebar, its own heading)
                assert page.get_by_role("heading", name="Join the lesson").is_visible()
                assert not page.locator("[data-testid=stSidebar]").is_visible()
            else:
                assert page.locator("[data-testid=stSidebar]").is_visible()
            assert page.get_by_text("Page not found").count() == 0  # the legacy runner's dialog
            assert not sp.exceptions(page)
            assert not srv.tracebacks(), srv.tracebacks()
        finally:
            context.close()
