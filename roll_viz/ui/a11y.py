"""Accessibility (WCAG 2.1 AA) fixes on Streamlit's own markup: one small script, loaded once.

Streamlit 1.67 offers no option for three things axe-core reports, so ``a11y.js`` sets
attributes (never nodes: React owns the DOM) after every redraw:

- the sidebar navigation draws each section as a ``div`` inside the ``ul`` (axe: list,
  listitem); each section becomes a list of its own, named by its header. Drawing our own
  navigation with ``st.page_link`` would avoid the script but lose Streamlit's navigation (its
  current-page mark, sections, and the links the tests and shared URLs use);
- display formulas and code blocks, which scroll when wide, get ``tabindex=0`` so a keyboard
  can scroll them (axe: scrollable-region-focusable);
- every Plotly chart gets ``role="img"`` and an ``aria-label`` read from the live figure: its
  title, axis titles and each trace's numbers (all of them when few, else their range). One
  place covers every chart of every page, whichever module drew it.

The caption contrast (4.48:1) is fixed in the theme instead (``.streamlit/config.toml``,
``textColor``: Streamlit derives the caption grey from it), and the colours of st.code's
tokens and st.json's values in ``CSS`` below (the theme has no option for them).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st

SCRIPT = Path(__file__).with_name("a11y.js")
#: st.json's colours (react-json-view's rjv-default theme, inline styles: 2.5 to 4.6:1 on white)
#: -> the same hues at least 4.8:1 on #f0f2f6
JSON_COLOURS = {
    "rgb(147, 161, 161)": "#5f6d6d",  # array indices
    "rgba(0, 0, 0, 0.3)": "#6b6b6b",
    "rgb(211, 54, 130)": "#c22b74",
    "rgb(203, 75, 22)": "#b94414",  # strings
    "rgb(220, 50, 47)": "#cd2522",
    "rgb(133, 153, 0)": "#627000",  # floats
    "rgb(108, 113, 196)": "#5c61bd",
    "rgb(42, 161, 152)": "#1e756e",  # booleans
    "rgb(38, 139, 210)": "#1e6ea7",  # integers
}
#: a keyboard user sees where the focus is on a formula, a code block or a page link; st.code's
#: token colours (Streamlit's fixed palette, 2.1 to 3.5:1 on the code's background) darkened in
#: the same hues to at least 4.8:1 on #f0f2f6
CSS = """
[data-testid="stMain"] .katex-display:focus-visible, [data-testid="stCode"] pre:focus-visible {
  outline: 2px solid #2166ac; outline-offset: -2px; }
/* a caption is its text at 60 % opacity, which made a link in it #7c95d2 (2.96:1 on white) and
   inline code too faint: a caption with a link or code is drawn opaque in about the same grey
   (5.1:1 on white, 5.0:1 on the sidebar's grey) and its link in the theme's blue (5.9:1, 5.4:1) */
[data-testid="stCaptionContainer"]:has(a, code) { opacity: 1; color: #6d6d78; }
[data-testid="stCaptionContainer"] a { color: #2166ac; }
/* Streamlit marks a focused page link with the same faint tint as the current page's */
[data-testid="stSidebarNavLink"]:focus-visible, [data-testid="stPageLink-NavLink"]:focus-visible {
  outline: 2px solid #2166ac; outline-offset: -2px; }
[data-testid="stCode"] pre .token.comment, [data-testid="stCode"] pre .token.prolog,
[data-testid="stCode"] pre .token.doctype, [data-testid="stCode"] pre .token.cdata,
[data-testid="stCode"] pre .token.punctuation { color: #66697a; }
[data-testid="stCode"] pre .token.attr-name, [data-testid="stCode"] pre .token.property,
[data-testid="stCode"] pre .token.variable { color: #007394; }
[data-testid="stCode"] pre .token.boolean, [data-testid="stCode"] pre .token.constant,
[data-testid="stCode"] pre .token.symbol, [data-testid="stCode"] pre .token.inserted {
  color: #147934; }
[data-testid="stCode"] pre .token.number, [data-testid="stCode"] pre .token.regex {
  color: #1c7669; }
[data-testid="stCode"] pre .token.string, [data-testid="stCode"] pre .token.char,
[data-testid="stCode"] pre .token.attr-value { color: #067b2a; }
[data-testid="stCode"] pre .token.operator, [data-testid="stCode"] pre .token.entity,
[data-testid="stCode"] pre .token.decorator, [data-testid="stCode"] pre .token.atrule {
  color: #a94f0d; }
[data-testid="stCode"] pre .token.keyword, [data-testid="stCode"] pre .token.tag,
[data-testid="stCode"] pre .token.function, [data-testid="stCode"] pre .token.class-name,
[data-testid="stCode"] pre .token.selector { color: #176bb8; }
[data-testid="stCode"] pre .token.important, [data-testid="stCode"] pre .token.deleted {
  color: #d70000; }
""" + "".join(
    f'[data-testid="stJson"] [style*="color: {old}"] {{ color: {new} !important; }}\n'
    for old, new in JSON_COLOURS.items()
)


@cache
def markup() -> str:
    """The style and script element (read once per process)."""
    return f"<style>{CSS}</style><script>{SCRIPT.read_text(encoding='utf-8')}</script>"


def inject() -> None:
    """Load the fixes on this page (the script runs once per browser tab, then observes)."""
    st.sidebar.html(markup(), unsafe_allow_javascript=True)
