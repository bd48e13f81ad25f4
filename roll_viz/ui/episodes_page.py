"""Streamlit glue of the Episodes page: the mask and credit views of a set of episodes.

``draw_views`` draws them for any ``EpisodeSet`` (``episode_sources``: recorded, live, an ATIF
file); the Your run page calls it for an ATIF file. The views: the transcript as token chips by
role and turn with the loss mask over it, each known mistake with what it trains and what it
does to the loss and its gradient, the credit rules side by side (formula with numbers, the
advantage on every token), which rule rewards an extra turn and verl #7244's bias, and one
real update step on the episodes (``episode_step``: delta log pi on every token). Every knob
is bound to the URL. Model and tool text is untrusted: it reaches the page only as escaped
chips (``views.episode_charts``), ``st.code`` and plain dataframe cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from roll_viz.analysis import episode_lab as lab
from roll_viz.core.agentic import credit as credit_mod
from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode
from roll_viz.ui.episode_sources import KEY_UPLOAD as KEY_UPLOAD
from roll_viz.ui.episode_sources import EpisodeSet as EpisodeSet
from roll_viz.ui.episode_sources import atif_from_path as atif_from_path
from roll_viz.ui.episode_sources import is_atif as is_atif
from roll_viz.ui.episode_sources import source_controls as source_controls
from roll_viz.ui.episode_step import update_section
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.table_fit import table
from roll_viz.ui.url import bound
from roll_viz.ui.widgets import chips, explainer, plot
from roll_viz.views import episode_charts as charts
from roll_viz.views import text


def _notice(lines: list[str]) -> None:
    if lines:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in lines), icon=":material/info:")


def episode_label(episodes: tuple[Episode, ...], i: int) -> str:
    """How episode ``i`` reads in the picker: task, turns, outcome, why it stopped."""
    e = episodes[i]
    return (
        f"{i + 1}: {e.task} ({e.env}), {text.count(e.n_turns, 'turn')}, "
        f"outcome {e.outcome:g}, stop: {e.stop}"
    )


def transcript_table(episode: Episode) -> pd.DataFrame:
    """The transcript as plain rows (role, turn, tokens, text): a dataframe never renders HTML."""
    return pd.DataFrame(
        [
            {
                "role": s.role,
                "turn": str(s.turn + 1) if s.turn >= 0 else "prompt",
                "tokens": len(s.token_ids),
                "sampled": s.sampled,
                "tool call": s.tool_call or "",
                "text": s.text,
            }
            for s in episode.segments
        ]
    )


def pick_episode(data: EpisodeSet, key: str) -> int:
    """The episode the chips show (URL-bound by its number)."""
    n = len(data.episodes)
    _notice(check_fields({key: Field(1, 1, n, integer=True)}))
    if n == 1:
        return 0
    pick, words = st.columns([1, 4], vertical_alignment="bottom")
    with pick:
        choice = bound(st.selectbox, "Episode", list(range(1, n + 1)), index=0, key=key)
    with words:
        st.caption(text.md_escape(episode_label(data.episodes, int(choice) - 1)))
    return int(choice) - 1


# ------------------------------------------------------------------------------ the views

#: the mask view's choices: the correct mask, each known mistake, and the re-encoding template
THINK = "think_template"
#: the mask choices as shown (a bound widget's link holds the shown label) -> rule name
MASK_CHOICES = {
    "right mask": "correct",
    **{rule.label: name for name, rule in masks.MASK_RULES.items() if name != "correct"},
    "<think> stripped, re-encoded": THINK,
}
#: the credit rules as shown -> rule name
CREDIT_CHOICES = {rule.label: name for name, rule in credit_mod.CREDIT_RULES.items()}
DEFAULT_CREDIT = credit_mod.CREDIT_RULES["episode_grpo"].label
GAMMAS = (1.0, 0.99, 0.95, 0.9, 0.8, 0.5, 0.0)
REWARDS = (0.0, 0.1, 0.2, 0.25, 0.5, 1.0)
#: the advantage colour range of the token chips (fixed: a rule's scale is visible)
ADVANTAGE_RANGE = 2.0


def _fields(prefix: str, n: int) -> dict[str, Field]:
    return {
        f"{prefix}_row": Field(1, 1, max(n, 1), integer=True),
        f"{prefix}_mask": Field("right mask", options=tuple(MASK_CHOICES)),
        f"{prefix}_credit": Field(DEFAULT_CREDIT, options=tuple(CREDIT_CHOICES)),
        f"{prefix}_gamma": Field(1.0, options=GAMMAS),
        f"{prefix}_r": Field(0.5, options=REWARDS),
    }


def _mask_notes(name: str, data: EpisodeSet) -> str:
    if name == THINK:
        return (
            "A template that drops the reasoning of earlier assistant turns (Qwen3's) re-encodes "
            "the history as other tokens than were sampled: the trainer then scores tokens the "
            "sampler never drew (the extension property broken). Outlined: the positions where "
            "the re-encoded transcript differs."
        )
    rule = masks.MASK_RULES[name]
    return f"{rule.what} Where: {rule.source}."


def draw_views(data: EpisodeSet, prefix: str = "ep") -> None:
    """The mask and credit views of ``data``: chips, mistakes, rules side by side, the bias.

    Args:
        data: the episodes and their tokens' display strings.
        prefix: the widgets' key prefix (also their URL parameters).
    """
    _notice(check_fields(_fields(prefix, len(data.episodes))))
    row = pick_episode(data, f"{prefix}_row")
    episodes = lab.selected_first(data.episodes, row)
    pieces = (data.pieces[row], *data.pieces[:row], *data.pieces[row + 1 :])
    episode = episodes[0]

    st.header("1. Which tokens get gradient?")
    name = MASK_CHOICES[
        bound(
            st.radio,
            "Mask",
            list(MASK_CHOICES),
            index=0,
            key=f"{prefix}_mask",
            horizontal=True,
            help="The right mask, or one of the known mistakes: what it trains, and what it "
            "does to the loss and its gradient.",
        )
    ]
    mlab = lab.mask_lab(episodes, data.eos_id, data.reencode, data.unit)
    right = mlab.effects["correct"]
    shown = mlab.effects.get(name, right)
    differs: Sequence[int] | None = ()
    if name == THINK:
        if data.rerender is None:
            st.info(
                "The re-encoding needs the tokenizer that wrote these tokens: sample live (or "
                "load the model that recorded them) to see it.",
                icon=":material/info:",
            )
            differs = None
        else:
            differs = lab.differing_positions(episode.token_ids, data.rerender(episode))
    elif name == "mask_as_attention":
        differs = [i for i, v in enumerate(mlab.row(shown.broken.double())) if v > 0]
    chips(
        charts.mask_html(
            episode,
            pieces[0],
            mlab.row(shown.mask.double()),
            mlab.row(right.mask.double()),
            differs or (),
            wrap=data.unit == "segment",
        )
    )
    # the legend and the rule's words under the chips: the transcript starts in the first screen
    chips(charts.mask_legend_html(name not in ("correct", THINK), bool(differs)))
    st.caption(_mask_notes(name, data))
    if name != THINK and shown.note:
        st.info(f"Not shown on these episodes: the rule {shown.note}.", icon=":material/info:")
    with st.expander("The transcript as text (exactly as recorded)"):
        table(transcript_table(episode), key=f"{prefix}_text")
    _effect_metrics(name, shown, right, mlab, differs)
    st.caption(
        "Advantages for these losses: episode-level GRPO (each episode's return against its "
        "task group); section 2 compares the rules. Loss: -sum m A log pi / sum m at the first "
        "step; gradient d L / d log pi = -m A / sum m."
    )
    with st.expander("Every mask on this batch (table)"):
        table(lab.rule_table(mlab), key=f"{prefix}_rules", point="rule")

    chosen = _credit_section(data, episodes, pieces, mlab, prefix)
    mask_label = (
        "right mask"
        if name == THINK
        else next(label for label, rule in MASK_CHOICES.items() if rule == name)
    )
    update_section(
        data,
        episodes,
        pieces[0],
        (right if name == THINK else shown).mask,
        mask_label,
        chosen.token_advantages,
        chosen.label,
        prefix,
    )


def _effect_metrics(name, shown, right, mlab, differs) -> None:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(
        "Tokens trained",
        shown.n_trained,
        delta=shown.n_trained - right.n_trained or None,
        delta_color="off",
        help="Positions in the mask, over the whole batch (the right mask: sampled tokens).",
    )
    share = lab.context_share(shown, mlab.batch)
    c2.metric(
        "Gradient on context",
        f"{share:.1%}",
        help="Share of sum |d L / d log pi| on tokens the sampler did not write (tool output, "
        "prompt, history): 0 with the right mask.",
    )
    c3.metric(
        "A right token's gradient",
        f"x {shown.scale:.3g}",
        help="How the gradient of a correctly trained token is scaled: the right mask's count "
        "over this mask's count (token-mean).",
    )
    if name == THINK or name == "mask_as_attention":
        c4.metric(
            "Positions that differ" if name == THINK else "Positions with broken context",
            "n/a" if differs is None else len(differs),
            help="Re-encoded tokens that are not the sampled ones"
            if name == THINK
            else "Positions whose causal context loses the tool output when the loss mask is "
            "the attention mask.",
        )
    else:
        loss = "n/a" if shown.loss is None else f"{shown.loss:.4g}"
        c4.metric(
            "Loss",
            loss,
            help="None when the mask trains a token the sampler has no log-prob for (it did not "
            "write it): the gradient above still acts on it.",
        )


def _credit_section(data, episodes, pieces, mlab, prefix: str) -> credit_mod.Credit:
    """Sections 2 and 3; returns the credit rule chosen for the tokens (section 4's)."""
    st.header("2. Credit per turn: the rules side by side")
    c1, c2 = st.columns([1, 2])
    with c1:
        gamma = bound(
            st.select_slider,
            "gamma (discount across turns)",
            list(GAMMAS),
            value=1.0,
            key=f"{prefix}_gamma",
            help="Read by the rules with returns (per-turn returns, GAE, GiGPO, progress deltas).",
        )
    params = credit_mod.CreditParams(gamma=float(gamma))
    credits = lab.all_credit(episodes, params, data.unit)
    episode = episodes[0]
    labels = [c.label for c in credits.values()]
    plot(
        charts.credit_figure(
            labels,
            [c.turn_advantages[0] for c in credits.values()],
            f"Advantage per turn of episode {episode.task} (outcome {episode.outcome:g}), "
            "every rule",
        ),
        key=f"{prefix}_credit_fig",
    )
    table(lab.credit_table(credits), key=f"{prefix}_credit_table", point="rule")
    with c2:
        name = CREDIT_CHOICES[
            bound(
                st.selectbox,
                "Rule on the tokens",
                list(CREDIT_CHOICES),
                index=list(CREDIT_CHOICES).index(DEFAULT_CREDIT),
                key=f"{prefix}_credit",
            )
        ]
    chosen = credits[name]
    st.subheader(f"{chosen.label}: the advantage on every token")
    st.markdown(f"**{text.md_escape(chosen.source)}**")
    st.code(f"{chosen.formula}\n{chosen.worked}", language=None, wrap_lines=True)
    for note in chosen.notes:
        st.caption(text.md_escape(note))
    chips(
        charts.advantage_legend_html(ADVANTAGE_RANGE)
        + charts.advantage_html(
            episode,
            pieces[0],
            mlab.row(chosen.token_advantages),
            mlab.row(mlab.effects["correct"].mask.double()),
            ADVANTAGE_RANGE,
            wrap=data.unit == "segment",
        )
    )
    explainer(
        "Every token of turn t carries turn t's advantage; the mask decides which of them "
        "count (grey: no gradient). **Outcome broadcast** and **episode GRPO** give every turn "
        "the same number; the **per-turn** rules tell the turns apart when there are turn "
        "rewards; **GiGPO** compares turns that started from the same state.",
        title="What to look at",
    )

    st.header("3. Which rule rewards an extra turn?")
    table(lab.stop_table(episodes, credits), key=f"{prefix}_stops", point="turns taken")
    st.caption(
        "Mean advantage of the first turn of the episodes that took n turns, under each rule. "
        "An unbiased rule moves with the outcome, not with the number of turns."
    )
    _bias(prefix)
    return chosen


def _bias(prefix: str) -> None:
    """The bias of verl #7244, exactly, for a policy that chooses when to stop."""
    reward = bound(
        st.select_slider,
        "Intermediate reward per turn E[r_k] (e.g. a well-formed tool call)",
        list(REWARDS),
        value=0.5,
        key=f"{prefix}_r",
    )
    probs, outcome = (0.5, 0.25, 0.25), (1.0, 1.0, 1.0)
    bias = credit_mod.turn_index_bias(probs, [float(reward)] * 3, outcome)
    plot(
        charts.bias_figure(bias.stops, bias.turn_index, bias.reference),
        key=f"{prefix}_bias_fig",
    )
    extra = ", ".join(f"{x:+.4g}" for x in bias.per_extra_turn)
    st.markdown(
        f"**verl #7244:** per extra turn the per-turn-index baseline moves the advantage by "
        f"**{text.md_escape(extra)}** against the unbiased one (= -E[r_k])."
    )
    st.caption(text.md_escape(bias.text))
