"""The navigation: ``st.Page`` objects and sections built from the one page table.

``roll_viz.nav.PAGES`` holds the data (key, file, title, URL path, section); this module turns it
into what ``st.navigation`` takes. ``app.py`` calls ``sections()`` on every run and runs the page
it returns; each page still draws its own sidebar (``page_setup``), so a page script also runs
alone.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[2]  # where app.py and pages/ live


def st_page(page: nav.Page) -> st.Page:
    """The ``st.Page`` of one table row (Home is the default page, served at ``/``)."""
    return st.Page(
        ROOT / page.file,
        title=page.title,
        url_path=page.url_path or None,
        default=page.key == nav.HOME,
    )


def sections() -> dict[str, list[st.Page]]:
    """Section header -> its pages, in the table's order (the argument of ``st.navigation``)."""
    out: dict[str, list[st.Page]] = {}
    for page in nav.PAGES:
        out.setdefault(page.section, []).append(st_page(page))
    return out
