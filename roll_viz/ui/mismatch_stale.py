"""The "Sampler != trainer" lab's three-policy section: the sampler k steps behind the trainer.

The lab's batch was drawn by the base model; its mu is the lab's source (bf16, int8, top-p ...)
and its pi_old the float32 recompute. Here the trainer is k steps ahead: a scratch adapter takes
k update steps on this batch (``lm.rollout.trainer_ahead``, verl's default loss, lr 2e-4, the
Update page's default), so the base is "the adapter of k steps ago" and the scratch adapter's
log-probs are pi_theta. k is URL-bound (``?mm_lag=1``), at most ``MAX_LAG`` (each step is one
update of the batch on the shared model, seconds on a CPU), and needs a live batch of the base
policy (the model has to score it). The scratch adapter is removed at once; the shared base is
never changed. Token strings reach the page as escaped hover text and plain dataframe cells.
"""

from __future__ import annotations

import hashlib
from typing import Any

import streamlit as st
import torch

from roll_viz.analysis import staleness
from roll_viz.core.records import Rollout
from roll_viz.lm import rollout as door
from roll_viz.lm.runfile import MAX_LAG
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.state import AppState
from roll_viz.ui.table_fit import table
from roll_viz.ui.url import bound
from roll_viz.ui.widgets import plot
from roll_viz.views import staleness_charts, text

KEY_LAG = "mm_lag"
KEY_ROW = "mm_lag_row"
LAGS = tuple(range(MAX_LAG + 1))
FIELDS = {KEY_LAG: Field(0, options=LAGS)}
EPS = 0.2  # the lab's PPO clip range (``analysis.mismatch.EPS_CLIP``)


@st.cache_data(show_spinner=False, max_entries=8)
def _theta(_rollout: Rollout, _advantages: torch.Tensor, key: tuple, steps: int) -> torch.Tensor:
    """The log pi_theta after ``steps`` updates, cached per batch and advantages (``key``), k."""
    return door.trainer_ahead(ensure_model(key[0]), _rollout, _advantages, steps)


def _usable(state: AppState, rollout: Rollout) -> str | None:
    """Why the trainer cannot step on this batch here (None: it can)."""
    if not state.live:
        return (
            "The trainer's k steps need the model to score this batch: switch on 'Sample live "
            "with the model' (with k = 0 below, π_θ = π_old and no model is needed)."
        )
    if rollout.meta.policy_mode not in (None, "identical"):
        return (
            "This batch's policy is steered (it hears an instruction the adapter does not), and "
            "the trainer's steps start from the base model: pick a batch of the identical "
            "policy (e.g. the sentiment preset)."
        )
    return None


def section(state: AppState, rollout: Rollout, old: Any, mu: Any, mask: Any, adv: Any) -> None:
    """Section 4: mu, pi_old and pi_theta of the batch with the trainer k steps ahead."""
    notices = check_fields(FIELDS)
    if notices:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in notices), icon=":material/info:")
    lag = bound(
        st.selectbox,
        "The trainer is k steps ahead of the sampler",
        list(LAGS),
        index=0,
        key=KEY_LAG,
        help=f"k = 0: the first update after the rollout, π_θ = π_old. k = 1, 2 (at most "
        f"{MAX_LAG}): a scratch adapter takes k update steps on this batch, so the model that "
        "sampled it is the adapter of k steps ago, as in async training (prime-rl runs one "
        "step behind).",
    )
    advantages = torch.as_tensor(adv).float()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand(mask.shape)
    theta = torch.as_tensor(old)  # k = 0: pi_theta is pi_old, bit for bit
    if lag:
        why = _usable(state, rollout)
        if why is not None:
            st.info(why, icon=":material/info:")
            return
        with st.spinner(f"The trainer takes {lag} update step{'s' if lag > 1 else ''}"):
            digest = hashlib.sha256(advantages.contiguous().numpy().tobytes()).hexdigest()
            key = (state.model, state.sampling, state.decode, digest)  # the sidebar's advantages
            theta = _theta(rollout, advantages.contiguous(), key, int(lag))
    three = staleness.three_policies(mu, old, theta, advantages, mask, EPS)
    frame = three.table.copy()
    table(frame.drop(columns="anchor"), key="mm_lag_anchors")
    st.caption(
        f"PPO's ratio and the share clipped at ε = {EPS:g} when the loss divides by each π_old. "
        "π_old := π_θ (a trainer that keeps no old weights: miles #1829, SkyRL #1315) reads 1 "
        "on every token and clips nothing, however far the trainer moved; π_old := μ adds the "
        "sampler's numeric gap to the drift."
    )
    rows = list(range(int(torch.as_tensor(mask).shape[0])))
    row = st.selectbox("Sample", rows, key=KEY_ROW) if len(rows) > 1 else 0
    row = row if row in rows else 0
    tokens = rollout.tokens[row] if row < len(rollout.tokens) else ()
    plot(staleness_charts.three_columns_figure(three, row, tokens, EPS), key="mm_lag_cols")
    st.dataframe(staleness.token_rows(three, row, tokens), hide_index=True, key="mm_lag_tokens")
