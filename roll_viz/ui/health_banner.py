"""The group-health banner every page that shows a batch draws above it.

Two entry points, both one call from a page:

- ``batch_health(state, key=...)``: the current batch of the sidebar (its rollout, its rewards
  and, when the reward has several terms, each term's own scores);
- ``group_health_banner(scores, group_ids, prompts, components, key=...)``: any batch.

Either draws one line of small chips (all-good / all-bad / mixed groups, the share without
signal, the mean within-group std of the combined reward next to each reward function's,
ms-swift#4570) and a popover button holding the per-prompt table. The numbers come from
``roll_viz.analysis.group_health``, the chips from ``roll_viz.views.health``. One line high, so it
never pushes a page's first figure out of a projector's first screen. With ``era=<page>`` the row
ends with the 'Recipes of record' switch (``ui.era_compare``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st
import torch
from torch import Tensor

from roll_viz import rewards
from roll_viz.analysis import group_health
from roll_viz.ui import era_compare
from roll_viz.ui.flow import cached_rollout, cached_scores
from roll_viz.ui.state import AppState
from roll_viz.views import health as health_view
from roll_viz.views import normalisation_charts


def group_health_banner(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
    components: Mapping[str, Tensor] | None = None,
    *,
    key: str = "group_health",
    solved_at: float | None = None,
    era_key: str | None = None,
) -> group_health.GroupHealth:
    """Draw the group-health banner: one line of chips and a popover with the per-prompt table.

    Args:
        scores: (B,) combined response rewards of the batch the page shows.
        group_ids: (B,) long prompt index 0..P-1.
        prompts: (P,) prompt texts (shown literally in the table).
        components: reward function name -> (B,) its weighted scores, if the reward has several.
        key: widget key prefix (one banner per key on a page).
        solved_at: reward at or above which an answer counts as right (None: a flat group is
            all-good at the batch's best reward, all-bad at its worst).
        era_key: when given, the 'Recipes of record' switch sits at the end of the row
            under this key (``era_compare.era_toggle``); read its value from session state.

    Returns:
        The GroupHealth drawn.
    """
    # raw text: the table shows cells literally (an escaped '2 \\+ 3' would show its backslash)
    names = list(prompts) if prompts is not None else None
    health = group_health.group_health(
        scores, group_ids, names, components=components, solved_at=solved_at
    )
    with st.container(horizontal=True, vertical_alignment="center", gap="small", key=key):
        st.html(health_view.health_chips_html(health), width="content")
        if health.n_groups:
            with st.popover(
                "Per prompt", icon=":material/groups:", type="tertiary", width="content"
            ):
                st.caption(normalisation_charts.health_banner_text(health))
                st.dataframe(
                    normalisation_charts.health_table(health),
                    key=f"{key}_table",
                    hide_index=True,
                    width="stretch",
                )
        if era_key is not None:
            era_compare.era_toggle(era_key)
    return health


@st.cache_data(show_spinner=False, max_entries=64)
def _components(
    prompts: tuple[str, ...], responses: tuple[str, ...], spec: rewards.RewardSpec
) -> dict[str, Tensor]:
    """Each reward term's weighted scores of the responses (noise not included)."""
    out: dict[str, Tensor] = {}
    for i, (name, weight, params) in enumerate(spec.terms):
        label = name if name not in out else f"{name} #{i + 1}"
        one = rewards.RewardSpec(terms=((name, weight, params),))
        out[label] = rewards.score_responses(prompts, responses, one)
    return out


def reward_components(state: AppState) -> dict[str, Tensor] | None:
    """The current batch's reward split by term, or None (one term, or a run's own scores)."""
    spec = state.reward
    if state.source.startswith("run:") or spec is None or len(spec.terms) < 2:
        return None
    rollout = cached_rollout(state)
    prompts = tuple(rollout.prompts[int(g)] for g in rollout.group_ids)
    return _components(prompts, tuple(rollout.responses), spec)


def batch_health(
    state: AppState, *, key: str = "batch_health", era: str | None = None, below: Any = None
) -> group_health.GroupHealth:
    """The banner for the sidebar's current batch (its rewards, split by term when several).

    Args:
        state: from ``ui.page_setup``.
        key: widget key prefix, unique on the page.
        era: the page's key in ``analysis.era_pages.PAGE_QUANTITIES``: the row ends with the
            'Recipes of record' switch, and the comparison opens under it when on.
        below: a container for the comparison instead (e.g. the main column when the row sits
            in a side column).

    Returns:
        The GroupHealth drawn.
    """
    rollout = cached_rollout(state)
    scores = torch.as_tensor(cached_scores(state), dtype=torch.float64)
    era_key = f"{key}_era" if era is not None else None
    health = group_health_banner(
        scores,
        rollout.group_ids,
        rollout.prompts,
        reward_components(state),
        key=key,
        era_key=era_key,
    )
    if era is not None and st.session_state.get(era_key):
        with below if below is not None else st.container():
            era_compare.era_comparison(state, era, key=f"{key}_eras")
    return health
