"""Streamlit glue of the Episodes page's section 4: one real update step on its episodes.

One press takes one LoRA policy-gradient step (``lm.rollout.episode_update``) on the page's
current episodes (already bounded by their source) with the mask of section 1 and the credit
rule of section 2, on a scratch adapter created for the press and released after it (the
shared base is never changed; the session's own adapter is not touched). The result is kept in
the session for the settings it was taken with, and drawn as delta log pi on every token of
the shown episode, with the check a student can read off: under the right mask the
environment's replies get no gradient (they move only because the weights they share with the
trained tokens moved); under "tool output trained" they get one. The step needs the model that
drew the token ids: recorded episodes on another model, and files, say so instead.
"""

from __future__ import annotations

import hashlib

import streamlit as st
from torch import Tensor

from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode
from roll_viz.lm import models as models_mod
from roll_viz.lm import rollout as door
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.update import DEFAULT_LR
from roll_viz.ui.episode_sources import EpisodeSet
from roll_viz.ui.flow import ensure_model
from roll_viz.ui.widgets import chips
from roll_viz.views import episode_charts as charts
from roll_viz.views import text

ASSISTANT = masks.ROLE_INDEX["assistant"]


def _replies(batch_role: Tensor, batch_turn: Tensor, valid: Tensor) -> Tensor:
    """(B, T) bool: the environment's replies (tool output, user follow-ups), not the prompt."""
    return (batch_role != ASSISTANT) & (batch_turn >= 0) & valid


def _take(data: EpisodeSet, episodes: tuple[Episode, ...], mask: Tensor, adv: Tensor):
    """The step's EpisodeUpdate, or the message of why it could not be taken."""
    try:
        bundle = ensure_model(data.model)
    except models_mod.ModelNotFoundError as err:
        return f"The model is not available: {err}"
    if bundle.name != data.drawn_by:
        return (
            f"These token ids were drawn by {data.drawn_by}; this server runs {bundle.name}: "
            "the update needs the model that drew them (sample live episodes instead)."
        )
    scratch = LoraPolicy(bundle, seed=0)
    try:
        with st.spinner(f"One update step on {len(episodes)} episodes"):
            return door.episode_update(scratch, episodes, adv, mask, temperature=data.temperature)
    except ValueError as err:
        return str(err)
    finally:
        scratch.release()  # freed off the request path (the reaper takes the lock)


def update_section(
    data: EpisodeSet,
    episodes: tuple[Episode, ...],
    pieces: tuple[str, ...],
    mask: Tensor,
    mask_label: str,
    advantages: Tensor,
    credit_label: str,
    prefix: str,
) -> None:
    """Section 4: the button, and the last step's delta log pi over the shown episode.

    Args:
        data: the page's episode set (its model, the log-probs' temperature).
        episodes: the episodes, the shown one first.
        pieces: the shown episode's token strings.
        mask: (B, T) the trainable mask (section 1's choice).
        mask_label: its name as shown.
        advantages: (B, T) per-token advantages (section 2's rule).
        credit_label: the rule's name as shown.
        prefix: the widgets' key prefix.
    """
    st.header("4. One update step on these episodes")
    st.caption(
        f"A real LoRA policy-gradient step on these {len(episodes)} episodes: mask "
        f'"{mask_label}", advantages "{credit_label}", loss -sum m A ratio / sum m, one AdamW '
        f"step (lr {DEFAULT_LR:g}) of a scratch adapter released after the press; the "
        "forward pass sees every token of the transcript (attention = all real tokens, never "
        "the loss mask). Bound: the episodes above, at most "
        f"{door.MAX_UPDATE_TOKENS:,} transcript tokens."
    )
    if data.model is None:
        st.info(
            "The update needs the model that drew these token ids: a file's model is not "
            "known here.",
            icon=":material/info:",
        )
        return
    kept_key = f"_{prefix}_update"
    # the advantages' bytes stand for the credit knobs (gamma) the step was taken with
    digest = hashlib.sha256(advantages.nan_to_num().double().numpy().tobytes()).hexdigest()
    settings = (episodes, mask_label, credit_label, digest)
    if st.button("Take one update step", key=f"{prefix}_update", icon=":material/play_arrow:"):
        st.session_state[kept_key] = (settings, _take(data, episodes, mask, advantages))
    kept = st.session_state.get(kept_key)
    if kept is None or kept[0] != settings:
        st.info(
            "Press **Take one update step**: delta log pi of every token appears over the "
            "transcript (the mask and the credit rule above are the step's).",
            icon=":material/info:",
        )
        return
    result = kept[1]
    if isinstance(result, str):
        st.error(text.md_escape(result), icon=":material/error:")
        return
    if not bool((result.advantages != 0).any()):
        st.info(
            "Every advantage under this mask is 0 on these episodes (e.g. equal outcomes in each "
            "group under episode-level GRPO): the loss has no gradient and nothing moves. Pick "
            "another credit rule, or episodes whose outcomes differ.",
            icon=":material/info:",
        )
    _draw(episodes, pieces, result)


def _draw(episodes: tuple[Episode, ...], pieces: tuple[str, ...], result) -> None:
    batch = masks.batch_episodes(episodes)
    replies = _replies(batch.role, batch.turn, batch.valid)
    trained = result.mask > 0
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(
        "Gradient on the environment's replies",
        f"{float(result.grad_coef[replies].abs().sum()):.3g}",
        help="sum |dL/dlog pi| over the tool's (and user's) replies in the turns: exactly 0 "
        "with the right mask; positive when the mask trains them.",
    )
    c2.metric(
        "Mean |delta log pi|, trained",
        _mean_abs(result.delta, trained),
        help="The tokens the loss pushed on.",
    )
    c3.metric(
        "Mean |delta log pi|, replies",
        _mean_abs(result.delta, replies & ~trained),
        help="Untrained replies move only through the shared weights (context, no gradient).",
    )
    c4.metric("Loss", f"{result.loss:.4g}", help=f"Gradient norm {result.grad_norm:.3g}.")
    n = len(pieces)
    row = [float(v) for v in result.delta[0, :n].tolist()]
    vmax = max(max((abs(v) for v in row), default=0.0), 1e-6)
    chips(
        charts.delta_legend_html(vmax)
        + charts.delta_html(
            episodes[0],
            pieces,
            row,
            [float(v) for v in result.grad_coef[0, :n].tolist()],
            [float(v) for v in result.mask[0, :n].tolist()],
            vmax,
        )
    )
    recorded = int(result.old_recorded.sum())
    st.caption(
        f"Shown: episode 1 of the step. Ratio = exp(log pi - old): old is the episode's "
        f"recorded sampling log-prob on {recorded} trained tokens, a recompute (ratio 1) on the "
        f"other {int(trained.sum()) - recorded}; logits / {result.temperature:g} as when sampled."
    )


def _mean_abs(values: Tensor, where: Tensor) -> str:
    if not bool(where.any()):
        return "n/a"
    return f"{float(values[where].abs().mean()):.3g}"
