"""Real-browser fixtures: a `streamlit run app.py` server on 127.0.0.1 and Debian's Chromium.

The server runs the tiny test model (ROLL_VIZ_MODEL=tiny) and is killed with its whole process
group at teardown. Without /usr/bin/chromium every browser test (marker ``browser``, set in
tests/conftest.py) is skipped with the reason, unless REQUIRE_E2E=1 (CI), which turns that into a
failure. Screenshots go to a temporary folder;
``make screenshots`` (ROLL_VIZ_SCREENSHOTS=1) writes the README's images to docs/screenshots/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.browser import CHROMIUM, CHROMIUM_ARGS
from benchmarks.server import streamlit_server
from roll_viz import nav

ROOT = Path(__file__).resolve().parents[2]
#: where ``make screenshots`` writes the README's images (the suite itself never writes there)
README_SHOTS = ROOT / "docs" / "screenshots"
__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "ROOT"]


def pytest_collection_modifyitems(config, items):
    """Skip (or fail in CI) every test in this folder without a browser."""
    here = Path(__file__).parent
    missing = not Path(CHROMIUM).exists()
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = True
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        if missing and os.environ.get("REQUIRE_E2E") != "1":
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{CHROMIUM} or the playwright package is missing "
                    "(apt-get install -y chromium; REQUIRE_E2E=1 makes this a failure)"
                )
            )


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    """Folder for screenshots: a temporary one, docs/screenshots/ under ROLL_VIZ_SCREENSHOTS=1."""
    if os.environ.get("ROLL_VIZ_SCREENSHOTS") == "1":
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        return README_SHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """Base URL of a headless `streamlit run app.py` on a free local port (tiny model)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"REQUIRE_E2E=1 but {CHROMIUM} is missing (apt-get install -y chromium)")
    runs = str(ROOT / "tests" / "fixtures" / "runs")  # what the Your run page may open
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    with streamlit_server(script=nav.ENTRY, log=log, extra_env={"ROLL_VIZ_RUNS": runs}) as srv:
        yield srv.base


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by the Python playwright package (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


#: runs first in every document of a page: the first time the page (tab) meets an origin, that
#: origin's localStorage (Streamlit's theme and sidebar state) is emptied, as in a new context
FRESH_STORAGE_JS = """(() => { try {
  if (!sessionStorage.getItem('__rvFreshPage')) {
    localStorage.clear(); sessionStorage.setItem('__rvFreshPage', '1');
  }
} catch (e) {} })()"""


def fresh_page(context, timeout_ms: float):
    """A new page in ``context`` with nothing of an earlier test's session state.

    Cookies (the student key, Streamlit's XSRF cookie) are cleared and each origin's
    localStorage is emptied on the page's first visit (``FRESH_STORAGE_JS``); sessionStorage is
    the page's own. What the context keeps is its HTTP cache: Streamlit's scripts load once per
    context, not once per test (a new context per test cost about 0.6 s each).
    """
    context.clear_cookies()
    pg = context.new_page()
    pg.add_init_script(FRESH_STORAGE_JS)
    pg.set_default_timeout(timeout_ms)
    return pg


@pytest.fixture(scope="session")
def page_context(browser):
    """The context the ``page`` fixture opens its pages in (1400 x 1000, downloads accepted)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    yield context
    context.close()


@pytest.fixture
def page(page_context):
    """A fresh page per test, with no session state of an earlier test (``fresh_page``)."""
    pg = fresh_page(page_context, 60_000)
    yield pg
    pg.close()
