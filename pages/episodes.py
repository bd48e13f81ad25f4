"""Beyond one step: multi-turn, tool-using episodes, the loss mask over a transcript, credit per turn."""

import streamlit as st

from roll_viz import ui
from roll_viz.ui import episodes_page as page

with ui.page_guard("Episodes (multi-turn)"):
    state = ui.page_setup("Episodes (multi-turn)")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing
    st.title("Episodes: an agent, a tool, and which tokens learn")
    ui.prose(
        "An **episode** is a conversation: the model writes, a tool answers, the model writes "
        "again. The whole transcript is one sequence, but only the tokens the model **sampled** "
        "may carry gradient; the tool's answer and the prompt are context. Then the reward, "
        "given once at the end, has to be split over the turns: **credit per turn**."
    )
    with ui.folded("Which episodes: recorded, live or a file"):
        data = page.source_controls(state)
    if data is None:
        ui.stop_page("episodes")
    page.draw_views(data)
    ui.back_next("episodes")
