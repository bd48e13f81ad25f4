"""Back and Next: every page's links follow the README's lecture recipe, numbered from one list.

The order lives in ``roll_viz/nav.py`` (``LECTURE``, then the other pages: ``tour``); the README's
recipe table must name the same pages in the same order, and every page of the tour must draw
its own Back and Next (opened through the router in AppTest, as a browser does).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roll_viz import nav
from tests.ui import apptest

README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_TITLE = "**Page order, and the link for each point**"


def recipe_pages() -> list[str]:
    """The page column of the README's recipe table, a page repeated on the next row once."""
    text = README.read_text()
    start = text.index(TABLE_TITLE)
    rows = [r for r in text[start:].split("\n\n")[1].splitlines() if r.startswith("| ")][2:]
    pages = [row.split("|")[2].strip() for row in rows]
    return [p for i, p in enumerate(pages) if i == 0 or p != pages[i - 1]]


def test_the_lecture_order_is_the_readme_recipe():
    assert recipe_pages() == [nav.page(key).title for key in nav.LECTURE]


def test_the_tour_holds_every_page_but_the_classroom_tools_once():
    tour = nav.tour()
    assert tour[: len(nav.LECTURE)] == nav.LECTURE
    assert sorted(tour) == sorted(p.key for p in nav.PAGES if p.key not in nav.OFF_TOUR)
    # lecture pages numbered 1, 2, ... after Home; nothing else numbered
    assert [nav.number(k) for k in nav.LECTURE] == [None, *range(1, len(nav.LECTURE))]
    assert all(nav.number(k) is None for k in tour[len(nav.LECTURE) :])


def _links(at) -> dict[str, tuple[str, str]]:
    """'back' / 'next' -> (label, URL path) of the page's Back and Next links."""
    out = {}
    for link in at.get("page_link"):
        label = link.proto.label
        if label.startswith("\u2190 Back: "):
            out["back"] = (label, link.proto.page)
        elif label.startswith(("Next: ", "Back to the start: ")):
            out["next"] = (label, link.proto.page)
    return out


@pytest.mark.parametrize("key", nav.tour())
def test_back_and_next_follow_the_tour(key):
    at = apptest.open_page(key)
    back, after = nav.neighbours(key)
    links = _links(at)
    if back is None:
        assert "back" not in links
    else:
        assert links["back"] == (f"\u2190 Back: {nav.numbered_title(back)}", nav.url_path(back))
    word = "Back to the start" if after == nav.HOME else "Next"
    assert links["next"] == (f"{word}: {nav.numbered_title(after)} \u2192", nav.url_path(after))
    # the title carries the same number as the links to this page
    title = at.title[0].value
    n = nav.number(key)
    if n:
        assert title.startswith(f"{n}. "), title
    else:
        assert not re.match(r"^\d+\. ", title), title


def test_next_from_home_walks_the_lecture_in_the_recipe_order():
    key, seen = nav.HOME, []
    for _ in nav.LECTURE:
        seen.append(key)
        key = nav.neighbours(key)[1]
    assert seen == list(nav.LECTURE)
    assert [nav.neighbours(k)[0] for k in nav.LECTURE[1:]] == list(nav.LECTURE[:-1])
