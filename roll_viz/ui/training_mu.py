"""The Training page's loss option and sampler (behaviour policy mu) selects.

The loss options are the Update page's (``lm.loss_options.LOSS_OPTIONS``, per framework, under
the framework's own key); the sampler draws the training tokens (``lm.behaviour_sampler``): fp32
is the trainer itself (mu = pi_old), bf16 / int8 decode with the adapter merged into those
weights, top-p draws from the nucleus and reports processed log-probs. Both are bound to the URL
(``?tr_loss=...&tr_sampler=...``) and checked on the server with the page's other fields
(``training_page.field_specs``); a loss option of another framework falls back to the shipped
defaults with a note.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from roll_viz.lm.runfile import (
    DEFAULT_OPTION,
    OPTION_IDS,
    SAMPLER_LABELS,
    SAMPLERS,
    options_for,
)
from roll_viz.lm.update import loss_inputs
from roll_viz.ui.fields import Field

KEY_LOSS = "tr_loss"
KEY_SAMPLER = "tr_sampler"

FIELDS = {
    KEY_LOSS: Field(DEFAULT_OPTION, options=OPTION_IDS),
    KEY_SAMPLER: Field("fp32", options=SAMPLERS),
}

#: the training curves of the sampler's gap (``lm.train_batch.mismatch_metrics``)
MISMATCH_PANELS = ("delta_abs_mean", "is_ess", "correction_frac")


def _value(key: str) -> Any:
    spec = FIELDS[key]
    value = st.session_state.get(key, spec.default)
    return value if spec.accepts(value) else spec.default


def chosen(framework: str) -> tuple[str, str, list[str]]:
    """(loss option, sampler, notes) of the page for ``framework`` (valid values only)."""
    notes = []
    option = str(_value(KEY_LOSS))
    if option not in options_for(framework):
        notes.append(f"Loss option '{option}' is not one of this framework's: shipped defaults.")
        option = DEFAULT_OPTION
    return option, str(_value(KEY_SAMPLER)), notes


def reads_mu(framework: str, config: dict[str, Any], option: str) -> bool:
    """Whether the framework's loss with this option reads the sampler's log-probs mu."""
    try:
        keys = {**config, **options_for(framework).get(option, {})}
        return "rollout_logprobs" in loss_inputs(framework, keys)
    except ValueError:
        return False


def controls(framework: str, config: dict[str, Any], disabled: bool = False) -> None:
    """The two selects, side by side, and one caption on what mu does with this loss.

    Call after ``training_page.controls`` (which checks these fields' values first).
    """
    offered = options_for(framework)
    current = st.session_state.get(KEY_LOSS, st.query_params.get(KEY_LOSS))
    if current is not None and current not in offered:
        st.session_state[KEY_LOSS] = DEFAULT_OPTION
    c1, c2 = st.columns(2)
    with c1:
        option = st.selectbox(
            "Loss option",
            list(offered),
            key=KEY_LOSS,
            bind="query-params",
            disabled=disabled or len(offered) == 1,
            help="The Update page's loss options, under the framework's own key: ROLL topr and "
            "difficulty weights, OpenRLHF is_correction (token / seq), TRL's vLLM importance-"
            "sampling cap. verl has none here (its defaults).",
        )
    with c2:
        sampler = st.selectbox(
            "Sampler (behaviour policy mu)",
            list(SAMPLERS),
            key=KEY_SAMPLER,
            bind="query-params",
            disabled=disabled,
            help="Who draws the training tokens. fp32: the trainer's own model, mu = pi_old. "
            "bf16 / int8: the lean decode with the current adapter merged into bf16 / int8 "
            "weights, mu = that decoder's log-probs. top-p: nucleus 0.9, mu = the processed "
            "(renormalised) log-probs. mu reaches the loss as rollout_logprobs.",
        )
    acts = reads_mu(framework, config, str(option))
    label = f"Sampler: {SAMPLER_LABELS.get(str(sampler), str(sampler))}."
    if sampler == "fp32":
        st.caption(
            f"{label} mu = pi_old, so delta = log pi_old - log mu is 0 on every token and a "
            "correction has nothing to do. Pick bf16, int8 or top-p to see a gap."
        )
    elif acts:
        st.caption(
            f"{label} '{option}' corrects for the gap: watch mean |delta|, the ESS of "
            "pi_old / mu and the share the correction truncates or masks, under the curves."
        )
    else:
        st.caption(
            f"{label} This loss does not read mu: the gap is recorded (mean |delta|, ESS) but "
            "not corrected. verl bypass_mode, OpenRLHF is_correction or TRL's token_truncate "
            "correct it."
        )
