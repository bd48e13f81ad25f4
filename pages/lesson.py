"""Lesson: the class predicts, votes from their phones, then the pipeline reveals the answer."""

from roll_viz import ui
from roll_viz.ui import lesson_page

with ui.page_guard("Lesson"):
    state = ui.page_setup("Lesson")
    ui.steady_page()  # reads no algorithm knob: a knob move reruns nothing
    lesson_page.teacher_page(state)
