"""Glue of the Normalisation page, and the group-health banner every batch page can show.

``group_health_banner(scores, group_ids, prompts)`` is the one call a page makes to show, above
its batch, how many prompt groups are all-good / all-bad / mixed (and each reward component's
std next to the combined one, in an expander). The numbers come from
``roll_viz.analysis.group_health``, the text and table from ``roll_viz.views.normalisation_charts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import streamlit as st
from torch import Tensor

from roll_viz.analysis import group_health
from roll_viz.views import normalisation_charts, text


def group_health_banner(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
    components: Mapping[str, Tensor] | None = None,
    *,
    key: str = "group_health",
    solved_at: float | None = None,
) -> group_health.GroupHealth:
    """Draw the group-health banner (one line, the per-group table in an expander).

    Args:
        scores: (B,) combined response rewards of the batch the page shows.
        group_ids: (B,) long prompt index 0..P-1.
        prompts: (P,) prompt texts (escaped before display).
        components: reward function name -> (B,) its scores, if the reward has components.
        key: widget key prefix (one banner per key on a page).
        solved_at: reward at or above which an answer counts as right (None: a flat group is
            all-good at the batch's best reward, all-bad at its worst).

    Returns:
        The GroupHealth drawn.
    """
    names = [text.md_escape(p) for p in prompts] if prompts is not None else None
    health = group_health.group_health(
        scores, group_ids, names, components=components, solved_at=solved_at
    )
    icon = ":material/groups:" if health.no_signal == 0 else ":material/warning:"
    st.info(normalisation_charts.health_banner_text(health), icon=icon)
    if health.n_groups:
        with st.expander("Group health, per prompt"):
            st.dataframe(
                normalisation_charts.health_table(health),
                key=f"{key}_table",
                hide_index=True,
                width="stretch",
            )
    return health
