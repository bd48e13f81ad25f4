"""The teaching loop's steps on the teacher's page: what did you see, the follow-up, the gain.

"What did you see?", the follow-up drawn in class, and the class's own gain at the end
(``analysis.class_gain``).

A follow-up that the model samples (``Gate.resample``) gets its seed when the class first
reaches it: drawn here (``secrets``, never a global RNG), kept in the room (``STORE.set_note``,
so a refresh of the teacher's browser, or another process of a lecture hall, finds the same
batch) and sampled through the app's one door (``flow.sample_live``, cached by its settings).
The phones answer it alone; its reveal and the summary read the same fresh batch.
"""

from __future__ import annotations

from collections import Counter

import streamlit as st

from roll_viz.analysis.class_gain import Gain, class_gain
from roll_viz.analysis.lesson_answers import GateResult
from roll_viz.data.lessons import Lesson
from roll_viz.ui.rooms import STORE
from roll_viz.views import lesson_charts
from roll_viz.views.text import md_escape

#: what the teacher's caption says of a step, by role
ROLE_CAPTION = {
    "gate": "",
    "seen": " · what did you see?",
    "followup": " · the same question on a fresh batch, answered alone",
    "knob": " · change one knob",
    "summary": " · the class's results",
}
#: what a phone says above the question, by role ("" = nothing)
PHONE_NOTE = {
    "seen": "What did you see on the screen?",
    "followup": "A fresh batch, the same question: answer alone, without discussing.",
}
#: steps without a re-vote (answered once, alone) and the summary, which takes no vote
SINGLE_ROUND = frozenset({"seen", "followup", "summary"})


def answers_of(code: str, key: str, steps: range) -> dict[int, dict[int, Counter]]:
    """Each step's answers: round -> answer -> count, from the room's tallies."""
    return {s: STORE.tally(code, key, s).rounds for s in steps}


def summary_view(code: str, key: str, lesson: Lesson, results: dict[int, GateResult]) -> None:
    """The last step: each question's first vote, after discussion, and the follow-up alone."""
    answers = answers_of(code, key, range(len(lesson.steps)))
    rights = {i: r.is_right for i, r in results.items()}
    gains = class_gain(lesson, answers, rights)
    if not gains:
        st.info("No question of this lesson has a follow-up yet.")
        return
    figure = lesson_charts.class_gain(gains)
    st.plotly_chart(figure, key="lesson_gain", theme=None, config={"displaylogo": False})
    st.caption(
        "Right answers: first vote (alone, before discussion), after discussion (the re-vote), "
        "and on the follow-up (a fresh batch, alone). Learning feels harder than it is: "
        "look at the last column (Deslauriers et al. 2019)."
    )
    st.table({"question": [md_escape(g.question) for g in gains]} | _columns(gains))


def _columns(gains: tuple[Gain, ...]) -> dict[str, list[str]]:
    def pct(x: float | None, n: int) -> str:
        return "-" if x is None else f"{x:.0%} of {n}"

    return {
        "first vote": [pct(g.first, g.answered[0]) for g in gains],
        "after discussion": [pct(g.discussed, g.answered[1]) for g in gains],
        "follow-up, alone": [pct(g.followup, g.answered[2]) for g in gains],
    }
