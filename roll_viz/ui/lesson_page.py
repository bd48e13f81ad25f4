"""The lesson page: the teacher's projector view (the phones' page is ``vote_page``).

Teacher (``pages/lesson.py``): pick a lesson (built-in or an uploaded TOML file; a bad file
gets one message naming the gate and the field), start it, and get a room code, a link and a QR
code. Each step shows one question; the teacher opens, locks and reveals the vote, asks for a
re-vote after discussion, resets, moves next or back, and downloads the answers as CSV. On
reveal the class's distribution stands next to the pipeline's own answer, with its formula and
one figure. The room lives in the server's vote store (``rooms.STORE``: in-process, or Redis in
a lecture hall). The page's URL carries
the room code only: the teacher key is derived from this browser's student-key cookie
(``reconnect.student_key``, ``SameSite=Strict``; ``votes.owner_key``), so the projected or copied
link controls nothing, while a refresh of the teacher's own browser keeps the room.

Why a page of the app and not a custom ``/api/vote`` route: a route needs Streamlit's ASGI entry
point (``st.App`` under uvicorn), while the embedded default is ``streamlit run app.py``, which
serves pages only; a page needs no second server, no extra port and no CORS, and every vote
still goes through the same bounded store.
"""

from __future__ import annotations

import contextlib
import functools
import io
import urllib.parse
from typing import Any, NamedTuple

import segno
import streamlit as st

from roll_viz import nav
from roll_viz.analysis.class_gain import share_right
from roll_viz.analysis.lesson_answers import GateResult
from roll_viz.data.lessons import (
    LESSON_DIR,
    MAX_FILE_BYTES,
    Gate,
    Lesson,
    LessonError,
    builtin_lesson_ids,
)
from roll_viz.lm import models
from roll_viz.ui import lesson_fix, lesson_loop, lesson_steps, reconnect
from roll_viz.ui.rooms import STORE
from roll_viz.ui.votes import STORE_REASONS, VoteError, owner_key
from roll_viz.views import lesson_charts
from roll_viz.views.text import md_escape

TEACHER_POLL_S = 2.0
VOTE_PATH = nav.url_path("vote")  # the phone page's URL path
KEY_LESSON_CHOICE = "lesson"  # in the URL: ?lesson=seed_chain
KEY_ROOM = "room"  # in the URL: ?room=<code>, the only part of a room a URL carries
OLD_KEY = "key"  # where the teacher key used to be: dropped from any URL that still has it
KEY_UPLOAD = "lesson_upload"
UPLOAD_CHOICE = "Upload a lesson file (.toml)"
LETTERS = "ABCDEFGH"

TEACHER_CSS = """<style>
[data-testid="stMain"] .lesson-question p {
  font-size: 2rem !important; line-height: 1.3; font-weight: 600; }
[data-testid="stMain"] .st-key-lesson_options p { font-size: 1.5rem !important; }
/* the reveal points at one number: the pipeline's answer, large (Miller et al. 2013) */
[data-testid="stMain"] .st-key-lesson_answer p {
  font-size: 2.6rem !important; line-height: 1.2; font-weight: 700; color: #1a6b34; }
[data-testid="stMain"] [data-testid="stMetricValue"] * { font-size: 2.8rem !important; }
.lesson-code { font-size: 3rem; font-weight: 700; letter-spacing: 0.3rem; }
/* presentation mode stacks columns; the question beside the join panel and the row of controls
   stay side by side (one screen at 1280 x 720) */
[data-testid="stMain"] .st-key-lesson_top [data-testid="stHorizontalBlock"],
[data-testid="stMain"] .st-key-lesson_controls [data-testid="stHorizontalBlock"] {
  flex-direction: row !important; }
[data-testid="stMain"] .st-key-lesson_controls [data-testid="stColumn"] {
  width: auto !important; flex: 1 1 0 !important; min-width: 0 !important; }
[data-testid="stMain"] .st-key-lesson_top [data-testid="stColumn"] {
  width: auto !important; flex: 1 1 0 !important; min-width: 0 !important; }
[data-testid="stMain"] .st-key-lesson_top [data-testid="stColumn"]:first-child {
  flex: 3 1 0 !important; }
</style>"""


