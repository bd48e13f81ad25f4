"""The silent-bug gallery page's widgets: pick a bug (in the URL), predict, reveal, compare.

The lessons and their numbers come from ``roll_viz.analysis.silent_bugs`` (recomputed on each
run, milliseconds); the figure from ``roll_viz.views.silent_bugs_charts``. Every text of a lesson
is shown through ``text.md_escape`` or ``st.code`` (plain text): nothing is rendered as HTML.
"""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from roll_viz.analysis import silent_bugs
from roll_viz.ui.widgets import explainer, plot
from roll_viz.views import silent_bugs_charts, text

KEY_BUG = "bug"  # the URL's ?bug=<id>
KEY_CHOICE = "silent_bug_choice"  # the buttons' own state (synced with the URL)
_REVEALED = "_silent_bug_revealed"  # session: set of revealed lesson ids
_THREAD = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)#(\d+)")


def _short(bug_id: str) -> str:
    number = silent_bugs.IDS.index(bug_id) + 1
    return text.md_escape(f"{number}. {silent_bugs.BY_ID[bug_id].short}")


def link_notice(raw: object) -> str:
    """The app's one-line notice for a ``bug=`` value that names no lesson ("" if it does)."""
    if raw is None or raw in silent_bugs.BY_ID:
        return ""
    shown = str(raw)[:40]
    return (
        f"The link's value {KEY_BUG}={shown} is not allowed ({KEY_BUG} takes one of "
        f"{', '.join(silent_bugs.IDS[:8])}, ...); using {silent_bugs.IDS[0]}."
    )


def _to_url() -> None:
    """Callback: the chosen lesson into the URL (``?bug=<id>``; the first lesson is the default)."""
    chosen = st.session_state.get(KEY_CHOICE)
    if chosen == silent_bugs.IDS[0] or chosen not in silent_bugs.BY_ID:
        if KEY_BUG in st.query_params:
            del st.query_params[KEY_BUG]
    else:
        st.query_params[KEY_BUG] = chosen


def choose_bug() -> silent_bugs.SilentBug:
    """The one-click choice of a lesson, kept in the URL as ``?bug=<id>``.

    The buttons show the titles while the URL carries the short id, so the widget's state is
    synced by hand (a bound widget would put the displayed title in the URL): the link's value
    wins on a fresh load and on Back/Forward, a click writes the URL. A value that names no
    lesson gets the app's one-line notice and the first lesson.
    """
    raw = st.query_params.get(KEY_BUG)
    notice = link_notice(raw)
    if notice:
        del st.query_params[KEY_BUG]
        st.warning(text.md_escape(notice), icon=":material/info:")
    wanted = raw if raw in silent_bugs.BY_ID else silent_bugs.IDS[0]
    if st.session_state.get(KEY_CHOICE) != wanted:
        st.session_state[KEY_CHOICE] = wanted
    bug_id = st.segmented_control(
        "Pick a bug",
        list(silent_bugs.IDS),
        format_func=_short,
        required=True,
        key=KEY_CHOICE,
        on_change=_to_url,
        help=f"{len(silent_bugs.BUGS)} bugs practitioners hit in real frameworks, each on a batch "
        "you can check by hand. The choice is in the URL (?bug=...), so a link opens the same "
        "lesson.",
    )
    return silent_bugs.BY_ID.get(bug_id or wanted, silent_bugs.BUGS[0])


def _revealed() -> set[str]:
    return st.session_state.setdefault(_REVEALED, set())


def _reveal(bug_id: str) -> None:
    _revealed().add(bug_id)


def _hide(bug_id: str) -> None:
    _revealed().discard(bug_id)
    st.session_state.pop(f"silent_bug_pick_{bug_id}", None)


def thread_links(thread: str) -> list[tuple[str, str]]:
    """(label, GitHub URL) for every "owner/repo#number" in a thread reference."""
    return [
        (f"{repo}#{number}", f"https://github.com/{repo}/issues/{number}")
        for repo, number in _THREAD.findall(thread)
    ]


