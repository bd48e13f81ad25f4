"""Presentation mode for a projector: larger type, the figure first, controls hidden by key.

``?present=true`` enlarges fonts in prose, charts and tables and folds explainers and intro prose
into expanders (``widgets.explainer``, ``widgets.prose``), so each page's key figure is in the
first screen at 1280 x 720; ``&hide=beta,gamma`` hides those controls and ``&hide=sidebar`` the
whole sidebar, with a "Show the controls" button to bring it back.

In every mode: a row that holds an explainer stacks it under the figure when the main column is
narrower than 1000 px, display formulas and wide tables scroll inside themselves (the page never
scrolls sideways), and live progress (sampling, model loading) is drawn in the frame's slot at
the top of the main column (``top_slot``), whatever the page computes first.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from roll_viz.ui import a11y
from roll_viz.ui.state import KEY_HIDE, KEY_PRESENT
from roll_viz.ui.url import bound

#: what a hidden control's key may be (it goes into a CSS selector)
HIDE_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")

# No zoom on tables: they draw on a canvas sized by its container, and a zoomed one was laid out
# wider than it showed, its right-hand columns cut; ``table_fit`` fits their columns instead.
PRESENT_CSS = """
<style>
[data-testid="stMain"] { font-size: 21px; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.2rem; }
[data-testid="stMain"] [data-testid="stHeading"] h1 { font-size: 2.6rem; }
[data-testid="stMain"] .katex { font-size: 1.35em !important; }
[data-testid="stMain"] [data-testid="stMetricValue"] { font-size: 2.8rem; }
/* a metric's value and label are Markdown too: without these the 1.2rem prose rule above drew
   the value at 19 px under a label of the same size */
[data-testid="stMain"] [data-testid="stMetricValue"] [data-testid="stMarkdownContainer"] p {
  font-size: 2.8rem; }
[data-testid="stMain"] [data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"] p {
  font-size: 1.05rem; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] { font-size: 1.05rem; }
/* the header bar holds only the menu (and "Show the controls"): start the page under it */
[data-testid="stMainBlockContainer"] { padding-top: 3.5rem; }
</style>
"""

BASE_CSS = """
<style>
.rv-chips { line-height: 2.0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
a.rv-link { display: inline-block; padding: 0.35rem 0.8rem; border: 1px solid #2166ac;
  border-radius: 0.5rem; color: #2166ac; text-decoration: none; font-weight: 600; }
a.rv-link:hover { background: #2166ac; color: #ffffff; }
/* the run step's URL fields: the sidebar names the run in words */
.st-key-dump, .st-key-dump_step { display: none; }
/* nothing scrolls the page sideways: formulas and tables scroll inside themselves */
[data-testid="stMain"] .katex-display { overflow-x: auto; overflow-y: hidden; max-width: 100%; }
[data-testid="stMain"] [data-testid="stDataFrame"] { max-width: 100%; overflow-x: auto; }
[data-testid="stMain"] pre { white-space: pre-wrap; word-break: break-word; }
/* "Show the controls" floats in the page's header bar instead of taking a row of its own */
.st-key-show_sidebar { position: fixed; top: 0.6rem; left: 1rem; z-index: 1000001;
  width: auto !important; }
[data-testid="stMainBlockContainer"] { container-type: inline-size; container-name: rvmain; }
/* a narrow main column: the explainer beside a figure goes under it */
@container rvmain (max-width: 1000px) {
  [data-testid="stHorizontalBlock"]:has(.rv-explainer) { flex-direction: column; }
  [data-testid="stHorizontalBlock"]:has(.rv-explainer) > [data-testid="stColumn"] {
    width: 100% !important; flex: 1 1 100% !important; }
}
</style>
"""

_TOP = threading.local()  # this script run's slot at the top of the main column


def is_present() -> bool:
    """Whether this session shows the projector mode (``?present=true``)."""
    return bool(st.session_state.get(KEY_PRESENT))


def sidebar_hidden() -> bool:
    """Whether ``hide`` names the whole sidebar (the projector's link: ``hide=sidebar``)."""
    return "sidebar" in (h.strip() for h in str(st.session_state.get(KEY_HIDE) or "").split(","))


def open_top_slot() -> None:
    """Reserve the slot at the top of the main column for this run's live progress."""
    _TOP.slot = st.container()


def close_top_slot() -> None:
    """Forget the slot (the run ended)."""
    _TOP.slot = None


@contextmanager
def top_slot() -> Iterator[None]:
    """Draw inside the slot at the top of the main column (in place when there is none)."""
    slot = getattr(_TOP, "slot", None)
    if slot is None:
        yield
        return
    with slot:
        yield


def presentation_controls() -> tuple[bool, tuple[str, ...]]:
    """The presentation controls (bound to the URL: ``?present=true&hide=beta,gamma``)."""
    with st.sidebar.expander("Presentation mode", expanded=False):
        present = bound(
            st.toggle,
            "Presentation mode (larger fonts)",
            value=False,
            key=KEY_PRESENT,
            help="For a projector. In the URL as present=true.",
        )
        hide_text = bound(
            st.text_input,
            "Hide these controls",
            value="",
            key=KEY_HIDE,
            placeholder="beta,gamma  (or: sidebar)",
            help="Comma-separated control keys as they appear in the URL (beta, gamma, lam, G, "
            "seed, fw, est, ...); 'sidebar' hides the whole sidebar. In the URL as hide=...",
        )
    # keys only (letters, digits, _ and -): the text goes into a CSS selector
    parts = (p.strip() for p in (hide_text or "").split(","))
    hide = tuple(h for h in parts if HIDE_KEY_RE.match(h))
    return bool(present), hide


def _show_sidebar(kept: str) -> None:
    """Callback: drop 'sidebar' from the hidden controls (the URL follows)."""
    st.session_state[KEY_HIDE] = kept


def inject_css(present: bool, hide: tuple[str, ...]) -> None:
    """The app's CSS: links, the projector mode, and the controls ``hide`` names."""
    css = BASE_CSS
    if present:
        css += PRESENT_CSS
    rules = []
    for key in hide:
        if key == "sidebar":
            rules.append('[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"]')
        else:
            rules.append(f".st-key-{key}")
    if rules:
        css += "<style>" + ", ".join(rules) + " { display: none !important; }</style>"
    st.html(css)
    a11y.inject()  # WCAG fixes on Streamlit's markup (navigation list, formulas, charts)
    if "sidebar" in hide:
        # the sidebar and its toggle are hidden: leave a visible way back (same tab, same state)
        st.button(
            "Show the controls",
            key="show_sidebar",
            on_click=_show_sidebar,
            args=(",".join(h for h in hide if h != "sidebar"),),
            icon=":material/tune:",
            type="tertiary",
        )
