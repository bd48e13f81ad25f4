"""Small Streamlit widgets every page uses: figures, explainers, links, downloads, token chips."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from roll_viz import nav
from roll_viz.analysis import reward_table
from roll_viz.core.pipeline import ALIASES
from roll_viz.core.records import Trace
from roll_viz.data.runs.export import safe_csv
from roll_viz.ui.nav import ROOT
from roll_viz.ui.present import is_present
from roll_viz.ui.sidebar import select_preset
from roll_viz.ui.state import KEY_CRITIC, KEY_PRESENT, page_url, url_state
from roll_viz.views import scales, tables

# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------
EXPLAINER_MARK = '<span class="rv-explainer" hidden></span>'  # CSS stacks its row when narrow


def explainer(markdown: str, *, title: str = "What am I looking at?") -> None:
    """A bordered box of plain-language explanation beside a picture.

    In presentation mode it is a folded expander: the projector shows the figure, the teacher
    opens the words when needed. A row holding an explainer stacks it under the figure when the
    main column is narrower than 1000 px (``present.BASE_CSS``).
    """
    st.html(EXPLAINER_MARK)
    if is_present():
        with st.expander(title, expanded=False, icon=":material/help:"):
            st.markdown(markdown)
        return
    with st.container(border=True):
        st.markdown(f"**{title}**")
        st.markdown(markdown)


@contextmanager
def folded(title: str = "About this page") -> Iterator[None]:
    """Draw prose and secondary controls in place, or in a folded expander on a projector."""
    if is_present():
        with st.expander(title, expanded=False, icon=":material/notes:"):
            yield
        return
    with st.container():
        yield


def prose(markdown: str, *, title: str = "About this page") -> None:
    """A page's introductory prose: plain text, folded into an expander in presentation mode."""
    with folded(title):
        st.markdown(markdown)


def zero_kl_notice(text: str, key: str) -> None:
    """Say that every KL is exactly 0 (policy = reference), with a button to the pirate preset.

    Args:
        text: what is 0 on this page (Markdown).
        key: the button's widget key.
    """
    info, action = st.columns([4, 1], vertical_alignment="center")
    with info:
        st.info(text, icon=":material/info:")
    with action:
        st.button(
            "Load the pirate preset",
            on_click=select_preset,
            args=("pirate",),
            key=key,
            icon=":material/sailing:",
        )


def lecture_title(page: str, text: str) -> None:
    """The page's title, numbered when it is a lecture page ("6. The normalisation matrix").

    The number is the page's place in ``nav.LECTURE`` (the README's recipe), the one the Back and
    Next links show.
    """
    n = nav.number(page)
    st.title(f"{n}. {text}" if n else text)


def stop_page(page: str) -> NoReturn:
    """End ``page`` here (``st.stop``) with its Back and Next links: an empty state leads on."""
    back_next(page)
    st.stop()


def back_next(page: str) -> None:
    """The Back and Next links at the bottom of ``page``, in the lecture's order.

    The order is ``nav.tour()`` (the README's recipe, then the other pages in the navigation's
    order), so no page names its neighbours; each link keeps the whole state (``page_link``).
    """
    back, after = nav.neighbours(page)
    st.divider()
    left, right = st.columns(2)
    if back is not None:
        with left:
            page_link(back, f"\u2190 Back: {nav.numbered_title(back)}")
    with right:
        label = "Back to the start" if after == nav.HOME else "Next"
        page_link(after, f"{label}: {nav.numbered_title(after)} \u2192")


def page_link(page: str, label: str, *, icon: str | None = None) -> None:
    """A link to a page by key (``roll_viz.nav.PAGES``) that keeps the whole state.

    Under the router it is ``st.page_link``: the shared controls belong to every page, so the
    next page opens with the same settings, the URL keeps them and the browser gets one history
    entry. A page script run on its own has no navigation; it gets a plain link that carries the
    state in its URL (caches are shared, so the next page is still instant).
    """
    target = nav.page(page)
    try:
        st.page_link(str(ROOT / target.file), label=label, icon=icon)
    except StreamlitPageNotFoundError:
        href = html.escape(page_url(page, url_state()), quote=True)
        st.html(f'<a class="rv-link" href="{href}" target="_self">{html.escape(label)}</a>')


def download_csv(df: pd.DataFrame, name: str, key: str, label: str | None = None) -> None:
    """A download button for a table as CSV (``data.runs.export.safe_csv``: no live formulas).

    Args:
        df: the table.
        name: file name without extension.
        key: widget key.
        label: button label (default "Download <name>.csv").
    """
    st.download_button(
        label or f"Download {name}.csv",
        # A callable runs only when clicked, so an unused button costs nothing per rerun.
        data=lambda: safe_csv(df).encode("utf-8"),  # text cells that start a formula neutralised
        file_name=f"{name}.csv",
        mime="text/csv",
        key=key,
        on_click="ignore",
        icon=":material/download:",
    )


