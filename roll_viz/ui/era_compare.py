"""'2024 vs 2026 on this batch': a page's key number under the two era presets, on request.

``era_toggle(key)`` draws the switch (one line; the group-health banner puts it in its own row),
``era_comparison(state, page, key)`` the small tables once it is on: the page's quantities under
"GRPO as published (2024)" and "defaults of 2026" (``analysis.era_pages``) in the sidebar's
dialect, and the per-answer columns that page looks at. Nothing runs while the switch is off.
"""

from __future__ import annotations

import streamlit as st

from roll_viz.analysis import era_diff, era_pages
from roll_viz.ui.flow import cached_rollout, current_batch
from roll_viz.ui.state import FRAMEWORK_LABELS, AppState
from roll_viz.ui.widgets import page_link

TOGGLE_LABEL = "2024 vs 2026"


def era_toggle(key: str) -> bool:
    """The switch that shows the era comparison (off by default)."""
    return st.toggle(
        TOGGLE_LABEL,
        key=key,
        help="On this batch: this page's number under 'GRPO as published (2024)' and under "
        "the 'defaults of 2026' (no KL, token mean over the batch, clip-higher, zero-variance "
        "filter, batch std), "
        "both on the batch shown, in the sidebar's dialect.",
    )


def era_comparison(state: AppState, page: str, *, key: str) -> None:
    """The page's key numbers under both eras on the current batch (a bordered block).

    Args:
        state: from ``ui.page_setup``.
        page: a key of ``analysis.era_pages.PAGE_QUANTITIES``.
        key: widget key prefix.
    """
    rollout = cached_rollout(state)
    batch = current_batch(state)
    prompts = list(rollout.prompts)
    label = FRAMEWORK_LABELS.get(state.framework, state.framework).replace(" (default)", "")
    with st.container(border=True, key=f"{key}_box"):
        if page == "frameworks":
            st.caption(
                "Each era's loss in every dialect on this batch (first update, ratio 1): the "
                "dialects agree within an era where their conventions agree on the batch."
            )
            st.dataframe(
                era_pages.framework_losses(batch, prompts),
                key=f"{key}_dialects",
                hide_index=True,
                width="stretch",
            )
        try:
            diff = era_diff.diff_eras(batch, state.framework, prompts)
        except ValueError as err:
            st.info(f"The eras cannot run on this batch in {label}: {err}", icon=":material/info:")
            return
        st.caption(
            f"This page's number in {label}, both eras on the same answers (first update: "
            "policy = rollout policy)."
        )
        st.dataframe(
            era_pages.page_numbers(diff, page, batch.response_mask),
            key=f"{key}_numbers",
            hide_index=True,
            width="stretch",
        )
        with st.expander("Per answer"):
            st.dataframe(
                era_pages.page_answers(diff, page),
                key=f"{key}_answers",
                hide_index=True,
                width="stretch",
            )
        page_link("eras", "Both eras in full: the Eras page", icon=":material/history:")


def era_strip(state: AppState, page: str, *, key: str) -> None:
    """The switch and, when it is on, the comparison under it (for a page without a banner)."""
    if era_toggle(f"{key}_on"):
        era_comparison(state, page, key=key)