# ---------------------------------------------------------------------------------------------
# Phones' link
# ---------------------------------------------------------------------------------------------


class PhoneLink(NamedTuple):
    """Where phones join a room.

    Attributes:
        url: the phone page's link with the room code, or None when no phone could open one
            (the page is on a loopback host and this machine has no network address).
        note: one line for the teacher about it ("" when there is nothing to say).
    """

    url: str | None
    note: str


SAME_NETWORK = "Phones must be on the same network as this computer."
NO_NETWORK = (
    "This computer has no network address, so no phone can reach it: connect it to the "
    "classroom network or a phone's hotspot, then reload this page (docs/lessons.md, "
    "Classroom network)."
)


def phone_link(page_url: str | None, code: str, lan_ip: str | None) -> PhoneLink:
    """The phones' link of a room, from the teacher page's own URL.

    On a loopback host (``localhost``, ``127.x``, ``[::1]``: the teacher's browser runs on the
    server) the link takes this machine's network address instead, as Streamlit's "Network URL"
    does, with the port and scheme of the page; any other host is kept (the phones reach the
    server the way the teacher's browser did).

    Args:
        page_url: the teacher page's URL (``st.context.url``), None when unknown.
        code: the room code.
        lan_ip: this machine's network address (``models.network_ip()``), None when offline.
    """
    path = f"/{VOTE_PATH}?room={code}"
    if not page_url or not page_url.startswith(("http://", "https://")):
        return PhoneLink(path, "")
    parts = urllib.parse.urlsplit(page_url)
    try:
        port = parts.port
    except ValueError:  # a malformed port: keep the host as the browser sent it
        return PhoneLink(f"{parts.scheme}://{parts.netloc}{path}", "")
    if not models.is_loopback(parts.hostname):
        return PhoneLink(f"{parts.scheme}://{parts.netloc}{path}", "")
    if lan_ip is None:
        return PhoneLink(None, NO_NETWORK)
    return PhoneLink(f"{parts.scheme}://{models.host_port(lan_ip, port)}{path}", SAME_NETWORK)


def _page_url() -> str | None:
    try:
        return st.context.url
    except (AttributeError, RuntimeError):
        return None


def vote_link(code: str) -> PhoneLink:
    """The phones' link of a room as this teacher's browser should show it (``phone_link``)."""
    return phone_link(_page_url(), code, models.network_ip())


@functools.lru_cache(maxsize=64)
def qr_png(text: str, scale: int = 8) -> bytes:
    """A QR code of ``text`` as PNG bytes (black on white, a 4-module quiet zone)."""
    out = io.BytesIO()
    segno.make(text, error="m").save(out, kind="png", scale=scale, border=4)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Teacher
# ---------------------------------------------------------------------------------------------


def teacher_key(code: str) -> str:
    """This browser's teacher key for room ``code`` (derived from its student key, never shown)."""
    return owner_key(reconnect.student_key(), code)


def _start_room(lesson: Lesson) -> None:
    try:
        code, _ = STORE.create_room(
            lesson.id,
            [lesson_steps.answer_spec(g) for g in lesson.steps],
            content=lesson,
            owner=reconnect.student_key(),
        )
    except VoteError as err:
        st.session_state["_lesson_error"] = str(err)
        return
    st.query_params[KEY_ROOM] = code


def _end_room(code: str, key: str) -> None:
    with contextlib.suppress(VoteError):
        STORE.close(code, key)
    st.query_params.pop(KEY_ROOM, None)


def _teacher_action(code: str, key: str, action: str) -> None:
    try:
        if action == "next":
            STORE.next(code, key)
        elif action == "back":
            STORE.back(code, key)
        elif action == "revote":
            STORE.revote(code, key)
        elif action == "reset":
            STORE.reset(code, key)
        else:
            STORE.set_phase(code, key, action)
    except VoteError as err:
        st.session_state["_lesson_error"] = str(err)