def lesson(bug: silent_bugs.SilentBug) -> None:
    """One lesson: the question first, then on Reveal the numbers, verdict, formula and figure.

    The two numbers go above the batch and the verdict under the prediction, where the Reveal
    button was: both in a projector's first screen (they had been at 1150 px).
    """
    st.subheader(text.md_escape(bug.title))
    batch_col, question_col = st.columns(2, gap="large")
    with batch_col:
        numbers = st.container()  # on Reveal the two numbers, above the batch they come from
        st.markdown(
            "**The batch**\n\n"
            + "\n".join(f"- {text.md_escape(name)}: {text.md_escape(v)}" for name, v in bug.batch)
        )
    with question_col:
        st.markdown(f"**Predict first.** {text.md_escape(bug.question)}")
        pick = st.radio(
            "Your prediction",
            list(range(len(bug.choices))),
            index=None,
            format_func=lambda i: text.md_escape(bug.choices[i]),
            key=f"silent_bug_pick_{bug.id}",
        )
        if bug.id not in _revealed():
            st.button(
                "Reveal",
                key=f"silent_bug_reveal_{bug.id}",
                type="primary",
                icon=":material/visibility:",
                on_click=_reveal,
                args=(bug.id,),
            )
            st.caption(f"Reported in {text.md_escape(bug.thread)}")
            return
    outcome = bug.compute()
    with numbers:
        _numbers(bug, outcome)
    with question_col:
        _verdict(bug, pick)
        st.button(
            "Hide and predict again",
            key=f"silent_bug_hide_{bug.id}",
            icon=":material/visibility_off:",
            on_click=_hide,
            args=(bug.id,),
        )
    st.caption(f"Reported in {text.md_escape(bug.thread)}")
    _details(bug, outcome)


def _numbers(bug: silent_bugs.SilentBug, outcome: Any) -> None:
    """The two numbers: what the buggy formula gives and what the pipeline computes."""
    st.markdown(f"**{text.md_escape(bug.quantity)}**")
    wrong_col, right_col = st.columns(2)
    with wrong_col:
        st.metric(
            text.md_escape(f"Wrong: {bug.wrong_label}"),
            silent_bugs_charts.value_text(outcome.wrong),
        )
    with right_col:
        st.metric(
            text.md_escape(f"Right: {bug.right_label}"),
            silent_bugs_charts.value_text(outcome.right),
        )


def _verdict(bug: silent_bugs.SilentBug, pick: int | None) -> None:
    """The prediction against the answer."""
    right_choice = text.md_escape(bug.choices[bug.answer])
    if pick is None:
        st.info(f"The answer: {right_choice}", icon=":material/lightbulb:")
    elif pick == bug.answer:
        st.success(f"Right: {right_choice}", icon=":material/check_circle:")
    else:
        st.warning(
            f"Not quite: you picked {text.md_escape(bug.choices[pick])}. The answer: "
            f"{right_choice}",
            icon=":material/help:",
        )


def _details(bug: silent_bugs.SilentBug, outcome: Any) -> None:
    """Under the numbers: why they differ, the formula, the figure and the thread."""
    st.markdown(text.md_escape(bug.explanation))
    st.code(outcome.formula, language=None, wrap_lines=True)
    plot(
        silent_bugs_charts.outcome_figure(
            outcome, bug.wrong_label, bug.right_label, outcome.series_title or bug.quantity
        ),
        key=f"silent_bug_chart_{bug.id}",
    )
    links = thread_links(bug.thread)
    if links:
        st.markdown(
            "The thread: " + ", ".join(f"[{text.md_escape(label)}]({url})" for label, url in links)
        )
    explainer(
        "The wrong number is the buggy formula written out as the thread describes it; the "
        "right number is what roll-viz's own pipeline computes on the same batch (where "
        "roll-viz has no such stage, the lesson computes the missing piece from first "
        "principles and says so). The test suite checks both against hand-computed values.",
        title="Where the numbers come from",
    )