def trace_json(trace: Trace, state: Any = None, rollout: Any = None) -> str:
    """The whole trace as JSON, with the inputs that produced it when ``state`` is given.

    The inputs (prompts, responses, tokens and their ids, log-probs, seed, sampling and reward
    settings, the dialect config) make the file self-describing: ``inputs.compute_case`` is a
    case for ``python -m roll_viz compute`` that recomputes the trace's rewards and advantages.
    """
    body: dict[str, Any] = {"trace": tables.trace_to_plain(trace)}
    if state is not None and rollout is not None:
        body = {"inputs": trace_inputs(state, rollout, trace), **body}
    return json.dumps(body, indent=1)


def trace_inputs(state: Any, rollout: Any, trace: Trace) -> dict[str, Any]:
    """Everything needed to reproduce a trace, as plain JSON values."""
    mask = rollout.response_mask
    lengths = mask.sum(dim=1).long().tolist()
    group = rollout.group_ids.tolist()
    sampling = dataclasses.asdict(state.sampling)
    return {
        "source": state.source,
        "model": state.model if state.live else (rollout.meta.model or state.preset),
        "sampling": sampling,
        "decode_weights": rollout.meta.decode_weights or "float32",
        "reward": {
            "terms": [[n, w, dict(p)] for n, w, p in state.reward.terms],
            "noise_sigma": state.reward.noise_sigma,
            "noise_seed": state.reward.noise_seed,
        },
        "framework": trace.framework,  # the trace's dialect (the Frameworks page runs all four)
        "config": dict(trace.config),
        "prompts": list(rollout.prompts),
        "samples": [
            {
                "prompt": group[b],
                "response": rollout.responses[b],
                "finish_reason": rollout.finish_reasons[b],
                "token_ids": rollout.token_ids[b, : lengths[b]].tolist(),
                "tokens": list(rollout.tokens[b]),
            }
            for b in range(len(rollout.responses))
        ],
        "compute_case": {
            "batch": {
                "scores": trace.scores.tolist(),
                "response_mask": mask.tolist(),
                "group": group,
                "logprobs": rollout.logprobs.tolist(),
                "ref_logprobs": rollout.ref_logprobs.tolist(),
            },
            "config": {"framework": trace.framework, **dict(trace.config)},
        },
    }


def download_trace_json(
    trace: Trace, key: str, name: str = "trace", state: Any = None, rollout: Any = None
) -> None:
    """A download button for the whole trace as JSON (with its inputs when state is given)."""
    st.download_button(
        f"Download the whole trace ({name}.json)",
        data=lambda: trace_json(trace, state, rollout).encode("utf-8"),
        file_name=f"{name}.json",
        mime="application/json",
        key=key,
        on_click="ignore",
        icon=":material/data_object:",
    )


def critic_radio(key: str = KEY_CRITIC, captions: bool = False) -> str:
    """The "Critic for GAE" choice ("zero" or "probe"), bound to the URL under ``key``."""
    return st.radio(
        "Critic for GAE",
        ["zero", "probe"],
        captions=["V = 0", "ridge probe on the reference model's hidden states, cross-fitted"]
        if captions
        else None,
        key=key,
        bind="query-params",
        horizontal=True,
        help="GAE needs a value estimate V(s_t). zero: V = 0. probe: a ridge regression from the "
        "reference model's hidden states to the returns, fitted on the other samples only.",
    )


def plot(fig: Any, key: str, **kwargs: Any) -> None:
    """st.plotly_chart with a key and the figure's own colours (theme off for fixed scales).

    In presentation mode the figure's fonts (ticks, axis titles, legend, colour bars, subplot
    titles) are enlarged for a projector. The title, legend and plot are stacked one above the
    other at any font size (``scales.stacked_header``): changed on ``fig`` itself, which a page
    builds for this one call (a copy would revalidate every array: tens of ms a figure).
    """
    chart(finished(fig, bool(st.session_state.get(KEY_PRESENT))), key, **kwargs)


def finished(fig: Any, present: bool) -> Any:
    """``fig`` as every page draws it: projector fonts when ``present``, header stacked."""
    if present:
        fig = scales.projector_fonts(fig)
    fig.update_layout(scales.stacked_header(fig))
    return fig


def chart(fig: Any, key: str, **kwargs: Any) -> None:
    """st.plotly_chart of a finished figure: the figure's own colours, no Plotly logo."""
    st.plotly_chart(fig, key=key, theme=None, config={"displaylogo": False}, **kwargs)


