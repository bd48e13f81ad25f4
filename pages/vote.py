"""Vote: the phone page of a lesson (no sidebar, large buttons, only the current question)."""

from roll_viz import ui
from roll_viz.ui import vote_page

with ui.page_guard("Vote"):
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing
    vote_page.phone_page()
