"""Open pages in AppTest: through the router ``app.py`` (as a browser does) or a page script alone.

Page files and keys come from the one page table, ``roll_viz/nav.py``.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from streamlit.testing.v1 import AppTest

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / nav.ENTRY)
TIMEOUT = 120


def page_file(page: str) -> str:
    """The script of page ``page`` (a ``nav.PAGES`` key), relative to the router."""
    return nav.page(page).file


@functools.cache
def _deep_links() -> Path:
    """A folder of empty files named after the pages' URL paths (``Token_KL.py``, ...)."""
    folder = Path(tempfile.mkdtemp(prefix="roll_viz_deep_links_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for page in nav.PAGES:
        if page.url_path:
            (folder / f"{page.url_path}.py").touch()
    return folder


def router(page: str | None = None, **params: str) -> AppTest:
    """The router opened at ``page`` (None = Home) with ``params``, as a deep link; not yet run.

    A browser opening ``/Token_KL?G=3`` asks the router for the page whose URL path is
    ``Token_KL``. ``st.Page`` names a page by the hash of its URL path, and before its first run
    AppTest hashes the name of the file given to ``switch_page``: an empty file named after the
    URL path therefore asks for the same page, in a fresh session, as the deep link does.
    """
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    if page is not None and page != nav.HOME:
        at.switch_page(str(_deep_links() / f"{nav.url_path(page)}.py"))
    return at


def open_page(page: str | None = None, **params: str) -> AppTest:
    """Open ``page`` (None = Home) through the router with ``params``; assert no exception."""
    at = router(page, **params)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def page_alone(page: str) -> AppTest:
    """The page script on its own (no router: the page draws the shared sidebar itself)."""
    return AppTest.from_file(str(ROOT / page_file(page)), default_timeout=TIMEOUT)
