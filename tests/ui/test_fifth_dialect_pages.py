"""The toy fifth framework (tests/core/test_fifth_dialect.py, one file) on every page.

Registering the record is all it takes: the sidebar offers it, every page opens on it with no
exception and no error box of the app's own making, and the pages name it by its label and its
own keys. Nothing outside the toy's file is touched, so a page that kept a private list of the
four frameworks (a label table built at import, a select over the shipped four) fails here.
"""

from __future__ import annotations

import pytest
from core.test_fifth_dialect import NAME, TOY

from roll_viz import nav
from roll_viz.core.pipeline import dialects
from roll_viz.ui.state import KEY_FRAMEWORK
from tests.ui.apptest import TIMEOUT, router

#: every page but the lesson pair (a room, not a framework: they read no framework setting)
PAGES = tuple(p.key for p in nav.PAGES if p.key not in nav.OFF_TOUR)


@pytest.fixture(scope="module")
def toy():
    dialects.register(TOY)
    try:
        yield TOY
    finally:
        dialects.unregister(NAME)


def _open(page: str, framework: str | None = None):
    """``page`` with the sidebar's framework set (AppTest does not read a bound widget's URL)."""
    at = router(page)
    if framework is not None:
        at.session_state[KEY_FRAMEWORK] = framework
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.message for e in at.exception]
    return at


def _framework_select(at):
    return next(s for s in at.sidebar.selectbox if s.key == KEY_FRAMEWORK)


def test_without_the_toy_the_sidebar_offers_the_four():
    # first in the file: it runs before the module's toy fixture registers the toy
    at = _open("home")
    assert len(_framework_select(at).options) == len(dialects.FRAMEWORKS)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_the_toy(toy, page):
    at = _open(page, NAME)
    select = _framework_select(at)
    assert select.value == NAME, f"{page}: the sidebar dropped the toy"
    assert NAME in select.options
    errors = [e.value for e in at.error]
    assert not errors, f"{page}: {errors}"


def test_the_sidebar_names_the_toys_own_keys(toy):
    at = _open("advantages", NAME)
    labels = " ".join(w.label for w in at.sidebar.slider) + " ".join(
        w.label for w in at.sidebar.number_input
    )
    assert "kl_weight" in labels  # beta, under the toy's own name


def test_the_frameworks_page_compares_the_toy(toy):
    """The comparison runs every registered dialect: the toy is a row, or says why it is not."""
    at = _open("frameworks")
    rows = {
        str(v) for d in at.dataframe if "dialect" in d.value.columns for v in d.value["dialect"]
    }
    said = [i.value for i in at.info if i.value.startswith("Toy RL")]
    assert NAME in rows or said, (rows, [i.value for i in at.info])
