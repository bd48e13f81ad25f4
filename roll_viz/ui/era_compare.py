"""'Recipes of record on this batch': a page's key number under the recipes you pick, on request.

``era_toggle(key)`` draws the switch (one line; the group-health banner puts it in its own row),
``era_comparison(state, page, key)`` the picker and the small tables once it is on: the page's
quantities under each picked recipe of record ("GRPO as published (2024)", prime-rl, Tinker,
DeepSeek-V3.2, ScaleRL / Olmo 3: ``core.pipeline.eras``, computed by ``analysis.era_pages``) in
the sidebar's dialect, the per-answer columns that page looks at, and the note that the std is
now the minority choice. ``recipe_picker`` is the picker, shared with the Eras page. Nothing runs
while the switch is off.
"""

from __future__ import annotations

import streamlit as st

from roll_viz.analysis import era_diff, era_pages
from roll_viz.core.pipeline.eras import ERAS, std_note
from roll_viz.ui.flow import cached_rollout, current_batch
from roll_viz.ui.state import AppState, framework_label
from roll_viz.ui.table_fit import table
from roll_viz.ui.widgets import page_link

TOGGLE_LABEL = "Recipes of record"
#: the part of the main column a table inside the bordered box gets (1086 of 1110 px, Chromium)
BOX_SHARE = 0.97


def era_toggle(key: str) -> bool:
    """The switch that shows the recipe comparison (off by default)."""
    return st.toggle(
        TOGGLE_LABEL,
        key=key,
        help="On this batch: this page's number under each recipe of record you pick (GRPO as "
        "published in 2024, prime-rl, Tinker, DeepSeek-V3.2, ScaleRL / Olmo 3, which is what "
        "'defaults of 2026' names now), all on the batch shown, in the sidebar's dialect.",
    )


def recipe_picker(key: str, *, note: bool = True) -> list[str]:
    """The recipes to compare (default every record), with the std note under them when any.

    Args:
        key: widget key.
        note: draw ``minority_note`` under the picker (the Eras page draws it lower down).

    Returns:
        Record keys in ``ERAS`` order; empty when the user cleared the picker (then the
        picker says to pick one).
    """
    picked = st.pills(
        "Recipes",
        list(ERAS),
        selection_mode="multi",
        default=list(ERAS),
        format_func=lambda k: ERAS[k].label,
        key=key,
        help="Each recipe in words, its sources and each dialect's own keys: the Eras page.",
    )
    keys = [k for k in ERAS if k in (picked or [])]
    if not keys:
        st.info("Pick at least one recipe to compare.", icon=":material/info:")
    elif note:
        minority_note(keys)
    return keys


def minority_note(keys: list[str]) -> None:
    """How the picked recipes divide the advantage; the std is now the minority choice."""
    st.caption(std_note(tuple(keys)))


def era_comparison(state: AppState, page: str, *, key: str) -> None:
    """The page's key numbers under the picked recipes on the current batch (a bordered block).

    Args:
        state: from ``ui.page_setup``.
        page: a key of ``analysis.era_pages.PAGE_QUANTITIES``.
        key: widget key prefix.
    """
    rollout = cached_rollout(state)
    batch = current_batch(state)
    prompts = list(rollout.prompts)
    label = framework_label(state.framework)
    with st.container(border=True, key=f"{key}_box"):
        picked = recipe_picker(f"{key}_pick")
        if not picked:
            return
        if page == "frameworks":
            st.caption(
                "Each recipe's loss in every dialect on this batch (first update, ratio 1): the "
                "dialects agree on a recipe where their conventions agree on the batch."
            )
            table(
                era_pages.framework_losses(batch, prompts, eras=picked),
                key=f"{key}_dialects",
                point="dialect",
                share=BOX_SHARE,
            )
        try:
            diff = era_diff.diff_eras(batch, state.framework, prompts, eras=picked)
        except ValueError as err:
            st.info(
                f"The recipes cannot run on this batch in {label}: {err}", icon=":material/info:"
            )
            return
        st.caption(
            f"This page's number in {label}, every recipe on the same answers (first update: "
            "policy = rollout policy)."
        )
        # fitted to a projector: five recipes beside the quantity and its meaning
        table(
            era_pages.page_numbers(diff, page, batch.response_mask),
            key=f"{key}_numbers",
            point="quantity",
            share=BOX_SHARE,
        )
        with st.expander("Per answer"):
            st.dataframe(
                era_pages.page_answers(diff, page),
                key=f"{key}_answers",
                hide_index=True,
                width="stretch",
            )
        page_link("eras", "Every recipe in full: the Eras page", icon=":material/history:")
