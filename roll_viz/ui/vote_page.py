"""The phones' page of a lesson: join a room, answer the current question, nothing else.

``pages/vote.py``: no sidebar, no login, large buttons, 360 px wide. It joins with the room
code from its link under an anonymous token derived from the phone's browser
(``votes.voter_token`` of its student-key cookie, ``reconnect.student_key``): the token is never
in the URL, so a refresh keeps the student's vote and a made-up token in a link adds no student.
It shows only the current question and the student's own answer, and polls the room every
``PHONE_POLL_S`` seconds so it follows the teacher. It never shows other students' answers or
how many answered. Every vote goes through the bounded store (``rooms.STORE``: in-process, or
Redis in a lecture hall).
"""

from __future__ import annotations

import streamlit as st

from roll_viz.ui import reconnect
from roll_viz.ui.lesson_loop import PHONE_NOTE
from roll_viz.ui.lesson_page import LETTERS
from roll_viz.ui.lesson_steps import answer_label
from roll_viz.ui.rooms import STORE
from roll_viz.ui.votes import STORE_REASONS, VoteError, voter_token
from roll_viz.views.text import md_escape

PHONE_POLL_S = 2.0
KEY_PHONE_MSG = "_vote_message"
KEY_NUMBER = "vote_number"
OLD_TOKEN = "s"  # where the token used to be: dropped from any URL that still has it

PHONE_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
[data-testid="stSidebarNav"], header[data-testid="stHeader"] { display: none !important; }
.block-container { padding: 1rem 0.75rem 3rem 0.75rem !important; max-width: 40rem; }
.stButton button { min-height: 3.5rem; font-size: 1.15rem; white-space: normal; }
.stButton button p { font-size: 1.15rem; }
</style>"""


def _cast(code: str, token: str, step: int, rnd: int, answer: float) -> None:
    try:
        STORE.vote(code, token, step, rnd, answer)
    except VoteError as err:
        st.session_state[KEY_PHONE_MSG] = str(err)


def _cast_number(code: str, token: str, step: int, rnd: int) -> None:
    _cast(code, token, step, rnd, st.session_state.get(f"{KEY_NUMBER}_{step}_{rnd}"))


def _join_form() -> None:
    st.title("Join the lesson")
    typed = st.text_input("Room code (on the screen)", max_chars=5, key="vote_code")
    if st.button("Join", type="primary", width="stretch", key="vote_join") and typed:
        st.query_params["room"] = typed.strip().upper()
        st.rerun()


@st.fragment(run_every=PHONE_POLL_S)
def _phone_question(code: str, token: str) -> None:
    try:
        view = STORE.view(code)
        lesson = STORE.content(code)
        mine = STORE.my_answer(code, token)
    except VoteError as err:
        if err.reason in STORE_REASONS:  # the hall's Redis: down (may come back) or emptied
            st.error(md_escape(str(err)))
        else:
            st.warning("This lesson has ended. Thank you!")
        return
    gate = lesson.steps[view.step]
    again = " · vote again" if view.round > 1 else ""
    st.caption(f"Room {code} · question {view.step + 1} of {view.n_steps}{again}")
    if gate.role == "summary":
        st.info("The class's results are on the screen. Thank you!")
        return
    note = PHONE_NOTE.get(gate.role)
    if note:
        st.markdown(f"**{md_escape(note)}**")
    st.markdown(f"#### {md_escape(gate.question)}")
    message = st.session_state.pop(KEY_PHONE_MSG, None)
    if message:
        st.warning(md_escape(message))
    if view.phase == "open":
        if gate.kind == "number":
            st.slider(
                "Your answer",
                min_value=float(gate.low),
                max_value=float(gate.high),
                step=float(gate.step),
                value=float(mine) if mine is not None else float(gate.low + gate.high) / 2,
                key=f"{KEY_NUMBER}_{view.step}_{view.round}",
            )
            st.button(
                "Send",
                type="primary",
                width="stretch",
                key=f"vote_send_{view.step}_{view.round}",
                on_click=_cast_number,
                args=(code, token, view.step, view.round),
            )
        else:
            for i, label in enumerate(gate.labels):
                st.button(
                    f"{LETTERS[i]}. {md_escape(label)}",
                    key=f"vote_{view.step}_{view.round}_{i}",
                    type="primary" if mine == float(i) else "secondary",
                    width="stretch",
                    on_click=_cast,
                    args=(code, token, view.step, view.round, i),
                )
        if mine is not None:
            st.success(
                f"Your answer: {md_escape(answer_label(gate, mine))}. "
                "You can change it until the vote closes."
            )
        else:  # also after a reconnect that lost it: what to redo
            st.caption("No answer from this phone yet: tap yours.")
    elif view.phase == "locked":
        st.info(f"The vote is closed. Your answer: {md_escape(answer_label(gate, mine)) or '-'}")
    else:
        st.info(
            "Look at the screen for the answer. "
            f"Your answer: {md_escape(answer_label(gate, mine)) or '-'}"
        )


def phone_page() -> None:
    """The phone's page: join with the room code from the link, then answer the current step."""
    st.set_page_config(
        page_title="Vote - roll-viz", layout="centered", initial_sidebar_state="collapsed"
    )
    st.html(PHONE_CSS)
    code = (st.query_params.get("room") or "").strip().upper()
    try:
        STORE.view(code)
    except VoteError as err:
        if err.reason == "store_down":
            st.error(md_escape(str(err)))
            return
        if err.reason == "store_lost":  # the teacher starts again: the phone joins the new room
            st.error(md_escape(str(err)))
        elif code:
            st.warning("No lesson with this room code (it may have ended).")
        _join_form()
        return
    st.query_params.pop(OLD_TOKEN, None)  # a token in a link is never obeyed (old or forged)
    reconnect.remember_student()  # the cookie that makes a reload the same student
    token = voter_token(reconnect.student_key(), code)
    try:
        if not STORE.knows(code, token):
            STORE.join(code, token)
    except VoteError as err:  # full, or the store failed since the view above
        st.error(md_escape(str(err)))
        return
    _phone_question(code, token)
