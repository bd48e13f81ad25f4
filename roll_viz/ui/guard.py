"""The page-level catch-all: no traceback ever reaches a page.

Every page runs inside ``with ui.page_guard("Title"):``. Field-level problems are caught where they
are typed (the sidebar shows a message under the field and keeps the last valid value); this is
the net under them: anything unforeseen is logged with its traceback on the server and the
page shows one friendly message with what to change, never server paths or code.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import streamlit as st

from roll_viz.views import text

LOG = logging.getLogger("roll_viz.pages")


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


@contextlib.contextmanager
def page_guard(title: str) -> Iterator[None]:
    """Run a page; on an unforeseen error log it and show a friendly message instead.

    Streamlit's own control flow (``st.rerun``, ``st.stop``) derives from BaseException and
    passes through untouched.

    Args:
        title: the page's title, for the server log.
    """
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