def _pick_lesson(state: Any) -> Lesson | None:
    ids = builtin_lesson_ids()
    options = [*ids, UPLOAD_CHOICE]
    titles = {}
    for lesson_id in ids:
        try:
            titles[lesson_id] = lesson_steps.builtin(lesson_id).title
        except LessonError as err:
            titles[lesson_id] = f"{lesson_id} (cannot be read: {err})"
    # The link names a lesson by its id (?lesson=teaching_loop). Streamlit's query-param binding
    # would write the formatted title instead, so the page reads and writes the id itself.
    linked = st.query_params.get(KEY_LESSON_CHOICE)
    if KEY_LESSON_CHOICE not in st.session_state and linked in options:
        st.session_state[KEY_LESSON_CHOICE] = linked
    choice = st.selectbox(
        "Lesson", options, key=KEY_LESSON_CHOICE, format_func=lambda o: titles.get(o, o)
    )
    if choice == options[0]:  # the default stays out of the link
        st.query_params.pop(KEY_LESSON_CHOICE, None)
    else:
        st.query_params[KEY_LESSON_CHOICE] = choice
    if choice == UPLOAD_CHOICE:
        upload = st.file_uploader(
            f"Lesson file (TOML, at most {MAX_FILE_BYTES // 1000} kB)",
            type=["toml"],
            key=KEY_UPLOAD,
            max_upload_size=1,  # MB, the smallest the uploader takes; read_upload checks 64 kB
        )
        if upload is None:
            return None
        try:
            return lesson_steps.read_upload(upload.getvalue(), upload.name)
        except LessonError as err:
            st.error(md_escape(str(err)), icon=":material/error:")
            return None
    try:
        return lesson_steps.builtin(choice)
    except LessonError as err:
        st.error(md_escape(str(err)), icon=":material/error:")
        return None


def _start_view(state: Any) -> None:
    st.title("Lesson: predict, vote, then see the real answer")
    st.markdown(
        "Each question freezes a batch and asks the class to predict. Students answer on their "
        "phones; on **Reveal** the class's answers stand next to the answer the pipeline computes "
        "on that batch, with its formula and one figure. Then discuss, **Re-vote**, and change "
        "one knob. How to run a lesson and write your own: docs/lessons.md."
    )
    lesson = _pick_lesson(state)
    if lesson is None:
        return
    st.subheader(md_escape(lesson.title))
    if lesson.description:
        st.markdown(md_escape(lesson.description))
    st.caption(f"{len(lesson.steps)} questions · about {lesson.minutes} minutes")
    problem = lesson_steps.check_lesson(lesson, state)
    if problem:
        st.error(md_escape(problem), icon=":material/error:")
        return
    st.button(
        "Start the lesson",
        type="primary",
        icon=":material/play_arrow:",
        key="lesson_start",
        on_click=_start_room,
        args=(lesson,),
    )
    if lesson.id in builtin_lesson_ids():
        st.download_button(
            "Download this lesson's file (copy and edit it to write your own)",
            (LESSON_DIR / f"{lesson.id}.toml").read_text(encoding="utf-8"),
            file_name=f"{lesson.id}.toml",
            mime="text/plain",
            key="lesson_template",
            on_click="ignore",
        )


def _join_panel(code: str) -> None:
    link = vote_link(code)
    st.markdown(f'<div class="lesson-code">{code}</div>', unsafe_allow_html=True)
    if link.url is None:
        st.warning(link.note, icon=":material/wifi_off:")
    else:
        st.image(qr_png(link.url), width=220, alt=f"QR code of the phone link {link.url}")
        st.caption(f"Phones: scan, or open {md_escape(link.url)}. {link.note}".strip())


