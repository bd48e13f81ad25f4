"""roll-viz: ``streamlit run app.py``. The router: it picks the page and frames it.

The page table is ``roll_viz/nav.py``. The frame draws the shared sidebar before the page runs:
widgets of the entry script belong to every page, so the settings and their query parameters
survive every page switch. Each page still starts with ``ui.page_setup``, which returns the
frame's state here and draws the sidebar itself when the page script runs on its own.
``guard.install_server_guards`` acts once per server process (the upload guard, the frozen
start-up heap); ``guard.page_slot`` lets a few page runs draw at a time (``lm.admission``).
"""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import guard, nav

guard.install_server_guards()
with guard.page_slot():  # a few page runs at a time, so the server keeps answering everyone
    page = st.navigation(nav.sections(), expanded=True)  # every page listed, no 'View more'
    with ui.frame(page.title):
        page.run()
