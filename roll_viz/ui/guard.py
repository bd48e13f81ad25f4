"""The page-level catch-all: no traceback ever reaches a page.

Every page runs inside ``with ui.page_guard("Title"):``. Field-level problems are caught where they
are typed (the sidebar shows a message under the field and keeps the last valid value); this is
the net under them: anything unforeseen is logged with its traceback on the server and the
page shows one friendly message with what to change, never server paths or code.

``install_server_guards()`` (the router calls it on every run; it acts once per server process)
sets up what protects every session of the process: the guard on Streamlit's upload endpoint
(``upload_guard``) and the frozen start-up heap (``lm.reaper.freeze_heap``: garbage collection
passes no longer walk the ~455,000 objects of torch, transformers and Streamlit while every
other student waits).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.pages_manager import PagesManager

from roll_viz.lm import models
from roll_viz.ui import upload_guard
from roll_viz.views import text

LOG = logging.getLogger("roll_viz.pages")
_INSTALLED: list[bool] = []
_INSTALL_LOCK = threading.Lock()


def real_server() -> Runtime | None:
    """The running server's Runtime, or None (bare mode, or an AppTest's stand-in)."""
    if not Runtime.exists():
        return None
    runtime = Runtime.instance()
    return runtime if type(runtime) is Runtime else None


def install_server_guards() -> bool:
    """Once per server process: the upload guard and the frozen start-up heap.

    The model stack (transformers, peft) is imported first, so the freeze covers it. Does
    nothing outside a real server (AppTests, bare runs) and on every later call.

    Returns:
        True on the call that installed them.
    """
    runtime = real_server()
    if runtime is None or _INSTALLED:
        return False
    with _INSTALL_LOCK:
        if _INSTALLED:
            return False
        upload_guard.install(runtime)
        import peft  # noqa: F401  (imported before the freeze: they live as long as the process)
        import transformers  # noqa: F401

        frozen = models.freeze_heap()
        _INSTALLED.append(True)
    LOG.info("server guards installed; %d start-up objects frozen out of collection", frozen)
    return True


def page_slot() -> contextlib.AbstractContextManager[bool]:
    """The page run's turn (``lm.admission.PAGE_SLOTS``): at most a few pages draw at once.

    A page that waits for the model gives the turn back meanwhile; none waits more than
    ``admission.MAX_WAIT_S`` for it.
    """
    return models.PAGE_SLOTS.page()


def failure_hint(err: Exception) -> str:
    """What a user can change after ``err``, in one sentence (no code, no file paths).

    A ``ValueError`` from roll-viz is written for users (it names the setting and the allowed
    values), so it is shown; anything else gets a generic hint.
    """
    if isinstance(err, ValueError) and str(err):
        first_line = str(err).splitlines()[0][:300]
        return f"{first_line}. Change that setting in the sidebar, or reset the page."
    if isinstance(err, MemoryError):
        return "The request is too large for the shared server: lower G, the tokens or prompts."
    return (
        "Try another preset, a smaller group size G, or reset the page to its defaults; "
        "the problem was logged on the server."
    )


def leave_legacy_pages_runner() -> None:
    """Rerun through the router when Streamlit ran this page with its legacy ``pages/`` runner.

    Streamlit 1.67 decides once per process, when the first session opens, whether the app is an
    old-style one (``PagesManager.uses_pages_directory``: a folder named ``pages`` beside the
    entry script). Ours is, by name: the first run of a fresh server then goes through that
    runner, whose navigation lists every file of ``pages/`` plus ``app``, and a first visit to
    ``/vote`` runs the page script without the router. ``st.navigation`` (the router) switches
    the runner off; a page the legacy runner started switches it off here and reruns, so the
    router draws the page and its navigation holds exactly the page table. That first run
    carries no widget event, so the rerun loses nothing. AppTest resets the flag before every
    run (a rerun there would drop the click under test): it runs such a page alone, as a page
    script may run (``page_setup`` draws the sidebar).
    """
    if PagesManager.uses_pages_directory and real_server() is not None:
        PagesManager.uses_pages_directory = False
        st.rerun()


@contextlib.contextmanager
def page_guard(title: str) -> Iterator[None]:
    """Run a page; on an unforeseen error log it and show a friendly message instead.

    Streamlit's own control flow (``st.rerun``, ``st.stop``) derives from BaseException and
    passes through untouched.

    Args:
        title: the page's title, for the server log.
    """
    leave_legacy_pages_runner()
    try:
        yield
    except Exception as err:  # the catch-all: the page must never show a traceback
        LOG.exception("page %r failed", title)
        st.error(
            f"**This page could not be drawn with the current settings.**  \n"
            f"What to change: {text.md_escape(failure_hint(err))}",
            icon=":material/sentiment_dissatisfied:",
        )
        st.link_button("Reset this page to its defaults", "?", icon=":material/restart_alt:")