@st.fragment(run_every=TEACHER_POLL_S)
def _answer_count(code: str, role: str) -> None:
    if role == "summary":  # no vote on the last screen
        return
    try:
        view = STORE.view(code)
    except VoteError as err:
        st.warning(md_escape(str(err)) if err.reason in STORE_REASONS else "This room has ended.")
        return
    round_text = "first vote" if view.round == 1 else "after discussion"
    if role in lesson_loop.SINGLE_ROUND:
        round_text = "answered alone"
    st.metric(
        f"Answers ({round_text}, {view.phase})",
        f"{view.answered} / {view.students}",
        help="phones that answered this question / phones in the room",
    )


def _controls(code: str, key: str, phase: str, step: int, n_steps: int, role: str) -> None:
    cols = st.container(key="lesson_controls").columns(7)
    summary = role == "summary"
    buttons = [
        ("Back", "back", ":material/arrow_back:", step == 0),
        (
            "Lock" if phase == "open" else "Open",
            "locked" if phase == "open" else "open",
            ":material/lock:" if phase == "open" else ":material/lock_open:",
            summary,
        ),
        ("Reveal", "revealed", ":material/visibility:", phase == "revealed" or summary),
        # seen and follow-up are answered once, alone: no discussion round
        ("Re-vote", "revote", ":material/replay:", role in lesson_loop.SINGLE_ROUND),
        ("Reset", "reset", ":material/restart_alt:", False),
        ("Next", "next", ":material/arrow_forward:", step >= n_steps - 1),
    ]
    for col, (label, action, icon, disabled) in zip(cols, buttons, strict=False):
        col.button(
            label,
            key=f"lesson_{action}",
            icon=icon,
            disabled=disabled,
            on_click=_teacher_action,
            args=(code, key, action),
            width="stretch",
            type="primary" if action == "revealed" else "secondary",
        )
    cols[6].button(
        "End",
        key="lesson_end",
        icon=":material/stop:",
        on_click=_end_room,
        args=(code, key),
        width="stretch",
    )


def _reveal_votes(code: str, key: str, gate: Gate, result: GateResult) -> None:
    """The pipeline's answer and the class's votes, where the options were (first screen)."""
    tally = STORE.tally(code, key)
    st.caption("The recorded runs' answer:" if gate.kind == "fix" else "The pipeline's answer:")
    with st.container(key="lesson_answer"):  # the one number the reveal points at, large
        st.markdown(md_escape(result.shown))
    if gate.kind == "number":
        fig = lesson_charts.vote_histogram(tally.rounds, result.value, gate.low, gate.high)
    else:
        fig = lesson_charts.vote_bars(gate.labels, tally.rounds, result.right)
    st.plotly_chart(fig, key="lesson_votes", theme=None, config={"displaylogo": False})
    both = " · ".join(
        f"{'first vote' if r == 1 else 'after discussion'}: {n} answers, "
        f"{share_right(tally.rounds[r], result.is_right) or 0.0:.0%} right"
        for r, n in tally.answered.items()
        if n
    )
    if both:
        st.caption(both)


def _reveal_details(gate: Gate, result: GateResult) -> None:
    """Under the controls: the step's figure, its explanation and formula."""
    left, right = st.columns(2)
    with left:
        figure = lesson_charts.gate_figure(result)
        if figure is not None:
            st.plotly_chart(figure, key="lesson_figure", theme=None, config={"displaylogo": False})
    with right:
        if gate.explanation:
            st.markdown(md_escape(gate.explanation))
        st.latex(result.formula)


