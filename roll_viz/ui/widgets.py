"""Small Streamlit widgets every page uses: figures, explainers, links, downloads, token chips."""

from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd
import streamlit as st

from roll_viz.core.records import Trace
from roll_viz.ui.state import KEY_CRITIC, page_url, url_state
from roll_viz.views import tables


# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------
def explainer(markdown: str, *, title: str = "What am I looking at?") -> None:
    """A bordered box of plain-language explanation beside a picture."""
    with st.container(border=True):
        st.markdown(f"**{title}**")
        st.markdown(markdown)


def next_page(page: str, label: str) -> None:
    """The "Next ->" link at the bottom of a page (carries the whole URL state)."""
    st.divider()
    page_link(page, label + " \u2192")


def page_link(page: str, label: str, **_kwargs: Any) -> None:
    """A link to a page by short name (see PAGES) that carries the whole URL state.

    st.page_link cannot do this: on a page transition Streamlit drops query parameters bound to
    widgets of another page, and the shared sidebar's widgets belong to each page separately. A
    plain link reloads the app with the state in the URL instead (caches are shared, so the next
    page is still instant); the sidebar navigation keeps the state by itself.
    """
    href = html.escape(page_url(page, url_state()), quote=True)
    st.html(
        f'<a class="rv-link" href="{href}" target="_self">{html.escape(label)}</a>',
    )


def download_csv(df: pd.DataFrame, name: str, key: str, label: str | None = None) -> None:
    """A download button for a table as CSV.

    Args:
        df: the table.
        name: file name without extension.
        key: widget key.
        label: button label (default "Download <name>.csv").
    """
    st.download_button(
        label or f"Download {name}.csv",
        # A callable runs only when clicked, so an unused button costs nothing per rerun.
        data=lambda: df.to_csv(index=False).encode("utf-8"),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=key,
        on_click="ignore",
        icon=":material/download:",
    )


def trace_json(trace: Trace) -> str:
    """The whole trace as a JSON string (every field of the Trace, tensors as nested lists)."""
    return json.dumps(tables.trace_to_plain(trace), indent=1)


def download_trace_json(trace: Trace, key: str, name: str = "trace") -> None:
    """A download button for the whole trace as JSON."""
    st.download_button(
        f"Download the whole trace ({name}.json)",
        data=lambda: trace_json(trace).encode("utf-8"),
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
    """st.plotly_chart with a key and the figure's own colours (theme off for fixed scales)."""
    st.plotly_chart(fig, key=key, theme=None, config={"displaylogo": False}, **kwargs)


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
    from roll_viz.analysis import reward_table

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
    from roll_viz.analysis import reward_table

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
