"""Accessibility (WCAG 2.1 AA) fixes on Streamlit's own markup: one small script, loaded once.

Streamlit 1.67 offers no option for three things axe-core reports, so ``a11y.js`` sets
attributes (never nodes: React owns the DOM) after every redraw:

- the sidebar navigation draws each section as a ``div`` inside the ``ul`` (axe: list,
  listitem); each section becomes a list of its own, named by its header. Drawing our own
  navigation with ``st.page_link`` would avoid the script but lose Streamlit's navigation (its
  current-page mark, sections, and the links the tests and shared URLs use);
- display formulas that scroll sideways get ``tabindex=0`` so a keyboard can scroll them
  (axe: scrollable-region-focusable);
- every Plotly chart gets ``role="img"`` and an ``aria-label`` read from the live figure: its
  title, axis titles and each trace's numbers (all of them when few, else their range). One
  place covers every chart of every page, whichever module drew it.

The caption contrast (4.48:1) is fixed in the theme instead (``.streamlit/config.toml``,
``textColor``: Streamlit derives the caption grey from it).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st

SCRIPT = Path(__file__).with_name("a11y.js")
#: a keyboard user sees where the focus is on a formula (Streamlit styles its own widgets)
CSS = """
[data-testid="stMain"] .katex-display:focus-visible { outline: 2px solid #2166ac;
  outline-offset: 2px; }
"""


@cache
def markup() -> str:
    """The style and script element (read once per process)."""
    return f"<style>{CSS}</style><script>{SCRIPT.read_text(encoding='utf-8')}</script>"


def inject() -> None:
    """Load the fixes on this page (the script runs once per browser tab, then observes)."""
    st.sidebar.html(markup(), unsafe_allow_javascript=True)
