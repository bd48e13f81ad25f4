"""The lecture from the keyboard's side of the projector: Next from Home walks the README recipe.

In projector mode at 1280 x 720, pressing each page's Next link from Home must open the recipe's
pages in its order (``nav.LECTURE``), each titled with its number, and Back from the last one
must walk the same way home, with the link's state (preset) kept all along.
"""

from __future__ import annotations

import re
import urllib.parse

from roll_viz import nav
from tests.browser import streamlit_page as sp


def _path(url: str) -> str:
    return urllib.parse.urlparse(url).path.rsplit("/", 1)[-1]


def _follow(page, word: str, target: str) -> None:
    """Press the page's Back or Next link to ``target`` and wait for that page's run."""
    name = re.compile(rf"^(\u2190 )?{word}: {re.escape(nav.numbered_title(target))}")
    link = page.get_by_role("link", name=name)
    assert link.count() == 1, (word, target, page.url)
    sp.after_rerun(page, link.click)
    page.wait_for_url(re.compile(rf"/{re.escape(nav.url_path(target))}(\?|$)"))
    sp.wait_idle(page)


def test_next_walks_the_recipe_and_back_walks_it_home(server, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.set_default_timeout(120_000)
    sp.goto(page, f"{server}/?present=true&hide=sidebar&preset=arithmetic")
    seen = [_path(page.url)]
    for key in nav.LECTURE[1:]:
        _follow(page, "Next", key)
        seen.append(_path(page.url))
        title = page.locator("h1").first.inner_text()
        assert title.startswith(f"{nav.number(key)}. "), title
        assert sp.query(page.url).get("preset") == "arithmetic"
        assert sp.exceptions(page) == []
    assert seen == [nav.url_path(k) for k in nav.LECTURE]
    for key in reversed(nav.LECTURE[1:-1]):
        _follow(page, "Back", key)
    assert _path(page.url) == nav.url_path(nav.LECTURE[1])
    context.close()