def first_moving_token(advantages: Any, mask: Any, b: int | None = None) -> tuple[int, int]:
    """(b, t) of the first valid token with a non-zero advantage: a worked example that moves.

    Args:
        advantages: (B, T) advantages (or None: no estimator ran).
        mask: (B, T) response mask.
        b: look only in this sample (default: the first sample that has such a token).

    Returns:
        (b, t); (b or 0, 0) when every advantage there is 0.
    """
    rows = range(int(mask.shape[0])) if b is None else (b,)
    if advantages is not None:
        for row in rows:
            moving = ((advantages[row] != 0) & (mask[row] > 0)).nonzero()
            if len(moving):
                return row, int(moving[0][0])
    return (0 if b is None else b), 0


def accept_index_url(key: str, labels: list[str]) -> str:
    """Read a plain row index from the URL (``sample=2``) as that row; "" or a one-line notice.

    The bound selectbox's URL value is the row's label (``sample=p0%2Fs2``); a number is taken as
    the row index on the session's first visit. Anything else is left to the default with a
    notice naming the value and what is allowed.
    """
    raw = st.query_params.get(key)
    if raw is None or raw in labels or key in st.session_state:
        return ""
    text_value = str(raw).strip()
    if text_value.isdigit() and int(text_value) < len(labels):
        st.session_state[key] = int(text_value)
        return ""
    return (
        f"The link's {key}={html.escape(text_value)[:40]} is not a sample of this batch: use a "
        f"row number 0 to {len(labels) - 1} or a name such as {labels[0]}. Showing the default."
    )


def widget_default(key: str, **default: Any) -> dict[str, Any]:
    """The default keyword for a keyed widget, or none when the session already holds a value.

    Passing a default and a session value makes Streamlit warn.
    """
    return {} if key in st.session_state else default


def chips(html_text: str) -> None:
    """Render token chips (an already escaped HTML string from chips.token_chips_html)."""
    st.html(html_text)


# ---------------------------------------------------------------------------------------------
# The editable reward table travels in the link (?rt=..., compact) so a shared URL reproduces it
# ---------------------------------------------------------------------------------------------
KEY_TABLE_BASE = "_lg_table_base"  # the table the editor started from in this session
KEY_TABLE_URL = "rt"


def reward_table_base() -> tuple[Any, str]:
    """The table the editor starts from: the link's (read once per session) or the example.

    Returns:
        (DataFrame, "" or why the link's table could not be read).
    """
    if KEY_TABLE_BASE in st.session_state:
        return st.session_state[KEY_TABLE_BASE], ""
    problem = ""
    base = reward_table.default_reward_table()
    encoded = st.query_params.get(KEY_TABLE_URL)
    if encoded:
        try:
            base = reward_table.decode_table(encoded)
        except reward_table.RewardTableError as err:
            problem = f"The link's reward table was not loaded: {err}. Showing the example."
    st.session_state[KEY_TABLE_BASE] = base
    return base, problem


def share_reward_table(edited: Any) -> None:
    """Write the edited table into the URL (removed again when it equals the example)."""
    encoded = reward_table.encode_table(edited)
    if encoded == reward_table.encode_table(reward_table.default_reward_table()):
        if KEY_TABLE_URL in st.query_params:
            del st.query_params[KEY_TABLE_URL]
    elif st.query_params.get(KEY_TABLE_URL) != encoded:
        st.query_params[KEY_TABLE_URL] = encoded


def reset_reward_table() -> None:
    """Back to the seed's example table (the editor's edits and the link's table dropped)."""
    st.session_state.pop("lg_table", None)
    st.session_state.pop(KEY_TABLE_BASE, None)
    if KEY_TABLE_URL in st.query_params:
        del st.query_params[KEY_TABLE_URL]


def beta_note(state: Any, *, stage: str = "advantages") -> None:
    """Say when the sidebar's beta cannot change what this page shows, and why.

    Args:
        state: from page_setup.
        stage: "advantages" (beta acts only through KL in the reward) or "rewards" (the
            response-level processing comes before any KL, so beta never acts here).
    """
    beta = dict(state.generic).get("beta")
    key = ALIASES[state.framework].get("kl_in_reward")
    in_reward = bool(dict(state.generic).get("kl_in_reward")) if key else False
    if stage == "rewards":
        st.caption(
            f"beta = {beta:g} does not act on this page: the response-level reward is processed "
            "before any KL penalty (see Token KL for where beta enters)."
        )
    elif not in_reward:
        where = f"'{key}' is off" if key else f"{state.framework} puts the KL in the loss only"
        st.caption(
            f"beta = {beta:g} has no effect on these advantages: {where}, so the KL is a term of "
            "the policy loss (see the Update page), not part of the token rewards."
        )