def _room_view(state: Any, code: str, key: str) -> None:
    lesson = STORE.content(code)
    view = STORE.view(code)
    gate = lesson.steps[view.step]
    seed = lesson_steps.step_seed(code, key, lesson, view.step)
    result, problem = None, None
    # a fix gate shows its collapsing run while the class votes
    if (view.phase == "revealed" or gate.kind == "fix") and gate.role != "summary":
        try:
            result = lesson_steps.step_result(lesson, view.step, state, seed)
        except LessonError as err:
            problem = str(err)
    st.html(TEACHER_CSS)
    main, side = st.container(key="lesson_top").columns([3, 1])
    with side:
        _join_panel(code)
        _answer_count(code, gate.role)
    with main:
        drawn = f" (seed {seed}, drawn in class)" if seed is not None else ""
        st.caption(
            f"{md_escape(lesson.title)} · question {view.step + 1} of {view.n_steps} · "
            f"{gate.stage.replace('_', ' ')}{lesson_loop.ROLE_CAPTION[gate.role]}{drawn}"
            f"{lesson_fix.CAPTION if gate.kind == 'fix' else ''}"
        )
        with st.container(key="lesson_question"):
            st.markdown(
                f'<div class="lesson-question">\n\n{md_escape(gate.question)}\n\n</div>',
                unsafe_allow_html=True,
            )
        if gate.role == "summary":
            lesson_loop.summary_view(
                code, key, lesson, lesson_steps.results_in_class(lesson, state, code, key)
            )
        elif view.phase != "revealed":  # on reveal the vote chart lists the options
            with st.container(key="lesson_options"):
                if gate.kind == "number":
                    st.markdown(f"Answer on the slider: from {gate.low:g} to {gate.high:g}.")
                else:
                    for i, label in enumerate(gate.labels):
                        st.markdown(f"**{LETTERS[i]}.** {md_escape(label)}")
        elif result is not None:  # in the options' place: the reveal in a projector's first screen
            _reveal_votes(code, key, gate, result)
    message = st.session_state.pop("_lesson_error", None)
    if message:
        st.warning(md_escape(message))
    _controls(code, key, view.phase, view.step, view.n_steps, gate.role)
    if problem:
        st.error(md_escape(problem), icon=":material/error:")
    if result is not None and gate.kind == "fix":
        if view.phase == "revealed":
            lesson_fix.reveal(code, key, gate, result)
        else:
            lesson_fix.before_reveal(gate, result)
    elif result is not None:
        _reveal_details(gate, result)
    st.download_button(
        "Download the answers (CSV)",
        lesson_steps.export_csv(code, key, lesson, state),
        file_name=f"lesson-{code}.csv",
        mime="text/csv",
        key="lesson_csv",
        on_click="ignore",
        icon=":material/download:",
    )


def _not_yours(code: str) -> None:
    """A live room opened from a browser that did not start it: no controls, the phone link."""
    st.info(
        f"Lesson room {code} is run from the teacher's browser; this copy of its link has no "
        "controls (they stay with the browser that started it). To answer, open the phone "
        "page below; to start a lesson of your own, open Lesson without the room in the link.",
        icon=":material/co_present:",
    )
    link = vote_link(code)
    st.caption(md_escape(link.url or link.note))


def teacher_page(state: Any) -> None:
    """The teacher's page (after ``page_setup``): start a lesson, or run this browser's room."""
    st.query_params.pop(OLD_KEY, None)  # an old link's key: never kept in a URL, never obeyed
    code = (st.query_params.get(KEY_ROOM) or "").strip().upper()
    if code:
        key = teacher_key(code)
        try:
            mine = STORE.is_teacher(code, key)
            if not mine:
                STORE.view(code)
        except VoteError as err:
            if err.reason == "store_down":  # the room may come back: keep it in the URL
                st.error(md_escape(str(err)))
                return
            if err.reason == "store_lost":  # gone with Redis's data: say so, start again
                st.warning(md_escape(str(err)))
            else:
                st.info("That lesson room has ended or expired: start a new one.")
            st.query_params.pop(KEY_ROOM, None)
        else:
            try:
                if mine:
                    _room_view(state, code, key)
                else:
                    _not_yours(code)
            except VoteError as err:  # the hall's Redis failed mid-page: its one sentence
                if err.reason not in STORE_REASONS:
                    raise
                st.error(md_escape(str(err)))
            return
    message = st.session_state.pop("_lesson_error", None)
    if message:
        st.warning(md_escape(message))
    _start_view(state)
