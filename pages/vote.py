"""Vote: the phone page of a lesson (no sidebar, large buttons, only the current question)."""

from roll_viz import ui
from roll_viz.ui import vote_page

with ui.page_guard("Vote"):
    vote_page.phone_page()
