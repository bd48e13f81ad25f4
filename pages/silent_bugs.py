"""Lessons: the field's silent bugs, one click each (predict, reveal, wrong vs right)."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import silent_bugs_page

with ui.page_guard("Silent bugs"):
    ui.page_setup("Silent bugs")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing
    st.title("Silent bugs: the wrong number and the right one")
    ui.prose(
        "Each of these bugs was reported in a real framework and trained models without any "
        "error message. Pick one, read the tiny batch, **predict** the answer, then reveal the "
        "number the buggy formula gives next to the one roll-viz computes."
    )
    bug = silent_bugs_page.choose_bug()
    silent_bugs_page.lesson(bug)
    ui.back_next("silent_bugs")
