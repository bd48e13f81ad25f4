"""A fix gate on the teacher's page: the run to fix, then the class's top choices side by side.

Productive failure (Sinha & Kapur 2021): the class tries knob changes before the explanation.
Before the reveal the projector shows the recorded collapsing run under the options; pairs
choose one change on their phones. On the reveal the recorded runs of the class's top choices
(``analysis.fix_votes.top_choices``: the re-vote's if there was one, ties by option order) play
side by side against the collapse, then the gate's explanation. Nothing advances by itself.
Every curve is a real recording (``data.recorded_runs``).
"""

from __future__ import annotations

import streamlit as st

from roll_viz.analysis.fix_votes import TOP_CHOICES, top_choices
from roll_viz.analysis.lesson_answers import GateResult
from roll_viz.data.lessons import Gate
from roll_viz.data.recorded_runs import RECORDED
from roll_viz.ui.rooms import STORE
from roll_viz.views import lesson_charts
from roll_viz.views.text import count, md_escape

#: the teacher's caption of a fix gate (beside the role's)
CAPTION = " · fix this run: pairs choose one change"
_CHART = {"displaylogo": False}


def _run_name(gate: Gate) -> str:
    return gate.batch.removeprefix("recorded:")


def before_reveal(gate: Gate, result: GateResult) -> None:
    """Under the controls while the class votes: the recorded run the class is asked to fix."""
    run = RECORDED[_run_name(gate)]
    figure = lesson_charts.run_curves(result.env, f"The run to fix: {run.title}")
    st.plotly_chart(figure, key="lesson_fix_run", theme=None, config=_CHART)
    st.caption(
        f"A real recording: {md_escape(run.description)} Each option was trained the same way, "
        "with its one change; the reveal plays the class's top choices."
    )


def reveal(code: str, key: str, gate: Gate, result: GateResult) -> None:
    """On the reveal: the top choices' recorded runs side by side, then the explanation."""
    tally = STORE.tally(code, key)
    picked = top_choices(tally.rounds, len(gate.choices))
    if picked:
        rnd = max(r for r, n in tally.answered.items() if n)
        votes = tally.rounds[rnd]
        when = "after discussion" if rnd > 1 else "first vote"
        head = f"The class's top choices ({when}): " + " · ".join(
            f"{lesson_charts.LETTERS[i]} ({count(int(votes.get(float(i), 0)), 'vote')})"
            for i in picked
        )
    else:  # nothing to rank: say so, and play the options in the file's order
        picked = tuple(range(min(TOP_CHOICES, len(gate.choices))))
        head = f"Nobody voted: the first {len(picked)} options, in the lesson's order."
    outcomes = [result.outcomes[i] for i in picked]
    base = RECORDED[_run_name(gate)]
    figure = lesson_charts.fix_outcomes(result.env, outcomes, f"the collapse ({base.title})")
    st.caption(md_escape(head))
    st.plotly_chart(figure, key="lesson_fix_outcomes", theme=None, config=_CHART)
    st.caption(
        "Dashed grey: the collapsing run. Each column: the recorded run of one change, "
        + " · ".join(
            f"{lesson_charts.LETTERS[o.choice]}: {md_escape(RECORDED[o.run].title)}"
            for o in outcomes
        )
    )
    if gate.explanation:  # then the explanation; the teacher moves on
        st.markdown(md_escape(gate.explanation))
